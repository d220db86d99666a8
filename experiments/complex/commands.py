"""``gemmlab complex``: complex products (complex128) as called against ZGEMM at chosen sizes, methods and phi
values (resuming), printed as one row per size and method with its time, speed-up and componentwise errors, then
the verdict on the complex speed targets (:mod:`experiments.complex.report`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from accuracy.methods import parse_methods
from gpu.backend import get_backend

from ..audit.bench import usable_methods
from ..core.command import MEASURING, command, emit, measuring_run, ms, numbers, run_header, sizes, table, verdict_lines
from .bench import BENCH_DEFAULTS, FULL_ROWS_MAX, METHODS, PHIS, SAMPLED_ROWS, Plan, check_memory
from .report import FRONT_FLOOR, OZAKI2C_TARGET, STRASSEN_TARGET, TARGET_N, run_bench, verdict


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sizes", type=sizes, default=None,
                   help="N of the N x N x N complex products (default: 1024,4096,8192,16384 on GPU, 32,64 on CPU)")
    p.add_argument("--methods", default=None,
                   help="complex audit method names, comma-separated: zgemm-<3m|4m>-<real method>, "
                        "ozaki2c-<2m|3m|4m>-<moduli|auto>, zauto-<zgemm|dgemm|sgemm|bound> (zgemm, the baseline, is "
                        f"always added; default: {','.join(METHODS)})")
    p.add_argument("--phis", type=numbers(float, "phi values"), default=list(PHIS),
                   help="input spreads for the errors (default: 0.1,1,2,4; times are taken on phi = 1)")
    p.add_argument("--rows", type=int, default=None,
                   help=f"rows sampled for the errors (default: all up to N = {FULL_ROWS_MAX}, else {SAMPLED_ROWS})")
    p.add_argument("--slow-factor", type=float, default=3.0,
                   help="methods slower than this many ZGEMMs on one call are timed by that call (default: 3)")
    p.add_argument("--errors", action=argparse.BooleanOptionalAction, default=True, help="measure errors")
    p.add_argument("--timing", action=argparse.BooleanOptionalAction, default=True, help="measure times")


def plan_of(args: argparse.Namespace, backend: str) -> Plan:
    """The plan the arguments ask for, on the backend's defaults where none are given (an option given but empty
    is an error, never the default)."""
    base = BENCH_DEFAULTS[backend]
    chosen = base.sizes if args.sizes is None else tuple(args.sizes)
    methods = base.methods if args.methods is None else tuple(m.name for m in parse_methods(args.methods))
    return Plan(chosen, methods, tuple(args.phis), args.rows, args.slow_factor, args.errors, args.timing)


COLUMNS = [("n", "N", "d"), ("method", "method", ""), ("time_ms", "time (ms)", ""),
           ("speedup_vs_zgemm", "speed-up vs ZGEMM", ".3f"), ("protocol", "timed by", "")]


def _text(header: str, rows: list[dict[str, Any]], phis: tuple[float, ...], checks: list[dict[str, Any]]) -> str:
    cols = [*COLUMNS, *((f"max_comp_phi{p:g}", f"max_comp phi={p:g}", ".2e") for p in phis)]
    shown = [{**r, "time_ms": ms(r["time_s"])} for r in rows]
    lines = [header, table(shown, cols)]
    lines += verdict_lines(checks)
    return "\n".join(lines)


DESCRIPTION = ("Complex products (complex128) as called against ZGEMM: largest componentwise error per phi (each "
               "part against its own scale) and speed-up per size and method (resumes), judged on a GPU against the "
               f"targets: at N = {TARGET_N}, the fastest Ozaki II complex configuration as accurate as ZGEMM at "
               f"phi = 1 >= {OZAKI2C_TARGET:g}x and 3M over Strassen >= {STRASSEN_TARGET:g}x ZGEMM; the front door "
               f"at accuracy='zgemm' >= {FRONT_FLOOR:g}x ZGEMM at every N measured")


@command("complex", options=MEASURING, arguments=_arguments, description=DESCRIPTION)
def cmd_complex(args: argparse.Namespace, db_path: Path) -> int:
    """Measure (or resume) the plan, then print its rows and the verdict."""
    backend = get_backend(args.backend)
    plan = plan_of(args, backend.name)
    plan = plan.with_methods(usable_methods(backend, plan.methods))
    check_memory(backend, plan)
    with measuring_run(args, db_path, backend) as ctx:
        counts, rows = run_bench(ctx, plan)
        device = ctx.db.environment(ctx.env_key).get("device")
    shown = [r.as_dict() for r in rows]
    checks = [c.as_dict() for c in verdict(rows)]
    payload = {"backend": backend.name, "device": device, "env_key": ctx.env_key, "regime": args.regime,
               "summary": counts, "verdict": checks, "rows": shown}
    header = run_header(device, backend.name, args.regime, counts)
    emit(args, payload, lambda: _text(header, shown, plan.phis, checks))
    return 0
