"""``matmul`` and ``configure``: the Ozaki scheme on NumPy or CuPy (see :mod:`gpu.ozaki` for the method).

:func:`matmul` is a plan (:class:`gpu.ozaki.execution.Plan`) kept per operand signature and options in a
bounded cache, then executed: the steps are written once there (line exponents, for ``target`` the data's
bound, the slicing of A and of B^T, the GEMM calls of every chunk batch by batch through
:meth:`gpu.backend.Backend.gemm_ex`, and the fold of each batch into C), and the backend's ``"ozaki"``
operations (:mod:`gpu.ozaki.ops`) do the element-wise work. The line helpers here (:class:`Lines`,
:func:`line_pair`, :func:`located`, :func:`_with_nonfinite`) also serve scheme II.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..backend import Array, Backend, get_backend
from ..backend.checks import zeroed_copies
from ..backend.conditional import available
from ..backend.plans import PlanCache, operand_signature
from .bound import slice_ratio
from .common import NONFINITE, _operands, _phase, _tiles
from .execution import Options, Plan, request
from .formats import get_format
from .ops import ops
from .plan import SUM_ERROR, OzakiPlan, auto_slices, choose_alpha, plan, predicted_error
from .slicing import slice_layout

#: The plans :func:`matmul` keeps (least recently used dropped first).
PLANS = PlanCache()

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
    """The configuration ``matmul`` would run on these operands (``target``: slices chosen from the data, and
    the proven bound in :attr:`OzakiPlan.bound`), with the workspace sized to the device's free memory;
    raises where ``matmul`` would, and for NaN and infinity (an inspection: it waits for the device)."""
    be = get_backend(backend)
    A, B = _operands(be, A, B)
    rows, cols = line_pair(be, A, B)
    _refuse_nonfinite(rows, cols)
    fmt = get_format(slice_format)
    slices, target = request(slices, target, remainder)
    (m, k), n = A.shape, B.shape[1]
    bound = None
    if slices is None:
        alpha = choose_alpha(fmt, k, k_block)[0]
        ratio = slice_ratio(be, A, B, rows.exps, cols.exps, fmt)
        slices = auto_slices(alpha, ratio, target)
        bound = predicted_error(alpha, slices, ratio) + SUM_ERROR
    return plan(m, k, n, slices, fmt, k_block=k_block, memory=be.memory_info()[0], remainder=remainder,
                bound=bound)


# --------------------------------------------------------------------------- execution

def matmul(A: Any, B: Any, *, slices: int | None = None, slice_format: str = "fp32", target: Any = None,
           k_block: int | None = None, remainder: bool = False, backend: str | Backend = "auto",
           overwrite_a: bool = False, overwrite_b: bool = False, out: Any = None,
           phases: dict[str, float] | None = None, check_finite: bool = False, verdict: str = "device",
           max_slices: int | None = None) -> Array:
    """``A @ B`` in float64 by the Ozaki scheme (see :mod:`gpu.ozaki`).

    ``slices``: slices per operand (S(S+1)/2 slice-pair products; no error
    bound is promised), or ``target``: t, a number in (0, 1), ``"dgemm"``
    (2**-53) or ``"sgemm"`` (2**-24), for which the result meets

        |C - AB| <= t |A||B| + 2**-53 |C|   entrywise

    (and within 2**-1074 where C is subnormal), proven on these inputs: the
    fewest slices that prove it are chosen from the data (one more low-precision
    GEMM, of magnitudes, on the device; see :mod:`gpu.ozaki.bound`). Neither
    means ``target="dgemm"``. ``verdict``: where the count is decided.
    ``"device"`` (the default): the call never waits for the device; the plan
    holds room for up to ``max_slices`` slices (default: 32, fewer where half
    the free memory or a graph of 2048 GEMM calls holds fewer:
    :attr:`gpu.ozaki.Plan.max_slices`) and a CUDA graph
    runs the products the device's count needs (:mod:`gpu.ozaki.deferred`);
    where the data need more slices, or no 64 slices reach the target (rows
    or columns whose entries span too many binades), every entry of C is the
    IEEE dot product instead, as the library GEMM computes it, and
    :meth:`gpu.ozaki.Plan.last_verdict` says so. ``"host"``: the call reads
    the count back (ONE 32-bit word, a 4-byte read that waits for the work
    before it) and raises a ValueError, before any product, when no 64 slices
    reach the target. A call with ``slices`` never waits. ``slice_format``: ``fp32`` (SGEMM, the paper's method),
    ``tf32``, ``fp16``, ``bf16`` (tensor cores, FP32 accumulation) or ``int8``
    (INT32 accumulation). ``k_block``: most inner terms per GEMM call (default:
    as many as the format's accumulator sums exactly). ``remainder``: the
    paper's form for float formats (see :mod:`gpu.ozaki`): the last diagonal
    multiplies each slice of A by the rest of B rounded to the format, and A's
    rounded rest by B rounded, so nothing is dropped; more accurate per slice,
    but those products are rounded, not exact, and CPU and GPU results then
    differ in the last bits. ``overwrite_a`` / ``overwrite_b``: on NumPy the
    input may hold the scaled remainders while slicing (saving a float64 copy;
    ignored when A and B share memory or hold NaN or infinity, and by a device
    verdict, whose fallback reads them whole); the GPU kernel
    needs no scratch and ignores them. ``out``: a writeable C-ordered float64
    array of the backend for the result, sharing no memory with A or B.
    ``phases``: a dict that receives seconds per phase (``split``, ``gemm``,
    ``sum``; each phase synchronized, for breakdowns).

    NaN and infinity: by default (``check_finite=False``) the rows of A and
    columns of B that hold them are found on the device, sliced as zeros, and
    their entries of C computed as IEEE dot products by the last fold, so C
    has NaN and infinity where ``A @ B`` has them, and the rest is the Ozaki
    scheme's, with no wait. ``check_finite=True`` refuses them instead (a
    ValueError before any product; it reads the verdict word, as
    ``verdict="host"`` does, with ``slices`` too).

    A call is a kept :class:`gpu.ozaki.Plan` (one per operand signature and
    options, :data:`PLANS`) and its execution: build the plan yourself to hold
    its workspace across calls. A device-verdict plan that ``matmul`` keeps
    on the GPU holds its workspace and graph (built, and waited for, on the
    signature's first call; handed back where another plan needs the memory),
    and the bound's buffers, on which the steps before the products replay as
    one more graph from the second call with the same arrays.
    Inputs may be any 2-D array-likes of float64
    values (``np.matrix`` included; masked arrays are refused). Raises
    TypeError for inputs or ``out`` of the wrong kind, ValueError for bad shapes,
    ``out`` or parameters, and :class:`WorkspaceError` or
    :class:`gpu.backend.MemoryPlanError` (both ValueErrors) when the output or
    the workspace would not fit in free memory: all before any product.
    """
    be = get_backend(backend)
    opts = Options(slices, slice_format, target, k_block, remainder, overwrite_a, overwrite_b, check_finite, verdict,
                   max_slices)
    key = operand_signature(be, A, B, out)
    if key is None:
        A, B = _operands(be, A, B)
        key = operand_signature(be, A, B, out)
    graph = opts.slices is None and opts.verdict == "device" and not opts.check_finite and available(be)
    plan = PLANS.get(None if key is None else (key, opts),
                     lambda: Plan(A, B, out=out, options=opts, backend=be, hold=graph))
    return plan.run(A, B, out, phases)


def _with_nonfinite(be: Backend, A: Array, B: Array, C: Array, bad_rows: Array, bad_cols: Array,
                    options: dict[str, Any], method: Any = None) -> Array:
    """``check_finite=False`` with NaN or infinity, for a method that finds them on the host (scheme II):
    ``method`` (the Ozaki scheme by default) on copies of A and B whose non-finite rows and columns are
    zeroed, then those rows and columns of C by the library GEMM."""
    A2, B2 = zeroed_copies(be, A, B, bad_rows, bad_cols)
    (method or matmul)(A2, B2, out=C, overwrite_a=True, overwrite_b=True, check_finite=True, **options)
    xp = be.xp
    if bad_rows.size:
        C[bad_rows] = xp.matmul(A[bad_rows], B)
    if bad_cols.size:
        C[:, bad_cols] = xp.matmul(A, B[:, bad_cols])
    return C


def _split(be: Backend, X: Array, exps: Array, p: OzakiPlan, rows_pad: int, reverse: bool,
           overwrite: bool) -> Array:
    """X's rows as concatenated slices in the format's storage, rows_pad x positions*ldk:
    [X_1 | ... | X_S] for A, B's digits reversed for B (see :func:`gpu.ozaki.plan.plan`), and with
    ``remainder`` the rounded tails: A's after S - 1 digits, each of B's T_j at 2S - 1 - j."""
    layout = slice_layout(p, reverse)
    out = be.xp.empty((rows_pad, layout["positions"] * p.ldk), dtype=p.format.storage)
    return ops(be).split(X, exps, p, rows_pad, layout, overwrite, out)


__all__ = ["NONFINITE", "PLANS", "Lines", "_operands", "_phase", "_refuse_nonfinite", "_split", "_tiles",
           "_with_nonfinite", "configure", "line_pair", "lines_of", "located", "matmul"]
