"""Strassen-Winograd over the residues: scheme II's products modulo m with 7/8 of the INT8 work per level.

Arithmetic modulo m is a ring, so Winograd's form of Strassen's algorithm is exact on the residue planes: the
operand sums are taken modulo m (symmetric residues, INT8 again), the 7 products of a level are exact INT8
GEMMs (INT32 sums, each reduced modulo m), and the output blocks are combined modulo m. What comes out is the
symmetric residue of A'B' modulo m, the one number the CRT reads (:mod:`gpu.ozaki2.crt`), so the product is
**bitwise** the plain scheme II product with the same moduli and scaling: only the work differs.

With A's residues ``a`` (rows x k) and B's read as rows ``b`` (cols x k, the layout of the INT8 GEMM
``a @ b.T``), one level takes the even cores of the three sides in 2 x 2 blocks (B_ij = b's block of column
block j and k block i, transposed) and forms

* S1 = A21 + A22, S2 = S1 - A11, S3 = A11 - A21, S4 = A12 - S2;
* T1 = B12 - B11, T2 = B22 - T1, T3 = B22 - B12, T4 = T2 - B21;
* M1 = A11 B11, M2 = A12 B21, M3 = S4 B22, M4 = A22 T4, M5 = S1 T1, M6 = S2 T2, M7 = S3 T3;
* C11 = M1 + M2, U2 = M1 + M6, U3 = U2 + M7, C12 = U2 + M5 + M3, C21 = U3 - M4, C22 = U3 + M5,

every sum modulo m. Each side's core is its largest multiple of 2 :data:`ALIGN_SIDE`; the rest is peeled: those
rows or columns of C, or the last terms of k, come from thin INT8 GEMMs. Halves below :data:`MIN_SIDE` stop the
recursion.

Each level makes three passes besides its 7 products (:class:`HostResidueOps` on NumPy, CUDA kernels on CuPy:
``gpu.ozaki2.winograd_kernels``): one forms an operand's four sums from its four blocks (one for A, one for B),
and one forms the four output blocks from the 7 products, the bottom level's straight from their INT32 values
(exact in 64 bits, reduced once). On the H200 the first form, 23 passes of two operands each, cost more than the
level saved (``results/published/h200/h200-ozaki2-winograd-probe-23-passes.json``). The residue and CRT passes
that the plain product already makes do not take these sums up yet (the fused form).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..backend import Array, Backend, get_backend, register_ops
from .residues import symmetric

#: The most levels a product takes (each halves the three sides).
MAX_LEVEL = 4
#: Halves below this many lines on any side are multiplied directly.
MIN_SIDE = 32
#: Each level splits sides in halves of a multiple of this many lines (the rest peeled), so that every view and
#: sum the INT8 GEMMs read starts 16-byte aligned with a leading dimension a multiple of 16, as the tensor
#: cores' kernels want.
ALIGN_SIDE = 16


def check_level(level: Any) -> int:
    """``level`` as a whole number in 0..MAX_LEVEL, or ValueError."""
    if isinstance(level, bool) or not isinstance(level, (int, np.integer)) or not 0 <= level <= MAX_LEVEL:
        raise ValueError(f"level must be a whole number in 0..{MAX_LEVEL} (Winograd levels over the residues; "
                         f"0 is the plain product), not {level!r}")
    return int(level)


def scratch_bytes(m: int, k: int, n: int, level: int) -> int:
    """Bytes the sums and products of ``level`` levels take at their peak, beyond the plan's workspace: the
    operand sums (a quarter of each operand, 8 of them per level: (m + n) k INT8 bytes), the 7 products (INT32 at
    the bottom level: 7 m n bytes; residues above) and the output's residues (m n), each level below a quarter of
    the one above."""
    if not level:
        return 0
    top = (m + n) * k + 8 * m * n
    return 2 * top


def residue_product(be: Backend, a: Array, b: Array, modulus: int, level: int) -> Array:
    """The symmetric residues (INT8, rows of ``a`` x rows of ``b``) of ``a @ b.T`` modulo ``modulus``, by
    ``level`` Winograd levels (see the module)."""
    rows, k = a.shape
    cols = b.shape[0]
    r2, c2, k2 = (side // (2 * ALIGN_SIDE) * 2 * ALIGN_SIDE for side in (rows, cols, k))
    if level == 0 or min(r2, c2, k2) // 2 < MIN_SIDE:
        return _direct(be, a, b, modulus)
    C = be.xp.empty((rows, cols), dtype=np.int8)
    C[:r2, :c2] = _level(be, a[:r2, :k2], b[:c2, :k2], modulus, level)
    if k2 < k:
        C[:r2, :c2] = add(C[:r2, :c2], _direct(be, a[:r2, k2:], b[:c2, k2:], modulus), modulus)
    if r2 < rows:
        C[r2:] = _direct(be, a[r2:], b, modulus)
    if c2 < cols:
        C[:r2, c2:] = _direct(be, a[:r2], b[c2:], modulus)
    return C


def _level(be: Backend, a: Array, b: Array, m: int, level: int) -> Array:
    """One level on even sides: each operand's four sums in one pass, the 7 products one level down (INT32
    products at the bottom, residues above), and the four output blocks from them in one pass."""
    h, w, d = a.shape[0] // 2, b.shape[0] // 2, a.shape[1] // 2
    ops = be.ops(FAMILY)
    a11, a12, a21, a22 = a[:h, :d], a[:h, d:], a[h:, :d], a[h:, d:]
    b11, b12, b21, b22 = b[:w, :d], b[w:, :d], b[:w, d:], b[w:, d:]
    s1, s2, s3, s4 = ops.operand_sums(a11, a12, a21, a22, m, "a")
    t1, t2, t3, t4 = ops.operand_sums(b11, b12, b21, b22, m, "b")

    def down(x: Array, y: Array) -> Array:
        return int32_product(be, x, y) if level == 1 else residue_product(be, x, y, m, level - 1)

    products = (down(a11, b11), down(a12, b21), down(s4, b22), down(a22, t4), down(s1, t1), down(s2, t2),
                down(s3, t3))
    C = be.xp.empty((2 * h, 2 * w), dtype=np.int8)
    ops.combine_products(products, m, (C[:h, :w], C[:h, w:], C[h:, :w], C[h:, w:]))
    return C


def _direct(be: Backend, a: Array, b: Array, m: int) -> Array:
    """``a @ b.T`` by one INT8 GEMM (INT32, exact), reduced to symmetric residues."""
    return be.ops(FAMILY).reduce(int32_product(be, a, b), m)


def int32_product(be: Backend, a: Array, b: Array) -> Array:
    """``a @ b.T`` by one INT8 GEMM into a new INT32 array (exact)."""
    P = be.xp.empty((a.shape[0], b.shape[0]), dtype=np.int32)
    if P.size:
        be.gemm_ex(a, b.T, P, recipe="int8")
    else:
        P[...] = 0
    return P


def add(x: Array, y: Array, m: int, out: Array | None = None) -> Array:
    """The symmetric residues of x + y modulo m (x and y symmetric residues, INT8), into ``out`` where given (which
    may be x or y: each entry is read before it is written)."""
    return _ops_of(x).combine(x, y, m, 1, out)


class HostResidueOps:
    """The residue sums and reductions on NumPy (CuPy's run as one CUDA pass each: ``gpu.ozaki2.winograd_kernels``)."""

    def __init__(self, backend: Backend | None = None) -> None:
        self.backend = backend

    def combine(self, x: Array, y: Array, m: int, sign: int, out: Array | None = None) -> Array:
        """The symmetric residues of x + sign y modulo m, into ``out`` where given."""
        z = symmetric((x.astype(np.int16) + sign * y.astype(np.int16)) % m, m)
        if out is None:
            return z
        out[...] = z
        return out

    def reduce(self, P: Array, m: int) -> Array:
        """The symmetric residues of the INT32 products P modulo m."""
        return symmetric(P % m, m)

    def operand_sums(self, x11: Array, x12: Array, x21: Array, x22: Array, m: int, side: str,
                     out: tuple[Array, ...] | None = None) -> tuple[Array, ...]:
        """One operand's four Winograd sums modulo m from its blocks (see the module): S1..S4 of A's blocks for
        ``side`` ``"a"``, T1..T4 of B's for ``"b"``; into ``out``'s four arrays where given (then ``out``)."""
        c = self.combine
        if side == "a":
            s1 = c(x21, x22, m, 1)
            s2 = c(s1, x11, m, -1)
            sums = (s1, s2, c(x11, x21, m, -1), c(x12, s2, m, -1))
        else:
            t1 = c(x12, x11, m, -1)
            t2 = c(x22, t1, m, -1)
            sums = (t1, t2, c(x22, x12, m, -1), c(t2, x21, m, -1))
        return into(out, sums)

    def combine_products(self, products: tuple[Array, ...], m: int, out: tuple[Array, ...]) -> None:
        """C11, C12, C21, C22 modulo m into ``out`` from the 7 products M1..M7 (INT32 products or residues;
        exact in int64): C11 = M1 + M2, C12 = M1 + M6 + M5 + M3, C21 = M1 + M6 + M7 - M4, C22 = M1 + M6 + M7 + M5."""
        m1, m2, m3, m4, m5, m6, m7 = (x.astype(np.int64) for x in products)
        u2 = m1 + m6
        u3 = u2 + m7
        for view, value in zip(out, (m1 + m2, u2 + m5 + m3, u3 - m4, u3 + m5), strict=True):
            view[...] = symmetric(value % m, m)

    def karatsuba(self, P1: Array, P2: Array, P3: Array, m: int,
                  out: tuple[Array, Array] | None = None) -> tuple[Array, Array]:
        """The symmetric residues of P1 - P2 and of P3 - P1 - P2 modulo m (INT32 products in, exact in int64): the
        real and imaginary parts of a complex product by 3M over the residues, in one pass (into ``out``'s two
        INT8 arrays where given)."""
        P1, P2 = P1.astype(np.int64), P2.astype(np.int64)
        return into(out, (symmetric((P1 - P2) % m, m), symmetric((P3 - P1 - P2) % m, m)))


def into(out: tuple[Array, ...] | None, parts: tuple[Array, ...]) -> tuple[Array, ...]:
    """``parts``, written into ``out``'s arrays where given (then ``out``): how the NumPy passes that make several
    arrays at once (both parts of a complex product, an operand's four sums) return them."""
    if out is None:
        return parts
    for view, value in zip(out, parts, strict=True):
        view[...] = value
    return out


def _ops_of(x: Array) -> Any:
    """The residue operations of the array module x belongs to (NumPy's, or CuPy's CUDA passes)."""
    return _HOST if isinstance(x, np.ndarray) else get_backend("cupy").ops(FAMILY)


FAMILY = "ozaki2-winograd"
_HOST = HostResidueOps()
register_ops(FAMILY, "numpy", HostResidueOps)
register_ops(FAMILY, "cupy", "gpu.ozaki2.winograd_kernels:CudaResidueOps")
