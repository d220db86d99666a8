"""The front door as called against the library GEMM and its own candidates: the experiment ``frontdoor``.

A user calls ``gpu.matmul(A, B, accuracy=...)`` and gets a new output per call; the question is whether that
call, its ranking and planning included, is as fast as the fastest method that keeps the accuracy, and never
slower than the library GEMM. Per (shape, accuracy) point (:mod:`experiments.frontdoor.points`) one interleaved
group times, on the same phi = 1 operands (:mod:`experiments.frontdoor.errors`), each as called and by the
device's clock (:func:`experiments.core.ascalled.time_called`):

* ``library``: ``cupy.matmul(A, B)`` (``numpy.matmul`` on the CPU), a new output per call: the reference;
* ``frontdoor``: ``gpu.matmul(A, B, accuracy=...)``, a new output per call;
* the best :data:`OTHERS` eligible candidates of the front door's ranking besides the one it runs and the library
  GEMM (so that their workspaces fit beside it), and the front door's choice with this device's profile hidden
  (:mod:`experiments.frontdoor.hidden`) where no other call runs it, each through its own family plan
  (:func:`gpu.frontdoor.frontplan.family_plan`) as a user runs a kept plan: ``plan.execute(A, B)``.

Before anything is timed, :func:`gpu.plan` says what the front door runs and why (``explain()``), and every
call is made once and its product checked against ``A (B x)``: a wrong product raises and nothing is stored;
a candidate whose family refuses the product (its checks, or a workspace that does not fit) is left out, and
the front door's row names it with the reason. A point the front door itself refuses (no method keeps the
accuracy on the shape) is stored as refused. The device time counts each call's launch: the front door's
Ozaki methods read a word back from the device per call, so the stream cannot be held. After the timing,
the front door's error is taken on phi inputs against its bound (:func:`~experiments.frontdoor.errors.measure_errors`).

A shape's missing points are measured together (their timing operands drawn once), then stored, the
front door's row of each point last: a point counts as stored once that row is, so an interrupted sweep
measures again only the points whose front-door row is missing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

import gpu
from gpu.backend import Array, Backend, MemoryPlanError
from gpu.backend.plans import MatmulPlan, free_kept_plans
from gpu.frontdoor import Ranked
from gpu.frontdoor.frontplan import family_plan

from ..core.ascalled import AS_CALLED, Call, Called, time_called, wall_seconds
from ..core.lab import Operands, require_correct
from ..core.registry import Context, experiment
from ..core.summary import Summary
from ..core.sweep import group_sweep
from ..core.timing import FEWEST_REPEATS
from .errors import SEED, TIME_PHI, error_bound, measure_errors, phi_inputs
from .hidden import hidden_choice
from .points import (
    DTYPE,
    PLANS,
    Plan,
    Shape,
    accuracy_text,
    fitting_points,
    point_params,
    shape_order,
    shape_text,
    shapes_text,
)
from .report import frontdoor_summary
from .rows import EXPERIMENT, FRONTDOOR, LIBRARY, REFUSED, FrontdoorRow, frontdoor_rows

#: Candidates timed besides the one the front door runs and the library GEMM, at most.
OTHERS = 2
#: Where one library GEMM call takes longer than this, a group takes the protocol's fewest samples.
SLOW_CALL_S = 1.0
#: Errors a family raises where it refuses a product before any work.
REFUSALS = (MemoryPlanError, ValueError, TypeError)


@dataclass
class FrontOperands(Operands):
    """A (m x k) and B (k x n) of one point; every call makes its own output (C is an empty placeholder)."""

    def needs_flush(self) -> bool:
        """Flush the cache before each sample where A, B and an output fit in twice its size."""
        nbytes = self.A.nbytes + self.B.nbytes + self.A.shape[0] * self.B.shape[1] * self.A.itemsize
        return nbytes < 2 * self.backend.cache_bytes()


@dataclass
class Group:
    """What one point times: the front door's choice and why, the calls, the candidates' plans (freed after the
    group) and what refused."""

    level: Any
    chosen: Ranked
    explain: str
    candidates: tuple[str, ...]
    public: dict[str, Call]
    families: dict[str, str]
    plans: list[MatmulPlan] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)
    hidden: tuple[str, str] | None = None      # the choice with the profile hidden, and the call timing it

    def free(self) -> None:
        for plan in self.plans:
            plan.free()
        self.plans.clear()


class Refused(Exception):
    """The front door refused a point before any work; its message says why."""


def product_error(be: Backend, A: Array, B: Array, C: Array) -> float:
    """Relative error of ``C x`` against ``A (B x)`` for a random x in [0, 1)."""
    xp = be.xp
    x = xp.random.default_rng(0).random(B.shape[1])
    expected = A @ (B @ x)
    return float(xp.linalg.norm(C @ x - expected) / xp.linalg.norm(expected))


def candidates(be: Backend, A: Array, B: Array, entries: Sequence[Ranked], chosen: Ranked, others: int = OTHERS
               ) -> tuple[dict[str, Call], dict[str, str], list[MatmulPlan], dict[str, str]]:
    """The best ``others`` eligible candidates besides ``chosen`` and the library GEMM, each as a call of its
    own family plan: (calls, families, plans, refused with why). A candidate whose family refuses the product
    is passed over for the next."""
    calls, families, plans, refused = {}, {}, [], {}
    for r in entries:
        if len(calls) >= others:
            break
        if not r.eligible or r.family == "gemm" or r.name == chosen.name:
            continue
        try:
            calls[r.name], plan = family_call(be, A, B, r)
        except REFUSALS as err:
            refused[r.name] = str(err)
            continue
        families[r.name] = r.family
        plans.append(plan)
    return calls, families, plans, refused


def family_call(be: Backend, A: Array, B: Array, r: Ranked) -> tuple[Call, MatmulPlan]:
    """Candidate ``r`` as a call of its own family plan, and the plan (refusals raise as the family's)."""
    plan = family_plan(r, A, B, None, be, None)
    options = ", ".join(f"{k}={v!r}" for k, v in r.options.items())
    return Call(f"{r.family}.Plan(A, B, options={{{options}}}).execute(A, B)", partial(plan.execute, A, B)), plan


def add_hidden(be: Backend, A: Array, B: Array, group: Group) -> None:
    """Time what the front door would choose with this device's profile hidden (:mod:`.hidden`): the call of the
    group that runs it already, or its family plan's call added to the group; ``group.hidden`` names it."""
    m, k = A.shape
    found = hidden_choice(be, m, k, B.shape[1], group.level)
    if found is None:
        return
    if found.family == "gemm" or found.name == group.chosen.name or found.name in group.public:
        key = {"gemm": LIBRARY}.get(found.family, FRONTDOOR if found.name == group.chosen.name else found.name)
        group.hidden = (found.name, key)
        return
    try:
        group.public[found.name], plan = family_call(be, A, B, found)
    except REFUSALS as err:
        group.refused[found.name] = str(err)
        return
    group.families[found.name] = found.family
    group.plans.append(plan)
    group.hidden = (found.name, found.name)


def prepare(be: Backend, A: Array, B: Array, level: Any) -> Group:
    """The front door's choice for (A, B, ``level``) and the calls of the point; :class:`Refused` where
    ``gpu.plan`` refuses before any work."""
    try:
        probe = gpu.plan(A, B, accuracy=level, backend=be)
    except REFUSALS as err:
        raise Refused(str(err)) from None
    chosen, text, entries = probe.chosen, probe.explain(), probe.ranking.entries
    probe.free()
    public = {FRONTDOOR: Call(f"gpu.matmul(A, B, accuracy={level!r})",
                              partial(gpu.matmul, A, B, accuracy=level, backend=be))}
    calls, families, plans, refused = candidates(be, A, B, entries, chosen, OTHERS)
    refused.update({r.name: why for r, why in probe.refused})
    group = Group(level, chosen, text, tuple(r.name for r in entries), {**public, **calls},
                  {FRONTDOOR: chosen.family, LIBRARY: "gemm", **families}, plans, refused)
    add_hidden(be, A, B, group)
    return group


def check_calls(be: Backend, A: Array, B: Array, group: Group, reference: Call, where: str) -> None:
    """Each call made once, its product checked (RuntimeError where wrong: nothing is stored); a candidate
    that refuses on its first call is dropped, and the front door refusing raises :class:`Refused`."""
    tolerance = np.finfo(DTYPE).eps ** 0.5
    require_correct(product_error(be, A, B, reference.fn()), f"{reference.text} at {where}", tolerance)
    for name, call in list(group.public.items()):
        try:
            C = call.fn()
        except REFUSALS as err:
            if name == FRONTDOOR:
                raise Refused(str(err)) from None
            group.refused[name] = str(err)
            del group.public[name]
            continue
        require_correct(product_error(be, A, B, C), f"{call.text} at {where}", tolerance)
        del C                                  # one output at a time


def time_point(ctx: Context, ops: FrontOperands, group: Group, reference: Call) -> Called:
    """The point's calls timed as called and by the device's clock, interleaved, the library GEMM the
    baseline; the protocol's fewest samples where one library call lasts over :data:`SLOW_CALL_S`."""
    slow = wall_seconds(ctx.backend, reference.fn) > SLOW_CALL_S
    protocol = {"repeats": FEWEST_REPEATS, "least": FEWEST_REPEATS} if slow else {}
    works: dict[str, Callable[[], Any]] = {LIBRARY: reference.fn, **{n: c.fn for n, c in group.public.items()}}
    return time_called(ops, works, LIBRARY, group.public, reference, refill=False, regime=ctx.regime, **protocol)


def timed_meta(called: Called, name: str, family: str) -> tuple[float, list[float], dict[str, Any]]:
    """(as-called median, its samples, the row's meta) of one timed call."""
    timed, device = called.result.timings[AS_CALLED + name], called.result.timings[name]
    return timed.median, timed.samples, {**timed.meta(), **called.meta(name), "family": family,
                                         "device_samples": device.samples, "device_stable": device.stable}


def door_meta(group: Group, called: Called, errors: list[dict[str, Any]], k: int) -> dict[str, Any]:
    """What the front door's row adds: what it ran and why, the candidates, and its verdict's measurements."""
    seconds = {name: called.result.timings[AS_CALLED + name].median for name in (LIBRARY, *group.public)}
    fastest = min((n for n in seconds if n != FRONTDOOR), key=seconds.__getitem__)
    return {"runs": group.chosen.name, "explain": group.explain, "candidates": list(group.candidates),
            "timed": [n for n in group.public if n != FRONTDOOR], "refused": group.refused, "fastest": fastest,
            "frontdoor_over_fastest": seconds[fastest] / seconds[FRONTDOOR], "errors": errors,
            "bound": error_bound(group.level, k, group.chosen.guarantee), **hidden_meta(group, seconds)}


def hidden_meta(group: Group, seconds: dict[str, float]) -> dict[str, Any]:
    """The choice with the profile hidden, the model it came from, and the time it loses against the front door's
    call (0 where the same method runs; the hidden call's own time otherwise); nothing where nothing is hidden."""
    if group.hidden is None:
        return {}
    name, key = group.hidden
    lost = None if key not in seconds else seconds[key] / seconds[FRONTDOOR] - 1.0 if key != FRONTDOOR else 0.0
    return {"hidden": {"runs": name, "timed_as": key, "lost": lost}}


def store_point(ctx: Context, shape: Shape, group: Group, called: Called, errors: list[dict[str, Any]]) -> int:
    """Every call of a timed group as a row, the front door's last (see the module notes); how many."""
    params = point_params(shape, group.level, ctx.regime)
    names = [LIBRARY, *(n for n in group.public if n != FRONTDOOR), FRONTDOOR]
    for name in names:
        value, samples, meta = timed_meta(called, name, group.families[name])
        if name == FRONTDOOR:
            meta.update(door_meta(group, called, errors, shape[1]))
        ctx.db.add(ctx.run_id, EXPERIMENT, name, params, value=value, unit="s", samples=samples, meta=meta)
    return len(names)


def store_refused(ctx: Context, shape: Shape, level: Any, why: str) -> int:
    """A point the front door refused before any work: one row saying why."""
    ctx.db.add(ctx.run_id, EXPERIMENT, FRONTDOOR, point_params(shape, level, ctx.regime), value=0.0, unit=REFUSED,
               meta={"regime": ctx.regime, "refused": {FRONTDOOR: why}, "family": "none"})
    return 1


def measure_shape(ctx: Context, shape: Shape, levels: Sequence[Any]) -> int:
    """Time the shape's points at ``levels`` on one draw of phi = 1 operands, then take the front door's errors
    on every phi, then store every point; rows stored."""
    be, where = ctx.backend, shape_text(shape)
    A, B, _ = phi_inputs(be, shape, TIME_PHI, SEED)
    ops = FrontOperands(be, A, B, be.xp.empty((0, 0)))
    reference = Call(f"{be.xp.__name__}.matmul(A, B)", partial(be.xp.matmul, A, B))
    timed: list[tuple[Group, Called]] = []
    refused: list[tuple[Any, str]] = []
    for level in levels:
        try:
            group = prepare(be, A, B, level)
            try:
                check_calls(be, A, B, group, reference, f"{where}, accuracy {accuracy_text(level)}")
                timed.append((group, time_point(ctx, ops, group, reference)))
            finally:
                group.free()
        except Refused as why:
            refused.append((level, str(why)))
        free_kept_plans()
    del ops, A, B
    errors = measure_errors(be, shape, [g.level for g, _ in timed]) if timed else {}
    stored = sum(store_refused(ctx, shape, level, why) for level, why in refused)
    return stored + sum(store_point(ctx, shape, g, c, errors[accuracy_text(g.level)]) for g, c in timed)


def stored(ctx: Context, shape: Shape, level: Any) -> bool:
    """Whether the point's front-door row (stored last) is in this environment and regime."""
    return ctx.db.has(EXPERIMENT, FRONTDOOR, point_params(shape, level, ctx.regime), ctx.env_key)


def run_points(ctx: Context, plan: Plan, left_out: Sequence[str]) -> tuple[dict[str, Any], list[FrontdoorRow]]:
    """Measure (or resume) the plan's points shape by shape, stored as soon as measured; the counts and the
    stored rows of those points. ``left_out``: the reasons of shapes left out for memory, for the counts."""
    shapes = sorted(set(plan.shapes), key=shape_order)
    missing = {s: [a for a in plan.accuracies if ctx.force or not stored(ctx, s, a)] for s in shapes}
    todo = [s for s in shapes if missing[s]]
    with ctx.backend.allocation_policy("pooled"):
        group_sweep(ctx, EXPERIMENT, todo, lambda s: False, lambda s: measure_shape(ctx, s, missing[s]), shape_text)
    wanted = {(s, accuracy_text(a)) for s in shapes for a in plan.accuracies}
    rows = [r for r in frontdoor_rows(ctx.db, ctx.env_key, ctx.regime) if r.point in wanted]
    measured = sum(len(v) for v in missing.values())
    return {"points measured": measured, "points already stored": len(wanted) - measured,
            "shapes left out (memory)": list(left_out),
            "shapes": shapes_text(shapes),
            "accuracies": ", ".join(accuracy_text(a) for a in plan.accuracies)}, rows


@experiment(EXPERIMENT, "The front door (gpu.matmul) as called against the library GEMM and its best candidates, "
                        "by shape and accuracy, with its error on phi inputs against its bound")
def run_frontdoor(ctx: Context) -> Summary:
    plan, left_out = fitting_points(ctx.backend, PLANS[(ctx.backend.name, ctx.quick)])
    counts, rows = run_points(ctx, plan, left_out)
    return frontdoor_summary(counts, rows)
