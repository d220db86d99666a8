"""Scheme II's experiments for ``gemmlab reproduce``: ``ozaki2-pareto`` (error and time of every method
against DGEMM, and the verdict on its speed-up targets) and ``ozaki2-breakdown`` (seconds per phase);
see :mod:`experiments.ozaki2.bench` for what each measures."""

from __future__ import annotations

from ..audit.bench import usable_methods
from ..core.registry import Context, experiment
from ..core.summary import Summary, Table, spread
from .bench import BREAKDOWN, BREAKDOWN_PLANS, PARETO, PARETO_PLANS, check_memory, shape_text
from .breakdown import PHASES, breakdown_rows, rate_text, run_breakdown
from .table import pareto_summary, run_bench


@experiment(PARETO, "Ozaki scheme II against DGEMM, SGEMM, scheme I and cuBLAS's emulation: max relative error on "
                    "phi inputs and speed-up over DGEMM per product, judged against the speed-up targets")
def run_pareto(ctx: Context) -> Summary:
    """The plan of the backend and size of run, its methods that can run there; the summary with the verdict."""
    base = PARETO_PLANS[(ctx.backend.name, ctx.quick)]
    plan = base.with_methods(usable_methods(ctx.backend, base.methods))
    check_memory(ctx.backend, plan)
    counts, rows = run_bench(ctx, plan)
    return pareto_summary(counts, rows, plan, ctx.regime)


@experiment(BREAKDOWN, "Seconds of scheme II's phases (scaling, residues, INT8 GEMMs, reduction, CRT) and the INT8 "
                       "GEMM rate they imply")
def run_phases(ctx: Context) -> Summary:
    """Phases of the plan's configurations at its products; the share of each and the INT8 rate."""
    shapes, configs = BREAKDOWN_PLANS[(ctx.backend.name, ctx.quick)]
    outcome = run_breakdown(ctx, shapes, configs)
    rows = [r for r in breakdown_rows(ctx.db, ctx.env_key, ctx.regime) if r.shape in shapes and r.method in configs]
    phases = [p for p in PHASES if any(p in r.seconds for r in rows)]
    table = Table("share of time per phase", ("configuration", "product", "total (ms)", *phases, "INT8 GEMM rate"),
                  [(r.method, shape_text(r.shape), 1e3 * r.total_s,
                    *(f"{r.shares().get(p, 0.0):.0%}" for p in phases), rate_text(r.int8_ops_per_s)) for r in rows],
                  formats={"total (ms)": ".3g"})
    return Summary(
        scope=(f"{', '.join(shape_text(s) for s in shapes)}; {', '.join(configs)}; regime {ctx.regime}"
               if rows else "nothing measured"),
        facts={"points measured": outcome.measured, "points already stored": outcome.skipped,
               "configurations": spread(list(configs), "configurations")},
        tables=[table],
        notes=["median of runs, each phase synchronized; INT8 GEMM rate: 2 m n k per modulus over the GEMM phase's "
               "seconds (accurate scaling's bound GEMM is part of the scaling phase)"])
