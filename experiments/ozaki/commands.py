"""``gemmlab ozaki``: the Ozaki benchmark at chosen sizes, formats and slice counts (resuming),
printed as one row per size and method with its time, ratios and errors."""

from __future__ import annotations

import argparse
from pathlib import Path

from accuracy.methods import OZAKI_VARIANTS
from gpu.backend import get_backend

from ..core.command import MEASURING, command, counts, emit, measuring_run, ms, numbers, sizes, table
from .bench import BENCH_DEFAULTS, FULL_ROWS_MAX, GPU_FORMATS, PHIS, SAMPLED_ROWS, BenchPlan, check_sizes
from .table import run_bench


def _ozaki_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sizes", type=sizes, default=None,
                   help="N of the N x N x N products (default: 4096,8192,16384 on GPU, 256,512 on CPU)")
    p.add_argument("--formats", default=None,
                   help=f"slice formats, comma-separated: {','.join(OZAKI_VARIANTS)} (r: the "
                        f"paper's rounded tails; default: {','.join(GPU_FORMATS)} on GPU, "
                        "fp32r,fp32 on CPU, where the others are emulated)")
    p.add_argument("--slices", type=counts, default=None, help="slice counts, e.g. 2-9 or 2,4,6 (default: 2-10 "
                                                                 "on GPU, 2-6 on CPU)")
    p.add_argument("--phi", type=numbers(float, "phi values"), default=list(PHIS),
                   help="input spreads for the errors (default: 0.1,1,2)")
    p.add_argument("--rows", type=int, default=None,
                   help=f"rows sampled for the errors (default: all up to N={FULL_ROWS_MAX}, else {SAMPLED_ROWS})")
    p.add_argument("--slow-factor", type=float, default=3.0,
                   help="configurations slower than this many DGEMMs are timed by one run (default: 3)")
    p.add_argument("--max-ratio", type=float, default=25.0,
                   help="do not run configurations predicted slower than this many DGEMMs (from the previous "
                        "slice count); they are stored as predicted (default: 25; 0: run everything)")
    p.add_argument("--errors", action=argparse.BooleanOptionalAction, default=True, help="measure errors")
    p.add_argument("--timing", action=argparse.BooleanOptionalAction, default=True, help="measure times")


@command("ozaki", options=MEASURING, arguments=_ozaki_arguments)
def cmd_ozaki(args: argparse.Namespace, db_path: Path) -> int:
    backend = get_backend(args.backend)
    base = BENCH_DEFAULTS[backend.name]
    # an option given but empty is an error (BenchPlan's checks), never the default
    formats = base.formats if args.formats is None else tuple(args.formats.replace(",", " ").split())
    if not formats:
        raise ValueError("--formats is empty; name formats such as fp32r,fp16 or leave it out for the default")
    plan = BenchPlan(base.sizes if args.sizes is None else tuple(args.sizes), formats,
                     base.slices if args.slices is None else tuple(args.slices), tuple(args.phi), args.rows,
                     args.slow_factor, args.max_ratio or None, args.errors, args.timing)
    check_sizes(backend, plan)
    with measuring_run(args, db_path, backend) as ctx:
        summary, rows = run_bench(ctx, plan)
        device = ctx.db.environment(ctx.env_key).get("device")
    shown = [r.as_dict() for r in rows]
    payload = {"backend": backend.name, "device": device, "env_key": ctx.env_key, "summary": summary, "rows": shown}
    cols = [("n", "N", "d"), ("label", "method", ""), ("time_s", "time (ms)", ""),
            ("speedup_vs_dgemm", "speed-up vs DGEMM", ".3f"), ("slowdown_vs_sgemm", "x SGEMM time", ".2f")]
    cols += [(f"max_rel_phi{phi:g}", f"max_rel phi={phi:g}", ".2e") for phi in plan.phis]
    cols += [("protocol", "timing", "")]
    emit(args, payload, lambda: (f"{device} ({backend.name}): " + "; ".join(
        f"{k}: {v}" for k, v in summary.items()) + "\n" + table([{**r, "time_s": ms(r["time_s"])} for r in shown],
                                                                cols)))
    return 0
