"""The planes layout's reduction on CuPy: one modulus's INT32 product into its INT8 plane, added to the plane modulo m
across k blocks (:meth:`gpu.ozaki2.ops.HostOps.reduce` is its arithmetic; :mod:`gpu.ozaki2.workspace` its layout).

A product of a plane's whole rows (rows on 16 bytes, a width of whole groups of 16) takes a vector kernel: a thread
reads 16 products (64 bytes) and writes 16 residues, in 32-bit integers only (each product's word residue
``hi c16 + lo``, the plane's residue added where k blocks accumulate, then ``residue_small``'s multiply-high
quotient; :mod:`gpu.ozaki2.winograd_kernels`). The one-element kernel, with a 64-bit sum and a float64 quotient,
takes other views. Same bits either way. On the H200 the one-element kernel ran at about a quarter of the memory
bandwidth (19.7 ms of a 15-modulus product's 126.5 ms at N = 16384, where the direct layout took 110.2 ms); the
vector kernel took 6.1 ms of 117.9 (direct: 110.9), and 22 ms of 846 at N = 32768 (direct: 822;
``results/published/h200/h200-ozaki2-layout-probe.json``). The planes layout holds 6.12 FP64 matrices of workspace
at 15 moduli against the direct layout's 11.25.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import cupy
import numpy as np

from .winograd_kernels import DEVICE, _aligned, _launch, word_constants

SOURCE = DEVICE + r"""
extern "C" __global__ void ozaki2_plane_reduce16(
        const int* __restrict__ p, long long ldp, signed char* __restrict__ z, long long ldz, long long rows,
        long long groups, int m, int c16, int off, unsigned magic, int accumulate) {
    ROW_GROUPS {
        const int4* src = reinterpret_cast<const int4*>(p + r * ldp + 16 * g);
        int4* dst = reinterpret_cast<int4*>(z + r * ldz + 16 * g);
        int4 v[4] = {src[0], src[1], src[2], src[3]};
        int4 old = accumulate ? *dst : make_int4(0, 0, 0, 0);
        const int* x = reinterpret_cast<const int*>(v);
        const signed char* o = reinterpret_cast<const signed char*>(&old);
        int4 out;
        signed char* q = reinterpret_cast<signed char*>(&out);
#pragma unroll
        for (int i = 0; i < 16; ++i) q[i] = residue_small(word_residue(x[i], c16) + o[i], m, off, magic);
        *dst = out;
    }
}
"""


@cache
def _module() -> Any:
    return cupy.RawModule(code=SOURCE)


@cache
def _element_kernel() -> Any:
    """An INT32 product into its modulus's plane (added to it across k blocks), reduced once in 64 bits."""
    return cupy.ElementwiseKernel(
        "int32 p, int32 m, float64 inverse, bool accumulate", "int8 plane",
        "long long v = p; if (accumulate) v += (long long)plane; plane = residue_reduce64(v, m, inverse)",
        "ozaki2_reduce", preamble=DEVICE)


def reduce_into(P: Any, plane: Any, modulus: int, accumulate: bool) -> None:
    """``plane = sym(P mod m)``, or with ``accumulate`` ``sym(plane + P mod m)``: ``P`` an INT32 view of
    ``plane``'s shape (see the module)."""
    if plane.size and P.shape == plane.shape and _aligned(P, 16, 16) and _aligned(plane, 16, 16):
        rows, cols = plane.shape
        _launch("ozaki2_plane_reduce16", rows, cols // 16,
                (P, np.int64(P.strides[0] // 4), plane, np.int64(plane.strides[0]), np.int64(rows),
                 np.int64(cols // 16), *word_constants(modulus), np.int32(accumulate)), _module)
        return
    _element_kernel()(P, np.int32(modulus), np.float64(1.0 / modulus), accumulate, plane)
