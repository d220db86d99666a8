"""The front door as called against the library GEMM and its own candidates: the experiment ``frontdoor``.

A user calls ``gpu.matmul(A, B, accuracy=...)`` and gets a new output per call; the question is whether that
call, its ranking and planning included, is as fast as the fastest method that keeps the accuracy, and never
slower than the library GEMM. Per (shape, accuracy) point (:mod:`experiments.frontdoor.points`) one interleaved
group times, on the same phi = 1 operands (:mod:`experiments.frontdoor.errors`), each as called and by the
device's clock (:func:`experiments.core.ascalled.time_called`):

* ``library``: ``cupy.matmul(A, B)`` (``numpy.matmul`` on the CPU), a new output per call: the reference;
* ``frontdoor``: ``gpu.matmul(A, B, accuracy=...)``, a new output per call;
* the best :data:`OTHERS` eligible candidates of the front door's ranking besides the one it runs and the library
  GEMM (so that their workspaces fit beside it; none where the operands take over
  :data:`~experiments.frontdoor.groups.BESIDE` of the device, the front door's row naming each one left out),
  and the front door's choice with this device's profile hidden
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
from functools import partial
from typing import Any

from gpu.backend import Backend
from gpu.backend.plans import free_kept_plans

from ..core.ascalled import AS_CALLED, Call, Called, time_called, wall_seconds
from ..core.registry import Context, experiment
from ..core.summary import Summary
from ..core.sweep import group_sweep
from ..core.timing import FEWEST_REPEATS
from .errors import SEED, TIME_PHI, error_bound, measure_errors, phi_inputs
from .groups import Built, FrontOperands, Group, Refused, check_calls, prepare, timed_key
from .points import (
    PLANS,
    Plan,
    Shape,
    accuracy_text,
    fitting_points,
    point_bytes,
    point_params,
    shape_order,
    shape_text,
    shapes_text,
)
from .report import frontdoor_summary
from .rows import EXPERIMENT, FRONTDOOR, LIBRARY, REFUSED, FrontdoorRow, frontdoor_rows

#: Where one library GEMM call takes longer than this, a group takes the protocol's fewest samples.
SLOW_CALL_S = 1.0
#: A shape whose operands take at most this share of the device's memory times its levels in one group.
TOGETHER = 1 / 16


def time_point(ctx: Context, ops: FrontOperands, group: Group, reference: Call) -> Called:
    """One group's calls timed (:func:`time_groups`)."""
    return time_groups(ctx, ops, [group], reference)


def time_groups(ctx: Context, ops: FrontOperands, groups: Sequence[Group], reference: Call) -> Called:
    """The calls of ``groups`` (one shape's points) timed as called and by the device's clock in one interleaved
    group, each once under its :func:`timed_key`, the library GEMM the baseline; the protocol's fewest samples
    where one library call lasts over :data:`SLOW_CALL_S`."""
    slow = wall_seconds(ctx.backend, reference.fn) > SLOW_CALL_S
    protocol = {"repeats": FEWEST_REPEATS, "least": FEWEST_REPEATS} if slow else {}
    public = {timed_key(g, name): call for g in groups for name, call in g.public.items()}
    works: dict[str, Callable[[], Any]] = {LIBRARY: reference.fn, **{n: c.fn for n, c in public.items()}}
    return time_called(ops, works, LIBRARY, public, reference, refill=False, regime=ctx.regime, **protocol)


def timed_meta(called: Called, key: str, family: str) -> tuple[float, list[float], dict[str, Any]]:
    """(as-called median, its samples, the row's meta) of the call timed under ``key``."""
    timed, device = called.result.timings[AS_CALLED + key], called.result.timings[key]
    return timed.median, timed.samples, {**timed.meta(), **called.meta(key), "family": family,
                                         "device_samples": device.samples, "device_stable": device.stable}


def door_meta(group: Group, called: Called, errors: list[dict[str, Any]], k: int) -> dict[str, Any]:
    """What the front door's row adds: what it ran and why, the candidates, and its verdict's measurements."""
    seconds = {name: called.result.timings[AS_CALLED + timed_key(group, name)].median
               for name in (LIBRARY, *group.public)}
    keeps = group.library_keeps
    fastest = min((n for n in seconds if n != FRONTDOOR and (keeps or n != LIBRARY)), key=seconds.__getitem__,
                  default=None)
    return {"runs": group.chosen.name, "explain": group.explain, "candidates": list(group.candidates),
            "timed": [n for n in group.public if n != FRONTDOOR], "refused": group.refused, "fastest": fastest,
            "frontdoor_over_fastest": fastest and seconds[fastest] / seconds[FRONTDOOR], "library_keeps": keeps,
            "errors": errors,
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
        value, samples, meta = timed_meta(called, timed_key(group, name), group.families[name])
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
    """Time the shape's points at ``levels`` on one draw of phi = 1 operands, in one group where the shape is
    small beside the device (:func:`together`), else level by level with every plan freed between them; then
    take the front door's errors on every phi, then store every point; rows stored."""
    be = ctx.backend
    A, B, _ = phi_inputs(be, shape, TIME_PHI, SEED)
    ops = FrontOperands(be, A, B, be.xp.empty((0, 0)))
    reference = Call(f"{be.xp.__name__}.matmul(A, B)", partial(be.xp.matmul, A, B))
    timed: list[tuple[Group, Called]] = []
    refused: list[tuple[Any, str]] = []
    for batch in ([list(levels)] if together(be, shape) else [[level] for level in levels]):
        timed += time_batch(ctx, ops, shape, batch, reference, refused)
    del ops, A, B
    errors = measure_errors(be, shape, [g.level for g, _ in timed]) if timed else {}
    stored = sum(store_refused(ctx, shape, level, why) for level, why in refused)
    return stored + sum(store_point(ctx, shape, g, c, errors[accuracy_text(g.level)]) for g, c in timed)


def together(be: Backend, shape: Shape) -> bool:
    """Whether a shape's levels are timed in one group: its operands take at most :data:`TOGETHER` of the
    device's memory (each level's front-door plan and each candidate's workspace are held at once)."""
    return point_bytes(shape) <= TOGETHER * be.memory_info()[1]


def time_batch(ctx: Context, ops: FrontOperands, shape: Shape, levels: Sequence[Any], reference: Call,
               refused: list[tuple[Any, str]]) -> list[tuple[Group, Called]]:
    """The points of ``levels`` built, checked and timed in one group, their plans freed after; the levels the
    front door refused appended to ``refused``."""
    be, A, B = ctx.backend, ops.A, ops.B
    groups: list[Group] = []
    built = Built()
    try:
        for level in levels:
            try:
                group = prepare(be, A, B, level, built)
                groups.append(group)
                check_calls(be, A, B, group, reference, f"{shape_text(shape)}, accuracy {accuracy_text(level)}")
            except Refused as why:
                groups = [g for g in groups if g.level is not level]
                refused.append((level, str(why)))
        called = time_groups(ctx, ops, groups, reference) if groups else None
    finally:
        built.free()
        free_kept_plans()
    return [(g, called) for g in groups]


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
