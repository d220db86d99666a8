"""The CUDA source of :mod:`accuracy.exact_cuda` (the exact product's element-wise work on CuPy), as text:
importable without CuPy, so that a CUDA compiler with no GPU can check it.

One module, compiled once per process (and kept in CuPy's kernel cache), does what the NumPy path does with
NumPy's functions (:mod:`accuracy.slicing`, :mod:`accuracy.limbs`), entry by entry with integer arithmetic:

* ``exact_spans``: per row, e with max |x| < 2**e (0 for a zero row) and the span e - (the exponent of the
  row's lowest set bit), -1 for a zero row (:func:`accuracy.slicing.row_spans`);
* ``exact_digits``: one slice of digits of the listed rows, from X itself (the first slice) or from the
  remainders, which it updates (:func:`accuracy.slicing._digits`, its ``ldexp`` form, exact for any scale);
* ``exact_accumulate``: a limb plus a GEMM result (integers below 2**53) on rows and columns of a tile;
* ``exact_carry``: carries of every entry's limbs (:func:`accuracy.limbs.carry`);
* ``exact_round``: per entry, the magnitude and sign of its limbs and their one rounding to float64, written
  into C (:func:`accuracy.limbs.magnitude`, :func:`accuracy.limbs.round_to_float64`), with a flag where the
  top limb overflowed (a bug of the caller's limb count).
"""

from __future__ import annotations

EXACT_SOURCE = r"""
#ifndef EXACT_FN
#define EXACT_FN __device__ __forceinline__
#define CLZ64(x) __clzll(x)
#define FFS64(x) __ffsll(x)
#endif

EXACT_FN int bit_length(long long x) { return x ? 64 - CLZ64((unsigned long long)x) : 0; }

EXACT_FN void carry_entry(long long* L, long long limbs, long long stride, int beta)
{
    const long long mask = (1ll << beta) - 1;
    for (long long q = 0; q + 1 < limbs; ++q) {
        const long long v = L[q * stride];
        L[(q + 1) * stride] += v >> beta;        // arithmetic shift: floor division, also for negatives
        L[q * stride] = v & mask;
    }
}

EXACT_FN double round_entry(long long* L, long long limbs, long long stride, int beta, long long exponent,
                            int* overflow)
{
    carry_entry(L, limbs, stride, beta);
    const bool negative = L[(limbs - 1) * stride] < 0;
    if (negative) {
        for (long long q = 0; q < limbs; ++q) L[q * stride] = -L[q * stride];
        carry_entry(L, limbs, stride, beta);
    }
    if (L[(limbs - 1) * stride] >> beta) *overflow = 1;
    long long top = limbs - 1;
    while (top >= 0 && L[top * stride] == 0) --top;
    if (top < 0) return 0.0;
    const long long bits = top * beta + bit_length(L[top * stride]);
    const long long leading = bits - 1 + exponent;
    const long long precision = leading >= -1022 ? 53 : leading + 1075;
    const long long dropped = bits - precision, shift = dropped - 1;
    long long kept = 0;
    bool sticky = false;
    for (long long q = 0; q <= top; ++q) {
        const long long d = L[q * stride];
        if (d == 0) continue;
        const long long unit = q * beta;
        if (unit + beta <= shift) {
            sticky = true;
        } else if (unit >= shift) {
            kept += d << (unit - shift);
        } else {
            const long long right = shift - unit;
            const long long part = d >> right;
            kept += part;
            sticky |= (part << right) != d;
        }
    }
    long long significand = kept >> 1;
    significand += ((kept & 1) && (sticky || (significand & 1))) ? 1 : 0;
    long long scale = dropped + exponent;
    scale = scale < -(1ll << 30) ? -(1ll << 30) : (scale > (1ll << 30) ? (1ll << 30) : scale);
    const double value = ldexp((double)significand, (int)scale);
    return negative ? -value : value;
}

#ifndef EXACT_HOST
extern "C" __global__ void exact_spans(const double* __restrict__ x, long long rows, long long k, long long rs,
                                       long long cs, long long* __restrict__ exps, long long* __restrict__ spans)
{
    const int lane = threadIdx.x & 31;
    const long long warps = (long long)gridDim.x * (blockDim.x >> 5);
    for (long long r = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); r < rows; r += warps) {
        int top = -2147483647;
        long long low = 9223372036854775807ll;
        for (long long c = lane; c < k; c += 32) {
            const double v = x[r * rs + c * cs];
            if (v != 0.0) {
                int e;
                const double mant = frexp(v, &e);
                const long long M = (long long)(mant * 9007199254740992.0);       // 2**53: exact
                top = e > top ? e : top;
                const long long lsb = (long long)e - 53 + (FFS64(M) - 1);
                low = lsb < low ? lsb : low;
            }
        }
        for (int off = 16; off; off >>= 1) {
            const int t = __shfl_down_sync(0xffffffffu, top, off);
            const long long l = __shfl_down_sync(0xffffffffu, low, off);
            top = t > top ? t : top;
            low = l < low ? l : low;
        }
        if (lane == 0) {
            const bool zero = low == 9223372036854775807ll;
            exps[r] = zero ? 0 : top;
            spans[r] = zero ? -1 : (long long)top - low;
        }
    }
}

extern "C" __global__ void exact_digits(
    const double* __restrict__ x, long long rs, long long cs, int first, double* __restrict__ rest, long long k,
    const long long* __restrict__ rows, long long nrows, const long long* __restrict__ exps, int s, int beta,
    double* __restrict__ digits)
{
    const long long total = nrows * k;
    for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (long long)gridDim.x * blockDim.x) {
        const long long i = idx / k, c = idx - i * k;
        const long long r = rows ? rows[i] : i;
        const double part = first ? x[r * rs + c * cs] : rest[r * k + c];
        const int g = (int)(exps[r] + 1 - (long long)s * beta);
        const double scaled = ldexp(part, -g);
        const double d = rint(scaled);
        double left = ldexp(scaled - d, g);
        if (g > 0 && d == 0.0) left = part;              // the scaling underflowed: the digit is 0
        digits[idx] = d;
        rest[r * k + c] = left;
    }
}

extern "C" __global__ void exact_accumulate(
    long long* __restrict__ limb, long long ldl, const double* __restrict__ product, long long ldp, long long na,
    long long nb, const long long* __restrict__ a_rows, long long a_from, const long long* __restrict__ b_cols,
    long long b_from)
{
    const long long total = na * nb;
    for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (long long)gridDim.x * blockDim.x) {
        const long long i = idx / nb, j = idx - i * nb;
        const long long r = a_rows ? a_rows[i] - a_from : i, c = b_cols ? b_cols[j] - b_from : j;
        limb[r * ldl + c] += (long long)product[i * ldp + j];
    }
}

extern "C" __global__ void exact_carry(long long* __restrict__ L, long long limbs, long long entries, int beta)
{
    for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < entries;
         e += (long long)gridDim.x * blockDim.x)
        carry_entry(L + e, limbs, entries, beta);
}

extern "C" __global__ void exact_round(
    long long* __restrict__ L, long long limbs, long long mi, long long nj, int beta,
    const long long* __restrict__ erow, const long long* __restrict__ ecol, long long bias,
    double* __restrict__ C, long long ldc, int* __restrict__ overflow)
{
    const long long entries = mi * nj;
    for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < entries;
         e += (long long)gridDim.x * blockDim.x) {
        const long long i = e / nj, j = e - i * nj;
        C[i * ldc + j] = round_entry(L + e, limbs, entries, beta, erow[i] + ecol[j] + bias, overflow);
    }
}
#endif
"""
