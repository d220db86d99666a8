"""``gemmlab outofcore``: the out-of-core engine against the in-core DGEMM at chosen sizes N
(resuming), printed as one row per size and method."""

from __future__ import annotations

import argparse
from pathlib import Path

from gpu.backend import get_backend

from ..core.command import MEASURING, command, emit_sweep, measuring_run, numbers
from .bench import run_points
from .points import custom_sizes, fitting_points
from .report import checks

COLUMNS = (("n", "N", "d"), ("method", "method", ""), ("time_s", "seconds", ".4g"), ("tflops", "TFLOP/s", ".3f"),
           ("vs_dgemm", "vs dgemm", ".3f"), ("vs_gemm", "vs gemm", ".3f"), ("block", "block", ""),
           ("panel", "panel", "d"), ("as_called_s", "as called (s)", ".4g"),
           ("ratio_as_called", "vs baseline as called", ".3f"))


def _outofcore_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--n", type=numbers(int, "sizes N"), default=None,
                   help="sizes N of the square FP64 products, e.g. 8192,16384 (default: the backend's sweep; "
                        "on GPU 8192 to 65536)")


@command("outofcore", options=MEASURING, arguments=_outofcore_arguments)
def cmd_outofcore(args: argparse.Namespace, db_path: Path) -> int:
    backend = get_backend(args.backend)
    points, skipped = fitting_points(backend, custom_sizes(backend, args.n))
    with measuring_run(args, db_path, backend) as ctx:
        counts, rows = run_points(ctx, points, skipped)
    emit_sweep(args, backend.name, ctx.env_key, counts, rows, checks(rows), COLUMNS,
               lambda r: {**r, "block": "x".join(map(str, r["block"])) if r["block"] else None})
    return 0
