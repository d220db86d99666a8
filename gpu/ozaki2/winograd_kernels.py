"""CuPy kernels of the Winograd levels over the residues (:mod:`gpu.ozaki2.winograd`): each sum or difference of
two residue planes modulo m, and each INT32 product's reduction, in one pass.

Loaded by :meth:`gpu.backend.Backend.ops` for the CuPy backend only (``"ozaki2-winograd"``), so the CPU path
never imports CuPy. The arithmetic is the NumPy operations' (:class:`gpu.ozaki2.winograd.HostResidueOps`) in C:
symmetric residues in, the symmetric residue of x + sign y (or of p) modulo m out.

On the H200 the first form of these passes (one element a thread, C's ``%`` by a modulus known only at run time) ran
at a tenth of the memory bandwidth: 0.39 ms for one sum of two 8192 x 8192 planes, where 201 MB at 4.8 TB/s take
0.04 ms (``results/published/h200/h200-ozaki2-winograd-probe-23-passes.json``). So here no ``%`` is left: a sum of
two symmetric residues lies in [-m, m), one comparison brings it to [0, m); a product p (|p| < 2**31) takes its
quotient from ``rint(p * (1.0 / m))`` in float64, off by at most one, which two comparisons correct. A Winograd
level forms each operand's four sums in one pass and its four output blocks from the 7 products in one more
(:data:`LEVEL`, :data:`COMBINE4`; :data:`SUMS` and :data:`COMBINE` on unaligned blocks). As CuPy elementwise kernels
on quadrant views these two ran at about a third of the bandwidth (2.4 ms of passes per modulus at N = 16384,
``h200-ozaki2-winograd-probe-elementwise.json``); as vector kernels, about 0.9 ms. Complex 3M's two parts come from
its three INT32 products in one pass (:meth:`CudaResidueOps.karatsuba`: P1 - P2 and P3 - P1 - P2) in 32-bit integers
only: each product's word residue hi c16 + lo (p = hi 2^16 + lo, c16 = 2^16 mod m), then a multiply-high quotient
(``residue_small``, :func:`word_constants`). At N = 16384 on the H200 that pass took 1.08 ms a modulus against 1.28
for 64-bit differences with float64 quotients, the same bits (``h200-ozaki2-complex-probe.json``).
Where the planes allow (rows starting on 16 bytes, widths of whole groups), a thread
reads and writes 16 bytes of a sum, or 4 products, at once; other views (a plane's first n columns, say) take the
one-element kernels, with the same arithmetic.

The shared device functions, and how the 16-byte sums take two residues a word, are in
:mod:`gpu.ozaki2.residue_cuda`.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import cupy
import numpy as np

from ..backend import Array, Backend
from .residue_cuda import DEVICE

#: Rows by ``blockIdx.y`` (strided), groups of a row by threads; each group 16 residues (a sum) or 4 products.
SOURCE = DEVICE + r"""
extern "C" __global__ void ozaki2_residue_sum16(
        const signed char* __restrict__ x, long long ldx, const signed char* __restrict__ y, long long ldy,
        signed char* __restrict__ z, long long ldz, long long rows, long long groups, int m, int sign) {
    ROW_GROUPS {
        int4 a = *reinterpret_cast<const int4*>(x + r * ldx + 16 * g);
        int4 b = *reinterpret_cast<const int4*>(y + r * ldy + 16 * g);
        int4 c;
        const Lanes k = lanes_of(m);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const unsigned x4 = reps4(WORDS4(a)[j], k), y4 = reps4(WORDS4(b)[j], k);
            unsigned half[2];
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                const unsigned sel = i ? 0x4342u : 0x4140u, u = lanes_in(x4, sel), v = lanes_in(y4, sel);
                half[i] = sign > 0 ? lanes_add(u, v, k) : lanes_sub(u, v, k);
            }
            WORDS4(c)[j] = lanes_out(half[0], half[1], k);
        }
        *reinterpret_cast<int4*>(z + r * ldz + 16 * g) = c;
    }
}

extern "C" __global__ void ozaki2_karatsuba4(
        const int* __restrict__ p1, long long ld1, const int* __restrict__ p2, long long ld2,
        const int* __restrict__ p3, long long ld3, signed char* __restrict__ re, signed char* __restrict__ im,
        long long ldz, long long rows, long long groups, int m, int c16, int off, unsigned magic) {
    ROW_GROUPS {
        int4 a = *reinterpret_cast<const int4*>(p1 + r * ld1 + 4 * g);
        int4 b = *reinterpret_cast<const int4*>(p2 + r * ld2 + 4 * g);
        int4 c = *reinterpret_cast<const int4*>(p3 + r * ld3 + 4 * g);
        char4 x, y;
#define KARATSUBA(L) { const int t1 = word_residue(a.L, c16), t2 = word_residue(b.L, c16); \
                       x.L = residue_small(t1 - t2, m, off, magic); \
                       y.L = residue_small(word_residue(c.L, c16) - t1 - t2, m, off, magic); }
        KARATSUBA(x) KARATSUBA(y) KARATSUBA(z) KARATSUBA(w)
#undef KARATSUBA
        *reinterpret_cast<char4*>(re + r * ldz + 4 * g) = x;
        *reinterpret_cast<char4*>(im + r * ldz + 4 * g) = y;
    }
}

extern "C" __global__ void ozaki2_residue_reduce4(
        const int* __restrict__ p, long long ldp, signed char* __restrict__ z, long long ldz, long long rows,
        long long groups, int m, double inverse) {
    ROW_GROUPS {
        int4 v = *reinterpret_cast<const int4*>(p + r * ldp + 4 * g);
        char4 c;
        c.x = residue_reduce(v.x, m, inverse);
        c.y = residue_reduce(v.y, m, inverse);
        c.z = residue_reduce(v.z, m, inverse);
        c.w = residue_reduce(v.w, m, inverse);
        *reinterpret_cast<char4*>(z + r * ldz + 4 * g) = c;
    }
}
"""

#: A Winograd level's passes on aligned planes: each operand's four sums, 16 residues a thread, from four views with
#: their own leading dimensions into four contiguous planes; the four output blocks from the 7 contiguous products
#: of one shape, 4 a thread, into four views of C (``{T}``/``{V}``: the products' type and its 4-vector).
LEVEL = DEVICE + r"""
/* A's (side 0) or B's four sums of one pair of lanes of each block, as representatives (SUMS' formulas). */
__device__ __forceinline__ void sums_of(int side, Lanes k, unsigned x11, unsigned x12, unsigned x21, unsigned x22,
                                        unsigned* s) {
    if (side == 0) {
        const unsigned r1 = lanes_add(x21, x22, k), r2 = lanes_sub(r1, x11, k);
        s[0] = r1; s[1] = r2; s[2] = lanes_sub(x11, x21, k); s[3] = lanes_sub(x12, r2, k);
    } else {
        const unsigned r1 = lanes_sub(x12, x11, k), r2 = lanes_sub(x22, r1, k);
        s[0] = r1; s[1] = r2; s[2] = lanes_sub(x22, x12, k); s[3] = lanes_sub(r2, x21, k);
    }
}
extern "C" __global__ void ozaki2_winograd_sums16(
        const signed char* __restrict__ x11, long long ld11, const signed char* __restrict__ x12, long long ld12,
        const signed char* __restrict__ x21, long long ld21, const signed char* __restrict__ x22, long long ld22,
        signed char* __restrict__ s1, signed char* __restrict__ s2, signed char* __restrict__ s3,
        signed char* __restrict__ s4, long long rows, long long groups, int m, int side) {
    ROW_GROUPS {
        int4 a = *reinterpret_cast<const int4*>(x11 + r * ld11 + 16 * g);
        int4 b = *reinterpret_cast<const int4*>(x12 + r * ld12 + 16 * g);
        int4 c = *reinterpret_cast<const int4*>(x21 + r * ld21 + 16 * g);
        int4 d = *reinterpret_cast<const int4*>(x22 + r * ld22 + 16 * g);
        const Lanes k = lanes_of(m);
        int4 o[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const unsigned x11 = reps4(WORDS4(a)[j], k), x12 = reps4(WORDS4(b)[j], k),
                           x21 = reps4(WORDS4(c)[j], k), x22 = reps4(WORDS4(d)[j], k);
            unsigned half[2][4];
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                const unsigned sel = i ? 0x4342u : 0x4140u;
                sums_of(side, k, lanes_in(x11, sel), lanes_in(x12, sel), lanes_in(x21, sel), lanes_in(x22, sel),
                        half[i]);
            }
#pragma unroll
            for (int t = 0; t < 4; ++t) WORDS4(o[t])[j] = lanes_out(half[0][t], half[1][t], k);
        }
        long long at = r * groups * 16 + 16 * g;
        *reinterpret_cast<int4*>(s1 + at) = o[0];
        *reinterpret_cast<int4*>(s2 + at) = o[1];
        *reinterpret_cast<int4*>(s3 + at) = o[2];
        *reinterpret_cast<int4*>(s4 + at) = o[3];
    }
}
"""
COMBINE4 = r"""
extern "C" __global__ void ozaki2_winograd_combine4_{name}(
        const {T}* __restrict__ p1, const {T}* __restrict__ p2, const {T}* __restrict__ p3,
        const {T}* __restrict__ p4, const {T}* __restrict__ p5, const {T}* __restrict__ p6,
        const {T}* __restrict__ p7, signed char* __restrict__ c11, signed char* __restrict__ c12,
        signed char* __restrict__ c21, signed char* __restrict__ c22, long long ldc, long long rows,
        long long groups, int m, double inverse) {{
    ROW_GROUPS {{
        long long at = r * groups * 4 + 4 * g;
        {V} v1 = *reinterpret_cast<const {V}*>(p1 + at), v2 = *reinterpret_cast<const {V}*>(p2 + at),
            v3 = *reinterpret_cast<const {V}*>(p3 + at), v4 = *reinterpret_cast<const {V}*>(p4 + at),
            v5 = *reinterpret_cast<const {V}*>(p5 + at), v6 = *reinterpret_cast<const {V}*>(p6 + at),
            v7 = *reinterpret_cast<const {V}*>(p7 + at);
        const {T} *e1 = reinterpret_cast<const {T}*>(&v1), *e2 = reinterpret_cast<const {T}*>(&v2),
                  *e3 = reinterpret_cast<const {T}*>(&v3), *e4 = reinterpret_cast<const {T}*>(&v4),
                  *e5 = reinterpret_cast<const {T}*>(&v5), *e6 = reinterpret_cast<const {T}*>(&v6),
                  *e7 = reinterpret_cast<const {T}*>(&v7);
        char4 o11, o12, o21, o22;
        signed char *q11 = reinterpret_cast<signed char*>(&o11), *q12 = reinterpret_cast<signed char*>(&o12),
                    *q21 = reinterpret_cast<signed char*>(&o21), *q22 = reinterpret_cast<signed char*>(&o22);
#pragma unroll
        for (int i = 0; i < 4; ++i) {{
            long long a1 = e1[i], a2 = e2[i], a3 = e3[i], a4 = e4[i], a5 = e5[i], a6 = e6[i], a7 = e7[i];
            long long u2 = a1 + a6, u3 = u2 + a7;
            q11[i] = residue_reduce64(a1 + a2, m, inverse);
            q12[i] = residue_reduce64(u2 + a5 + a3, m, inverse);
            q21[i] = residue_reduce64(u3 - a4, m, inverse);
            q22[i] = residue_reduce64(u3 + a5, m, inverse);
        }}
        long long out = r * ldc + 4 * g;
        *reinterpret_cast<char4*>(c11 + out) = o11;
        *reinterpret_cast<char4*>(c12 + out) = o12;
        *reinterpret_cast<char4*>(c21 + out) = o21;
        *reinterpret_cast<char4*>(c22 + out) = o22;
    }}
}}
"""
#: The products' dtypes the vector combine takes: INT32 products (the bottom level) and INT8 residues (above).
VECTOR_TYPES = {np.dtype(np.int32): ("i32", "int", "int4", 16), np.dtype(np.int8): ("i8", "signed char", "char4", 4)}
LEVEL_SOURCE = LEVEL + "".join(COMBINE4.format(name=name, T=t, V=v) for name, t, v, _ in VECTOR_TYPES.values())

THREADS = 256
#: The most blocks along a row and the most rows of blocks one launch takes (the grid-stride loops do the rest).
MAX_X, MAX_Y = 1024, 65535


@cache
def _module() -> Any:
    return cupy.RawModule(code=SOURCE)


@cache
def _level_module() -> Any:
    return cupy.RawModule(code=LEVEL_SOURCE)


@cache
def _sum_kernel() -> Any:
    return cupy.ElementwiseKernel("int8 x, int8 y, int32 m, int32 sign", "int8 z", "z = residue_sum(x, y, m, sign)",
                                  "ozaki2_residue_sum", preamble=DEVICE)


@cache
def _reduce_kernel() -> Any:
    return cupy.ElementwiseKernel("int32 p, int32 m, float64 inverse", "int8 z", "z = residue_reduce(p, m, inverse)",
                                  "ozaki2_residue_reduce", preamble=DEVICE)


@cache
def _karatsuba_kernel() -> Any:
    return cupy.ElementwiseKernel(
        "int32 p1, int32 p2, int32 p3, int32 m, float64 inverse", "int8 re, int8 im",
        "long long a = p1, b = p2; re = residue_reduce64(a - b, m, inverse); "
        "im = residue_reduce64((long long)p3 - a - b, m, inverse)", "ozaki2_karatsuba", preamble=DEVICE)


#: The bodies of one Winograd level's passes (see :mod:`gpu.ozaki2.winograd`): A's sums S1..S4, B's T1..T4.
SUMS = {"a": "signed char r1 = residue_sum(x21, x22, m, 1); signed char r2 = residue_sum(r1, x11, m, -1); "
             "s1 = r1; s2 = r2; s3 = residue_sum(x11, x21, m, -1); s4 = residue_sum(x12, r2, m, -1)",
        "b": "signed char r1 = residue_sum(x12, x11, m, -1); signed char r2 = residue_sum(x22, r1, m, -1); "
             "s1 = r1; s2 = r2; s3 = residue_sum(x22, x12, m, -1); s4 = residue_sum(r2, x21, m, -1)"}
#: The four output blocks from the 7 products, exact in 64 bits, each reduced once.
COMBINE = ("long long a1 = p1, a2 = p2, a3 = p3, a4 = p4, a5 = p5, a6 = p6, a7 = p7; "
           "long long u2 = a1 + a6, u3 = u2 + a7; "
           "c11 = residue_reduce64(a1 + a2, m, inverse); c12 = residue_reduce64(u2 + a5 + a3, m, inverse); "
           "c21 = residue_reduce64(u3 - a4, m, inverse); c22 = residue_reduce64(u3 + a5, m, inverse)")


@cache
def _sums_kernel(side: str) -> Any:
    return cupy.ElementwiseKernel("int8 x11, int8 x12, int8 x21, int8 x22, int32 m",
                                  "int8 s1, int8 s2, int8 s3, int8 s4", SUMS[side], f"ozaki2_winograd_sums_{side}",
                                  preamble=DEVICE)


@cache
def _combine_kernel() -> Any:
    return cupy.ElementwiseKernel("T p1, T p2, T p3, T p4, T p5, T p6, T p7, int32 m, float64 inverse",
                                  "int8 c11, int8 c12, int8 c21, int8 c22", COMBINE, "ozaki2_winograd_combine",
                                  preamble=DEVICE)


def _aligned(a: Array, align: int, width: int) -> bool:
    """Whether 2-D ``a``'s rows are contiguous, start on ``align`` bytes and hold whole groups of ``width``."""
    return a.ndim == 2 and a.strides[1] == a.itemsize and a.shape[1] % width == 0 and a.data.ptr % align == 0 \
        and (a.shape[0] == 1 or a.strides[0] % align == 0)


def _launch(name: str, rows: int, groups: int, args: tuple, module: Any = _module) -> None:
    grid = (min(MAX_X, -(-groups // THREADS)), min(MAX_Y, rows))
    module().get_function(name)(grid, (THREADS,), args)


def _contiguous(arrays: tuple[Array, ...], align: int, width: int) -> bool:
    """Whether the arrays are C-contiguous planes of one shape whose rows start on ``align`` bytes and hold whole
    groups of ``width``."""
    return all(a.flags.c_contiguous and a.shape == arrays[0].shape and a.dtype == arrays[0].dtype
               and _aligned(a, align, width) for a in arrays)


class CudaResidueOps:
    """The residue sums and reductions as one CUDA pass each (see the module notes)."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def combine(self, x: Array, y: Array, m: int, sign: int, out: Array | None = None) -> Array:
        z = cupy.empty(x.shape, dtype=np.int8) if out is None else out
        if z.size and all(_aligned(a, 16, 16) for a in (x, y, z)):
            rows, cols = x.shape
            _launch("ozaki2_residue_sum16", rows, cols // 16,
                    (x, np.int64(x.strides[0]), y, np.int64(y.strides[0]), z, np.int64(z.strides[0]), np.int64(rows),
                     np.int64(cols // 16), np.int32(m), np.int32(sign)))
            return z
        return _sum_kernel()(x, y, np.int32(m), np.int32(sign), z)

    def reduce(self, P: Array, m: int) -> Array:
        z = cupy.empty(P.shape, dtype=np.int8)
        if z.size and _aligned(P, 16, 4) and _aligned(z, 4, 4):
            rows, cols = P.shape
            _launch("ozaki2_residue_reduce4", rows, cols // 4,
                    (P, np.int64(P.strides[0] // 4), z, np.int64(z.strides[0]), np.int64(rows), np.int64(cols // 4),
                     np.int32(m), np.float64(1.0 / m)))
            return z
        return _reduce_kernel()(P, np.int32(m), np.float64(1.0 / m), z)

    def operand_sums(self, x11: Array, x12: Array, x21: Array, x22: Array, m: int, side: str,
                     out: tuple[Array, ...] | None = None) -> tuple[Array, ...]:
        blocks = (x11, x12, x21, x22)
        if not x11.size or not all(x.shape == x11.shape and _aligned(x, 16, 16) for x in blocks) or \
                (out is not None and (out[0].shape != x11.shape or not _contiguous(out, 16, 16))):
            return _sums_kernel(side)(*blocks, np.int32(m), *(out or ()))
        rows, cols = x11.shape
        sums = cupy.empty((4, rows, cols), dtype=np.int8) if out is None else out
        lds = [np.int64(x.strides[0]) for x in blocks]
        _launch("ozaki2_winograd_sums16", rows, cols // 16,
                (x11, lds[0], x12, lds[1], x21, lds[2], x22, lds[3], *sums, np.int64(rows), np.int64(cols // 16),
                 np.int32(m), np.int32(side != "a")), _level_module)
        return tuple(sums)

    def combine_products(self, products: tuple[Array, ...], m: int, out: tuple[Array, ...]) -> None:
        vector = VECTOR_TYPES.get(products[0].dtype)
        if vector is None or not products[0].size or not _contiguous(products, vector[3], 4) \
                or not _same_views(out, products[0].shape):
            _combine_kernel()(*products, np.int32(m), np.float64(1.0 / m), *out)
            return
        rows, cols = products[0].shape
        _launch(f"ozaki2_winograd_combine4_{vector[0]}", rows, cols // 4,
                (*products, *out, np.int64(out[0].strides[0]), np.int64(rows), np.int64(cols // 4), np.int32(m),
                 np.float64(1.0 / m)), _level_module)

    def karatsuba(self, P1: Array, P2: Array, P3: Array, m: int,
                  out: tuple[Array, Array] | None = None) -> tuple[Array, Array]:
        re, im = (cupy.empty(P1.shape, dtype=np.int8), cupy.empty(P1.shape, dtype=np.int8)) if out is None else out
        if re.size and all(_aligned(P, 16, 4) for P in (P1, P2, P3)) and _aligned(re, 4, 4) \
                and re.strides == im.strides and _aligned(im, 4, 4):
            rows, cols = P1.shape
            _launch("ozaki2_karatsuba4", rows, cols // 4,
                    (P1, np.int64(P1.strides[0] // 4), P2, np.int64(P2.strides[0] // 4), P3,
                     np.int64(P3.strides[0] // 4), re, im, np.int64(re.strides[0]), np.int64(rows),
                     np.int64(cols // 4), *word_constants(m)))
        else:
            _karatsuba_kernel()(P1, P2, P3, np.int32(m), np.float64(1.0 / m), re, im)
        return (re, im) if out is None else out


def word_constants(m: int) -> tuple[np.int32, np.int32, np.int32, np.uint32]:
    """(m, 2^16 mod m, off, magic) of the Karatsuba pass's 32-bit reduction (``residue_small``): off the least
    multiple of m at or above 2^25, magic = ceil(2^32 / m)."""
    if not 2 <= m <= 256:
        raise ValueError(f"a modulus lies in 2..256, got {m}")
    return np.int32(m), np.int32(65536 % m), np.int32(-(-2**25 // m) * m), np.uint32(-(-2**32 // m))


def _same_views(out: tuple[Array, ...], shape: tuple[int, ...]) -> bool:
    """Whether the four output blocks are INT8 views of ``shape`` with one row stride, rows on 4 bytes."""
    return all(o.dtype == np.int8 and o.shape == shape and o.strides == out[0].strides and _aligned(o, 4, 4)
               for o in out)
