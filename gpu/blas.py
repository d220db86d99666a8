"""How a 2-D view reaches a column-major BLAS (cuBLAS or the CPU BLAS) with no copy.

BLAS reads a matrix as a pointer, a leading dimension and a transpose flag. A
quadrant ``M[r0:r1, c0:c1]`` of a C-order matrix is a column-major matrix of its
transpose with ``ld`` equal to M's row length, so a GEMM on it needs no copy:
row-major ``C = A @ B`` is column-major ``C^T = B^T A^T``. This module turns
arrays into :class:`Layout` records and GEMM/GEAM requests into the arguments of
one BLAS call, and checks shapes, dtypes and aliasing before anything runs. Both
backends use it, so the NumPy and CuPy paths cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SUPPORTED_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
_INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class Layout:
    """A 2-D view as BLAS sees it.

    ``order`` is ``"C"`` when rows are contiguous (unit column stride) and
    ``"F"`` when columns are. ``ld`` is the stride, in elements, between
    consecutive rows (C) or columns (F).
    """

    ptr: int
    rows: int
    cols: int
    ld: int
    order: str
    itemsize: int

    @property
    def outer(self) -> int:
        return self.rows if self.order == "C" else self.cols

    @property
    def inner(self) -> int:
        return self.cols if self.order == "C" else self.rows

    @property
    def span(self) -> tuple[int, int]:
        """Byte range [first, last) that the view touches."""
        if self.rows == 0 or self.cols == 0:
            return (self.ptr, self.ptr)
        end = self.ptr + ((self.outer - 1) * self.ld + self.inner) * self.itemsize
        return (self.ptr, end)


@dataclass(frozen=True)
class GemmCall:
    """Arguments of one column-major ``gemm``: C = alpha op(a) op(b) + beta C."""

    transa: int
    transb: int
    m: int
    n: int
    k: int
    a: int
    lda: int
    b: int
    ldb: int
    c: int
    ldc: int


@dataclass(frozen=True)
class GeamCall:
    """Arguments of one column-major ``geam``: C = alpha op(a) + beta op(b)."""

    transa: int
    transb: int
    m: int
    n: int
    a: int
    lda: int
    b: int
    ldb: int
    c: int
    ldc: int


OP_N, OP_T = 0, 1


def layout(x, ptr: int, name: str = "array") -> Layout:
    """Describe array ``x`` (NumPy or CuPy) whose data starts at ``ptr``.

    Raises ValueError when ``x`` is not 2-D or has no unit stride along either
    axis, since BLAS cannot read such a view without a copy.
    """
    if x.ndim != 2:
        raise ValueError(f"{name} must be 2-D, got {x.ndim}-D with shape {x.shape}")
    rows, cols = x.shape
    it = x.itemsize
    s0, s1 = x.strides
    if rows == 0 or cols == 0:
        return Layout(ptr, rows, cols, max(1, cols), "C", it)
    if (s1 == it or cols == 1) and (rows == 1 or (s0 > 0 and s0 % it == 0 and s0 // it >= cols)):
        ld = s0 // it if rows > 1 else cols
        return _checked(Layout(ptr, rows, cols, ld, "C", it), name)
    if (s0 == it or rows == 1) and (cols == 1 or (s1 > 0 and s1 % it == 0 and s1 // it >= rows)):
        ld = s1 // it if cols > 1 else rows
        return _checked(Layout(ptr, rows, cols, ld, "F", it), name)
    raise ValueError(
        f"{name} has shape {x.shape} and strides {x.strides}: BLAS needs unit stride "
        "along one axis and a positive leading dimension; pass a contiguous copy "
        "(for example xp.ascontiguousarray(x))"
    )


def _checked(lay: Layout, name: str) -> Layout:
    if max(lay.rows, lay.cols, lay.ld) > _INT32_MAX:
        raise ValueError(
            f"{name} is {lay.rows} x {lay.cols} with leading dimension {lay.ld}: BLAS takes "
            "32-bit sizes; split the product into blocks below 2**31 per dimension"
        )
    return lay


def same_view(a: Layout, b: Layout) -> bool:
    """True when both layouts address exactly the same elements in the same way."""
    return a == b or (a.ptr == b.ptr and a.rows == b.rows and a.cols == b.cols
                      and a.rows * a.cols <= 1)


def overlaps(a: Layout, b: Layout) -> bool:
    """Whether two views may share an element.

    Exact for two blocks of one matrix with the same leading dimension (the
    quadrants of a Strassen step), conservative (True) otherwise.
    """
    (a0, a1), (b0, b1) = a.span, b.span
    if a0 == a1 or b0 == b1 or a1 <= b0 or b1 <= a0:
        return False
    if (a.order, a.ld, a.itemsize) != (b.order, b.ld, b.itemsize):
        return True
    if (b.ptr - a.ptr) % a.itemsize:
        return True
    first, second = (a, b) if a.ptr <= b.ptr else (b, a)
    offset = (second.ptr - first.ptr) // a.itemsize
    r0, c0 = divmod(offset, a.ld)
    if c0 + second.inner > a.ld or first.inner > a.ld:
        return True
    rows_meet = r0 < first.outer and 0 < r0 + second.outer
    cols_meet = c0 < first.inner and 0 < c0 + second.inner
    return rows_meet and cols_meet


def check_dtypes(*named) -> np.dtype:
    """Return the common dtype of ``(name, array)`` pairs, or raise TypeError."""
    dtypes = {np.dtype(x.dtype) for _, x in named}
    if len(dtypes) != 1:
        listing = ", ".join(f"{n}: {x.dtype}" for n, x in named)
        raise TypeError(f"operands must share one dtype, got {listing}; cast with .astype()")
    dtype = dtypes.pop()
    if dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"dtype {dtype} is not supported; use float32 or float64")
    return dtype


def plan_gemm(A: Layout, B: Layout, C: Layout) -> GemmCall | None:
    """The BLAS call computing ``C = alpha A @ B + beta C`` on row-indexed views.

    Returns None when C is empty (nothing to do). Raises ValueError on a shape
    mismatch or when C overlaps A or B (BLAS results would be undefined).
    """
    (m, k), (k2, n) = (A.rows, A.cols), (B.rows, B.cols)
    if k != k2 or (C.rows, C.cols) != (m, n):
        raise ValueError(
            f"gemm shapes do not match: A is {m} x {k}, B is {k2} x {n}, "
            f"C is {C.rows} x {C.cols}; need A m x k, B k x n, C m x n"
        )
    if m == 0 or n == 0:
        return None
    for name, x in (("A", A), ("B", B)):
        if overlaps(C, x):
            raise ValueError(f"C overlaps {name}; gemm cannot write its output over an input")
    if C.order == "F":
        first, second, mm, nn = A, B, m, n
    else:
        first, second, mm, nn = B, A, n, m
    return GemmCall(
        transa=OP_N if first.order == C.order else OP_T,
        transb=OP_N if second.order == C.order else OP_T,
        m=mm, n=nn, k=k,
        a=first.ptr, lda=first.ld, b=second.ptr, ldb=second.ld, c=C.ptr, ldc=C.ld,
    )


def plan_geam(A: Layout, B: Layout, C: Layout) -> GeamCall | None:
    """The BLAS-style call computing ``C = alpha A + beta B``.

    C may be the very same view as A or B (in-place, as cuBLAS allows); any
    other overlap raises ValueError. Returns None when C is empty.
    """
    for name, x in (("A", A), ("B", B)):
        if (x.rows, x.cols) != (C.rows, C.cols):
            raise ValueError(
                f"geam shapes do not match: {name} is {x.rows} x {x.cols}, C is {C.rows} x {C.cols}"
            )
        if not same_view(C, x) and overlaps(C, x):
            raise ValueError(
                f"C partly overlaps {name}; geam writes C in place only when C is exactly {name}"
            )
    if C.rows == 0 or C.cols == 0:
        return None
    m, n = (C.cols, C.rows) if C.order == "C" else (C.rows, C.cols)
    return GeamCall(
        transa=OP_N if A.order == C.order else OP_T,
        transb=OP_N if B.order == C.order else OP_T,
        m=m, n=n, a=A.ptr, lda=A.ld, b=B.ptr, ldb=B.ld, c=C.ptr, ldc=C.ld,
    )
