"""The front door as a plan: the ranked choice (:mod:`gpu.frontdoor.rank`) made once per operand signature, and
the winner's own family plan executed per call.

:class:`Plan` checks the operands (float64, shapes, ``out``), reads this device's tables (the profile's
Strassen ``configurations`` and ``methods``, :mod:`gpu.profile`), ranks the candidates for the accuracy asked
for, and builds the first eligible candidate's plan: the library GEMM (one checked GEMM call), a
:class:`gpu.strassen.Plan` with the configuration's options, a :class:`gpu.ozaki2.Plan` (a
:class:`gpu.ozaki2.TiledPlan` within the free memory where its workspace does not fit) or
:class:`gpu.ozaki.Plan` at the candidate's target, or a :class:`gpu.splitk.Plan`. A family that refuses the
product (its own checks, or :class:`gpu.backend.MemoryPlanError` where its workspace does not fit) hands on to
the next eligible candidate, and :meth:`Plan.explain` says so. A call then runs the chosen plan: what it waits
for is that family's (Ozaki I's ``target=`` reads one 4-byte word: the front door runs it with
``verdict="host"``, whose proof has no IEEE fallback; Ozaki II's ``moduli="auto"`` reads none on a repeated call,
its IEEE fallback keeping any accuracy the library GEMM keeps, and reads its count where that GEMM does not).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from .. import ozaki, ozaki2, splitk, strassen
from ..backend import Array, Backend, MemoryPlanError, get_backend, matrix_pair
from ..backend.checks import gemm_operands
from ..backend.plans import MatmulPlan, freeing_kept_plans, library_product, operand_signature
from ..profile import configurations, methods
from ..zgemm.api import is_complex
from . import contract
from .complexmm import ComplexPlan, rank_complex, refuse_memory
from .contract import as_accuracy
from .rank import Ranked, Ranking, rank
from .routes import OutOfCoreRoute, host_route

#: The builder of the correctly rounded product's plan, ``(A, B, out, backend, stream) -> plan``: registered by
#: :mod:`accuracy.reference` when it is imported (this layer imports nothing above it), so ``accuracy="exact"``
#: needs ``import accuracy`` first.
EXACT: list[Callable[..., MatmulPlan]] = []


def register_exact(build: Callable[..., MatmulPlan]) -> None:
    """Make ``build`` the plan of ``accuracy="exact"`` (see :data:`EXACT`)."""
    EXACT[:] = [build]


class LibraryPlan(MatmulPlan):
    """The library GEMM as a plan: one checked GEMM call into ``out``, or into a new C per call
    (:func:`gpu.backend.plans.library_product`)."""

    def __init__(self, A: Array, B: Array, out: Array | None, backend: Backend) -> None:
        self.backend = backend
        m, n = A.shape[0], B.shape[1]
        output = (m * n * A.itemsize, f"the {m} x {n} output", "pass out= (an array you allocated), or free memory")
        self._product = self._execute = library_product(backend, A, B, out, output)   # one frame fewer per call
        self.signature = operand_signature(backend, A, B, out)

    def _execute(self, A: Array, B: Array, out: Array | None) -> Array:
        return self._product(A, B, out)


def split_of(be: Backend, m: int, k: int, n: int, deterministic: bool) -> tuple[int, int] | None:
    """(chunk width, chunks) of split-K's default split of an m x k by k x n float64 product on this device:
    what its proven bound rests on (:func:`gpu.frontdoor.contract.splitk`); None where it cannot split it."""
    try:
        split = be.ops("splitk").split(np.dtype("float64"), m, n, k, deterministic=deterministic)
    except ValueError:
        return None
    return split.width, split.chunks


def family_plan(r: Ranked, A: Array, B: Array, out: Array | None, be: Backend, stream: Any,
                ieee_keeps: bool = True) -> MatmulPlan:
    """The plan of ranked candidate ``r`` for these operands (its family's checks run here). ``ieee_keeps``:
    whether the library GEMM keeps the accuracy asked for, so that Ozaki II's IEEE fallback where no count
    meets its target (:mod:`gpu.ozaki2.deferred`) keeps it too; where not, its count is read back."""
    if r.family == "gemm":
        return LibraryPlan(A, B, out, be)
    builders = {"strassen": strassen.Plan, "ozaki2": ozaki2.tiled.plan_in_memory, "ozaki": ozaki.Plan,
                "splitk": splitk.Plan}
    options = dict(r.options)
    if r.family == "ozaki" and "target" in options:      # its proof holds where the count is read back: no
        options.setdefault("verdict", "host")            # IEEE fallback (gpu.ozaki.deferred)
    if r.family == "ozaki2" and not ieee_keeps:
        options.setdefault("verdict", "host")
    built = builders[r.family](A, B, out=out, options=options, backend=be, stream=stream)
    if r.family == "ozaki2":
        refuse_passes(built, int(options.get("level", 0)))
    return built


def refuse_passes(plan: MatmulPlan, level: int) -> None:
    """ValueError (the plan freed) where an Ozaki II plan at ``level`` would run the level's passes, not the fused
    form its profile entry timed: that form needs room in the memory free for its layout and, for two levels, INT8
    GEMMs that write residues (the CUTLASS kernel built), and the passes run several times slower. A tiled plan
    (:class:`gpu.ozaki2.TiledPlan`) makes its tiles' plans per call: no level is taken in tiles."""
    if plan.fused_levels < level:
        plan.free()
        needs = " and INT8 GEMMs that write residues (the CUTLASS kernel built)" if level == 2 else ""
        raise ValueError(f"Ozaki II's level {level} would run the level's passes on this call, not the fused form "
                         f"its profile entry timed (that form needs room for its whole layout in the memory "
                         f"free{needs})")


class Plan(MatmulPlan):
    """``A @ B`` by the fastest method that keeps ``accuracy`` on this device (see the module notes), for the
    signature of (A, B, ``out``). :attr:`ranking` holds every candidate; :attr:`chosen` the one that runs;
    :attr:`refused` the candidates ranked above it whose families refused the product, with their messages."""

    def __init__(self, A: Any, B: Any, *, out: Any = None, accuracy: Any = "dgemm", deterministic: bool = False,
                 memory: Any = None, backend: str | Backend = "auto", stream: Any = None,
                 regime: str = "sustained") -> None:
        be = self.backend = get_backend(backend)
        self.accuracy, self.stream = as_accuracy(accuracy), stream
        self.refused: list[tuple[Ranked, str]] = []
        if host_route(be, A, B, out, memory):
            self._inner = route = OutOfCoreRoute(A, B, out, be, self.accuracy, memory)
            self.chosen, self.ranking, self.signature = route.chosen, route.ranking, route.signature
            return
        if is_complex(A, B):
            refuse_memory(memory)
            self._complex(A, B, out, regime)
            return
        A, B, out = gemm_operands(be, A, B, out)
        if A.dtype != "float64" or B.dtype != "float64":
            raise TypeError(f"the front door multiplies float64 matrices; A is {A.dtype} and B is {B.dtype}: "
                            "convert them, or call the library GEMM (A @ B) for other dtypes")
        (m, k), n = A.shape, B.shape[1]
        if self.accuracy.exact:
            self._exact(A, B, out, stream)
            return
        self.ranking: Ranking = rank(m, k, n, self.accuracy, configurations=configurations(be, regime)[0],
                                     methods=methods(be, regime)[0], deterministic=deterministic,
                                     graphs=be.supports_graphs, splits=partial(split_of, be, m, k, n))
        ieee = any(e.family == "gemm" and e.keeps for e in self.ranking.entries)
        self._first(lambda r: family_plan(r, A, B, out, be, stream, ieee))
        self.signature = operand_signature(be, A, B, out, stream)

    def _complex(self, A: Any, B: Any, out: Any, regime: str) -> None:
        """Complex operands: the complex candidates (:mod:`gpu.frontdoor.complexmm`), the first that takes them."""
        be = self.backend
        A, B, _, _ = matrix_pair(be, A, B)
        (m, k), n = A.shape, B.shape[1]
        if self.accuracy.exact:
            raise ValueError("accuracy 'exact' on complex operands: call accuracy.reference.exact_matmul, which "
                             "rounds each part correctly")
        self.ranking = rank_complex(m, k, n, self.accuracy, methods(be, regime)[0])
        self._first(lambda r: ComplexPlan(r, A, B, out, be))
        self.signature = operand_signature(be, A, B, out, self.stream)

    def _first(self, build: Callable[[Ranked], MatmulPlan]) -> None:
        """The plan of the first candidate of the ranking whose family takes the product (see the class)."""
        for candidate in self.ranking.fallbacks():
            try:
                self._inner = build(candidate)
            except (MemoryPlanError, ValueError, TypeError) as err:
                self.refused.append((candidate, str(err)))
                continue
            self.chosen = candidate
            return
        raise ValueError(f"every method that keeps accuracy {self.accuracy.level!r} refused this product: "
                         + "; ".join(f"{r.name}: {why}" for r, why in self.refused))

    def _exact(self, A: Array, B: Array, out: Array | None, stream: Any) -> None:
        """The correctly rounded product: the one candidate of ``"exact"``, registered from above."""
        if not EXACT:
            raise ValueError("accuracy 'exact' is accuracy.reference.exact_matmul's: import accuracy (or call "
                             "accuracy.reference.exact_matmul) first")
        self._inner = EXACT[0](A, B, out, self.backend, stream)
        self.chosen = Ranked("exact (accuracy.reference.exact_matmul)", "exact", {}, None,
                             "not timed: an audit tool that waits for the device", contract.exact(), True,
                             why="every entry correctly rounded")
        self.ranking = Ranking((A.shape[0], A.shape[1], B.shape[1]), self.accuracy, (self.chosen,),
                               "the one method that keeps 'exact'")
        self.signature = operand_signature(self.backend, A, B, out, stream)

    def _execute(self, A: Array, B: Array, out: Array | None) -> Array:
        """The chosen plan's product; where its memory is short before any work (a workspace filled on the
        first call), once more after freeing the plans every family's ``matmul`` keeps (another accuracy's
        Ozaki II plan holds a workspace of about 8 matrices, say)."""
        return freeing_kept_plans(self._inner._execute, A, B, out, keep=(self,))

    def _release(self) -> None:
        self._inner.free()

    def explain(self) -> str:
        """The ranking (every candidate, its estimate, its bound, why the winner won), then the candidates
        ranked above the one that runs whose families refused the product."""
        lines = [self.ranking.explain()]
        lines += [f"refused by its family: {r.name}: {why}" for r, why in self.refused]
        note = getattr(self._inner, "note", None)
        if self.refused or note:
            lines.append(f"runs: {self.chosen.name}" + (f" {note}" if note else ""))
        return "\n".join(lines)
