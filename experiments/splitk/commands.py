"""``gemmlab splitk``: split-K against the library GEMM and a device copy at chosen m = n and k
(resuming), printed as one row per point and method."""

from __future__ import annotations

import argparse
from pathlib import Path

from gpu.backend import get_backend
from gpu.splitk import MIN_K

from ..core.command import MEASURING, command, emit, measuring_run, ms, numbers, table
from .bench import run_points
from .points import custom_plan, fitting_points
from .report import checks

COLUMNS = (("m", "m = n", "d"), ("k", "k", "d"), ("method", "method", ""), ("time_ms", "time (ms)", ""),
           ("gbs", "GB/s", ".1f"), ("roofline_pct", "% copy bw", ".1f"), ("speedup", "vs GEMM", ".3f"),
           ("chunks", "chunks", "d"), ("width", "width", "d"), ("stable", "stable", ""))


def _splitk_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--m", type=numbers(int, "output sizes m"), default=None,
                   help="output sizes m = n, e.g. 16,32,64 (default: the backend's sweep; on GPU 8-128, with "
                        "17 and 50)")
    p.add_argument("--k", type=numbers(int, "inner dimensions k"), default=None,
                   help=f"inner dimensions k, integers of at least {MIN_K}, e.g. 1048576,16777216 (default: "
                        "the backend's sweep; on GPU 2^14 to 2^24, with 10^6 + 3 where neither option is given)")


@command("splitk", "split-K against the library GEMM and a device copy, by output size m = n and inner "
                   "dimension k (resumes)", options=MEASURING, arguments=_splitk_arguments)
def cmd_splitk(args: argparse.Namespace, db_path: Path) -> int:
    backend = get_backend(args.backend)
    points, skipped = fitting_points(backend, custom_plan(backend, args.m, args.k))
    with measuring_run(args, db_path, backend) as ctx:
        counts, rows = run_points(ctx, points, skipped)
    shown = [r.as_dict() for r in rows]
    verdict = [c.as_dict() for c in checks(rows)]
    emit(args, {"backend": backend.name, "env_key": ctx.env_key, "summary": counts, "verdict": verdict,
                "rows": shown},
         lambda: "\n".join([*(f"{key}: {value}" for key, value in counts.items()),
                            table([{**r, "time_ms": ms(r["time_s"]), "roofline_pct": 100 * r["roofline"]}
                                   for r in shown], COLUMNS),
                            *(f"{c['target']}: {c['measured']} ({'not judged' if c['met'] is None else c['met']})"
                              for c in verdict)]))
    return 0
