"""``gemmlab ozaki2``: Ozaki scheme II against DGEMM at chosen products, methods and phi values (resuming),
printed as one row per product and method with its time, speed-up and errors, then the verdict on
its speed-up targets (:data:`experiments.ozaki2.bench.TARGETS`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from accuracy.methods import parse_methods
from gpu.backend import get_backend

from ..audit.bench import usable_methods
from ..audit.commands import shapes
from ..core.command import MEASURING, command, emit, measuring_run, ms, numbers, run_header, sizes, table, verdict_lines
from ..ozaki.bench import FULL_ROWS_MAX, SAMPLED_ROWS
from .bench import BENCH_DEFAULTS, PHIS, TARGETS, Plan, check_memory, squares
from .table import VERDICT_PHI, best_scheme2, run_bench, verdict


def _ozaki2_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sizes", type=sizes, default=None,
                   help="N of the N x N x N products (default: 4096,8192,16384 on GPU, 64,128 on CPU; with "
                        "--shapes alone, none)")
    p.add_argument("--shapes", type=shapes, default=None, metavar="M:K:N[,M:K:N...]",
                   help="rectangular products, A M x K and B K x N; a dimension may be a power B^E (default: "
                        "1024:2^18:1024 on GPU, k beyond one INT8 GEMM's 2^17 - 1; none on CPU; with --sizes "
                        "alone, none)")
    p.add_argument("--methods", default=None,
                   help="audit method names, comma-separated: fp64, fp32, ozaki-int8-<slices>, "
                        "ozaki2-<accurate|fast>-<moduli>, cublas-emul-<bits|auto>, ... (fp64, the baseline, is "
                        "always added; default on GPU: fp64,fp32,ozaki-int8-8..12,ozaki2-{accurate,fast}-8..20,"
                        "ozaki2-fast-14..16-w1,ozaki2-fast-15-w2,cublas-emul-31,39,47,55,63,auto; on CPU a few of "
                        "each, no emulation)")
    p.add_argument("--phi", type=numbers(float, "phi values"), default=list(PHIS),
                   help="input spreads for the errors (default: 0.1,1,2,4; times are taken on phi = 1)")
    p.add_argument("--rows", type=int, default=None,
                   help=f"rows sampled for the errors (default: all up to M={FULL_ROWS_MAX}, else {SAMPLED_ROWS})")
    p.add_argument("--slow-factor", type=float, default=3.0,
                   help="methods slower than this many DGEMMs are timed by one run (default: 3)")
    p.add_argument("--errors", action=argparse.BooleanOptionalAction, default=True, help="measure errors")
    p.add_argument("--timing", action=argparse.BooleanOptionalAction, default=True, help="measure times")


def plan_of(args: argparse.Namespace, backend: str) -> Plan:
    """The plan the arguments ask for, on the backend's defaults where none are given (an option
    given but empty is an error, never the default)."""
    base = BENCH_DEFAULTS[backend]
    if args.sizes is None and args.shapes is None:
        products = base.shapes
    else:
        products = (*squares(*(args.sizes or ())), *(args.shapes or ()))
    methods = base.methods if args.methods is None else tuple(m.name for m in parse_methods(args.methods))
    return Plan(products, methods, tuple(args.phi), args.rows, args.slow_factor, args.errors, args.timing)


COLUMNS = [("shape", "product", ""), ("label", "method", ""), ("time_ms", "time (ms)", ""),
           ("speedup_vs_dgemm", "speed-up vs DGEMM", ".3f"), ("as_called_ms", "as called (ms)", ""),
           ("ratio_as_called", "vs DGEMM as called", ".3f")]


def _text(header: str, rows: list[dict[str, Any]], phis: tuple[float, ...], checks: list[dict[str, Any]]) -> str:
    cols = [*COLUMNS, *((f"max_rel_phi{p:g}", f"max_rel phi={p:g}", ".2e") for p in phis), ("protocol", "timing", "")]
    shown = [{**r, "time_ms": ms(r["time_s"]), "as_called_ms": ms(r["as_called_s"]),
              "protocol": f"{r['protocol']}, unstable batch" if r["stable"] is False and r["protocol"] == "interleaved"
              else r["protocol"]} for r in rows]
    lines = [header, table(shown, cols)]
    lines += verdict_lines(checks)
    return "\n".join(lines)


#: What ``gemmlab ozaki2 --help`` says above its options; the targets come from :data:`TARGETS`.
DESCRIPTION = (f"Ozaki scheme II against DGEMM: max relative error per phi and speed-up per product and method "
               f"(resumes), judged against the targets: at phi = {VERDICT_PHI:g}, the fastest scheme II "
               "configuration as accurate as DGEMM runs at " + ", ".join(
                   f">= {goal:g}x DGEMM at N = {n}" for n, goal in sorted(TARGETS.items(), reverse=True)))


@command("ozaki2", options=MEASURING, arguments=_ozaki2_arguments, description=DESCRIPTION)
def cmd_ozaki2(args: argparse.Namespace, db_path: Path) -> int:
    """Measure (or resume) the plan, then print its rows, the fastest accurate scheme II per product and the verdict."""
    backend = get_backend(args.backend)
    plan = plan_of(args, backend.name)
    plan = plan.with_methods(usable_methods(backend, plan.methods))
    check_memory(backend, plan)
    with measuring_run(args, db_path, backend) as ctx:
        counts, rows = run_bench(ctx, plan)
        device = ctx.db.environment(ctx.env_key).get("device")
    shown = [r.as_dict() for r in rows]
    checks = [c.as_dict() for c in verdict(rows)]
    best = [best_scheme2(rows, s) for s in plan.shapes]
    payload = {"backend": backend.name, "device": device, "env_key": ctx.env_key, "regime": args.regime,
               "summary": counts, "best": best, "verdict": checks, "rows": shown}
    header = "\n".join([run_header(device, backend.name, args.regime, counts),
                        *(f"{b['shape']}: fastest scheme II as accurate as DGEMM (phi = 1): "
                          f"{b.get('best') or b.get('note') or 'none'}"
                          + (f" at {b['best_speedup_vs_dgemm']:.3f}x DGEMM" if b.get("best") else "")
                          + (f", {b['best_ratio_as_called']:.3f}x as called" if b.get("best_ratio_as_called") else "")
                          for b in best)])
    emit(args, payload, lambda: _text(header, shown, plan.phis, checks))
    return 0

