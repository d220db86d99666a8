"""CUDA kernels of the Ozaki scheme (CuPy only): line exponents, slicing, the FP64 fold, the verdict.

Loaded by :meth:`gpu.backend.Backend.ops` for the CuPy backend only (``"ozaki"``): :class:`CudaOps` is the GPU
twin of :class:`gpu.ozaki.ops.HostOps`. The bound of ``target=`` has its kernels in :mod:`gpu.ozaki.bound_kernels`.

Kernels are plain CUDA (no CuPy header; their text is :mod:`gpu.ozaki.cuda_sources`), compiled by NVRTC on
first use and kept in CuPy's kernel cache, one module per configuration a call needs: the core module per
(slice storage, accumulator) holds

* ``ozaki_lines``: per row of A (or column of B) the exponent e with max |x| < 2**e, or :data:`BAD` where the
  line holds NaN or infinity, and (where asked, for ``target=``) its count of nonzeros, in one read: a warp
  per line where the line's entries are contiguous, 32 lines per block where the lines are;
* ``ozaki_slice``: reads a 32 x 32 tile of X (rows of A, or rows of B^T read from B's columns) through shared
  memory, so that both the read and the writes are coalesced whichever axis of X is contiguous, and writes
  every slice of each element in one pass: x = ldexp(X[r, c], -e[r]); then S times x *= 2**alpha;
  m = trunc(x); x -= m, storing m in the slice format (with ``remainder``, the last slice and B's extra one are
  rounded to the format's significand bits instead). Padding and the lines marked BAD get zeros;
* ``ozaki_fold``: adds the GEMM buffers of a batch into the FP64 result in one pass over the output: per
  entry, D += buffer (exact: integers below 2**53), and at the last buffer of a diagonal the exact
  D * 2**(-alpha d) joins the sum by TwoSum (the sum and its rounding errors, kept apart); the last batch
  writes ldexp(sum + errors, e_i + f_j), and for an entry whose row of A or column of B is BAD the dot
  product of A's row and B's column in IEEE arithmetic (NaN or infinity, as the library GEMM gives). Every
  operation is an explicitly rounded intrinsic (``__dadd_rn``, ...), so no contraction into FMAs can change a
  bit: results are bitwise reproducible;
* ``ozaki_verdict``: one 32-bit word that the host reads (:func:`gpu.ozaki.ops.decode`): the slice count of
  ``target=`` from the bound's ratio (the rule of :func:`gpu.ozaki.plan.auto_slices`, the same roundings),
  whether a line holds NaN or infinity, and the ratio's binade for the error message.

The NumPy path (:class:`gpu.ozaki.ops.HostOps`) performs the same operations in the same order; the two give
identical bits.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import cupy
import numpy as np

from ..backend import Backend
from .bound_kernels import bound_module, magnitudes, ratio
from .cuda_sources import branch_source, core_source
from .ops import batch_scales
from .plan import OzakiPlan

#: Tile side of the slicing kernel, and rows of threads per tile (each thread handles 32/8 rows).
TILE, TILE_ROWS = 32, 8
#: Threads per block of the fold kernel, and the most blocks it launches (a grid-stride loop does the rest).
FOLD_THREADS, FOLD_MAX_BLOCKS = 256, 65536
#: Lines per block of ``ozaki_lines`` (a warp each) and the most blocks it launches.
LINE_WARPS, LINE_MAX_BLOCKS = 8, 65535


@cache
def core(storage: str, buffer: str) -> Any:
    """The core module of (slice storage, accumulator), compiled on first use (one NVRTC call)."""
    return cupy.RawModule(code=core_source(storage, buffer))


@cache
def branch_module() -> Any:
    """The module of ``ozaki_branch`` (IF nodes of a device-verdict call), compiled on first use."""
    return cupy.RawModule(code=branch_source())


@cache
def _absmax() -> Any:
    """max |x| along an axis, NaN-propagating (for :func:`gpu.ozaki.api.line_pair`, which scheme II shares)."""
    return cupy.ReductionKernel("float64 x", "float64 y", "fabs(x)", "(isnan(a) || a > b) ? a : b",
                                "y = a", "0", "ozaki_absmax")


def absmax(X: Any, axis: int) -> Any:
    """max |X| along ``axis`` (NaN if the line holds NaN), with no |X| temporary."""
    return _absmax()(X, axis=axis)


def line_exponents(module: Any, X: Any, axis: int, count: bool, out: tuple[Any, Any] | None = None
                   ) -> tuple[Any, Any]:
    """(exponents with :data:`BAD`, nonzeros or None) of X's rows (axis 1) or columns (axis 0), one read; into
    ``out`` (int32 and int64 arrays of the lines) where given."""
    lines, length = X.shape[1 - axis], X.shape[axis]
    it = X.itemsize
    line_stride, elem_stride = X.strides[1 - axis] // it, X.strides[axis] // it
    by_warp = abs(elem_stride) <= abs(line_stride) or lines == 1
    exps = cupy.empty(lines, dtype=np.int32) if out is None else out[0]
    nnz = (cupy.empty(lines, dtype=np.int64) if out is None else out[1]) if count else None
    per_block = LINE_WARPS if by_warp else 32
    blocks = max(1, min(LINE_MAX_BLOCKS, -(-lines // per_block)))
    i64 = np.int64
    module.get_function("ozaki_lines")(
        (blocks,), (32 * LINE_WARPS,),
        (X, i64(lines), i64(length), i64(line_stride), i64(elem_stride), np.int32(by_warp), exps,
         nnz if nnz is not None else i64(0)))
    return exps, nnz


def slice_rows(module: Any, X: Any, exps: Any, out: Any, *, rows_pad: int, ldk: int, alpha: int, slices: int,
               bits: int, tiny: float, digits: int, first: int, step: int, tail_from: int, tail_first: int,
               tail_step: int, limit: Any = None) -> None:
    """Write the slices of every X[r, c] into ``out`` (rows_pad x positions*ldk, rows contiguous).

    For j = 1..slices: from ``tail_from`` on, the rest x_{j-1} 2**alpha rounded to ``bits`` significant
    bits goes to position tail_first + (j - tail_from) tail_step; up to ``digits``, digit j goes to position
    first + (j - 1) step (positions in units of ``ldk`` columns). Columns up to ldk, rows up to ``rows_pad``
    and the rows marked BAD are zero-filled. X may have any strides (B^T is read from B). ``limit``: a verdict
    word on the device, whose count caps ``digits`` (0 where it is 0 or above ``digits``).
    """
    rows, cols = X.shape
    it = X.itemsize
    rs, cs = X.strides[0] // it, X.strides[1] // it
    if cols == 1:
        cs = 1
    grid = (-(-ldk // TILE), -(-rows_pad // TILE))
    i64, i32 = np.int64, np.int32
    module.get_function("ozaki_slice")(
        grid, (TILE, TILE_ROWS),
        (X, i64(rs), i64(cs), i64(rows), i64(cols), i64(rows_pad), i64(ldk), exps, out,
         i64(out.strides[0] // out.itemsize), i32(alpha), i32(slices), i32(digits), i64(first), i64(step),
         i32(tail_from), i64(tail_first), i64(tail_step), i32(bits), np.float64(tiny),
         limit if limit is not None else i64(0)))


class CudaOps:
    """The Ozaki scheme's operations on CuPy arrays, as CUDA kernels."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    absmax = staticmethod(absmax)

    def prepare(self, fmt: Any, target: bool) -> None:
        """Compile (or load from CuPy's cache) the modules a call of ``fmt`` needs, before its first call."""
        core(fmt.storage, fmt.accumulator).get_function("ozaki_fold")
        if target:
            bound_module(fmt).get_function("ozaki_ratio")

    @staticmethod
    def prepare_branch() -> None:
        """Compile (or load) the module that sets a device-verdict call's IF nodes, before any capture."""
        branch_module().get_function("ozaki_branch")

    def line_exponents(self, X: Any, axis: int, count: bool, fmt: Any, out: tuple[Any, Any] | None = None
                       ) -> tuple[Any, Any]:
        """Exponents of X's lines (:data:`BAD` where NaN or infinity) and, with ``count``, their nonzeros (into
        ``out`` where given)."""
        return line_exponents(core(fmt.storage, fmt.accumulator), X, axis, count, out)

    magnitudes = staticmethod(magnitudes)
    ratio = staticmethod(ratio)

    def verdict(self, ratio: Any, erow: Any, ecol: Any, alpha: int, budget: float, fmt: Any,
                out: Any = None) -> Any:
        """The 32-bit verdict (see the module) on the device, into ``out`` (a 1-element int32 array) or a new
        array: no wait."""
        out = cupy.empty(1, dtype=np.int32) if out is None else out
        core(fmt.storage, fmt.accumulator).get_function("ozaki_verdict")(
            (1,), (256,),
            (erow, np.int64(erow.size), ecol, np.int64(ecol.size), ratio if ratio is not None else out,
             np.int32(ratio is not None), np.int32(alpha), np.float64(budget), out))
        return out

    def split(self, X: Any, exps: Any, p: OzakiPlan, rows_pad: int, layout: dict[str, int], overwrite: bool,
              out: Any, other: Any = None, limit: Any = None) -> Any:
        """X's rows as concatenated slices into ``out`` in one kernel pass; X is only read. ``limit``: a verdict
        word on the device whose count caps the digits written."""
        slice_rows(core(p.format.storage, p.format.accumulator), X, exps, out, rows_pad=rows_pad, ldk=p.ldk,
                   alpha=p.alpha, slices=p.slices, bits=p.format.bits, tiny=p.format.tiny, limit=limit,
                   **{k: v for k, v in layout.items() if k != "positions"})
        return out

    def fold(self, buffers: Any, count: int, diagonals: list[int], closes: list[bool], alpha: int, acc: Any,
             comp: Any, open_: Any, erow: Any, ecol: Any, flags: int, A: Any, B: Any, fmt: Any, dst: Any = None,
             limit: Any = None, most: int = 0) -> None:
        """One fold launch over ``buffers[:count]`` ((held, m, n_pad), one dtype) into ``acc`` (m x n), with the
        compensation ``comp`` (m x n; None when one launch does it all); A and B for the BAD lines. The last
        launch writes ``dst`` (default ``acc``), every entry as an IEEE dot product where the device's verdict
        word ``limit`` has a count of 0 or above ``most``."""
        dst = acc if dst is None else dst
        d0, mask = batch_scales(diagonals, closes)
        m, n = acc.shape
        blocks = max(1, min(FOLD_MAX_BLOCKS, -(-(m * n) // FOLD_THREADS)))
        i64, i32, it = np.int64, np.int32, A.itemsize
        core(fmt.storage, fmt.accumulator).get_function("ozaki_fold")(
            (blocks,), (FOLD_THREADS,),
            (buffers, i64(buffers.strides[0] // buffers.itemsize), i64(buffers.strides[1] // buffers.itemsize),
             i32(count), i32(d0), np.uint64(mask), i32(alpha), acc, i64(acc.strides[0] // acc.itemsize),
             comp if comp is not None else acc, open_ if open_ is not None else acc, erow, ecol, i64(m), i64(n),
             i32(flags), A, i64(A.strides[0] // it), i64(A.strides[1] // it), B, i64(B.strides[0] // it),
             i64(B.strides[1] // it), i64(A.shape[1]), dst, i64(dst.strides[0] // dst.itemsize),
             limit if limit is not None else i64(0), i32(most)))

    def branch(self, word: Any, diagonal: int, most: int, handle: Any) -> None:
        """Launch the kernel that sets IF node ``handle``: whether ``diagonal`` is among those of the count in
        the verdict ``word``, a count of at most ``most`` (:mod:`gpu.ozaki.deferred`)."""
        branch_module().get_function("ozaki_branch")((1,), (1,), (word, np.uint64(handle), np.int32(diagonal),
                                                                  np.int32(most)))
