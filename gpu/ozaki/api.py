"""``matmul`` and ``configure``: the Ozaki scheme on NumPy or CuPy (see :mod:`gpu.ozaki` for the method).

The steps are written once: line exponents, for ``target`` the data's bound
(:mod:`gpu.ozaki.bound`), the plan, the slicing of A and of B^T, the GEMM
calls of every chunk batch by batch through :meth:`gpu.backend.Backend.gemm_ex`,
and the fold of each batch into C. The backend's ``"ozaki"`` operations
(:mod:`gpu.ozaki.ops`) do the element-wise work.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..backend import Array, Backend, check_output, get_backend, matrix_pair, require_memory
from ..backend.checks import zeroed_copies
from .bound import slice_ratio
from .formats import get_format
from .ops import FINALIZE, LOAD_ACC, LOAD_OPEN, STORE_OPEN, ops
from .plan import (
    MAX_SLICES,
    SUM_ERROR,
    OzakiPlan,
    _positive_int,
    auto_slices,
    choose_alpha,
    plan,
    predicted_error,
    target_value,
)
from .slicing import slice_layout

#: What ``check_finite=False`` does (ValueError messages point here).
NONFINITE = ("rows of A and columns of B holding NaN or infinity are then computed by the library GEMM "
             "(IEEE arithmetic, as A @ B), the rest by the Ozaki scheme")


def _operands(be: Backend, A: Any, B: Any) -> tuple[Array, Array]:
    A, B, _, _ = matrix_pair(be, A, B)
    for name, x in (("A", A), ("B", B)):
        if x.dtype != np.float64:
            raise TypeError(f"{name} has dtype {x.dtype}; the Ozaki scheme takes float64 inputs "
                            "(convert with .astype(np.float64))")
    return A, B


@dataclass
class Lines:
    """Per row of A (or column of B): the exponent e with max |x| < 2**e, and the indices of the lines
    holding NaN or infinity (their max is not finite)."""

    exps: Array
    absmax: Array
    nonfinite: Array | None = None

    @property
    def bad(self) -> int:
        return 0 if self.nonfinite is None else int(self.nonfinite.size)


def _lines(be: Backend, X: Array, axis: int) -> Lines:
    """Exponents of X's rows (axis 1) or columns (axis 0); which hold NaN or infinity is found by :func:`located`."""
    xp = be.xp
    if X.shape[axis] == 0:
        return Lines(xp.zeros(X.shape[1 - axis], dtype=np.int32), xp.zeros(X.shape[1 - axis]))
    return lines_of(be, ops(be).absmax(X, axis))


def lines_of(be: Backend, absmax: Array) -> Lines:
    """:class:`Lines` from the maxima of |x| per line."""
    return Lines(be.xp.frexp(absmax)[1].astype(np.int32), absmax)


def located(be: Backend, rows: Lines, cols: Lines) -> tuple[Lines, Lines]:
    """``rows`` and ``cols`` with the lines holding NaN or infinity located, after one wait for the device
    (one test of both maxima; the lines are located only where there are some): each wait leaves the device
    idle until the host issues the next kernel (a line's exponents and located lines took 0.17 ms of device
    time alone at N = 8192 on the H100, where scheme II's whole product takes 17.8 ms)."""
    xp = be.xp
    if not bool(xp.isfinite(rows.absmax).all() & xp.isfinite(cols.absmax).all()):
        rows.nonfinite, cols.nonfinite = (xp.flatnonzero(~xp.isfinite(x.absmax)) for x in (rows, cols))
    return rows, cols


def line_pair(be: Backend, A: Array, B: Array) -> tuple[Lines, Lines]:
    """:func:`_lines` of A's rows and B's columns, :func:`located`."""
    return located(be, _lines(be, A, 1), _lines(be, B, 0))


def _refuse_nonfinite(rows: Lines, cols: Lines) -> None:
    """ValueError (``check_finite=True``) naming the rows of A and columns of B with NaN or infinity."""
    if rows.bad or cols.bad:
        raise ValueError(f"A has NaN or infinity in {rows.bad} rows and B in {cols.bad} columns (check_finite=True); "
                         f"check the input, or pass check_finite=False: {NONFINITE}")


# --------------------------------------------------------------------------- configuration

def configure(A: Any, B: Any, *, slices: int | None = None, slice_format: str = "fp32", target: Any = None,
              k_block: int | None = None, remainder: bool = False, backend: str | Backend = "auto") -> OzakiPlan:
    """The plan ``matmul`` would run on these operands (``target``: slices chosen from the data, and
    the proven bound in :attr:`OzakiPlan.bound`), with the workspace sized to the device's free memory;
    raises as ``matmul`` would (NaN and infinity included)."""
    be = get_backend(backend)
    A, B = _operands(be, A, B)
    rows, cols = line_pair(be, A, B)
    _refuse_nonfinite(rows, cols)
    return _configure(be, A, B, rows, cols, slices, slice_format, target, k_block, remainder, out_given=False)


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


def _configure(be: Backend, A: Array, B: Array, rows: Lines, cols: Lines, slices: Any, slice_format: str,
               target: Any, k_block: int | None, remainder: bool, out_given: bool) -> OzakiPlan:
    """The plan of a product whose lines (finite) are known, sized to the free memory; with ``target``,
    the fewest slices whose proven bound meets it (:mod:`gpu.ozaki.bound`)."""
    fmt = get_format(slice_format)
    slices, target = _request(slices, target, remainder)
    (m, k), n = A.shape, B.shape[1]
    bound = None
    if slices is None:
        alpha = choose_alpha(fmt, k, k_block)[0]
        ratio = slice_ratio(be, A, B, rows.exps, cols.exps, fmt)
        slices = auto_slices(alpha, ratio, target)
        bound = predicted_error(alpha, slices, ratio) + SUM_ERROR
    free = be.memory_info()[0] + (8 * m * n if out_given else 0)
    return plan(m, k, n, slices, fmt, k_block=k_block, memory=free, remainder=remainder, bound=bound)


# --------------------------------------------------------------------------- execution

def matmul(A: Any, B: Any, *, slices: int | None = None, slice_format: str = "fp32", target: Any = None,
           k_block: int | None = None, remainder: bool = False, backend: str | Backend = "auto",
           overwrite_a: bool = False, overwrite_b: bool = False, out: Any = None,
           phases: dict[str, float] | None = None, check_finite: bool = False) -> Array:
    """``A @ B`` in float64 by the Ozaki scheme (see :mod:`gpu.ozaki`).

    ``slices``: slices per operand (S(S+1)/2 slice-pair products; no error
    bound is promised), or ``target``: t, a number in (0, 1), ``"dgemm"``
    (2**-53) or ``"sgemm"`` (2**-24), for which the result meets

        |C - AB| <= t |A||B| + 2**-53 |C|   entrywise

    (and within 2**-1074 where C is subnormal), proven on these inputs: the
    fewest slices that prove it are chosen from the data (one more low-precision
    GEMM, of magnitudes, and a wait for the device; see :mod:`gpu.ozaki.bound`),
    and a ValueError, before any product, says so when no 64 slices can (rows
    or columns whose entries span too many binades). Neither means
    ``target="dgemm"``. ``slice_format``: ``fp32`` (SGEMM, the paper's method),
    ``tf32``, ``fp16``, ``bf16`` (tensor cores, FP32 accumulation) or ``int8``
    (INT32 accumulation). ``k_block``: most inner terms per GEMM call (default:
    as many as the format's accumulator sums exactly). ``remainder``: the
    paper's form for float formats (see :mod:`gpu.ozaki`): the last diagonal
    multiplies each slice of A by the rest of B rounded to the format, and A's
    rounded rest by B rounded, so nothing is dropped; more accurate per slice,
    but those products are rounded, not exact, and CPU and GPU results then
    differ in the last bits. ``overwrite_a`` / ``overwrite_b``: on NumPy the
    input may hold the scaled remainders while slicing (saving a float64 copy;
    ignored when A and B share memory); the GPU kernel needs no scratch and
    ignores them. ``out``: a writeable C-ordered float64 array of the backend
    for the result, sharing no memory with A or B. ``phases``: a dict that
    receives seconds per phase (``split``, ``gemm``, ``sum``; each phase
    synchronized, for breakdowns).

    ``check_finite=True``: refuse NaN and infinity. Finding them costs
    nothing extra: the row maxima the scaling needs find them. By default (False)
    the rows of A and columns of B that hold them are computed by the library
    GEMM, so those entries are what ``A @ B`` gives (IEEE arithmetic), and
    the rest by the Ozaki scheme on copies of A and B with those lines zeroed.

    Inputs may be any 2-D array-likes of float64 values (``np.matrix``
    included; masked arrays are refused). Raises TypeError for inputs or ``out``
    of the wrong kind, ValueError for non-finite entries, bad shapes, ``out`` or
    parameters, and :class:`WorkspaceError` or :class:`gpu.backend.MemoryPlanError`
    (both ValueErrors) when the output or the workspace would not fit in free
    memory: all before any product.
    """
    be = get_backend(backend)
    A, B = _operands(be, A, B)
    (m, k), n = A.shape, B.shape[1]
    C = check_output(be, out, (m, n), np.float64, {"A": A, "B": B}, rows_contiguous=True)
    get_format(slice_format)
    _request(slices, target, remainder)
    if C is None:
        require_memory(be, 8 * m * n, f"the output of a {m} x {k} x {n} product",
                       "pass out= (an array you allocated), or split the product into blocks of rows")
    if m == 0 or n == 0:
        return be.xp.empty((m, n)) if C is None else C
    with _phase(be, phases, "split"):
        rows, cols = line_pair(be, A, B)
        if rows.bad or cols.bad:
            if check_finite:
                _refuse_nonfinite(rows, cols)
            C = be.xp.empty((m, n)) if C is None else C
            options = dict(slices=slices, slice_format=slice_format, target=target, k_block=k_block,
                           remainder=remainder, backend=be, phases=phases)
            return _with_nonfinite(be, A, B, C, rows.nonfinite, cols.nonfinite, options)
        p = _configure(be, A, B, rows, cols, slices, slice_format, target, k_block, remainder, C is not None)
        C = be.xp.empty((m, n)) if C is None else C
        if k == 0:
            C[...] = 0.0
            return C
        if (overwrite_a or overwrite_b) and be.xp.may_share_memory(A, B):
            overwrite_a = overwrite_b = False            # slicing A in place would change B (matmul(A, A.T))
        a_cat = _split(be, A, rows.exps, p, p.m, reverse=False, overwrite=overwrite_a)
        b_cat = _split(be, B.T, cols.exps, p, p.n_pad, reverse=True, overwrite=overwrite_b)
    _products_and_sum(be, p, a_cat, b_cat, rows.exps, cols.exps, C, phases)
    return C


def _with_nonfinite(be: Backend, A: Array, B: Array, C: Array, bad_rows: Array, bad_cols: Array,
                    options: dict[str, Any], method: Any = None) -> Array:
    """``check_finite=False`` with NaN or infinity: ``method`` (the Ozaki scheme by default, or scheme II)
    on copies of A and B whose non-finite rows and columns are zeroed, then those rows and columns of C by
    the library GEMM."""
    A2, B2 = zeroed_copies(be, A, B, bad_rows, bad_cols)
    (method or matmul)(A2, B2, out=C, overwrite_a=True, overwrite_b=True, check_finite=True, **options)
    xp = be.xp
    if bad_rows.size:
        C[bad_rows] = xp.matmul(A[bad_rows], B)
    if bad_cols.size:
        C[:, bad_cols] = xp.matmul(A, B[:, bad_cols])
    return C


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


def _tiles(m: int, n: int, tile: int | tuple[int, int] | None) -> list[tuple[slice, slice]]:
    """Row and column ranges of the output tiles: ``tile`` square, or (rows, columns), or one tile (None)."""
    step_m, step_n = (tile, tile) if isinstance(tile, int) else tile or (m, n)
    return [(slice(i, min(i + step_m, m)), slice(j, min(j + step_n, n)))
            for i in range(0, m, step_m) for j in range(0, n, step_n)]


def _products_and_sum(be: Backend, p: OzakiPlan, a_cat: Array, b_cat: Array, erow: Array, ecol: Array,
                      C: Array, phases: dict[str, float] | None) -> None:
    """The GEMM calls of every chunk, batch by batch, each batch folded into C."""
    xp, fmt = be.xp, p.format
    buffers = xp.empty((p.held, p.m, p.n_pad), dtype=fmt.accumulator)
    open_ = xp.zeros((p.m, p.n), dtype=np.float64) if p.needs_open else None
    batches = p.batches
    comp = xp.empty((p.m, p.n), dtype=np.float64) if len(batches) > 1 else None
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
                 C, comp, open_, erow, ecol, flags)
