"""``gemmlab splitk``: split-K against the library GEMM and a device copy at chosen m = n and k
(resuming), printed as one row per point and method."""

from __future__ import annotations

import argparse
from pathlib import Path

from gpu.backend import get_backend
from gpu.splitk import MIN_K

from ..core.command import MEASURING, command, emit_sweep, measuring_run, ms, numbers
from .bench import run_points
from .points import custom_plan, fitting_points
from .report import checks

COLUMNS = (("m", "m = n", "d"), ("k", "k", "d"), ("method", "method", ""), ("time_ms", "time (ms)", ""),
           ("gbs", "GB/s", ".1f"), ("roofline_pct", "% copy bw", ".1f"), ("speedup", "vs GEMM", ".3f"),
           ("as_called_ms", "as called (ms)", ""), ("host_us", "host (us)", ".1f"),
           ("ratio_as_called", "vs GEMM as called", ".3f"), ("chunks", "chunks", "d"), ("width", "width", "d"),
           ("stable", "stable", ""))


def _splitk_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--m", type=numbers(int, "output sizes m"), default=None,
                   help="output sizes m = n, e.g. 16,32,64 (default: the backend's sweep; on GPU 8-128, with "
                        "17 and 50)")
    p.add_argument("--k", type=numbers(int, "inner dimensions k"), default=None,
                   help=f"inner dimensions k, integers of at least {MIN_K}, e.g. 1048576,16777216 (default: "
                        "the backend's sweep; on GPU 2^14 to 2^24, with 10^6 + 3 where neither option is given)")


@command("splitk", options=MEASURING, arguments=_splitk_arguments)
def cmd_splitk(args: argparse.Namespace, db_path: Path) -> int:
    backend = get_backend(args.backend)
    points, skipped = fitting_points(backend, custom_plan(backend, args.m, args.k))
    with measuring_run(args, db_path, backend) as ctx:
        counts, rows = run_points(ctx, points, skipped)
    emit_sweep(args, backend.name, ctx.env_key, counts, rows, checks(rows), COLUMNS,
               lambda r: {**r, "time_ms": ms(r["time_s"]), "roofline_pct": 100 * r["roofline"],
                          "as_called_ms": ms(r["as_called_s"]), "host_us": r["host_s"] and 1e6 * r["host_s"]})
    return 0
