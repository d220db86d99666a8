"""Split-K as a plan: what one operand signature decides, once (:class:`Plan`, options in :class:`Options`).

Building a plan runs every check that depends on the signature (types, dtypes, layouts, shapes, ``out``,
whether split-K pays), chooses the split from the device's limits and the compiled chunk kernel, compiles
the kernels the split launches and no other, looks them up and sizes every launch (``ops.bind``), and, in
the deterministic mode, allocates the partials' workspace (``chunks x m x n`` elements), which every call
then reuses on the plan's stream. A call (:meth:`Plan.execute`) checks only what can change between calls
of one signature: alpha and beta, whether ``out`` overlaps A or B (addresses), the values where
``check_finite=True``; then it launches the kernels. On CuPy nothing in that path waits for the device:
scalars are host numbers, the overlap test compares address ranges, a new C comes from the memory pool, and
launches and ``cudaMemsetAsync`` return at once; only ``check_finite=True`` reads a verdict back.
"""

from __future__ import annotations

import math
import threading
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

from ..backend import Array, Backend, get_backend, require_finite, require_memory
from ..backend.checks import check_output, gemm_operands
from ..backend.plans import MatmulPlan, operand_signature, resolve_options
from . import ops as _ops  # noqa: F401  (registers the "splitk" operations)
from .executor import run
from .plan import check_worth

NONFINITE = "NaN and infinity then flow through the chunk sums as through any GEMM"


@dataclass(frozen=True)
class Options:
    """How split-K cuts k and adds the chunks up (see :func:`gpu.splitk.matmul`): ``chunks`` (a count, or
    ``"auto"``: whole waves of the occupancy formula) or ``chunk_width``; ``deterministic`` (a fixed-order
    reduction through a workspace, or atomic additions into C); ``check_finite`` (refuse NaN and infinity
    before any work, which reads A and B once more and waits for the device). alpha and beta are no options:
    they are values of each call, as in the BLAS, so a loop over them reuses one plan."""

    chunks: int | str = "auto"
    chunk_width: int | None = None
    deterministic: bool = True
    check_finite: bool = False


def scalar(name: str, value: Any) -> float:
    """``value`` as a finite host float: TypeError for a device array (reading it would wait for the device)
    and for what is no real number, ValueError for NaN and infinity."""
    if type(value) is float and math.isfinite(value):
        return value
    if hasattr(value, "__cuda_array_interface__"):
        raise TypeError(f"{name} is a device array; pass a host number (reading {name} from the device would "
                        "make the call wait for it)")
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a real number, got {value!r}") from None
    if not math.isfinite(x):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return x


class Plan(MatmulPlan):
    """``alpha A @ B + beta out`` by split-K for operands of the signature of (A, B, ``out``) on ``stream`` (the
    current one where None): built once (see the module notes), executed per call. Holds :attr:`split` (the
    :class:`gpu.splitk.SplitPlan`), the bound kernels and, in the deterministic mode, :attr:`workspace`
    until :meth:`free` (or the end of its ``with`` block). Raises what :func:`gpu.splitk.matmul` raises for
    bad operands, options and shapes, and :class:`gpu.backend.MemoryPlanError` where the workspace does not
    fit; all before any work."""

    def __init__(self, A: Any, B: Any, *, out: Any = None, options: Options | dict | None = None,
                 backend: str | Backend = "auto", stream: Any = None) -> None:
        be = get_backend(backend)
        self.options = opts = resolve_options(Options, options)
        A, B, out = gemm_operands(be, A, B, out)
        (m, k), n = A.shape, B.shape[1]
        check_worth(m, n, k)
        ops = be.ops("splitk")
        with nullcontext() if stream is None else stream:
            self.split = ops.split(A.dtype, m, n, k, chunks=opts.chunks, chunk_width=opts.chunk_width,
                                   deterministic=opts.deterministic)
            self.backend, self.stream, self._shape, self._dtype = be, stream, (m, n), A.dtype
            self.workspace = self._workspace() if opts.deterministic else None
            self._ops = ops.bind(self.split, A, B, out)
        self.signature = operand_signature(be, A, B, out, stream)
        self._lock = threading.Lock()

    def execute(self, A: Array, B: Array, out: Array | None = None, *, alpha: float = 1.0, beta: float = 0.0,
                stream: Any = None) -> Array:
        """``alpha A @ B + beta out`` into ``out`` (a new array where None, which needs ``beta = 0``) on ``stream``
        (default: the plan's), for operands of the plan's signature (:class:`gpu.backend.plans.PlanMismatch`
        otherwise); alpha and beta are host numbers, any finite ones, per call."""
        return super().execute(A, B, out, stream=stream, alpha=alpha, beta=beta)

    def _execute(self, A: Array, B: Array, out: Array | None, alpha: Any = 1.0, beta: Any = 0.0) -> Array:
        """The per-call work for operands of the plan's signature, on the current stream."""
        alpha, beta = scalar("alpha", alpha), scalar("beta", beta)
        if out is None and beta != 0:
            raise ValueError(f"beta = {beta} scales the C it is given: pass that C as out=")
        if out is not None:
            self._check_apart(out, A, B)
        if self.options.check_finite:
            require_finite(self.backend, True, {"A": A, "B": B, **({"out": out} if beta != 0 else {})}, NONFINITE)
        C = self._new_output() if out is None else out
        if self._lock.acquire(blocking=False):
            try:
                run(self.backend, self._ops, self.split, A, B, C, alpha, beta, self.workspace)
            finally:
                self._lock.release()
        else:                                  # another thread is using the workspace: a private one
            spare = None if self.workspace is None else self._workspace()
            run(self.backend, self._ops, self.split, A, B, C, alpha, beta, spare)
        return C

    def _check_apart(self, out: Array, A: Array, B: Array) -> None:
        """ValueError where ``out`` overlaps A or B: the address ranges first, the exact test where they meet."""
        may_share = self.backend.xp.may_share_memory
        if may_share(out, A) or may_share(out, B):
            check_output(self.backend, out, self._shape, self._dtype, {"A": A, "B": B})

    def _new_output(self) -> Array:
        try:
            return self.backend.xp.empty(self._shape, dtype=self._dtype)
        except MemoryError:
            m, n = self._shape
            require_memory(self.backend, m * n * self._dtype.itemsize, f"the {m} x {n} output of split-K",
                           "pass out=, or free memory")
            raise

    def _workspace(self) -> Array:
        """The partials' buffer (chunks x m x n), or MemoryPlanError before any work."""
        s, (m, n) = self.split, self._shape
        require_memory(self.backend, s.workspace_elements() * self._dtype.itemsize,
                       f"split-K of {m} x {s.k} x {n} in {s.chunks} chunks",
                       "use deterministic=False (no workspace) or fewer chunks")
        return self.backend.xp.empty((s.chunks, m, n), dtype=self._dtype)

    def _release(self) -> None:
        self.workspace = self._ops = None
