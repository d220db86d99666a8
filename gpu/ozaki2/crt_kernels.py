"""Scheme II's CRT on the GPU (CuPy only): ``ozaki2_crt``, one kernel per moduli set, its constants compiled in.

The kernel computes the double-double CRT of :mod:`gpu.ozaki2.crt` for every entry of C, from INT8 residues or
from the INT32 products of one k block (each reduced as it is read, by ``residue_word``: see
:mod:`gpu.ozaki2.kernels`), in NumPy's order. S_hi's products and partial sums are exact (the grid of
:mod:`gpu.ozaki2.moduli`), so one FMA per term gives NumPy's bits; every other product and sum is rounded on its
own (``__dmul_rn``, ``__dadd_rn``: no contraction into FMAs, which would change the low parts' roundings); then
the division by the scale codes' factors where one is not 1 (:func:`gpu.ozaki2.scaling.unscale`) and ``ldexp`` by
their shifts.

**A moduli set's constants are compiled in** (:func:`source`): its moduli, the weights' high and low parts, the
product's two parts, its reciprocal and whether the reconstruction is exact, each written as the hexadecimal
literal of the very double the NumPy twin uses (:func:`gpu.ozaki2.cuda_source.constants`), so the bits are those of
the table. At 15 moduli the kernel took 126 registers with the weights read from global memory, and takes 78 with
them compiled in (112 with four columns a thread).

**Columns per thread:** each thread reads ``vec`` neighbouring columns of every plane with one vector load (4
where the planes' start and strides allow it and there are at most 16 moduli, else 2, else 1: :func:`columns`)
and writes them with 16-byte stores, under ``__launch_bounds__(256, 2)``. Measured on the H200 (15 moduli, INT32
planes of a real product, device time, interleaved, bitwise equal;
``results/published/h200/h200-ozaki2-passes-probe-740c7e0.json``): a span of 3072 x 16384 took 0.812 ms with the
constants and four columns, 0.857 ms with two, against 1.036 ms for the weights read from memory and two columns
(the form before); 2048 x 8192: 0.287, 0.299 and 0.355 ms. Three and four blocks an SM ran slower (0.875 and
0.970 ms at 16384).
"""

from __future__ import annotations

from functools import cache
from typing import Any

import cupy
import numpy as np

from .cuda_source import COMMON, constants, for_each_modulus
from .moduli import ModuliTable

#: Threads per block (a grid-stride loop over rows and columns does the rest), and the most columns a thread takes.
CRT_THREADS, VEC = 256, 4
#: The most moduli for which a thread takes :data:`VEC` columns: beyond, a vector of four INT32 products per modulus
#: spills registers under the bound (28 bytes at 20 moduli, on sm_90), and two columns do not.
VEC_MODULI = 16

#: Both kernels' reconstruction of one entry from its double-double sum (s_hi, s_lo): r = S - q P, q from S / P to
#: nearest in two steps (one where the table is exact), every product and sum rounded on its own.
FINISH = r"""
__device__ __forceinline__ double finish(double s_hi, double s_lo)
{
    const double qh = rint_magic(__dmul_rn(s_hi, INV));
    const double d = __dsub_rn(s_hi, __dmul_rn(qh, P_HI));
    if (EXACT) return __dsub_rn(d, __dmul_rn(rint_magic(__dmul_rn(d, INV)), P_HI));
    const double low = __dsub_rn(s_lo, __dmul_rn(qh, P_LO));
    const double q2 = rint_magic(__dmul_rn(__dadd_rn(d, low), INV));
    return __dadd_rn(__dsub_rn(d, __dmul_rn(q2, P_HI)), __dsub_rn(low, __dmul_rn(q2, P_LO)));
}
/* r / (rho_i rho_j) 2**-(s_i + s_j): the row's shift and 256 rho_i, and the column's code (as scaling.unscale). */
__device__ __forceinline__ double unscale(double r, int si, int ri, int cj)
{
    const int rj = (cj & 255) + 256;
    if (ri != 256 || rj != 256) r = __ddiv_rn(r, (double)(ri * rj) * 0x1p-16);
    return ldexp(r, -(si + (cj >> 8)));
}
"""

SOURCE = FINISH + r"""
extern "C" __global__ void __launch_bounds__(CRT_THREADS, 2) ozaki2_crt(
    const IN_T* __restrict__ planes, long long plane, long long ld, const int* __restrict__ sa,
    const int* __restrict__ sb, double* __restrict__ C, long long ldc, long long m, long long n, int pairs)
{
    const long long step = (long long)gridDim.x * blockDim.x * VEC;
    for (long long i = blockIdx.y; i < m; i += gridDim.y) {
        const IN_T* row = planes + i * ld;
        const int si = sa[i] >> 8, ri = (sa[i] & 255) + 256;
        for (long long j0 = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * VEC; j0 < n; j0 += step) {
            VEC_T v[COUNT];
            int s_col[VEC];
#pragma unroll
            for (int q = 0; q < VEC; ++q) s_col[q] = j0 + q < n ? sb[j0 + q] : 0;
#define LOAD_PLANE(T, M) v[T] = *(const VEC_T*)(row + T * plane + j0);
            FOR_EACH_MODULUS(LOAD_PLANE)
            double out[VEC];
#pragma unroll
            for (int q = 0; q < VEC; ++q) {
                double s_hi = 0.0, s_lo = 0.0;
#if REDUCE
#define RESIDUE(T, M) const int p = ((const IN_T*)&v[T])[q]; \
                      const double c = from_int((signed char)residue_word<M>(from_int(p), p));
#else
#define RESIDUE(T, M) const double c = from_int(((const IN_T*)&v[T])[q]);
#endif
#define TERM(T, M) { RESIDUE(T, M) s_hi = fma(W_HI_##T, c, s_hi); \
                     if (!EXACT) s_lo = __dadd_rn(s_lo, __dmul_rn(W_LO_##T, c)); }
                FOR_EACH_MODULUS(TERM)
                const double r = finish(s_hi, s_lo);
                const long long j = j0 + q;
                out[q] = j < n ? unscale(r, si, ri, s_col[q]) : 0.0;
            }
            double* c = C + i * ldc + j0;
#if VEC >= 2
            if (pairs && j0 + VEC <= n) {
#pragma unroll
                for (int q = 0; q < VEC; q += 2) *(double2*)(c + q) = make_double2(out[q], out[q + 1]);
                continue;
            }
#endif
#pragma unroll
            for (int q = 0; q < VEC; ++q) if (j0 + q < n) c[q] = out[q];
        }
    }
}
"""

#: The fused Winograd level's CRT (:mod:`gpu.ozaki2.fused_level`): a thread takes ``VEC`` columns of the four output
#: blocks at once, reads the 7 products of each modulus there (INT32, or their INT8 residues where the GEMMs wrote
#: residues: :func:`gpu.ozaki2.gemms.direct_products`), combines them exactly (INT32 products in float64, INT8
#: residues in int, ``NARROW``) and reduces each block's sum as the plain kernel reduces a product (INT8 residues' sums,
#: at most 512 in magnitude, by ``small_residue``); the sums and the reconstruction are the plain kernel's, term for
#: term. Two columns ran its span of 15 moduli at N = 16384 in 7.5 ms, four in 8.6 (register pressure: eight
#: double-double sums a column; ``h200-ozaki2-fused-level-probe-16384.json``). The INT8 path in int has 2712 SASS
#: instructions against 3336 (no int-to-float64 conversions); as called at 15 moduli on the H200, paired in turning
#: rounds, ``ozaki2.matmul(A, B, moduli=15, level=1)`` ran 99.4 ms against 100.3 at N = 16384 and 719.4 against 722.9
#: at 32768 (1.009x and 1.006x), every byte equal (``h200-ozaki2-level1-crt-probe.json``).
LEVEL_SOURCE = FINISH + r"""
template <int M> __device__ __forceinline__ void term(const PROD_T* at, long long quarter, double w_hi, double w_lo,
                                                      double (&hi)[4][VEC], double (&lo)[4][VEC])
{
    VEC_T v[7];
#pragma unroll
    for (int p = 0; p < 7; ++p) v[p] = *(const VEC_T*)(at + p * quarter);
#pragma unroll
    for (int q = 0; q < VEC; ++q) {
#if NARROW
        int x[7];
#else
        double x[7];
#endif
#pragma unroll
        for (int p = 0; p < 7; ++p) x[p] = ((const PROD_T*)&v[p])[q];
        const auto u2 = x[0] + x[5], u3 = u2 + x[6];
        const decltype(u2) y[4] = {x[0] + x[1], u2 + x[4] + x[2], u3 - x[3], u3 + x[4]};
#pragma unroll
        for (int o = 0; o < 4; ++o) {
#if NARROW
            const double c = small_residue<M>(y[o]);
#else
            const double c = from_int((signed char)residue_word<M>(y[o], low_word(__dadd_rn(y[o], MAGIC))));
#endif
            hi[o][q] = fma(w_hi, c, hi[o][q]);
            if (!EXACT) lo[o][q] = __dadd_rn(lo[o][q], __dmul_rn(w_lo, c));
        }
    }
}

extern "C" __global__ void __launch_bounds__(CRT_THREADS, 2) ozaki2_crt_level(
    const PROD_T* __restrict__ prod, long long plane, long long quarter, long long ld, const int* __restrict__ sa,
    const int* __restrict__ sb, double* __restrict__ C, long long ldc, long long rows, long long h, long long w)
{
    const long long step = (long long)gridDim.x * blockDim.x * VEC;
    for (long long i = blockIdx.y; i < rows; i += gridDim.y) {
        const PROD_T* row = prod + i * ld;
        const int s_row[2] = {sa[i] >> 8, sa[i + h] >> 8}, r_row[2] = {(sa[i] & 255) + 256, (sa[i + h] & 255) + 256};
        for (long long j0 = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * VEC; j0 < w; j0 += step) {
            double hi[4][VEC], lo[4][VEC];
#pragma unroll
            for (int o = 0; o < 4; ++o)
#pragma unroll
                for (int q = 0; q < VEC; ++q) { hi[o][q] = 0.0; lo[o][q] = 0.0; }
#define TERM(T, M) term<M>(row + (long long)(T) * plane + j0, quarter, W_HI_##T, W_LO_##T, hi, lo);
            FOR_EACH_MODULUS(TERM)
#pragma unroll
            for (int o = 0; o < 4; ++o) {
                double* c = C + (i + (o >> 1) * h) * ldc + (o & 1) * w;
                const int* s_col = sb + (o & 1) * w;
#pragma unroll
                for (int q = 0; q < VEC; ++q)
                    if (j0 + q < w)
                        c[j0 + q] = unscale(finish(hi[o][q], lo[o][q]), s_row[o >> 1], r_row[o >> 1], s_col[j0 + q]);
            }
        }
    }
}
"""
_VECTORS = {(True, 4): "int4", (False, 4): "char4", (True, 2): "int2", (False, 2): "char2"}


def source(table: ModuliTable, reduce: bool, vec: int) -> str:
    """The CRT kernel's whole source for ``table``, INT32 products (``reduce``) or INT8 residues, ``vec`` columns a
    thread."""
    in_t = "int" if reduce else "signed char"
    head = (f"#define REDUCE {int(reduce)}\n#define IN_T {in_t}\n#define COUNT {table.count}\n#define VEC {vec}\n"
            f"#define VEC_T {_VECTORS.get((reduce, vec), in_t)}\n#define CRT_THREADS {CRT_THREADS}\n")
    return head + constants(table) + for_each_modulus(table.moduli) + COMMON + SOURCE


@cache
def kernel(table: ModuliTable, reduce: bool, vec: int) -> Any:
    """The compiled kernel of :func:`source` (one per moduli set, planes' type and column count, per process)."""
    return cupy.RawKernel(source(table, reduce, vec), "ozaki2_crt")


def columns(planes: Any) -> int:
    """Columns per vector load: the most of 4 (up to :data:`VEC_MODULI` planes), 2 and 1 that the planes' start and
    strides allow."""
    plane, ld = planes.strides[0] // planes.itemsize, planes.strides[1] // planes.itemsize
    widths = (VEC, 2, 1) if planes.shape[0] <= VEC_MODULI else (2, 1)
    return next(v for v in widths if planes.data.ptr % (v * planes.itemsize) == 0 and plane % v == 0 and ld % v == 0)


def crt(planes: Any, table: ModuliTable, shift_a: Any, shift_b: Any, C: Any) -> None:
    """C = the CRT of ``planes`` (count x m x n, INT32 products or INT8 residues) scaled back by the shifts."""
    vec = columns(planes)
    launch(kernel(table, planes.dtype == np.int32, vec), vec, planes, shift_a, shift_b, C)


def launch(compiled: Any, vec: int, planes: Any, shift_a: Any, shift_b: Any, C: Any) -> None:
    """``compiled`` (a CRT kernel of ``vec`` columns a thread: :func:`kernel`, or a variant of its source) over
    ``planes`` into C: its grid, strides and 16-byte stores where C's start and rows allow them."""
    _, m, n = planes.shape
    plane, ld = planes.strides[0] // planes.itemsize, planes.strides[1] // planes.itemsize
    ldc = C.strides[0] // C.itemsize
    pairs = vec >= 2 and C.data.ptr % 16 == 0 and ldc % 2 == 0
    grid = (max(1, min(-(-n // (CRT_THREADS * vec)), 64)), max(1, min(m, 65535)))
    i32, i64 = np.int32, np.int64
    compiled(grid, (CRT_THREADS,), (planes, i64(plane), i64(ld), shift_a.astype(i32, copy=False),
                                    shift_b.astype(i32, copy=False), C, i64(ldc), i64(m), i64(n), i32(pairs)))


def prepare(table: ModuliTable, planes: Any) -> None:
    """Compile the kernel that :func:`crt` (4-D INT32 ``planes``: :func:`crt_level`) launches for these planes
    (once per process)."""
    if planes.ndim == 4:
        level_kernel(table, level_columns(planes), planes.dtype == np.int8)
    else:
        kernel(table, planes.dtype == np.int32, columns(planes))


@cache
def level_kernel(table: ModuliTable, vec: int, narrow: bool = False) -> Any:
    """The fused level's CRT kernel (:data:`LEVEL_SOURCE`) for ``table``, ``vec`` (1, 2 or 4) columns a thread, over
    INT32 products or (``narrow``) their INT8 residues."""
    prod_t = "signed char" if narrow else "int"
    head = (f"#define VEC {vec}\n#define VEC_T {_VECTORS.get((not narrow, vec), prod_t)}\n#define PROD_T {prod_t}\n"
            f"#define CRT_THREADS {CRT_THREADS}\n#define NARROW {int(narrow)}\n")
    return cupy.RawKernel(head + constants(table) + for_each_modulus(table.moduli) + COMMON + LEVEL_SOURCE,
                          "ozaki2_crt_level")


def level_columns(products: Any) -> int:
    """Columns a thread of :func:`crt_level` takes: 2 where the products' start and strides allow a vector load of
    two."""
    strides = [s // products.itemsize for s in products.strides[:-1]]
    return 2 if products.data.ptr % (2 * products.itemsize) == 0 and all(s % 2 == 0 for s in strides) else 1


def crt_level(products: Any, table: ModuliTable, shift_a: Any, shift_b: Any, C: Any, rows: slice, half: int,
              vec: int | None = None) -> None:
    """The fused level's CRT (:mod:`gpu.ozaki2.fused_level`): C's rows ``rows`` and ``rows`` + ``half``, all its
    columns, from the 7 INT32 products per modulus (``products``: count x 7 x rows x w) of the top half's ``rows``;
    ``vec``: columns a thread (default :func:`level_columns`; the probe that chose it times 4 too)."""
    count, _, lines, w = products.shape
    vec = vec or level_columns(products)
    plane, quarter, ld = (s // products.itemsize for s in products.strides[:-1])
    i32, i64 = np.int32, np.int64
    grid = (max(1, min(-(-w // (CRT_THREADS * vec)), 64)), max(1, min(lines, 65535)))
    level_kernel(table, vec, products.dtype == np.int8)(grid, (CRT_THREADS,), (
        products, i64(plane), i64(quarter), i64(ld), shift_a[rows.start:].astype(i32, copy=False),
        shift_b.astype(i32, copy=False), C[rows.start:], i64(C.strides[0] // C.itemsize), i64(lines), i64(half),
        i64(w)))
