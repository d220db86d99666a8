"""``matmul`` and ``configure``: the Ozaki scheme on NumPy or CuPy (see :mod:`gpu.ozaki` for the method).

The steps are written once: line exponents (and sums, for ``target``), the
plan, the slicing of A and of B^T, the GEMM calls of every chunk batch by
batch through :meth:`gpu.backend.Backend.gemm_ex`, and the fold of each batch
into C. The backend's ``"ozaki"`` operations (:mod:`gpu.ozaki.ops`) do the
element-wise work.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..backend import Array, Backend, get_backend, matrix_pair
from .formats import get_format
from .ops import FINALIZE, LOAD_ACC, LOAD_OPEN, STORE_OPEN, ops
from .plan import MAX_SLICES, OzakiPlan, _positive_int, auto_slices, choose_alpha, plan, scale_ratio, target_value
from .slicing import slice_layout


def _operands(be: Backend, A: Any, B: Any) -> tuple[Array, Array]:
    A, B, _, _ = matrix_pair(be, A, B)
    for name, x in (("A", A), ("B", B)):
        if x.dtype != np.float64:
            raise TypeError(f"{name} has dtype {x.dtype}; the Ozaki scheme takes float64 inputs "
                            "(convert with .astype(np.float64))")
    return A, B


@dataclass
class Lines:
    """Per row of A (or column of B): the exponent e with max |x| < 2**e, and optionally sum |x|."""

    exps: Array
    absmax: Array
    abssum: Array | None = None


def _lines(be: Backend, X: Array, axis: int, name: str, with_sum: bool = False) -> Lines:
    """Exponents of X's rows (axis 1) or columns (axis 0); ValueError for NaN or infinity."""
    xp = be.xp
    if X.shape[axis] == 0:
        zeros = xp.zeros(X.shape[1 - axis])
        return Lines(xp.zeros(X.shape[1 - axis], dtype=np.int32), zeros, zeros)
    mx = ops(be).absmax(X, axis)
    total = ops(be).abssum(X, axis) if with_sum else None
    bad = int((~xp.isfinite(mx)).sum())
    if bad:
        what = "rows" if axis == 1 else "columns"
        raise ValueError(f"{name} has NaN or infinite entries (in {bad} {what}); the Ozaki scheme "
                         "needs finite inputs")
    return Lines(xp.frexp(mx)[1].astype(np.int32), mx, total)


# --------------------------------------------------------------------------- configuration

def configure(A: Any, B: Any, *, slices: int | None = None, slice_format: str = "fp32", target: Any = None,
              k_block: int | None = None, remainder: bool = False, backend: str | Backend = "auto") -> OzakiPlan:
    """The plan ``matmul`` would run on these operands (``target``: slices chosen from the data),
    with the workspace sized to the device's free memory; raises as ``matmul`` would."""
    be = get_backend(backend)
    A, B = _operands(be, A, B)
    return _configure(be, A, B, slices, slice_format, target, k_block, remainder, out_given=False)[0]


def _request(slices: Any, target: Any, remainder: bool = False) -> tuple[int | None, Any]:
    """(slices, target) after checks: exactly one of them, ``target="dgemm"`` when neither is given."""
    if slices is not None and target is not None:
        raise ValueError("give either slices (a count) or target (an error bound), not both")
    if slices is None and remainder:
        raise ValueError("target picks slices for exact digits only; with remainder=True give slices")
    if slices is None:
        target = "dgemm" if target is None else target
        target_value(target)
        return None, target
    return _positive_int(slices, "slices", 1, MAX_SLICES), None


def _configure(be: Backend, A: Array, B: Array, slices: Any, slice_format: str, target: Any,
               k_block: int | None, remainder: bool, out_given: bool) -> tuple[OzakiPlan, Lines, Lines]:
    fmt = get_format(slice_format)
    slices, target = _request(slices, target, remainder)
    (m, k), n = A.shape, B.shape[1]
    rows, cols = _lines(be, A, 1, "A", slices is None), _lines(be, B, 0, "B", slices is None)
    if slices is None:
        alpha = choose_alpha(fmt, k, k_block)[0]
        slices = auto_slices(alpha, scale_ratio(be.xp, rows.exps, rows.absmax, rows.abssum, k),
                             scale_ratio(be.xp, cols.exps, cols.absmax, cols.abssum, k), target)
    free = be.memory_info()[0] + (8 * m * n if out_given else 0)
    return plan(m, k, n, slices, fmt, k_block=k_block, memory=free, remainder=remainder), rows, cols


# --------------------------------------------------------------------------- execution

def matmul(A: Any, B: Any, *, slices: int | None = None, slice_format: str = "fp32", target: Any = None,
           k_block: int | None = None, remainder: bool = False, backend: str | Backend = "auto",
           overwrite_a: bool = False, overwrite_b: bool = False, out: Any = None,
           phases: dict[str, float] | None = None) -> Array:
    """``A @ B`` in float64 by the Ozaki scheme (see :mod:`gpu.ozaki`).

    ``slices``: slices per operand (S(S+1)/2 slice-pair products), or ``target``:
    an error bound relative to |A||B| (a number, ``"dgemm"`` for 2**-53 or
    ``"sgemm"``) from which the slices are chosen; neither means
    ``target="dgemm"``. ``slice_format``: ``fp32`` (SGEMM, the paper's method),
    ``tf32``, ``fp16``, ``bf16`` (tensor cores, FP32 accumulation) or ``int8``
    (INT32 accumulation). ``k_block``: most inner terms per GEMM call (default:
    as many as the format's accumulator sums exactly). ``remainder``: the
    paper's form for float formats (see :mod:`gpu.ozaki`): the last diagonal
    multiplies each slice of A by the rest of B rounded to the format, and A's
    rounded rest by B rounded, so nothing is dropped; more accurate per slice,
    but those products are rounded, not exact, and CPU and GPU results then
    differ in the last bits. ``overwrite_a`` /
    ``overwrite_b``: on NumPy the input may hold the scaled remainders while
    slicing (saving a float64 copy; ignored when A and B share memory); the
    GPU kernel needs no scratch and ignores them. ``out``: a C-ordered float64 array for the result.
    ``phases``: a dict that receives seconds per phase (``split``, ``gemm``,
    ``sum``; each phase synchronized, for breakdowns).

    Raises TypeError for non-float64 inputs, ValueError for NaN or infinite
    entries, bad shapes or parameters, and :class:`WorkspaceError` (a
    ValueError) when the workspace would not fit in free memory.
    """
    be = get_backend(backend)
    A, B = _operands(be, A, B)
    (m, k), n = A.shape, B.shape[1]
    C = _output(be, out, m, n)
    get_format(slice_format)
    _request(slices, target, remainder)
    if m == 0 or n == 0:
        return C
    with _phase(be, phases, "split"):
        p, rows, cols = _configure(be, A, B, slices, slice_format, target, k_block, remainder, out is not None)
        if k == 0:
            C[...] = 0.0
            return C
        if (overwrite_a or overwrite_b) and be.xp.may_share_memory(A, B):
            overwrite_a = overwrite_b = False            # slicing A in place would change B (matmul(A, A.T))
        a_cat = _split(be, A, rows.exps, p, p.m, reverse=False, overwrite=overwrite_a)
        b_cat = _split(be, B.T, cols.exps, p, p.n_pad, reverse=True, overwrite=overwrite_b)
    _products_and_sum(be, p, a_cat, b_cat, rows.exps, cols.exps, C, phases)
    return C


def _output(be: Backend, out: Any, m: int, n: int) -> Array:
    if out is None:
        return be.xp.empty((m, n), dtype=np.float64)
    if (not isinstance(out, be.xp.ndarray) or out.shape != (m, n) or out.dtype != np.float64
            or (m > 1 and n > 0 and (out.strides[1] != 8 or out.strides[0] < 8 * n))):
        raise ValueError(f"out must be a {be.xp.__name__} float64 array of shape ({m}, {n}) with "
                         "contiguous rows (C order)")
    return out


@contextmanager
def _phase(be: Backend, phases: dict[str, float] | None, name: str) -> Iterator[None]:
    if phases is None:
        yield
        return
    with be.timer() as t:
        yield
    phases[name] = phases.get(name, 0.0) + t.seconds


def _split(be: Backend, X: Array, exps: Array, p: OzakiPlan, rows_pad: int, reverse: bool,
           overwrite: bool) -> Array:
    """X's rows as concatenated slices in the format's storage, rows_pad x positions*ldk:
    [X_1 | ... | X_S] for A, B's digits reversed for B (see :func:`gpu.ozaki.plan.plan`), and with
    ``remainder`` the rounded tails: A's after S - 1 digits, each of B's T_j at 2S - 1 - j."""
    return ops(be).split(X, exps, p, rows_pad, slice_layout(p, reverse), overwrite)


def _tiles(m: int, n: int, tile: int | None) -> list[tuple[slice, slice]]:
    """Row and column ranges of the output tiles (one tile when ``tile`` is None)."""
    step_m, step_n = (tile or m), (tile or n)
    return [(slice(i, min(i + step_m, m)), slice(j, min(j + step_n, n)))
            for i in range(0, m, step_m) for j in range(0, n, step_n)]


def _products_and_sum(be: Backend, p: OzakiPlan, a_cat: Array, b_cat: Array, erow: Array, ecol: Array,
                      C: Array, phases: dict[str, float] | None) -> None:
    """The GEMM calls of every chunk, batch by batch, each batch folded into C."""
    xp, fmt = be.xp, p.format
    buffers = xp.empty((p.held, p.m, p.n_pad), dtype=fmt.accumulator)
    open_ = xp.zeros((p.m, p.n), dtype=np.float64) if p.needs_open else None
    batches = p.batches
    for number, batch in enumerate(batches):
        with _phase(be, phases, "gemm"):
            for slot, index in enumerate(batch):
                c = p.chunks[index]
                a, b = a_cat[:, c.a_start:c.a_start + c.length], b_cat[:, c.b_start:c.b_start + c.length]
                for rows, cols in _tiles(p.m, p.n_pad, fmt.tile):
                    be.gemm_ex(a[rows], b[cols].T, buffers[slot, rows, cols], recipe=fmt.recipe)
        chunks = [p.chunks[i] for i in batch]
        flags = ((LOAD_ACC if number else 0) | (LOAD_OPEN if number and not p.chunks[batch[0] - 1].closes else 0)
                 | (STORE_OPEN if not chunks[-1].closes else 0) | (FINALIZE if number == len(batches) - 1 else 0))
        with _phase(be, phases, "sum"):
            ops(be).fold([buffers[slot, :, :] for slot in range(len(batch))],
                 [2.0 ** (-p.alpha * c.diagonal) for c in chunks], [c.closes for c in chunks],
                 C, open_, erow, ecol, flags)
