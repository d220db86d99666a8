"""CUDA kernels of scheme II (CuPy only): the GPU twin of :class:`gpu.ozaki2.ops.HostOps`.

* ``ozaki2_rows``: reads a 32 x 32 tile of X (A's rows, or B's columns as the rows of B^T) through shared
  memory, so that reads and writes are coalesced whichever axis of X is contiguous, and writes per
  element either its bar ``ceil(|x| 2**e_r)`` (``BARS``) or the symmetric residues of
  ``x' = round(x 2**s_r)`` modulo every modulus (``RESIDUES``; to nearest where s_r is at least the row's bar
  exponent, toward zero elsewhere, as :func:`gpu.ozaki2.scaling.to_integers`). A residue of an integer y below 2**53
  (held as a double) is ``y - q m`` with ``q = rint(y / m)``: one FMA, exact because the result is a
  small integer; q may be off by one, which the symmetric correction absorbs. x' is n 2**e with an
  integer n < 2**53 (``frexp``; e = 0 below 2**53), and with n = h 2**26 + l (both exact),
  x' = h 2**(e+26) + l 2**e: one FMA with entries of a table of 2**e mod m gives an integer below 2**36
  congruent to x', so each modulus costs one reduction whatever the size of x'. The residue is a
  function of x' alone, so it equals NumPy's.
* ``ozaki2_reduce`` (element-wise): an INT32 product's symmetric residue, added to the plane's where
  k is blocked.
* ``ozaki2_crt``: the double-double CRT of :mod:`gpu.ozaki2.crt` for every entry (from INT8 residues, or
  from the INT32 products of one k block, each reduced as it is read, the same way), in the same order,
  every product and sum rounded on its own (``__dmul_rn``, ``__dadd_rn``: no contraction into FMAs,
  which would change the low parts' roundings), then ``ldexp`` by the row and column shifts.

Both loops over the moduli are compiled for the count (``COUNT``, one kernel per count, cached) and
unrolled, and the CRT reads four columns per modulus with one vector load where the planes allow it, so
that many loads are in flight at once: with a runtime count and one column per thread the CRT ran at
1.25 TB/s on the H100 (N = 16384, 14 moduli: 12.8 ms; ncu at N = 8192: 44% of DRAM bandwidth).
"""

from __future__ import annotations

from functools import cache
from typing import Any

import cupy
import numpy as np

from ..backend import Backend
from ..ozaki.kernels import TILE, TILE_ROWS
from .moduli import ModuliTable
from .residues import powers_of_two

#: Threads per block of the CRT kernel (a grid-stride loop over rows and columns does the rest), and the
#: columns each thread takes with one vector load per modulus where the planes are aligned for it.
CRT_THREADS, VEC = 256, 4

_SYM_MOD = r"""
__device__ __forceinline__ double sym_mod(double y, double m, double inv, double hi, double lo)
{
    double r = fma(-rint(y * inv), m, y);
    if (r > hi) r -= m;
    if (r < lo) r += m;
    if (r > hi) r -= m;
    return r;
}
"""

_ROWS_SOURCE = r"""
extern "C" __global__ void ozaki2_rows(
    const double* __restrict__ x, long long rs, long long cs, long long rows, long long cols,
    long long rows_pad, long long ldk, const int* __restrict__ shifts, const int* __restrict__ exps,
    signed char* __restrict__ out,
    long long plane, int count, const double* __restrict__ consts, const double* __restrict__ pow2, int pow2_len)
{
    __shared__ double tile[32][33];
    const long long r0 = (long long)blockIdx.y * 32, c0 = (long long)blockIdx.x * 32;
    const int tx = threadIdx.x, ty = threadIdx.y;
    const bool by_rows = (cs == 1);
    for (int q = ty; q < 32; q += 8) {
        const long long r = r0 + (by_rows ? q : tx), c = c0 + (by_rows ? tx : q);
        double v = 0.0;
        if (r < rows && c < cols) {
#if BARS
            v = ceil(ldexp(fabs(x[r * rs + c * cs]), shifts[r]));
#else
            const double y = ldexp(x[r * rs + c * cs], shifts[r]);
            v = shifts[r] >= exps[r] ? rint(y) : trunc(y);
#endif
        }
        if (by_rows) tile[q][tx] = v; else tile[tx][q] = v;
    }
    __syncthreads();
    for (int q = ty; q < 32; q += 8) {
        const long long r = r0 + q, c = c0 + tx;
        if (r >= rows_pad || c >= ldk) continue;
        const double v = tile[q][tx];
        signed char* o = out + r * ldk + c;
#if BARS
        o[0] = (signed char)(int)v;
#else
        double n = v;
        int e = 0;
        if (fabs(v) >= 9007199254740992.0) {
            n = ldexp(frexp(v, &e), 53);
            e -= 53;
        }
        const double h = trunc(n * 0x1p-26), l = n - h * 0x1p26;
#pragma unroll
        for (int t = 0; t < COUNT; ++t) {
            const double* p = pow2 + t * pow2_len + e;
            const double y = fma(h, p[26], l * p[0]);
            o[t * plane] = (signed char)(int)sym_mod(y, consts[4 * t], consts[4 * t + 1], consts[4 * t + 2],
                                                     consts[4 * t + 3]);
        }
#endif
    }
}
"""

_CRT_SOURCE = r"""
extern "C" __global__ void ozaki2_crt(
    const IN_T* __restrict__ planes, long long plane, long long ld, int count, const double* __restrict__ consts,
    const double* __restrict__ w_hi, const double* __restrict__ w_lo, int exact, double p_hi, double p_lo,
    double inv, const int* __restrict__ sa, const int* __restrict__ sb, double* __restrict__ C, long long ldc,
    long long m, long long n)
{
    const long long step = (long long)gridDim.x * blockDim.x * VEC;
    for (long long i = blockIdx.y; i < m; i += gridDim.y) {
        const IN_T* row = planes + i * ld;
        for (long long j0 = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * VEC; j0 < n; j0 += step) {
            VEC_T v[COUNT];
#pragma unroll
            for (int t = 0; t < COUNT; ++t) v[t] = *(const VEC_T*)(row + t * plane + j0);
#pragma unroll
            for (int q = 0; q < VEC; ++q) {
                const long long j = j0 + q;
                if (j >= n) break;
                double s_hi = 0.0, s_lo = 0.0;
#pragma unroll
                for (int t = 0; t < COUNT; ++t) {
                    double c = (double)((const IN_T*)&v[t])[q];
#if REDUCE
                    c = sym_mod(c, consts[4 * t], consts[4 * t + 1], consts[4 * t + 2], consts[4 * t + 3]);
#endif
                    s_hi = __dadd_rn(s_hi, __dmul_rn(w_hi[t], c));
                    if (!exact) s_lo = __dadd_rn(s_lo, __dmul_rn(w_lo[t], c));
                }
                const double qh = rint(__dmul_rn(s_hi, inv));
                const double d = __dsub_rn(s_hi, __dmul_rn(qh, p_hi));
                double r;
                if (exact) {
                    r = __dsub_rn(d, __dmul_rn(rint(__dmul_rn(d, inv)), p_hi));
                } else {
                    const double low = __dsub_rn(s_lo, __dmul_rn(qh, p_lo));
                    const double q2 = rint(__dmul_rn(__dadd_rn(d, low), inv));
                    r = __dadd_rn(__dsub_rn(d, __dmul_rn(q2, p_hi)), __dsub_rn(low, __dmul_rn(q2, p_lo)));
                }
                C[i * ldc + j] = ldexp(r, -(sa[i] + sb[j]));
            }
        }
    }
}
"""


@cache
def _rows_kernel(bars: bool, count: int) -> Any:
    return cupy.RawKernel(f"#define BARS {int(bars)}\n#define COUNT {count}\n" + _SYM_MOD + _ROWS_SOURCE, "ozaki2_rows")


@cache
def _crt_kernel(reduce: bool, count: int, vec: int) -> Any:
    in_t = "int" if reduce else "signed char"
    vec_t = {(True, 4): "int4", (False, 4): "char4"}.get((reduce, vec), in_t)
    source = (f"#define REDUCE {int(reduce)}\n#define IN_T {in_t}\n#define COUNT {count}\n#define VEC {vec}\n"
              f"#define VEC_T {vec_t}\n")
    return cupy.RawKernel(source + _SYM_MOD + _CRT_SOURCE, "ozaki2_crt")


@cache
def _square_sum() -> Any:
    return cupy.ReductionKernel("int8 x", "int64 y", "(long long)x * x", "a + b", "y = a", "0", "ozaki2_square_sum")


@cache
def _reduce_kernel() -> Any:
    return cupy.ElementwiseKernel(
        "int32 p, int32 m, bool accumulate", "int8 plane",
        "int r = p % m; if (accumulate) r += (int)plane; r %= m; if (r < 0) r += m;"
        "plane = (signed char)(r > (m - 1) / 2 ? r - m : r)", "ozaki2_reduce")


@cache
def _table(moduli: tuple[int, ...]) -> tuple[Any, Any, int]:
    """Per modulus (m, 1/m, the symmetric range's top and bottom) and the tables of 2**e mod m, on the device."""
    consts = np.array([(m, 1.0 / m, (m - 1) // 2, -(m // 2)) for m in moduli], dtype=np.float64)
    pow2 = np.stack([powers_of_two(m) for m in moduli]).astype(np.float64)
    return cupy.asarray(consts), cupy.asarray(pow2), pow2.shape[1]


def _launch_rows(X: Any, shifts: Any, exps: Any, out: Any, rows_pad: int, ldk: int, bars: bool,
                 moduli: tuple[int, ...]) -> None:
    rows, cols = X.shape
    rs, cs = X.strides[0] // X.itemsize, X.strides[1] // X.itemsize
    if cols == 1:
        cs = 1
    mods, pow2, length = _table(moduli)
    i64 = np.int64
    _rows_kernel(bars, len(moduli))(
        (-(-ldk // TILE), -(-rows_pad // TILE)), (TILE, TILE_ROWS),
        (X, i64(rs), i64(cs), i64(rows), i64(cols), i64(rows_pad), i64(ldk), shifts.astype(np.int32, copy=False),
         exps.astype(np.int32, copy=False), out, i64(rows_pad * ldk), np.int32(len(moduli)), mods, pow2,
         np.int32(length)))


class CudaOps:
    """Scheme II's operations on CuPy arrays, as CUDA kernels (see the module)."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def bars(self, X: Any, e: Any, rows_pad: int, ldk: int) -> Any:
        out = cupy.empty((rows_pad, ldk), dtype=np.int8)
        _launch_rows(X, e, e, out, rows_pad, ldk, True, (1,))
        return out

    def residues(self, X: Any, shifts: Any, exps: Any, table: ModuliTable, rows_pad: int, ldk: int) -> Any:
        out = cupy.empty((table.count, rows_pad, ldk), dtype=np.int8)
        _launch_rows(X, shifts, exps, out, rows_pad, ldk, False, table.moduli)
        return out

    def reduce(self, P: Any, plane: Any, modulus: int, accumulate: bool) -> None:
        _reduce_kernel()(P, np.int32(modulus), accumulate, plane)

    def crt(self, planes: Any, table: ModuliTable, shift_a: Any, shift_b: Any, C: Any) -> None:
        count, m, n = planes.shape
        reduce = planes.dtype == np.int32
        consts = _table(table.moduli)[0]
        w_hi, w_lo = (cupy.asarray(np.array(w, dtype=np.float64)) for w in (table.weights_hi, table.weights_lo))
        plane, ld = planes.strides[0] // planes.itemsize, planes.strides[1] // planes.itemsize
        vec = VEC if planes.data.ptr % (VEC * planes.itemsize) == 0 and plane % VEC == 0 and ld % VEC == 0 else 1
        grid = (max(1, min(-(-n // (CRT_THREADS * vec)), 64)), max(1, min(m, 65535)))
        i32, i64, f64 = np.int32, np.int64, np.float64
        _crt_kernel(reduce, count, vec)(
            grid, (CRT_THREADS,),
            (planes, i64(plane), i64(ld), i32(count),
             consts, w_hi, w_lo, i32(table.exact), f64(table.product_hi), f64(table.product_lo),
             f64(1.0 / float(table.product)), shift_a.astype(i32, copy=False), shift_b.astype(i32, copy=False), C,
             i64(C.strides[0] // C.itemsize), i64(m), i64(n)))

    def square_sums(self, bars: Any) -> Any:
        return _square_sum()(bars, axis=1)
