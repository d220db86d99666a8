"""The complex benchmark's result: per size and method its time as called, speed-up over ZGEMM and largest
componentwise error per phi (:class:`Row`), the verdict on the complex speed targets computed from those rows,
:func:`run_bench` that measures and tabulates a plan (``gemmlab complex``), and the ``complex-pareto`` experiment.

The targets (:data:`TARGET_N`, :data:`OZAKI2C_TARGET`, :data:`STRASSEN_TARGET`, :data:`FRONT_FLOOR`), each judged
from the stored rows, on a GPU only (rows measured on the CPU say "not judged"), and not judged where the point was
not measured:

* Ozaki II complex (any ``ozaki2c-*`` configuration) as accurate as ZGEMM at phi = 1 (its ``max_comp`` at most
  ZGEMM's on the same inputs) runs at >= 2.0x ZGEMM at N = 16384: the fastest such configuration;
* 3M over Strassen (any ``zgemm-3m-strassen-*``) runs at >= 1.6x ZGEMM at N = 16384 within its documented
  bound (its error in 3M's scale at most :func:`gpu.zgemm.bound_3m` at every phi): the fastest such; the bound is
  not judged where its errors were not measured in that scale;
* the front door at ``accuracy="zgemm"`` (``zauto-zgemm``) is never below 0.98x ZGEMM at any N measured from
  1024 to 32768.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..audit.bench import usable_methods
from ..core.database import ResultsDB
from ..core.registry import Context, experiment
from ..core.summary import Check, Summary, Table, spread
from ..core.sweep import SweepOutcome
from .bench import FRONT_ZGEMM, PARETO, PARETO_PLANS, SEED, Plan, check_memory, family, real_of, sort_key
from .errors import error_rows, run_errors
from .timing import run_timing, time_rows

#: The phi of the verdict, and the size and speed-ups of its targets (see the module notes).
VERDICT_PHI, TARGET_N = 1.0, 16384
OZAKI2C_TARGET, STRASSEN_TARGET, FRONT_FLOOR = 2.0, 1.6, 0.98
FRONT_SIZES = (1024, 32768)
#: The backend whose rows the targets judge.
JUDGED_BACKEND = "cupy"


@dataclass(frozen=True)
class Row:
    """One method at one size: time as called (None: not measured), speed-up over ZGEMM, how it was timed, and
    the largest componentwise error per phi with ZGEMM's on the same inputs (None: not measured or not finite)."""

    n: int
    method: str
    time_s: float | None = None
    speedup_vs_zgemm: float | None = None
    protocol: str | None = None
    stable: bool | None = None
    backend: str | None = None
    call: str | None = None
    max_comp: Mapping[float, float | None] = field(default_factory=dict)
    zgemm_max_comp: Mapping[float, float | None] = field(default_factory=dict)
    err_3m_scale: Mapping[float, float | None] = field(default_factory=dict)
    bound_3m: Mapping[float, float | None] = field(default_factory=dict)

    @property
    def family(self) -> str:
        return family(self.method)[0]

    def as_accurate(self, phi: float = VERDICT_PHI) -> bool:
        """Whether its error at ``phi`` is measured and at most ZGEMM's there."""
        mine, zgemm = self.max_comp.get(phi), self.zgemm_max_comp.get(phi)
        return mine is not None and zgemm is not None and mine <= zgemm

    def as_dict(self) -> dict[str, Any]:
        """The row as ``gemmlab complex`` prints it: errors as ``max_comp_phi<phi>`` keys."""
        return {"n": self.n, "method": self.method, "family": self.family, "time_s": self.time_s,
                "speedup_vs_zgemm": self.speedup_vs_zgemm, "protocol": self.protocol, "stable": self.stable,
                "backend": self.backend, "call": self.call,
                **{f"max_comp_phi{phi:g}": e for phi, e in self.max_comp.items()},
                **{f"zgemm_max_comp_phi{phi:g}": e for phi, e in self.zgemm_max_comp.items()}}


def bench_table(db: ResultsDB, env_key: str, plan: Plan, regime: str) -> list[Row]:
    """Per size of the plan and method (by family): time in ``regime``, speed-up and errors per phi (of the plan's
    seed and rows)."""
    times = {(r.n, r.method): r for r in time_rows(db, env_key, regime)}
    errors: dict[tuple[int, str], dict[float, Any]] = defaultdict(dict)
    for r in error_rows(db, env_key):
        if r.seed == SEED and r.rows == plan.rows_for(r.n):
            errors[(r.n, r.method)][r.phi] = r
    out = []
    for n in plan.sizes:
        for name in sorted(plan.methods, key=sort_key):
            t, e = times.get((n, name)), errors[(n, name)]
            out.append(Row(n, name, t and t.time_s, t and t.speedup_vs_zgemm, t and t.protocol, t and t.stable,
                           t and t.backend, t and t.call,
                           *({p: getattr(e[p], f) if p in e else None for p in plan.phis}
                             for f in ("max_comp", "zgemm_max_comp", "err_3m_scale", "bound_3m"))))
    return out


def _judged(rows: Sequence[Row], target: str, measured: str, met: bool) -> Check:
    """The check, or not judged where any row it read was measured off the GPU."""
    off = sorted({r.backend for r in rows if r.backend != JUDGED_BACKEND})
    if off:
        return Check(target, f"{measured} (measured on {', '.join(map(str, off))}: not judged, the targets are a "
                             "GPU's)", None)
    return Check(target, measured, met)


def fastest(rows: Sequence[Row]) -> Row | None:
    """The timed row of the largest speed-up over ZGEMM, if any."""
    return max((r for r in rows if r.speedup_vs_zgemm is not None), key=lambda r: r.speedup_vs_zgemm, default=None)


def ozaki2c_check(rows: Sequence[Row], n: int = TARGET_N, goal: float = OZAKI2C_TARGET,
                  phi: float = VERDICT_PHI) -> Check:
    """The fastest Ozaki II complex configuration as accurate as ZGEMM at phi, at N = n."""
    target = f"phi = {phi:g}, N = {n}: the fastest Ozaki II complex configuration as accurate as ZGEMM >= {goal:g}x"
    mine = [r for r in rows if r.n == n and r.family == "Ozaki II complex" and r.speedup_vs_zgemm is not None]
    measured = [r for r in mine if r.max_comp.get(phi) is not None and r.zgemm_max_comp.get(phi) is not None]
    if not measured:
        return Check(target, f"N = {n} not measured (Ozaki II complex timed with its errors at phi = {phi:g})", None)
    best = fastest([r for r in measured if r.as_accurate(phi)])
    if best is None:
        worst = ", ".join(f"{r.method} {r.max_comp[phi]:.2e}" for r in measured)
        return _judged(measured, target, f"none as accurate as ZGEMM ({measured[0].zgemm_max_comp[phi]:.2e}): "
                                         f"{worst}", False)
    return _judged(measured, target, f"{best.speedup_vs_zgemm:.3f}x by {best.method} (max_comp "
                                     f"{best.max_comp[phi]:.2e} <= ZGEMM's {best.zgemm_max_comp[phi]:.2e})",
                   best.speedup_vs_zgemm >= goal)


def strassen_check(rows: Sequence[Row], n: int = TARGET_N, goal: float = STRASSEN_TARGET) -> Check:
    """The fastest 3M over Strassen at N = n."""
    target = f"N = {n}: 3M over Strassen >= {goal:g}x ZGEMM, within its documented bound"
    best = fastest([r for r in rows if r.n == n and (real_of(r.method) or "").startswith("strassen")
                    and r.method.startswith("zgemm-3m-")])
    if best is None:
        return Check(target, f"N = {n} not measured (no 3M over Strassen timed)", None)
    speed = f"{best.speedup_vs_zgemm:.3f}x by {best.method}"
    pairs = [(phi, e, best.bound_3m.get(phi)) for phi, e in best.err_3m_scale.items()]
    if not pairs or any(e is None or b is None for _, e, b in pairs):
        text = f"{speed}; its documented bound not judged (no error in 3M's scale at every phi)"
        return _judged([best], target, text, False) if best.speedup_vs_zgemm < goal else Check(target, text, None)
    phi, e, b = max(pairs, key=lambda x: x[1] / x[2])
    within = all(e <= b for _, e, b in pairs)
    return _judged([best], target, f"{speed}; error in 3M's scale {'within' if within else 'ABOVE'} its documented "
                                   f"bound at every phi (closest: {e:.2e} against {b:.2e} at phi = {phi:g})",
                   within and best.speedup_vs_zgemm >= goal)


def front_check(rows: Sequence[Row], floor: float = FRONT_FLOOR, sizes: tuple[int, int] = FRONT_SIZES) -> Check:
    """The front door at accuracy "zgemm" against ZGEMM at every N measured in ``sizes``."""
    lo, hi = sizes
    target = f"the front door at accuracy='zgemm' >= {floor:g}x ZGEMM at every N from {lo} to {hi}"
    mine = sorted((r for r in rows if r.method == FRONT_ZGEMM and lo <= r.n <= hi and r.speedup_vs_zgemm is not None),
                  key=lambda r: r.n)
    if not mine:
        return Check(target, f"no N from {lo} to {hi} measured", None)
    shown = "; ".join(f"{r.speedup_vs_zgemm:.3f}x at N = {r.n}" for r in mine)
    met = all(r.speedup_vs_zgemm >= floor for r in mine)
    ends = [n for n in sizes if n not in {r.n for r in mine}]
    if met and ends:
        return Check(target, f"{shown}; N = {' and '.join(map(str, ends))} not measured", None)
    return _judged(mine, target, shown, met)


def verdict(rows: Sequence[Row]) -> list[Check]:
    """The three complex targets (see the module notes), from the rows."""
    return [ozaki2c_check(rows), strassen_check(rows), front_check(rows)]


def rows_table(rows: Sequence[Row], phis: Sequence[float]) -> Table:
    """Every size and method: time (ms), speed-up, how it was timed and max_comp per phi."""
    errs = tuple(f"max_comp phi={p:g}" for p in phis)
    return Table("time as called and error per size and method",
                 ("N", "method", "time (ms)", "speed-up vs ZGEMM", "timed by", *errs),
                 [(r.n, r.method, 1e3 * r.time_s if r.time_s else None, r.speedup_vs_zgemm, r.protocol,
                   *(r.max_comp.get(p) for p in phis)) for r in rows],
                 formats={"time (ms)": ".3f", "speed-up vs ZGEMM": ".3f", **{e: ".2e" for e in errs}})


def run_bench(ctx: Context, plan: Plan) -> tuple[dict[str, Any], list[Row]]:
    """Errors, then timings, of every method of the plan (resuming); the counts and the rows."""
    err = run_errors(ctx, plan) if plan.errors else SweepOutcome()
    tim = run_timing(ctx, plan) if plan.timing else SweepOutcome()
    rows = bench_table(ctx.db, ctx.env_key, plan, ctx.regime)
    return {"error points measured": err.measured, "error points already stored": err.skipped,
            "times measured": tim.measured, "times already stored": tim.skipped}, rows


NOTES = ["time: each method's public call as called (calls back to back, then one synchronise, by the host's clock, "
         "a new C per call), interleaved with ZGEMM called the same way on phi = 1 inputs; single run: slower than "
         "the slow factor times ZGEMM on one call, timed by that call",
         "max_comp: the largest |c - c*| over both parts of C, each part against its own componentwise scale, "
         "against the exact complex product, on sampled rows of large products"]


def pareto_summary(counts: Mapping[str, Any], rows: Sequence[Row], plan: Plan, regime: str) -> Summary:
    """The ``complex-pareto`` summary: every row and the verdict."""
    return Summary(scope=(f"N = {', '.join(map(str, plan.sizes))}; {len(plan.methods)} methods; "
                          f"phi = {spread(list(plan.phis), 'values')}; regime {regime}"),
                   facts=dict(counts), tables=[rows_table(rows, plan.phis)], checks=verdict(rows), notes=list(NOTES))


@experiment(PARETO, "Complex products (complex128) as called against ZGEMM: 3M and 4M over real methods, Ozaki "
                    "scheme II over both parts and the front door, with their componentwise errors on phi inputs, "
                    "judged against the complex speed targets")
def run_pareto(ctx: Context) -> Summary:
    """The plan of the backend and size of run; the summary with the verdict."""
    base = PARETO_PLANS[(ctx.backend.name, ctx.quick)]
    plan = base.with_methods(usable_methods(ctx.backend, base.methods))
    check_memory(ctx.backend, plan)
    counts, rows = run_bench(ctx, plan)
    return pareto_summary(counts, rows, plan, ctx.regime)
