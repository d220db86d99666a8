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

from ..audit.bench import AuditRow, run_audit, summarize
from ..core.database import Measurement, ResultsDB
from ..core.registry import Context, experiment
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
from .table import run_bench
from .timing import run_timing, time_rows

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
def run_accuracy(ctx: Context) -> dict[str, Any]:
    outcome, rows = run_audit(ctx, paper_methods(), ACCURACY_PLANS[(ctx.backend.name, ctx.quick)])
    n = max((r.n for r in rows), default=None)
    gains = digits_gained(rows)
    summary: dict[str, Any] = {"points measured": outcome.measured, "points already stored": outcome.skipped}
    for s in summarize(rows):
        if s.n == n:
            summary.setdefault(f"mean max relative error at N={n}", {})[
                f"{s.method} phi={s.phi:g}"] = f"{s.mean_max_rel:.3e}" if s.mean_max_rel else "n/a"
    for (size, phi), by_method in sorted(gains.items()):
        if size == n:
            summary[f"digits gained over SGEMM at N={n}, phi={phi:g}"] = {
                m: f"{g:.1f}" for m, g in by_method.items()}
    return summary


@experiment(TIME, "Ozaki scheme time against DGEMM and SGEMM, N = 128-4096, every format (interleaved)")
def run_time(ctx: Context) -> dict[str, Any]:
    plan = TIME_PLANS[(ctx.backend.name, ctx.quick)]
    outcome = run_timing(ctx, plan)
    rows = [r for r in time_rows(ctx.db, ctx.env_key) if r.n in plan.sizes and r.method in plan.configs()]
    n = max(plan.sizes)
    return {"configurations timed": outcome.measured, "already stored": outcome.skipped,
            f"speed-up over DGEMM at N={n}": {r.method: f"{r.speedup_vs_dgemm:.3f}" for r in rows if r.n == n},
            f"time relative to SGEMM at N={n}": {r.method: f"{r.slowdown_vs_sgemm:.2f}" for r in rows
                                                 if r.n == n}}


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
def run_breakdown(ctx: Context) -> dict[str, Any]:
    sizes, configs = BREAKDOWN_PLANS[(ctx.backend.name, ctx.quick)]
    methods = [ozaki_method_name(f, s) for f, s in configs]

    def measure(params: Mapping[str, Any], missing: Sequence[str]) -> dict[str, Record]:
        return {m: measure_breakdown(ctx.backend, params["n"], *parse_ozaki_method(m)) for m in missing}

    outcome = sweep(ctx, BREAKDOWN, [{"n": n} for n in sizes], methods, measure, desc=BREAKDOWN)
    rows = [r for r in breakdown_rows(ctx.db, ctx.env_key) if r.n in sizes and r.method in methods]
    return {"points measured": outcome.measured, "points already stored": outcome.skipped,
            "share of time (split / GEMM / sum)": {f"{r.method} N={r.n}": r.shares() for r in rows}}


@experiment("ozaki-pareto", "Error (phi = 0.1, 1, 2) and time of every format and slice count at one N")
def run_pareto(ctx: Context) -> dict[str, Any]:
    return run_bench(ctx, PARETO_PLANS[(ctx.backend.name, ctx.quick)])[0]
