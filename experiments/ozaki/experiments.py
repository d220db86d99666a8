"""The Ozaki experiments of ``gemmlab reproduce``: ``ozaki-accuracy``, ``ozaki-time``,
``ozaki-breakdown`` and ``ozaki-pareto`` (see :mod:`experiments.ozaki.bench` for what each measures)."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from accuracy.methods import ozaki_method_name, parse_ozaki_method
from gpu import ozaki
from gpu.backend import Backend

from ..audit.bench import NONFINITE_NOTE, AuditRow, audit_scope, phi_table, run_audit
from ..core.database import Measurement, ResultsDB
from ..core.registry import Context, experiment
from ..core.summary import Check, Summary, Table, spread
from ..core.sweep import Record, sweep
from .bench import (
    ACCURACY_PLANS,
    BREAKDOWN,
    BREAKDOWN_PLANS,
    DGEMM,
    PAPER_SPLITS,
    PARETO_PLANS,
    SEED,
    SGEMM,
    TIME,
    TIME_PHI,
    TIME_PLANS,
    bench_inputs,
)
from .table import BenchRow, run_bench, verdict
from .timing import TimeRow, run_timing, time_rows

BREAKDOWN_RUNS = 5
#: The phases :func:`gpu.ozaki.matmul` reports, in order.
PHASES = ("split", "gemm", "sum")


def paper_methods() -> list[str]:
    """SGEMM, 2-6 splits in the paper's form and with exact digits only, DGEMM."""
    return [SGEMM, *(ozaki_method_name(f, s) for f in ("fp32r", "fp32") for s in PAPER_SPLITS), DGEMM]


def digits_gained(rows: Iterable[AuditRow]) -> dict[tuple[int, float], dict[str, float]]:
    """Per (n, phi): decimal digits gained over SGEMM, log10(SGEMM error / method error), median over seeds."""
    rows = list(rows)
    base = {(r.n, r.phi, r.seed): r.max_rel for r in rows if r.method == SGEMM}
    gains: dict[tuple[int, float], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        ref = base.get((r.n, r.phi, r.seed))
        if r.method != SGEMM and ref and r.max_rel:
            gains[(r.n, r.phi)][r.method].append(math.log10(ref / r.max_rel))
    return {key: {m: statistics.median(v) for m, v in methods.items()} for key, methods in gains.items()}


@experiment("ozaki-accuracy", "Ozaki scheme with 2-6 FP32 splits against SGEMM and DGEMM on phi inputs (the paper's "
                              "design)")
def run_accuracy(ctx: Context) -> Summary:
    methods = paper_methods()
    outcome, rows = run_audit(ctx, methods, ACCURACY_PLANS[(ctx.backend.name, ctx.quick)])
    n = max((r.n for r in rows), default=None)
    gains = {phi: by for (size, phi), by in digits_gained(rows).items() if size == n}
    phis = sorted(gains)
    gained = Table(f"digits gained over SGEMM at N={n}", ("method", *(f"phi={p:g}" for p in phis)),
                   [(m, *(gains[p].get(m) for p in phis)) for m in methods if any(m in gains[p] for p in phis)],
                   formats={f"phi={p:g}": ".1f" for p in phis})
    return Summary(scope=audit_scope(rows),
                   facts={"points measured": outcome.measured, "points already stored": outcome.skipped},
                   tables=[phi_table(f"mean max relative error at N={n}", rows, n, methods), gained],
                   notes=[NONFINITE_NOTE, "digits gained: log10(SGEMM's max relative error / the method's), "
                          "median over seeds"])


def time_scope(rows: Sequence[TimeRow]) -> str:
    """What was timed: sizes, formats and slice counts of the stored rows."""
    return (f"N = {spread([r.n for r in rows])}; format {', '.join(sorted({r.format for r in rows})) or 'none'}; "
            f"{spread([r.slices for r in rows], 'counts')} slices")


@experiment(TIME, "Ozaki scheme time against DGEMM and SGEMM by size, format and slice count (interleaved)")
def run_time(ctx: Context) -> Summary:
    plan = TIME_PLANS[(ctx.backend.name, ctx.quick)]
    outcome = run_timing(ctx, plan)
    rows = [r for r in time_rows(ctx.db, ctx.env_key) if r.n in plan.sizes and r.method in plan.configs()]
    n = max((r.n for r in rows), default=None)
    at_n = [r for r in rows if r.n == n]
    best = max(at_n, key=lambda r: r.speedup_vs_dgemm, default=None)
    return Summary(
        scope=time_scope(rows),
        facts={"configurations timed": outcome.measured, "already stored": outcome.skipped},
        tables=[Table(f"time at N={n}", ("configuration", "speed-up over DGEMM", "time relative to SGEMM",
                                         "timed by"),
                      [(r.method, r.speedup_vs_dgemm, r.slowdown_vs_sgemm, r.protocol) for r in at_n],
                      formats={"speed-up over DGEMM": ".3f", "time relative to SGEMM": ".2f"})],
        checks=[Check(f"an Ozaki configuration faster than DGEMM at N = {n}",
                      f"fastest {best.method}: {best.speedup_vs_dgemm:.3f}x DGEMM" if best else "nothing timed",
                      best.speedup_vs_dgemm > 1 if best else None)])


def measure_breakdown(be: Backend, n: int, fmt: str, slices: int, runs: int = BREAKDOWN_RUNS) -> Record:
    """Median seconds per phase over ``runs`` runs (after one warm-up) of one configuration at size ``n``."""
    A, B, _ = bench_inputs(be, n, TIME_PHI, SEED)
    base, remainder = ozaki.parse_variant(fmt)
    kw = {"slices": slices, "slice_format": base.name, "remainder": remainder, "backend": be,
          "out": be.xp.empty((n, n))}
    ozaki.matmul(A, B, **kw)
    samples: list[dict[str, float]] = []
    for _ in range(runs):
        phases: dict[str, float] = {}
        ozaki.matmul(A, B, phases=phases, **kw)
        samples.append(phases)
    median = {k: statistics.median(s[k] for s in samples) for k in PHASES}
    p = ozaki.plan(n, n, n, slices, base, remainder=remainder)
    return Record(sum(median.values()), "s", [sum(s.values()) for s in samples],
                  meta={**{f"{k}_s": v for k, v in median.items()}, "runs": runs, "plan": p.as_dict(),
                        "phases": samples})


@dataclass(frozen=True)
class BreakdownRow:
    """One stored breakdown: the total and the median seconds of each phase."""

    method: str
    n: int
    total_s: float
    split_s: float
    gemm_s: float
    sum_s: float

    @classmethod
    def read(cls, m: Measurement) -> BreakdownRow:
        return cls(m.method, m.params["n"], m.value, *(m.meta[f"{k}_s"] for k in PHASES))

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def seconds(self) -> dict[str, float]:
        """Median seconds per phase, by :data:`PHASES` name."""
        return {"split": self.split_s, "gemm": self.gemm_s, "sum": self.sum_s}

    def shares(self) -> str:
        """Shares of the total, ``split / GEMM / sum``."""
        return " / ".join(f"{part / self.total_s:.0%}" for part in self.seconds().values())


def breakdown_rows(db: ResultsDB, env_key: str) -> list[BreakdownRow]:
    """Every stored breakdown of one environment, by size and method."""
    return sorted((BreakdownRow.read(m) for m in db.measurements(BREAKDOWN, env_key=env_key)),
                  key=lambda r: (r.n, r.method))


@experiment(BREAKDOWN, "Seconds of the split, the GEMMs and the FP64 sum of the Ozaki scheme")
def run_breakdown(ctx: Context) -> Summary:
    sizes, configs = BREAKDOWN_PLANS[(ctx.backend.name, ctx.quick)]
    methods = [ozaki_method_name(f, s) for f, s in configs]

    def measure(params: Mapping[str, Any], missing: Sequence[str]) -> dict[str, Record]:
        return {m: measure_breakdown(ctx.backend, params["n"], *parse_ozaki_method(m)) for m in missing}

    outcome = sweep(ctx, BREAKDOWN, [{"n": n} for n in sizes], methods, measure, desc=BREAKDOWN)
    rows = [r for r in breakdown_rows(ctx.db, ctx.env_key) if r.n in sizes and r.method in methods]
    return Summary(
        scope=f"N = {spread([r.n for r in rows])}; {', '.join(r.method for r in rows if r.n == rows[0].n)}"
        if rows else "nothing measured",
        facts={"points measured": outcome.measured, "points already stored": outcome.skipped},
        tables=[Table("share of time (split / GEMM / sum)",
                      ("configuration", "N", "total (ms)", "split", "GEMM", "sum"),
                      [(r.method, r.n, 1e3 * r.total_s, *(f"{v / r.total_s:.0%}" for v in r.seconds().values()))
                       for r in rows], formats={"total (ms)": ".3g"})])


@experiment("ozaki-pareto", "Error on phi inputs and time of each format and slice count of the plan at one N")
def run_pareto(ctx: Context) -> Summary:
    plan = PARETO_PLANS[(ctx.backend.name, ctx.quick)]
    counts, rows = run_bench(ctx, plan)
    return pareto_summary(counts, rows, plan.phis)


def pareto_summary(counts: Mapping[str, Any], rows: Sequence[BenchRow], phis: Sequence[float]) -> Summary:
    """Time and error of every configuration at the largest size, and the verdict: is a
    configuration at least as accurate as DGEMM (phi = 1) also faster than it?"""
    n = max((r.n for r in rows), default=None)
    at_n = [r for r in rows if r.n == n]
    measured = [r for r in at_n if r.time_s]
    v = verdict(rows)
    formats = sorted({parse_ozaki_method(r.method)[0] for r in measured if parse_ozaki_method(r.method)})
    table = Table(f"error and time at N={n}", ("method", "time / DGEMM", "timed by",
                                               *(f"max rel. error, phi={p:g}" for p in phis)),
                  [(r.label, 1 / r.speedup_vs_dgemm if r.speedup_vs_dgemm else None, r.protocol,
                    *(r.max_rel.get(p) for p in phis)) for r in at_n],
                  formats={"time / DGEMM": ".3g", **{f"max rel. error, phi={p:g}": ".2e" for p in phis}})
    fastest = v.get("fastest_of_them")
    measured_text = (f"{fastest}: {v['its_speedup_vs_dgemm']:.3f}x DGEMM (as accurate: "
                     f"{', '.join(v['as_accurate_as_dgemm'])})" if fastest else v.get("note") or
                     "no configuration that ran (times predicted, not run, left out) is as accurate as DGEMM")
    return Summary(
        scope=f"N = {n}; format {', '.join(formats) or 'none'}; phi = {spread(list(phis), 'values')}",
        facts={k: val for k, val in counts.items() if not k.startswith("verdict")},
        tables=[table],
        checks=[Check("a configuration as accurate as DGEMM (phi = 1) and faster than DGEMM", measured_text,
                      v.get("target_met") if "target_met" in v else None)])
