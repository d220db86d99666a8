"""``gemmlab segmented``: the segmented launcher against the same kernel on whole arrays at chosen sizes N
(resuming), printed as one row per size and method, with the largest N of each decomposition here."""

from __future__ import annotations

import argparse
from pathlib import Path

from gpu.backend import get_backend

from ..core.command import MEASURING, command, emit_sweep, measuring_run, numbers
from .bench import limits_now, run_points
from .points import DTYPE, SEGMENTS, custom_points, fitting_points

COLUMNS = (("n", "N", "d"), ("m", "M", "d"), ("method", "method", ""), ("time_s", "seconds", ".4g"),
           ("tflops", "TFLOP/s", ".3f"), ("over_whole", "vs whole", ".3f"), ("executor", "executor", ""))


def _segmented_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--n", type=numbers(int, "sizes N"), default=None,
                   help="sizes N, multiples of 32, e.g. 4096,8192 (default: the backend's sweep; on GPU 4096 to 16384)")
    p.add_argument("--m", type=int, default=SEGMENTS,
                   help=f"segments of the 1-D and 2-D runs, a perfect square (default {SEGMENTS})")
    p.add_argument("--dtype", choices=("float32", "float64"), default=DTYPE,
                   help=f"element type (default {DTYPE}, the paper's)")


def _limits_text(limits: dict) -> dict[str, str]:
    return {f"largest N ({dtype})": f"unsplit {x['unsplit']}, 1-D {x['1d']} (M = {x['1d_m']}), "
                                    f"2-D {x['2d']} (host-bound, M >= {x['2d_m']})" for dtype, x in limits.items()}


@command("segmented", options=MEASURING, arguments=_segmented_arguments)
def cmd_segmented(args: argparse.Namespace, db_path: Path) -> int:
    backend = get_backend(args.backend)
    points, skipped = fitting_points(backend, custom_points(backend, args.n, args.m, args.dtype))
    with measuring_run(args, db_path, backend) as ctx:
        counts, rows = run_points(ctx, points, skipped)
    limits, _ = limits_now(backend)
    emit_sweep(args, backend.name, ctx.env_key, {**counts, **_limits_text(limits)}, rows, [], COLUMNS)
    return 0
