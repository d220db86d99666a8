"""The CUDA source of scheme II's residue kernel (``ozaki2_rows``, source text and its table of powers), which the
residue pass (:mod:`gpu.ozaki2.kernels`, whose notes give its arithmetic) and a fused level's pass of residues and
sums (:mod:`gpu.ozaki2.residue_sums`) compile."""

from __future__ import annotations

from functools import cache
from typing import Any

import cupy
import numpy as np

from .residues import powers_of_two

ROWS_SOURCE = r"""
template <int M> __device__ __forceinline__ unsigned int residues4(
    const double* h, const double* l, const int* e, const double* __restrict__ pow2)
{
    unsigned int word = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        double lp = l[j], p26 = (double)((1LL << 26) % M);
        if (e[j]) { lp = __dmul_rn(l[j], pow2[e[j]]); p26 = pow2[e[j] + 26]; }
        const double y = fma(h[j], p26, lp);
        const int r = residue_word<M>(y, low_word(__dadd_rn(y, MAGIC)));
        word |= ((unsigned int)r & 0xffu) << (8 * j);
    }
    return word;
}

__device__ __forceinline__ void split_h_l(double n, double& h, double& l, int& e)
{
    e = 0;
    if (fabs(n) >= 0x1p53) {
        n = ldexp(frexp(n, &e), 53);
        e -= 53;
    }
    h = rint_magic(n * 0x1p-26);
    l = fma(-h, 0x1p26, n);
}

/* n = a 2**52 + b 2**26 + c exactly (|b|, |c| <= 2**25), for an integer-valued n with |n| < 2**79. */
__device__ __forceinline__ void split_limbs(double n, double& a, double& b, double& c)
{
    a = rint_magic(n * 0x1p-52);
    const double rest = fma(-a, 0x1p52, n);
    b = rint_magic(rest * 0x1p-26);
    c = fma(-b, 0x1p26, rest);
}

template <int M> __device__ __forceinline__ unsigned int limbs4(const double* a, const double* b, const double* c)
{
    int r[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const double y = fma(a[j], (double)((1LL << 52) % M), fma(b[j], (double)((1LL << 26) % M), c[j]));
        r[j] = residue_word<M>(y, low_word(__dadd_rn(y, MAGIC)));
    }
    return __byte_perm(__byte_perm(r[0], r[1], 0x0040), __byte_perm(r[2], r[3], 0x0040), 0x5410);
}

/* A tile entry: its bar (BARS), or its scaled integer (code c: the factor rho 2**s, rho = 1 + j 2**-8, as
   gpu.ozaki2.scaling.code_parts), to nearest where s is at least the bar exponent; 0 for NaN and infinity (lines
   holding them get the library's IEEE values; the limbs and table paths below take finite integers only). */
__device__ __forceinline__ double scaled_integer(double x, int c, int e)
{
    const int s = c >> 8;
    const double y = __dmul_rn(ldexp(x, s), (double)((c & 255) + 256) * 0x1p-8);
    return isfinite(y) ? (s >= e ? rint(y) : trunc(y)) : 0.0;
}
#if BARS
/* A line that is not finite has the bar exponent BAD_E: its finite entries scale to 0 and NaN or infinity fail
   the test, so its bars are 0 (as a zero line's). */
__device__ __forceinline__ double bar(double x, int e)
{
    const double y = ceil(ldexp(fabs(x), e));
    return y <= 64.0 ? y : 0.0;
}
#define ROWS_LINE(r) make_int2(shifts[r], 0)
#define ROWS_VALUE(v, l) bar(v, (l).x)
#else
#define ROWS_LINE(r) make_int2(shifts[r], exps[r])
#define ROWS_VALUE(v, l) scaled_integer(v, (l).x, (l).y)
#endif

/* The row kernels' arguments, and their start: the tile, then the word of four entries (q, g .. g + 3) that
   thread (tx, ty) writes at o in each plane (variants in results/published/scripts/ozaki2_residues.py too). */
#define ROWS_ARGS \
    const double* __restrict__ x, long long rs, long long cs, long long rows, long long cols, \
    long long rows_pad, long long ldk, const int* __restrict__ shifts, const int* __restrict__ exps, \
    unsigned int* __restrict__ out, long long plane, const double* __restrict__ pow2, int pow2_len
#define ROWS_START(LINE, VALUE) \
    LOAD_TILE(LINE, VALUE) \
    const int tid = ty * 32 + tx, q = tid >> 3, g = (tid & 7) * 4; \
    const long long r = r0 + q; \
    const long long c = c0 + g; \
    if (r >= rows_pad || c >= ldk) return; \
    unsigned int* o = out + (r * ldk + c) / 4; \
    const long long plane4 = plane / 4;
/* Every entry through the power table (split_h_l, residues4): all of a warp, where one entry is 2**79 or more. */
#define RESIDUE_PLANE(T, M) o[T * plane4] = residues4<M>(h, l, e, pow2 + T * pow2_len);
#define TABLE_PLANES { \
        double h[4], l[4]; \
        int e[4]; \
        _Pragma("unroll") for (int j = 0; j < 4; ++j) split_h_l(tile[q][g + j], h[j], l[j], e[j]); \
        FOR_EACH_MODULUS(RESIDUE_PLANE) }
#define TABLE_PLANES_IF_WIDE { \
        bool wide = false; \
        _Pragma("unroll") for (int j = 0; j < 4; ++j) wide |= fabs(tile[q][g + j]) >= 0x1p79; \
        if (__any_sync(__activemask(), wide)) { TABLE_PLANES return; } }

extern "C" __global__ void ozaki2_rows(ROWS_ARGS)
{
    ROWS_START(ROWS_LINE, ROWS_VALUE)
#if BARS
    unsigned int word = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) word |= ((unsigned int)low_word(__dadd_rn(tile[q][g + j], MAGIC)) & 0xffu) << (8 * j);
    o[0] = word;
#else
    TABLE_PLANES_IF_WIDE
    double a[4], b[4], lo[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) split_limbs(tile[q][g + j], a[j], b[j], lo[j]);
#define LIMB_PLANE(T, M) o[T * plane4] = limbs4<M>(a, b, lo);
    FOR_EACH_MODULUS(LIMB_PLANE)
#endif
}
"""


@cache
def powers(moduli: tuple[int, ...]) -> tuple[Any, int]:
    """The tables of 2**e mod m (one row per modulus) on the device, and their length."""
    pow2 = np.stack([powers_of_two(m) for m in moduli]).astype(np.float64)
    return cupy.asarray(pow2), pow2.shape[1]


def element_strides(X: Any) -> tuple[int, int]:
    """X's row and column strides in elements, as the row kernels take them (a single column counts as rows)."""
    rs, cs = X.strides[0] // X.itemsize, X.strides[1] // X.itemsize
    return rs, 1 if X.shape[1] == 1 else cs
