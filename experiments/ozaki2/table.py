"""Scheme II's benchmark result: per product and method its time, speed-up over DGEMM and max relative
error per phi (:class:`Row`), the verdict on scheme II's speed targets computed from those rows, and
:func:`run_bench` that measures and tabulates a plan (``gemmlab ozaki2`` and ``ozaki2-pareto``).

The verdict, per product at phi = 1: among the scheme II configurations whose max relative error is
at most DGEMM's on the same inputs, the one with the largest speed-up over DGEMM as called (a loop of calls,
host time included, against the library GEMM called the same way; :func:`best_scheme2`). The targets
(:data:`experiments.ozaki2.bench.TARGETS`) ask that speed-up to reach 1.4 at N = 16384 and 1.05 at N = 8192,
and ``ozaki2.matmul(A, B)`` at its defaults, as called, to reach :data:`DEFAULTS_TARGETS`; a target whose
product was not measured, or not as called (rows stored before the as-called times were), is not judged.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from accuracy.methods import parse_ozaki2_method

from ..audit.bench import Shape
from ..core.database import ResultsDB
from ..core.registry import Context
from ..core.summary import Check, Summary, Table, spread
from ..core.sweep import SweepOutcome
from ..ozaki.bench import LABELS
from .bench import DGEMM, SEED, TARGETS, Plan, family, shape_text, sort_key
from .errors import error_rows, run_errors
from .timing import DEFAULTS, run_timing, time_rows

#: The phi of the verdict.
VERDICT_PHI = 1.0
#: ``ozaki2.matmul(A, B)`` at its defaults (target DGEMM), as called: its least speed-up over DGEMM as called.
DEFAULTS_TARGETS = {16384: 1.4, 8192: 1.2}


@dataclass(frozen=True)
class Row:
    """One method at one product: time (None: not measured), speed-up over DGEMM, how it was timed,
    the max relative error per phi of the plan (None: not measured or not finite), and whether the
    reported batch was stable (every sample within the protocol's tolerance of its mean)."""

    shape: Shape
    method: str
    time_s: float | None
    speedup_vs_dgemm: float | None
    protocol: str | None = None
    max_rel: Mapping[float, float | None] = field(default_factory=dict)
    stable: bool | None = None
    as_called_s: float | None = None
    host_s: float | None = None
    ratio_as_called: float | None = None

    @property
    def label(self) -> str:
        """DGEMM and SGEMM by those names, the others by their method names."""
        return LABELS.get(self.method, self.method)

    def as_dict(self) -> dict[str, Any]:
        """The row as ``gemmlab ozaki2`` prints it: errors as ``max_rel_phi<phi>`` keys."""
        m, k, n = self.shape
        return {"m": m, "k": k, "n": n, "shape": shape_text(self.shape), "method": self.method,
                "label": self.label, "family": family(self.method)[0], "time_s": self.time_s,
                "speedup_vs_dgemm": self.speedup_vs_dgemm, "protocol": self.protocol, "stable": self.stable,
                "as_called_s": self.as_called_s, "host_s": self.host_s, "ratio_as_called": self.ratio_as_called,
                **{f"max_rel_phi{phi:g}": e for phi, e in self.max_rel.items()}}


def bench_table(db: ResultsDB, env_key: str, plan: Plan, regime: str) -> list[Row]:
    """Per product of the plan and method (by family): time in ``regime``, speed-up and max relative
    error per phi (errors of the plan's seed and row count)."""
    times = {(r.shape, r.method): r for r in time_rows(db, env_key, regime)}
    errors: dict[tuple[Shape, str], dict[float, float | None]] = defaultdict(dict)
    for r in error_rows(db, env_key):
        if r.seed == SEED and r.rows == plan.rows_for(r.shape):
            errors[(r.shape, r.method)][r.phi] = r.max_rel
    out = []
    for shape in plan.shapes:
        defaults = [DEFAULTS] if (shape, DEFAULTS) in times else []
        for name in [*sorted(plan.methods, key=sort_key), *defaults]:
            t = times.get((shape, name))
            out.append(Row(shape, name, t.time_s if t else None, t.speedup_vs_dgemm if t else None,
                           t.protocol if t else None, {phi: errors[(shape, name)].get(phi) for phi in plan.phis},
                           t.stable if t else None, t.as_called_s if t else None, t.host_s if t else None,
                           t.ratio_as_called if t else None))
    return out


def best_scheme2(rows: Sequence[Row], shape: Shape, phi: float = VERDICT_PHI) -> dict[str, Any]:
    """At one product: DGEMM's max relative error on phi inputs, the scheme II configurations at least
    as accurate, and the fastest of them (largest speed-up over DGEMM) with its speed-up."""
    at = [r for r in rows if r.shape == shape]
    dgemm = next((r for r in at if r.method == DGEMM), None)
    bound = dgemm.max_rel.get(phi) if dgemm else None
    if bound is None:
        return {"shape": shape_text(shape), "phi": phi, "note": f"no DGEMM error at phi = {phi:g}"}
    ok = [r for r in at if parse_ozaki2_method(r.method) and r.max_rel.get(phi) is not None and r.max_rel[phi] <= bound
          and r.speedup_vs_dgemm]
    called = [r for r in ok if r.ratio_as_called is not None]
    best = max(called, key=lambda r: r.ratio_as_called) if called else max(ok, key=lambda r: r.speedup_vs_dgemm,
                                                                           default=None)
    return {"shape": shape_text(shape), "phi": phi, "dgemm_max_rel": bound,
            "as_accurate_as_dgemm": [r.method for r in ok], "best": best.method if best else None,
            "best_max_rel": best.max_rel[phi] if best else None,
            "best_speedup_vs_dgemm": best.speedup_vs_dgemm if best else None,
            "best_ratio_as_called": best.ratio_as_called if best else None}


def verdict(rows: Sequence[Row], targets: Mapping[int, float] = TARGETS, phi: float = VERDICT_PHI) -> list[Check]:
    """Scheme II's speed targets, one check per N (largest first), from the rows: met where the best scheme II
    configuration as accurate as DGEMM at N x N x N reaches the speed-up; not judged where N was not
    measured (no DGEMM error or no time there)."""
    checks = []
    for n, goal in sorted(targets.items(), reverse=True):
        target = f"phi = {phi:g}, N = {n}: the fastest scheme II configuration as accurate as DGEMM >= {goal:g}x DGEMM"
        if not any(r.shape == (n, n, n) for r in rows):
            checks.append(Check(target, "N not measured", None))
            continue
        b = best_scheme2(rows, (n, n, n), phi)
        if "note" in b:
            checks.append(Check(target, b["note"], None))
        elif b["best"] is None:
            checks.append(Check(target, f"no timed scheme II configuration is as accurate as DGEMM "
                                        f"({b['dgemm_max_rel']:.2e})", False))
        elif b["best_ratio_as_called"] is None:
            checks.append(Check(target, f"not measured as called ({b['best']}: {b['best_speedup_vs_dgemm']:.3f}x "
                                        "DGEMM by the device's clock)", None))
        else:
            checks.append(Check(target, f"{b['best']}: {b['best_ratio_as_called']:.3f}x DGEMM as called "
                                        f"({b['best_speedup_vs_dgemm']:.3f}x by the device's clock), max_rel "
                                        f"{b['best_max_rel']:.2e} <= DGEMM's {b['dgemm_max_rel']:.2e}",
                                b["best_ratio_as_called"] >= goal))
    return checks + defaults_checks(rows)


def defaults_checks(rows: Sequence[Row], targets: Mapping[int, float] = DEFAULTS_TARGETS) -> list[Check]:
    """``ozaki2.matmul(A, B)`` at its defaults, as called, against DGEMM as called, one check per N."""
    found = {r.shape: r for r in rows if r.method == DEFAULTS and r.ratio_as_called is not None}
    checks = []
    for n, goal in sorted(targets.items(), reverse=True):
        r = found.get((n, n, n))
        checks.append(Check(f"ozaki2.matmul(A, B) at its defaults, as called, >= {goal:g}x DGEMM as called at "
                            f"N = {n}", f"{r.ratio_as_called:.3f}x" if r else "not measured as called",
                            r.ratio_as_called >= goal if r else None))
    return checks


def best_table(rows: Sequence[Row], phi: float = VERDICT_PHI) -> Table:
    """Per product: DGEMM's error and the fastest scheme II configuration at least as accurate."""
    shapes = list(dict.fromkeys(r.shape for r in rows))
    found = [best_scheme2(rows, s, phi) for s in shapes]
    return Table(f"fastest scheme II as accurate as DGEMM (phi = {phi:g})",
                 ("product", "DGEMM max_rel", "configuration", "its max_rel", "speed-up vs DGEMM"),
                 [(b["shape"], b.get("dgemm_max_rel"), b.get("best"), b.get("best_max_rel"),
                   b.get("best_speedup_vs_dgemm")) for b in found],
                 formats={"DGEMM max_rel": ".2e", "its max_rel": ".2e", "speed-up vs DGEMM": ".3f"})


def rows_table(rows: Sequence[Row], phis: Sequence[float]) -> Table:
    """Every product and method: time (ms), speed-up, how it was timed and max_rel per phi."""
    errs = tuple(f"max_rel phi={p:g}" for p in phis)
    return Table("time and error per product and method",
                 ("product", "method", "time (ms)", "speed-up vs DGEMM", "timed by", "as called (ms)",
                  "as called vs DGEMM as called", "host per call (us)", *errs),
                 [(shape_text(r.shape), r.label, 1e3 * r.time_s if r.time_s else None, r.speedup_vs_dgemm,
                   r.protocol, 1e3 * r.as_called_s if r.as_called_s else None, r.ratio_as_called,
                   1e6 * r.host_s if r.host_s else None, *(r.max_rel.get(p) for p in phis)) for r in rows],
                 formats={"time (ms)": ".3f", "speed-up vs DGEMM": ".3f", "as called (ms)": ".3f",
                          "as called vs DGEMM as called": ".3f", "host per call (us)": ".1f",
                          **{e: ".2e" for e in errs}})


def run_bench(ctx: Context, plan: Plan) -> tuple[dict[str, Any], list[Row]]:
    """Errors, then timings, of every method of the plan (resuming); the counts and the table."""
    err = run_errors(ctx, plan) if plan.errors else SweepOutcome()
    tim = run_timing(ctx, plan) if plan.timing else SweepOutcome()
    rows = bench_table(ctx.db, ctx.env_key, plan, ctx.regime)
    return {"error points measured": err.measured, "error points already stored": err.skipped,
            "times measured": tim.measured, "times already stored": tim.skipped}, rows


def pareto_summary(counts: Mapping[str, Any], rows: Sequence[Row], plan: Plan, regime: str) -> Summary:
    """The ``ozaki2-pareto`` summary: every row, the fastest accurate configuration per product, the verdict."""
    return Summary(
        scope=(f"{', '.join(shape_text(s) for s in plan.shapes)}; {len(plan.methods)} methods; "
               f"phi = {spread(list(plan.phis), 'values')}; regime {regime}"),
        facts=dict(counts), tables=[rows_table(rows, plan.phis), best_table(rows)], checks=verdict(rows),
        notes=["times on phi = 1 inputs, interleaved with DGEMM (single run: slower than the slow factor times "
               "DGEMM, timed once); max_rel: max |c - c*| / |c*| against the correctly rounded product, on "
               "sampled rows of large products",
               "time: one call per sample by the device's clock; as called: the same public call in a loop of calls "
               "then one synchronise, by the host's clock, in the same rounds, against the library GEMM called "
               f"the same way; {DEFAULTS}: ozaki2.matmul(A, B, out=C), timed as called only"])
