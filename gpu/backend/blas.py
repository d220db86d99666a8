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
from functools import lru_cache
from typing import NamedTuple

import numpy as np

SUPPORTED_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
_INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class GemmRecipe:
    """A low-precision GEMM as cuBLAS ``gemmEx`` runs it: operand and output storage,
    their CUDA data types, the compute type and the dtype of alpha and beta.

    ``operands`` is the NumPy dtype that stores A and B. bfloat16 has no NumPy
    dtype: its operands are uint16 arrays holding the bit patterns (the upper
    half of the float32 bits), which cuBLAS reads as ``CUDA_R_16BF``.
    """

    name: str
    operands: np.dtype
    output: np.dtype
    cuda_operands: int
    cuda_output: int
    compute: int
    scalar: np.dtype
    description: str


# cudaDataType_t and cublasComputeType_t values (library_types.h, cublas_api.h); CuPy does not
# export CUDA_R_32I, hence the literals.
_CUDA_R_32F, _CUDA_R_16F, _CUDA_R_8I, _CUDA_R_32I, _CUDA_R_16BF = 0, 2, 3, 10, 14
_COMPUTE_32F, _COMPUTE_32I, _COMPUTE_32F_FAST_TF32 = 68, 72, 77

#: The low-precision products :meth:`gpu.backend.Backend.gemm_ex` runs, by name.
GEMM_RECIPES: dict[str, GemmRecipe] = {r.name: r for r in (
    GemmRecipe("fp32", np.dtype(np.float32), np.dtype(np.float32), _CUDA_R_32F, _CUDA_R_32F, _COMPUTE_32F,
               np.dtype(np.float32), "SGEMM: FP32 operands, FP32 multiply-add (no tensor cores)"),
    GemmRecipe("tf32", np.dtype(np.float32), np.dtype(np.float32), _CUDA_R_32F, _CUDA_R_32F,
               _COMPUTE_32F_FAST_TF32, np.dtype(np.float32),
               "TF32 tensor cores: FP32 storage read with 11 significant bits, FP32 accumulation"),
    GemmRecipe("fp16", np.dtype(np.float16), np.dtype(np.float32), _CUDA_R_16F, _CUDA_R_32F, _COMPUTE_32F,
               np.dtype(np.float32), "FP16 tensor cores, FP32 accumulation"),
    GemmRecipe("bf16", np.dtype(np.uint16), np.dtype(np.float32), _CUDA_R_16BF, _CUDA_R_32F, _COMPUTE_32F,
               np.dtype(np.float32), "BF16 tensor cores (bit patterns in uint16), FP32 accumulation"),
    GemmRecipe("int8", np.dtype(np.int8), np.dtype(np.int32), _CUDA_R_8I, _CUDA_R_32I, _COMPUTE_32I,
               np.dtype(np.int32), "INT8 tensor cores, INT32 accumulation"),
)}


def gemm_recipe(name: str) -> GemmRecipe:
    """The recipe called ``name``; ValueError listing the known ones otherwise."""
    try:
        return GEMM_RECIPES[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown GEMM recipe {name!r}; known: {', '.join(GEMM_RECIPES)}") from None


def check_recipe_dtypes(recipe: GemmRecipe, *named) -> None:
    """TypeError unless A and B hold the recipe's operand dtype and C its output dtype."""
    (na, A), (nb, B), (nc, C) = named
    for name, x, want in ((na, A, recipe.operands), (nb, B, recipe.operands), (nc, C, recipe.output)):
        if np.dtype(x.dtype) != want:
            raise TypeError(f"{recipe.name} GEMM: {name} has dtype {x.dtype}, needs {want} "
                            f"({recipe.description})")


class Layout(NamedTuple):
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
    def extent(self) -> int:
        """Bytes from the first element the view touches to past the last (0 for an empty view)."""
        if self.rows == 0 or self.cols == 0:
            return 0
        return ((self.outer - 1) * self.ld + self.inner) * self.itemsize


class BlasCall(NamedTuple):
    """Arguments of one column-major call on raw pointers.

    gemm: C = alpha op(a) op(b) + beta C, with inner dimension ``k``;
    geam: C = alpha op(a) + beta op(b) (``k`` unused, 0).
    """

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


OP_N, OP_T = 0, 1


def layout(x, ptr: int, name: str = "array") -> Layout:
    """Describe array ``x`` (NumPy or CuPy) whose data starts at ``ptr``.

    Raises ValueError when ``x`` is not 2-D or has no unit stride along either
    axis, since BLAS cannot read such a view without a copy. The analysis of a
    (shape, strides, itemsize) is cached: every library call asks it of each
    operand, and views of one signature recur by the thousand.
    """
    if x.ndim != 2:
        raise ValueError(f"{name} must be 2-D, got {x.ndim}-D with shape {x.shape}")
    return Layout(ptr, *_grid(x.shape, x.strides, x.itemsize, name), x.itemsize)


@lru_cache(maxsize=4096)
def _grid(shape: tuple[int, int], strides: tuple[int, int], it: int, name: str) -> tuple[int, int, int, str]:
    """(rows, cols, ld, order) of a 2-D view, or ValueError (see :func:`layout`)."""
    rows, cols = shape
    s0, s1 = strides
    if rows == 0 or cols == 0:
        return rows, cols, max(1, cols), "C"
    if rows == 1 or cols == 1:
        return _checked(_vector(rows, cols, s0 if cols == 1 else s1, it, shape, strides, name), name)
    if s1 == it and s0 > 0 and s0 % it == 0 and s0 // it >= cols:
        return _checked((rows, cols, s0 // it, "C"), name)
    if s0 == it and s1 > 0 and s1 % it == 0 and s1 // it >= rows:
        return _checked((rows, cols, s1 // it, "F"), name)
    raise _stride_error(shape, strides, name)


def _vector(rows: int, cols: int, stride: int, it: int, shape, strides, name: str) -> tuple[int, int, int, str]:
    """A single row or column: one contiguous line, or a line of stride ``ld``.

    A contiguous vector is laid out as one outer line (ld = its length), a
    strided one as a column of lines ``stride`` apart, so that overlap tests
    see its real addresses.
    """
    n = rows * cols
    if stride == it or n == 1:
        return rows, cols, n, "C" if rows == 1 else "F"
    if stride > 0 and stride % it == 0:
        return rows, cols, stride // it, "F" if rows == 1 else "C"
    raise _stride_error(shape, strides, name)


def _stride_error(shape, strides, name: str) -> ValueError:
    return ValueError(
        f"{name} has shape {shape} and strides {strides}: BLAS needs unit stride "
        "along one axis and a positive leading dimension; pass a contiguous copy "
        "(for example xp.ascontiguousarray(x))"
    )


def _checked(grid: tuple[int, int, int, str], name: str) -> tuple[int, int, int, str]:
    rows, cols, ld, _ = grid
    if max(rows, cols, ld) > _INT32_MAX:
        raise ValueError(
            f"{name} is {rows} x {cols} with leading dimension {ld}: BLAS takes "
            "32-bit sizes; split the product into blocks below 2**31 per dimension"
        )
    return grid


def same_view(a: Layout, b: Layout) -> bool:
    """True when both layouts address exactly the same elements in the same way."""
    return a == b or (a.ptr == b.ptr and a.rows == b.rows and a.cols == b.cols
                      and a.rows * a.cols <= 1)


def overlaps(a: Layout, b: Layout) -> bool:
    """Whether two views may share an element.

    A view is a grid of ``outer`` lines of ``inner`` elements, ``ld`` apart,
    whatever its order. Exact for two blocks on one grid (the quadrants of a
    Strassen step, their transposes, single rows and columns of them),
    conservative (True) otherwise.
    """
    if not bytes_meet(a.ptr, a.extent, b.ptr, b.extent):
        return False
    ld = _common_ld(a, b)
    if ld is None or a.itemsize != b.itemsize or (b.ptr - a.ptr) % a.itemsize:
        return True
    first, second = (a, b) if a.ptr <= b.ptr else (b, a)
    r0, c0 = divmod((second.ptr - first.ptr) // a.itemsize, ld)
    if c0 + second.inner > ld or first.inner > ld:
        return True
    return r0 < first.outer and c0 < first.inner


def bytes_meet(a: int, a_extent: int, b: int, b_extent: int) -> bool:
    """Whether the byte ranges [a, a + a_extent) and [b, b + b_extent) share a byte (an empty one shares none)."""
    return a_extent > 0 and b_extent > 0 and a < b + b_extent and b < a + a_extent


def _common_ld(a: Layout, b: Layout) -> int | None:
    """The grid width both views live on; a single line fits any grid it is not wider than."""
    if a.outer == 1 and a.inner <= b.ld:
        return b.ld
    if b.outer == 1 and b.inner <= a.ld:
        return a.ld
    return a.ld if a.ld == b.ld else None


def check_inner(A, B) -> None:
    """ValueError where A's columns are not B's rows (arrays, or anything with a 2-D ``shape``)."""
    if A.shape[1] != B.shape[0]:
        raise ValueError(f"A is {A.shape[0]} x {A.shape[1]} and B is {B.shape[0]} x {B.shape[1]}: "
                         "A's columns must equal B's rows")


def check_dtypes(*named) -> np.dtype:
    """Return the common dtype of ``(name, array)`` pairs, or raise TypeError."""
    dtypes = {np.dtype(x.dtype) for _, x in named}
    if len(dtypes) != 1:
        listing = ", ".join(f"{n}: {x.dtype}" for n, x in named)
        raise TypeError(f"operands must share one dtype, got {listing}; cast with .astype()")
    dtype = dtypes.pop()
    if not dtype.isnative:
        raise TypeError(f"dtype {dtype.str} has non-native byte order; convert with "
                        ".astype(x.dtype.newbyteorder('='))")
    if dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"dtype {dtype} is not supported; use float32 or float64")
    return dtype


def plan_gemm(A: Layout, B: Layout, C: Layout) -> BlasCall | None:
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
    return BlasCall(
        transa=OP_N if first.order == C.order else OP_T,
        transb=OP_N if second.order == C.order else OP_T,
        m=mm, n=nn, k=k,
        a=first.ptr, lda=first.ld, b=second.ptr, ldb=second.ld, c=C.ptr, ldc=C.ld,
    )


class GemmPlan(NamedTuple):
    """The address-free part of a checked GEMM, which :meth:`gpu.backend.Backend.gemm` keeps per operand
    signature (types, shapes, strides, dtypes): a repeated call then checks only what its addresses can
    change, whether C's bytes meet A's or B's. ``extents``: bytes from the first element of A, B and C
    to past their last; ``swap``: B is the call's first operand (C in row order: C^T = B^T A^T)."""

    call: BlasCall | None
    swap: bool
    extents: tuple[int, int, int]

    @classmethod
    def of(cls, A: Layout, B: Layout, C: Layout, call: BlasCall | None) -> GemmPlan:
        return cls(call, C.order == "C", (A.extent, B.extent, C.extent))

    def addresses(self, pa: int, pb: int, pc: int) -> tuple[int, int] | None:
        """The call's first and second operand addresses; None where C's byte range meets A's or B's (the
        caller then runs the full check, which tells a real overlap from views interleaved on one grid)."""
        ea, eb, ec = self.extents
        if bytes_meet(pc, ec, pa, ea) or bytes_meet(pc, ec, pb, eb):
            return None
        return (pb, pa) if self.swap else (pa, pb)

    def bind(self, pa: int, pb: int, pc: int) -> BlasCall | None:
        """The call on these addresses; None where C's byte range meets A's or B's (see :meth:`addresses`)."""
        operands = self.addresses(pa, pb, pc)
        if operands is None:
            return None
        c = self.call
        return BlasCall(c.transa, c.transb, c.m, c.n, c.k, operands[0], c.lda, operands[1], c.ldb, pc, c.ldc)


def plan_geam(A: Layout, B: Layout, C: Layout) -> BlasCall | None:
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
    return BlasCall(
        transa=OP_N if A.order == C.order else OP_T,
        transb=OP_N if B.order == C.order else OP_T,
        m=m, n=n, k=0, a=A.ptr, lda=A.ld, b=B.ptr, ldb=B.ld, c=C.ptr, ldc=C.ld,
    )
