"""CUDA passes of the Gaussian complex scheme (:mod:`gpu.ozaki2.gauss`), CuPy only: the GPU twin of
:class:`gpu.ozaki2.gauss.HostGaussOps`.

Both passes stay in 32-bit integers, as the Karatsuba pass does (:mod:`gpu.ozaki2.winograd_kernels`: its
``word_residue`` and multiply-high ``residue_small``):

* ``ozaki2_gauss_split16``: x + j y and x - j y for two symmetric residue planes (|j y| <= 120 * 120), 16 residues
  a thread with 16-byte loads and stores; the outputs may be the inputs (each thread reads its 16 pairs before it
  writes them), so the pairs replace the parts' residues with no plane of their own.
* ``ozaki2_gauss_parts4``: from the INT32 products P and Q, each taken to its word residue (|t| < 2**23.01), the
  symmetric residues s of t_P + t_Q and d of t_P - t_Q, then of s / 2 and d / (2 j) (``half`` and ``over``, the
  inverses modulo m): 4 products a thread.

Views that are not aligned planes take one-element kernels with the same arithmetic.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import cupy
import numpy as np

from ..backend import Array, Backend
from .gauss import constants
from .winograd_kernels import DEVICE, _aligned, _launch, word_constants

#: The device functions and the two passes' arithmetic, which the vector kernels and the one-element kernels share.
PREAMBLE = DEVICE + r"""
#define GAUSS_SPLIT(X, Y, J, U, V) { const int jy = (J) * (int)(Y); \
    U = residue_small((int)(X) + jy, m, off, magic); V = residue_small((int)(X) - jy, m, off, magic); }
#define GAUSS_PARTS(P, Q, RE, IM) { const int tp = word_residue(P, c16), tq = word_residue(Q, c16); \
    RE = residue_small(half * (int)residue_small(tp + tq, m, off, magic), m, off, magic); \
    IM = residue_small(over * (int)residue_small(tp - tq, m, off, magic), m, off, magic); }

"""

SOURCE = PREAMBLE + r"""extern "C" __global__ void ozaki2_gauss_split16(
        const signed char* x, long long ldx, const signed char* y, long long ldy, signed char* u, long long ldu,
        signed char* v, long long ldv, long long rows, long long groups, int m, int off, unsigned magic, int j) {
    ROW_GROUPS {
        int4 a = *reinterpret_cast<const int4*>(x + r * ldx + 16 * g);
        int4 b = *reinterpret_cast<const int4*>(y + r * ldy + 16 * g);
        int4 c, d;
        const signed char* pa = reinterpret_cast<const signed char*>(&a);
        const signed char* pb = reinterpret_cast<const signed char*>(&b);
        signed char* pc = reinterpret_cast<signed char*>(&c);
        signed char* pd = reinterpret_cast<signed char*>(&d);
#pragma unroll
        for (int i = 0; i < 16; ++i) GAUSS_SPLIT(pa[i], pb[i], j, pc[i], pd[i])
        *reinterpret_cast<int4*>(u + r * ldu + 16 * g) = c;
        *reinterpret_cast<int4*>(v + r * ldv + 16 * g) = d;
    }
}

extern "C" __global__ void ozaki2_gauss_parts4(
        const int* __restrict__ p, long long ldp, const int* __restrict__ q, long long ldq,
        signed char* __restrict__ re, signed char* __restrict__ im, long long ldz, long long rows, long long groups,
        int m, int c16, int off, unsigned magic, int half, int over) {
    ROW_GROUPS {
        int4 a = *reinterpret_cast<const int4*>(p + r * ldp + 4 * g);
        int4 b = *reinterpret_cast<const int4*>(q + r * ldq + 4 * g);
        char4 x, y;
        GAUSS_PARTS(a.x, b.x, x.x, y.x) GAUSS_PARTS(a.y, b.y, x.y, y.y)
        GAUSS_PARTS(a.z, b.z, x.z, y.z) GAUSS_PARTS(a.w, b.w, x.w, y.w)
        *reinterpret_cast<char4*>(re + r * ldz + 4 * g) = x;
        *reinterpret_cast<char4*>(im + r * ldz + 4 * g) = y;
    }
}
"""


@cache
def _module() -> Any:
    return cupy.RawModule(code=SOURCE)


@cache
def _split_kernel() -> Any:
    return cupy.ElementwiseKernel(
        "int8 x, int8 y, int32 m, int32 off, uint32 magic, int32 j", "int8 u, int8 v",
        "signed char a, b; GAUSS_SPLIT(x, y, j, a, b) u = a; v = b;", "ozaki2_gauss_split",
        preamble=PREAMBLE)


@cache
def _parts_kernel() -> Any:
    return cupy.ElementwiseKernel(
        "int32 p, int32 q, int32 m, int32 c16, int32 off, uint32 magic, int32 half, int32 over", "int8 re, int8 im",
        "signed char a, b; GAUSS_PARTS(p, q, a, b) re = a; im = b;", "ozaki2_gauss_parts",
        preamble=PREAMBLE)


class CudaGaussOps:
    """The two passes as one CUDA launch each (see the module notes)."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def split(self, x: Array, y: Array, m: int, out: tuple[Array, Array] | None = None) -> tuple[Array, Array]:
        u, v = (cupy.empty(x.shape, dtype=np.int8), cupy.empty(x.shape, dtype=np.int8)) if out is None else out
        _, _, off, magic = word_constants(m)
        j = np.int32(constants(m)[0])
        if u.size and all(_aligned(a, 16, 16) for a in (x, y, u, v)) and x.shape == y.shape == u.shape == v.shape:
            rows, cols = x.shape
            _launch("ozaki2_gauss_split16", rows, cols // 16,
                    (x, np.int64(x.strides[0]), y, np.int64(y.strides[0]), u, np.int64(u.strides[0]), v,
                     np.int64(v.strides[0]), np.int64(rows), np.int64(cols // 16), np.int32(m), off, magic, j), _module)
        elif u.size:
            _split_kernel()(x, y, np.int32(m), off, magic, j, u, v)
        return u, v

    def parts(self, P: Array, Q: Array, m: int, out: tuple[Array, Array] | None = None) -> tuple[Array, Array]:
        re, im = (cupy.empty(P.shape, dtype=np.int8), cupy.empty(P.shape, dtype=np.int8)) if out is None else out
        _, c16, off, magic = word_constants(m)
        _, h, g = (np.int32(c) for c in constants(m))
        if re.size and _aligned(P, 16, 4) and _aligned(Q, 16, 4) and _aligned(re, 4, 4) and _aligned(im, 4, 4) \
                and re.strides == im.strides:
            rows, cols = P.shape
            _launch("ozaki2_gauss_parts4", rows, cols // 4,
                    (P, np.int64(P.strides[0] // 4), Q, np.int64(Q.strides[0] // 4), re, im, np.int64(re.strides[0]),
                     np.int64(rows), np.int64(cols // 4), np.int32(m), c16, off, magic, h, g), _module)
        elif re.size:
            _parts_kernel()(P, Q, np.int32(m), c16, off, magic, h, g, re, im)
        return (re, im) if out is None else out
