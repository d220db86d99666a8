"""The Ozaki benchmark's result: per size, DGEMM, SGEMM and every configuration with its time,
ratios and errors (:class:`BenchRow`), the verdict on them, and :func:`run_bench` that measures
and tabulates a plan (``gemmlab ozaki`` and the ``ozaki-pareto`` experiment)."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from accuracy.methods import parse_ozaki_method

from ..core.ascalled import FIELDS, as_called_fields
from ..core.database import ResultsDB
from ..core.registry import Context
from ..core.sweep import SweepOutcome
from .bench import DGEMM, LABELS, SEED, SGEMM, TIME, BenchPlan
from .errors import error_rows, run_errors
from .timing import DEFAULTS, run_timing, time_rows


@dataclass(frozen=True)
class BenchRow:
    """One method at one size: time (None: not measured), ratios, how it was timed, and the max
    relative error per phi of the plan (None: not measured or not finite)."""

    n: int
    method: str
    time_s: float | None
    speedup_vs_dgemm: float | None
    slowdown_vs_sgemm: float | None = None
    protocol: str | None = None
    max_rel: Mapping[float, float | None] = field(default_factory=dict)
    call: str | None = None                  # the public call timed as called (None: not timed so)
    as_called_s: float | None = None         # its time per call in a loop of calls, host time included
    host_s: float | None = None              # host time of one such call
    ratio_as_called: float | None = None     # the library GEMM as called over it, in the same rounds

    @property
    def label(self) -> str:
        """DGEMM and SGEMM by those names, the configurations by their method names."""
        return LABELS.get(self.method, self.method)

    def as_dict(self) -> dict[str, Any]:
        """The row as ``gemmlab ozaki`` prints it: errors as ``max_rel_phi<phi>`` keys."""
        return {"n": self.n, "method": self.method, "label": self.label, "time_s": self.time_s,
                "speedup_vs_dgemm": self.speedup_vs_dgemm, "slowdown_vs_sgemm": self.slowdown_vs_sgemm,
                "protocol": self.protocol, "call": self.call, "as_called_s": self.as_called_s,
                "host_s": self.host_s, "ratio_as_called": self.ratio_as_called,
                **{f"max_rel_phi{phi:g}": e for phi, e in self.max_rel.items()}}


def bench_table(db: ResultsDB, env_key: str, plan: BenchPlan) -> list[BenchRow]:
    """Per size and method of the plan: time, ratios and max relative error per phi (DGEMM and SGEMM first)."""
    times = {(r.n, r.method): r for r in time_rows(db, env_key)}
    defaults = {(m.params["n"], m.method): m for m in db.measurements(TIME, method=DEFAULTS, env_key=env_key)}
    errors: dict[tuple[int, str], dict[float, float | None]] = defaultdict(dict)
    for r in error_rows(db, env_key):
        if r.seed == SEED and r.rows == plan.rows_for(r.n):
            errors[(r.n, r.method)][r.phi] = r.max_rel
    out = []
    for n in plan.sizes:
        group = [times[(n, c)] for c in plan.configs() if (n, c) in times]
        base = {DGEMM: statistics.median(r.dgemm_s for r in group) if group else None,
                SGEMM: statistics.median(r.sgemm_s for r in group) if group else None}
        for name in (DGEMM, SGEMM, *plan.configs()):
            t = times.get((n, name))
            time_s = t.time_s if t else base.get(name)
            out.append(BenchRow(
                n, name, time_s,
                speedup_vs_dgemm=t.speedup_vs_dgemm if t else (base[DGEMM] / time_s if time_s else None),
                slowdown_vs_sgemm=t.slowdown_vs_sgemm if t else (time_s / base[SGEMM] if time_s else None),
                protocol=t.protocol if t else ("interleaved" if time_s else None),
                max_rel={phi: errors[(n, name)].get(phi) for phi in plan.phis},
                **({k: getattr(t, k) for k in FIELDS} if t else {})))
        if (n, DEFAULTS) in defaults:
            d = defaults[(n, DEFAULTS)]
            out.append(BenchRow(n, DEFAULTS, d.value, d.meta["speedup_vs_dgemm"], protocol="as called",
                                **as_called_fields(d.meta)))
    return out


def verdict(rows: Sequence[BenchRow], phi: float = 1.0) -> dict[str, Any]:
    """At the largest size: configurations at least as accurate as DGEMM on phi inputs, and the fastest of them."""
    if not rows:
        return {}
    n = max(r.n for r in rows)
    at_n = [r for r in rows if r.n == n]
    dgemm = next((r for r in at_n if r.method == DGEMM), None)
    if dgemm is None or dgemm.max_rel.get(phi) is None:
        return {"n": n, "note": f"no DGEMM error at phi = {phi:g}"}
    bound = dgemm.max_rel[phi]
    ok = [r for r in at_n if parse_ozaki_method(r.method) and r.max_rel.get(phi) is not None
          and r.max_rel[phi] <= bound and r.time_s and r.protocol != "predicted"]
    best = min(ok, key=lambda r: r.time_s, default=None)
    return {"n": n, "phi": phi, "dgemm_max_rel": bound,
            "as_accurate_as_dgemm": [r.method for r in ok],
            "fastest_of_them": best.method if best else None,
            "its_speedup_vs_dgemm": best.speedup_vs_dgemm if best else None,
            "target_met": bool(best and best.speedup_vs_dgemm and best.speedup_vs_dgemm > 1)}


def run_bench(ctx: Context, plan: BenchPlan) -> tuple[dict[str, Any], list[BenchRow]]:
    """Errors, then timings, of every configuration of the plan (resuming); the summary and the table."""
    err = run_errors(ctx, plan) if plan.errors else SweepOutcome()
    tim = run_timing(ctx, plan) if plan.timing else SweepOutcome()
    rows = bench_table(ctx.db, ctx.env_key, plan)
    return {"error points measured": err.measured, "error points already stored": err.skipped,
            "timed configurations": tim.measured, "configurations already timed": tim.skipped,
            "verdict (phi = 1)": verdict(rows)}, rows
