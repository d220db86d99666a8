"""A Strassen product planned once per operand signature and executed per call: :class:`Plan`.

Building a plan runs every check that depends on the signature alone (the operands' kind, layout and dtype,
``out``'s shape, dtype and overlap, the overwrite rights, the options) and makes every decision
(:mod:`gpu.strassen.decide`: the configuration, its memory). The plan then holds its **workspace** (the
executor's arena of scratch buffers, filled on the first execution and kept, so a repeated call allocates
nothing beyond a new output) and, where a graph mode is on, its CUDA graphs (:mod:`gpu.strassen.graphs`).

:meth:`Plan.execute` does only the per-call work, with no wait for the device:

* the addresses: ``out``'s bytes must not meet A's or B's (ValueError), and where the plan holds overwrite
  rights, A's must not meet B's (such a call runs once without the rights);
* the values, only with ``check_finite=True`` (which reads A and B and waits for the device);
* the free memory, where the plan allocates: its output and workspace before the first execution, a new
  output (no ``out=``) on every call at level 1 and deeper (at level 0 on CuPy only where the pool cannot
  hand the output out, :meth:`gpu.backend.Backend.product_call`);
  a product that no longer fits gets :class:`gpu.backend.MemoryPlanError` before any work, after the
  workspaces of the plans ``matmul`` keeps are handed back where that makes room;
* for ``level="auto"``, the device profile's file and modification time, through a
  :class:`gpu.profile.ProfileWatch`: a profile written since makes the plan decide again (at once where this
  process wrote it or the profile folder's variable changed, within :data:`gpu.profile.STAMP_TTL_S` where
  another process wrote it).

Then the product: the library GEMM at level 0 (the library's own product where there is no ``out``), else the
levels, eagerly or as a graph, whose non-finite entries are recomputed by the library GEMM on the device
(:mod:`gpu.strassen.finite`). A plan's workspace is used by one product at a time: concurrent executions of
one plan from several threads take turns issuing their work.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import numpy as np

from ..backend import (
    Array,
    Backend,
    MemoryPlanError,
    blas,
    check_output,
    get_backend,
    matrix_pair,
    require_finite,
    require_memory,
)
from ..backend.blas import bytes_meet
from ..backend.checks import require_writeable
from ..backend.plans import MatmulPlan, library_product, operand_signature, resolve_options
from ..profile import ProfileWatch
from . import finite
from .choose import Configuration
from .costs import total_launches
from .decide import Decision, Product, decide
from .executor import Executor, quadrants
from .graphs import Graphs
from .liveness import clobbers
from .options import Options, check_options
from .schedules import SUPPORT, resolve

NONFINITE = ("entries that NaN or infinity reach are then recomputed by the library GEMM, so they are what A @ B "
             "gives (see gpu.strassen.api)")
#: Plans ``matmul`` keeps (see :func:`held_elsewhere`): their workspaces may be handed back for a new product.
_KEPT: weakref.WeakSet = weakref.WeakSet()
_KEPT_LOCK = threading.Lock()


class Plan(MatmulPlan):
    """``A @ B`` by Strassen-Winograd, planned for the signature of (A, B, ``out``) on ``stream`` under
    ``options`` (an :class:`~gpu.strassen.Options`, a dict of its fields, or None: the defaults, which let the
    device profile choose the configuration); see the module notes and :func:`gpu.strassen.matmul`.

    A and B may be any 2-D array-likes of the backend's kind; :meth:`execute` takes arrays of the backend with
    the plan's signature (:class:`gpu.backend.plans.PlanMismatch` otherwise). ``configuration``, ``decision``
    and ``workspace_bytes`` say what the plan runs and holds."""

    def __init__(self, A: Any, B: Any, *, out: Any = None, options: Options | dict | None = None,
                 backend: str | Backend = "auto", stream: Any = None, _owned: tuple[bool, bool] = (False, False)
                 ) -> None:
        be = get_backend(backend)
        o = resolve_options(Options, options)
        check_options(be, o)
        A, B, _, _ = matrix_pair(be, A, B)
        la, lb = be.layout(A, "A"), be.layout(B, "B")
        blas.check_dtypes(("A", A), ("B", B))
        require_writeable({"A": (A, o.overwrite_a), "B": (B, o.overwrite_b)})
        m, k, n = A.shape[0], A.shape[1], B.shape[1]
        check_output(be, out, (m, n), A.dtype, {"A": A, "B": B})
        apart = not blas.overlaps(la, lb)                      # matmul(A, A): no right to write either
        self.backend, self.options, self.stream = be, o, stream
        self.product = Product(m, k, n, A.dtype, 0 if out is not None else m * n * A.itemsize,
                               apart and (o.overwrite_a or _owned[0]), apart and (o.overwrite_b or _owned[1]))
        self._extents = (la.extent, lb.extent, 0 if out is None else be.layout(out).extent)
        self._watch = ProfileWatch(be) if o.level == "auto" else None
        self._lock = threading.Lock()
        self._decide()
        self._gemm = self._level0(A, B, out)
        self.signature = operand_signature(be, A, B, out, stream)

    # --------------------------------------------------------------------------- what the plan holds

    def _decide(self) -> None:
        self.decision: Decision = decide(self.backend, self.options, self.product, held_elsewhere(self))
        c, d = self.decision.configuration, self.decision
        self._arena: dict | None = {} if c.level else None
        self._filled = False
        self._executor = Executor(self.backend, parallel=d.parallel, fused=c.fused, arena=self._arena, flat=c.flat)
        self._graphs = Graphs(self.backend, d.graph, total_launches(c.schedule, c.level, c.fused, c.flat))
        p = self.product
        self._output = (p.output, f"the {p.m} x {p.n} output", "pass out= (an array you allocated), or split "
                        "the product into blocks of rows")

    @property
    def configuration(self) -> Configuration:
        """The level and configuration this plan runs."""
        return self.decision.configuration

    @property
    def workspace_bytes(self) -> int:
        """Bytes of scratch buffers the plan holds now (filled by its first execution)."""
        return sum(x.nbytes for x in list((self._arena or {}).values()))   # one read, whatever fills it

    def release_workspace(self, wait: bool = True) -> bool:
        """Hand the workspace and graphs back (the next execution makes them again, after a memory check);
        with ``wait=False`` only where no execution of this plan is issuing work now. Whether it did."""
        if not self._lock.acquire(blocking=wait):
            return False
        try:
            self._graphs.clear()
            if self._arena:
                self._arena.clear()
            self._filled = False
        finally:
            self._lock.release()
        return True

    def _release(self) -> None:
        self.release_workspace()
        with _KEPT_LOCK:
            _KEPT.discard(self)

    def _level0(self, A: Array, B: Array, out: Array | None) -> Any:
        """The level-0 product ``(A, B, out) -> C``, checked once (:func:`gpu.backend.plans.library_product`)."""
        return library_product(self.backend, A, B, out, self._output)

    # --------------------------------------------------------------------------- the per-call work

    def _execute(self, A: Array, B: Array, out: Array | None) -> Array:
        be = self.backend
        if self._watch is not None and self._watch.changed():
            self.release_workspace()
            self._decide()
        d = self.decision
        if not d.level:
            if self.options.check_finite:
                require_finite(be, True, {"A": A, "B": B}, NONFINITE)
            return self._gemm(A, B, out)
        if self._meet(A, B, out):
            with Plan(A, B, out=out, options=self.options, backend=be) as once:   # no rights over shared bytes
                return once._execute(A, B, out)
        if self.options.check_finite:
            require_finite(be, True, {"A": A, "B": B}, NONFINITE)
        with self._lock:
            if not self._filled:
                self._require(d.memory)
            C = self._new_output(A.dtype) if out is None else out
            self._run(A, B, C)
            self._filled = True
        return C

    def _new_output(self, dtype: Any) -> Array:
        """A new C (:meth:`gpu.backend.Backend.new_output`: its memory check says why where it does not fit)."""
        return self.backend.new_output((self.product.m, self.product.n), dtype,
                                       lambda: require_memory(self.backend, *self._output))

    def _meet(self, A: Array, B: Array, out: Array | None) -> bool:
        """ValueError where ``out`` overlaps A or B; whether A and B overlap where the plan holds overwrite
        rights (the call then runs without them)."""
        p = self.product
        rights = bool(self.decision.level) and (p.overwrite_a or p.overwrite_b)
        if out is None and not rights:
            return False
        be, (ea, eb, ec) = self.backend, self._extents
        pa, pb = be.pointer(A), be.pointer(B)
        if out is not None:
            pc = be.pointer(out)
            for name, x, at, extent in (("A", A, pa, ea), ("B", B, pb, eb)):
                if bytes_meet(pc, ec, at, extent) and blas.overlaps(be.layout(out), be.layout(x)):
                    raise ValueError(f"out overlaps {name}; pass a separate output array")
        return rights and bytes_meet(pa, ea, pb, eb) and blas.overlaps(be.layout(A), be.layout(B))

    def _require(self, memory: tuple[int, str, str]) -> None:
        """:func:`gpu.backend.require_memory`, after handing back the workspaces of the plans ``matmul`` keeps
        where the memory is short and they hold some."""
        try:
            require_memory(self.backend, *memory)
        except MemoryPlanError:
            freed = [plan.release_workspace(wait=False) for plan in kept_plans() if plan is not self and plan._filled]
            if not any(freed):
                raise
            require_memory(self.backend, *memory)

    def _run(self, A: Array, B: Array, C: Array) -> None:
        """The levels of the plan's configuration on (A, B, C), eagerly or as a graph, then the repair of the
        entries that came out NaN or infinite (:mod:`gpu.strassen.finite`)."""
        be, d, run = self.backend, self.decision, self._executor
        c, p = d.configuration, self.product

        def body() -> None:
            run.begin()
            if d.padded:
                padded(be, run, c.schedule, A, B, C, d.side, c.level)
            else:
                peeled(be, run, c.schedule, A, B, C, d.side, c.level, p.overwrite_a, p.overwrite_b)

        key = (be.pointer(A), be.pointer(B), be.pointer(C)) if self._graphs.mode else None
        with np.errstate(over="ignore", invalid="ignore"):   # the additions' overflow and NaN are repaired below
            self._graphs.run(key, body)
        be.ops(finite.FAMILY).repair(A, B, C)


def held_elsewhere(plan: Plan | None = None) -> int:
    """Bytes the workspaces of the plans ``matmul`` keeps hold (``plan``'s own left out): memory a new plan's
    choice may count on, since they are handed back where it is short (:meth:`Plan._require`)."""
    return sum(p.workspace_bytes for p in kept_plans() if p is not plan)


def keep(plan: Plan) -> Plan:
    """Mark ``plan`` as one ``matmul`` keeps (its workspace may be handed back for another); returns it."""
    with _KEPT_LOCK:
        _KEPT.add(plan)
    return plan


def kept_plans() -> list[Plan]:
    """The plans ``matmul`` keeps now."""
    with _KEPT_LOCK:
        return list(_KEPT)


# --------------------------------------------------------------------------- the bodies

def peeled(be: Backend, run: Executor, schedule: str, A: Array, B: Array, C: Array, s: int, level: int,
           overwrite_a: bool, overwrite_b: bool) -> None:
    """Strassen on the s x s core, library GEMMs on the fringe panels (computed first,
    while the core's inputs are intact)."""
    m, n = C.shape
    if n > s:
        be.gemm(A[:s], B[:, s:], C[:s, s:])
    if m > s:
        be.gemm(A[s:], B, C[s:])
    Ac, Bc = A[:s, :s], B[:s, :s]
    hit = clobbers(schedule, level)
    if "A" in hit and not overwrite_a:
        Ac = run.copy(Ac, ("top", "A"))
    if "B" in hit and not overwrite_b:
        Bc = run.copy(Bc, ("top", "B"))
    support = top_support(be, schedule, level, Ac, Bc, overwrite_a, overwrite_b, run.buffer)
    run.multiply(schedule, Ac, Bc, C[:s, :s], level, support)
    if A.shape[1] > s:
        be.gemm(A[:s, s:], B[s:, :s], C[:s, :s], 1.0, 1.0)


def padded(be: Backend, run: Executor, schedule: str, A: Array, B: Array, C: Array, side: int, level: int) -> None:
    """Zero-pad A, B and C to side x side and run the whole product by Strassen."""
    Ap, Bp, Cp = (run.buffer((side, side), A.dtype, ("top", "pad", name)) for name in "ABC")
    for P in (Ap, Bp, Cp):
        P.fill(0)
    Ap[:A.shape[0], :A.shape[1]] = A
    Bp[:B.shape[0], :B.shape[1]] = B
    run.multiply(schedule, Ap, Bp, Cp, level, top_support(be, schedule, level, Ap, Bp, True, True, run.buffer))
    C[...] = Cp[:C.shape[0], :C.shape[1]]


def top_support(be: Backend, schedule: str, level: int, A: Array, B: Array, overwrite_a: bool,
                overwrite_b: bool, buffer: Any = None) -> dict[str, Array] | None:
    """Top-level support quadrants: the input quadrants they may alias where the caller allows,
    new buffers otherwise (from ``buffer(shape, dtype, slot)``, an executor's, where given);
    None for schedules that take no support."""
    sched = resolve(schedule, level)
    if not sched.support:
        return None
    inputs = {**quadrants(A, "A"), **quadrants(B, "B")}
    reuse = sched.permitted_aliases(overwrite_a, overwrite_b)
    h = A.shape[0] // 2
    new = buffer or (lambda shape, dtype, slot: be.xp.empty(shape, dtype=dtype))
    return {s: inputs[reuse[s]] if s in reuse else new((h, h), A.dtype, ("top", s)) for s in SUPPORT}
