"""The CUDA sources of the Ozaki scheme's kernels (what :mod:`gpu.ozaki.kernels` and :mod:`gpu.ozaki.bound_kernels`
compile), as text: importable without CuPy, so that a machine with a CUDA compiler but no GPU can check them."""

from __future__ import annotations

from ..backend.conditional import SET_CONDITIONAL
from .ops import (
    BAD,
    COUNT_MASK,
    FINALIZE,
    LOAD_ACC,
    LOAD_OPEN,
    RAISED_TERM,
    SPREAD_INF,
    SPREAD_OFFSET,
    STORE_OPEN,
    WEAK,
)
from .slicing import RAISE

_DEFINES = "".join(f"#define {k} ({v})\n" for k, v in (
    ("LOAD_ACC", LOAD_ACC), ("LOAD_OPEN", LOAD_OPEN), ("STORE_OPEN", STORE_OPEN), ("FINALIZE", FINALIZE),
    ("BAD", BAD), ("SPREAD_INF", SPREAD_INF), ("SPREAD_OFFSET", SPREAD_OFFSET), ("COUNT_MASK", COUNT_MASK)))

_LINES_SOURCE = r"""
__device__ __forceinline__ void line_add(double v, double& mx, int& bad, long long& cnt)
{
    const double a = fabs(v);
    if (!(a <= 1.7976931348623157e308)) bad = 1;      // NaN or infinity
    else if (a > mx) mx = a;
    cnt += (v != 0.0);
}

__device__ __forceinline__ void line_out(double mx, int bad, long long cnt, long long line, int* exps,
                                         long long* nnz)
{
    int e = 0;
    frexp(mx, &e);
    exps[line] = bad ? BAD : e;
    if (nnz) nnz[line] = cnt;
}

extern "C" __global__ void ozaki_lines(
    const double* __restrict__ x, long long lines, long long len, long long line_stride, long long elem_stride,
    int by_warp, int* __restrict__ exps, long long* __restrict__ nnz)
{
    __shared__ double smx[8][33];
    __shared__ int sbad[8][33];
    __shared__ long long scnt[8][33];
    const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
    if (by_warp) {
        for (long long line = (long long)blockIdx.x * 8 + ty; line < lines; line += (long long)gridDim.x * 8) {
            double mx = 0.0; int bad = 0; long long cnt = 0;
            for (long long t = tx; t < len; t += 32) line_add(x[line * line_stride + t * elem_stride], mx, bad, cnt);
            for (int off = 16; off; off >>= 1) {
                const double o = __shfl_down_sync(0xffffffffu, mx, off);
                mx = o > mx ? o : mx;
                bad |= __shfl_down_sync(0xffffffffu, bad, off);
                cnt += __shfl_down_sync(0xffffffffu, cnt, off);
            }
            if (tx == 0) line_out(mx, bad, cnt, line, exps, nnz);
        }
        return;
    }
    for (long long base = (long long)blockIdx.x * 32; base < lines; base += (long long)gridDim.x * 32) {
        const long long line = base + tx;
        double mx = 0.0; int bad = 0; long long cnt = 0;
        if (line < lines)
            for (long long t = ty; t < len; t += 8) line_add(x[line * line_stride + t * elem_stride], mx, bad, cnt);
        smx[ty][tx] = mx; sbad[ty][tx] = bad; scnt[ty][tx] = cnt;
        __syncthreads();
        if (ty == 0 && line < lines) {
            for (int q = 1; q < 8; ++q) {
                mx = smx[q][tx] > mx ? smx[q][tx] : mx;
                bad |= sbad[q][tx];
                cnt += scnt[q][tx];
            }
            line_out(mx, bad, cnt, line, exps, nnz);
        }
        __syncthreads();
    }
}

extern "C" __global__ void ozaki_verdict(
    const int* __restrict__ erow, long long m, const int* __restrict__ ecol, long long n,
    const unsigned long long* __restrict__ ratio_bits, int have_ratio, int alpha, double budget,
    int* __restrict__ out)
{
    int bad = 0;
    for (long long i = threadIdx.x; i < m; i += blockDim.x) bad |= (erow[i] == BAD);
    for (long long j = threadIdx.x; j < n; j += blockDim.x) bad |= (ecol[j] == BAD);
    bad = __syncthreads_or(bad);
    if (threadIdx.x != 0) return;
    int slices = 0, spread = 0;
    if (have_ratio) {
        const double ratio = __longlong_as_double((long long)ratio_bits[0]);
        for (int s = 1; s <= 64 && !slices; ++s) {
            const double e = __dmul_rn(__dmul_rn((double)(s + 1), ldexp(1.0, -alpha * s)), ratio);
            if (__dmul_rn(e, 1.0 + 0x1p-40) <= budget) slices = s;
        }
        if (isinf(ratio)) spread = SPREAD_INF;
        else if (ratio > 0.0) spread = (int)fmax(fmin(rint(log2(ratio)), (double)(SPREAD_INF - 1)),
                                                 (double)(1 - SPREAD_OFFSET));
    }
    out[0] = slices | (bad << 7) | ((spread + SPREAD_OFFSET) << 8);
}
"""

_SLICE_SOURCE = r"""
__device__ __forceinline__ unsigned short half_bits(float f)
{
    // float -> binary16 bits; exact for the integers |f| < 2048 that slices hold.
    unsigned int b = __float_as_uint(f);
    unsigned int sign = (b >> 16) & 0x8000u, mag = b & 0x7fffffffu;
    if (mag == 0u) return (unsigned short)sign;
    unsigned int e = (mag >> 23) - 127u + 15u;
    return (unsigned short)(sign | (e << 10) | ((mag & 0x7fffffu) >> 13));
}

__device__ __forceinline__ double round_bits(double r, int bits, double tiny)
{
    // r rounded to nearest even with `bits` significant bits; below `tiny` (the storage's
    // smallest normal) to +0, so that the store is exact.
    int e;
    frexp(r, &e);
    const double q = ldexp(rint(ldexp(r, bits - e)), e - bits);
    return fabs(q) < tiny ? 0.0 : q;
}

extern "C" __global__ void ozaki_slice(
    const double* __restrict__ x, long long rs, long long cs, long long rows, long long cols,
    long long rows_pad, long long ldk, const int* __restrict__ exps,
    STORE_T* __restrict__ out, long long ld_out, int alpha, int slices, int digits, long long first,
    long long step, int tail_from, long long tail_first, long long tail_step, int bits, double tiny,
    const int* __restrict__ limit)
{
    // limit (or null): a verdict word on the device; only its slice count's digits are written (none where it
    // is 0 or above `digits`, the most the caller holds room for).
    int dg = digits;
    if (limit) { const int c = limit[0] & COUNT_MASK; dg = (c >= 1 && c <= digits) ? c : 0; }
    __shared__ double tile[32][33];
    const long long r0 = (long long)blockIdx.y * 32, c0 = (long long)blockIdx.x * 32;
    const int tx = threadIdx.x, ty = threadIdx.y;
    const bool by_rows = (cs == 1);          // X's rows are contiguous: threads run along columns
    for (int q = ty; q < 32; q += 8) {
        const long long r = r0 + (by_rows ? q : tx), c = c0 + (by_rows ? tx : q);
        double v = 0.0;
        if (r < rows && c < cols) {
            const int e = exps[r];
            v = (e == BAD) ? 0.0 : ldexp(x[r * rs + c * cs], -e);
        }
        if (by_rows) tile[q][tx] = v; else tile[tx][q] = v;
    }
    __syncthreads();
    const double radix = ldexp(1.0, alpha);
    for (int q = ty; q < 32; q += 8) {
        const long long r = r0 + q, c = c0 + tx;
        if (r < rows_pad && c < ldk) {
            double v = tile[q][tx];
            STORE_T* o = out + r * ld_out + c;
            for (int j = 1; j <= slices; ++j) {
                if (j >= tail_from)
                    o[(tail_first + (j - tail_from) * tail_step) * ldk] = STORE(round_bits(v * radix, bits, tiny));
                if (j <= dg) {
                    v *= radix;
                    const double m = trunc(v);
                    v -= m;
                    o[(first + (j - 1) * step) * ldk] = STORE(m);
                }
            }
        }
    }
}
"""

_FOLD_SOURCE = r"""
extern "C" __global__ void ozaki_fold(
    const BUF_T* __restrict__ bufs, long long slot, long long ldbuf, int nbuf, int d0,
    unsigned long long closes, int alpha,
    double* __restrict__ acc, long long ldacc, double* __restrict__ comp, double* __restrict__ open,
    const int* __restrict__ erow, const int* __restrict__ ecol, long long m, long long n, int flags,
    const double* __restrict__ a, long long a_rs, long long a_cs,
    const double* __restrict__ b, long long b_rs, long long b_cs, long long k,
    double* __restrict__ dst, long long lddst, const int* __restrict__ limit, int most)
{
    // FINALIZE writes dst; with a verdict word `limit` whose count is 0 or above `most` (the slices the caller's
    // schedule holds) every entry is the IEEE dot product instead, and no buffer is added. With a count c in
    // 1..most, the buffers of the diagonals above c + 1 (which that count does not run: stale) are left out.
    const long long total = m * n;
    bool everywhere = false;
    int top = 0x7fffffff;
    if (limit) {
        const int c = limit[0] & COUNT_MASK;
        everywhere = !(c >= 1 && c <= most);
        top = everywhere ? 0 : c + 1;
    }
    for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (long long)gridDim.x * blockDim.x) {
        const long long i = idx / n, j = idx - i * n;
        double hi = (flags & LOAD_ACC) ? acc[i * ldacc + j] : 0.0;
        double lo = (flags & LOAD_ACC) ? comp[idx] : 0.0;
        double d = (flags & LOAD_OPEN) ? open[idx] : 0.0;
        int diagonal = d0;
        for (int q = 0; q < nbuf; ++q) {
            const bool live = diagonal <= top;
            if (live) d = __dadd_rn(d, (double)bufs[q * slot + i * ldbuf + j]);
            if ((closes >> q) & 1ull) {
                if (live) {
                    // TwoSum (as gpu.ozaki.ops.two_sum): s = hi + t exactly as s + error.
                    const double t = __dmul_rn(d, ldexp(1.0, -alpha * diagonal));
                    const double s = __dadd_rn(hi, t);
                    const double v = __dsub_rn(s, hi);
                    lo = __dadd_rn(lo, __dadd_rn(__dsub_rn(hi, __dsub_rn(s, v)), __dsub_rn(t, v)));
                    hi = s;
                }
                d = 0.0;
                --diagonal;
            }
        }
        if (flags & STORE_OPEN) open[idx] = d;
        if (flags & FINALIZE) {
            const int e = erow[i], f = ecol[j];
            double c;
            if (everywhere || e == BAD || f == BAD) {
                // A line with NaN or infinity: the IEEE dot product, as the library GEMM computes it.
                c = 0.0;
                for (long long t = 0; t < k; ++t) c = __fma_rn(a[i * a_rs + t * a_cs], b[t * b_rs + j * b_cs], c);
            } else {
                c = ldexp(__dadd_rn(hi, lo), e + f);
            }
            dst[i * lddst + j] = c;
        } else {
            acc[i * ldacc + j] = hi;
            comp[idx] = lo;
        }
    }
}
"""

#: Per slice storage dtype: the C type the kernel writes and how a digit (a double) is stored.
STORES = {
    "int8": ("signed char", "(signed char)(int)(m)"),
    "float32": ("float", "(float)(m)"),
    "float16": ("unsigned short", "half_bits((float)(m))"),
    "uint16": ("unsigned short", "(unsigned short)(__float_as_uint((float)(m)) >> 16)"),   # bfloat16 bits
}
_BUFFERS = {"float32": "float", "int32": "int"}

_BRANCH_SOURCE = r"""
extern "C" __global__ void ozaki_branch(const int* __restrict__ word, unsigned long long handle, int diagonal,
                                        int most)
{
    // The condition of a diagonal's IF node: the verdict's count c is one the schedule holds (1..most) and the
    // diagonal is one of its c + 1 (diagonals 2..c+1 make c slices' products).
    const int c = word[0] & COUNT_MASK;
    cudaGraphSetConditional(handle, (unsigned)(c >= 1 && c <= most && diagonal <= c + 1));
}
"""


def branch_source() -> str:
    """The CUDA source of the module that sets the IF nodes of a device-verdict call (:mod:`gpu.ozaki.deferred`)."""
    return SET_CONDITIONAL + _DEFINES + _BRANCH_SOURCE


def core_source(storage: str, buffer: str) -> str:
    """The CUDA source of the core module for one slice storage and accumulator dtype."""
    ctype, store = STORES[storage]
    return (f"#define STORE_T {ctype}\n#define STORE(m) {store}\n#define BUF_T {_BUFFERS[buffer]}\n" + _DEFINES
            + _LINES_SOURCE + _SLICE_SOURCE + _FOLD_SOURCE)


_BOUND_SOURCE = r"""
extern "C" __global__ void ozaki_magnitude(
    const double* __restrict__ x, long long rows, long long cols, long long rs, long long cs,
    const int* __restrict__ exps, int per_row, int bits, STORE_T* __restrict__ out)
{
    const long long total = rows * cols;
    for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (long long)gridDim.x * blockDim.x) {
        const long long i = idx / cols, j = idx - i * cols;
        const double v = x[i * rs + j * cs];
        const int e = exps[per_row ? i : j];
        double y = 0.0;
        if (v != 0.0 && e != BAD) {
            const double a = fabs(ldexp(v, -e));
            int q;
            frexp(a, &q);
            const double t = ldexp(floor(ldexp(a, bits - q)), q - bits);
            y = t > RAISE_VALUE ? t : RAISE_VALUE;
        }
        out[idx] = STORE(y);
    }
}

extern "C" __global__ void ozaki_ratio(
    const float* __restrict__ P, long long ldp, long long m, long long n,
    const long long* __restrict__ nnz_rows, const long long* __restrict__ nnz_cols, double factor,
    const double* __restrict__ a, long long a_rs, long long a_cs,
    const double* __restrict__ b, long long b_rs, long long b_cs, long long k,
    const int* __restrict__ erow, const int* __restrict__ ecol, double low_factor,
    unsigned long long* __restrict__ best)
{
    __shared__ double part[32];
    double mine = 0.0;
    const long long total = m * n;
    for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (long long)gridDim.x * blockDim.x) {
        const long long i = idx / n, j = idx - i * n;
        const float p = P[i * ldp + j];
        if (!(p > 0.0f)) continue;
        const long long nr = nnz_rows[i], nc = nnz_cols[j];
        const double K = (double)(nr < nc ? nr : nc);
        const double low = __dsub_rn(__dmul_rn((double)p, factor), __dmul_rn(K, RAISED_TERM_VALUE));
        double r;
        if (!(low < __dmul_rn(K, WEAK_VALUE))) {
            r = __ddiv_rn(K, low);
        } else {
            // Weak: the float64 product of the scaled magnitudes of row i and column j.
            const int e = erow[i], f = ecol[j];
            double s = 0.0;
            for (long long t = 0; t < k; ++t)
                s = __fma_rn(fabs(ldexp(a[i * a_rs + t * a_cs], -e)), fabs(ldexp(b[t * b_rs + j * b_cs], -f)), s);
            const double low2 = __dsub_rn(__dmul_rn(s, low_factor), 0x1p-1020);
            r = low2 < 0x1p-900 ? __longlong_as_double(0x7ff0000000000000ll) : __ddiv_rn(K, low2);
        }
        mine = r > mine ? r : mine;
    }
    for (int off = 16; off; off >>= 1) {
        const double o = __shfl_down_sync(0xffffffffu, mine, off);
        mine = o > mine ? o : mine;
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) part[warp] = mine;
    __syncthreads();
    if (warp == 0) {
        mine = lane < (int)(blockDim.x >> 5) ? part[lane] : 0.0;
        for (int off = 16; off; off >>= 1) {
            const double o = __shfl_down_sync(0xffffffffu, mine, off);
            mine = o > mine ? o : mine;
        }
        if (lane == 0 && mine > 0.0) atomicMax(best, (unsigned long long)__double_as_longlong(mine));
    }
}
"""


def _hex(x: float) -> str:
    return float(x).hex()


def bound_source(storage: str) -> str:
    """The CUDA source of the bound's module for one magnitude storage."""
    ctype, store = STORES[storage]
    return (f"#define STORE_T {ctype}\n#define STORE(m) {store}\n#define RAISE_VALUE {_hex(RAISE)}\n"
            f"#define RAISED_TERM_VALUE {_hex(RAISED_TERM)}\n#define WEAK_VALUE {_hex(WEAK)}\n" + _DEFINES
            + _BOUND_SOURCE)


