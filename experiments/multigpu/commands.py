"""``gemmlab multigpu``: products across 1, 2 and 4 workers of a Dask cluster at chosen sizes (resuming), one shot
and steady, for host operands and device-resident dask arrays, printed as one row per point and mode."""

from __future__ import annotations

import argparse
from pathlib import Path

from gpu.backend import get_backend

from ..core.command import MEASURING, command, emit_sweep, measuring_run, numbers
from .bench import run_points
from .points import KINDS, LOCKS, OUTPUTS, PLANS, PROTOCOLS, Plan, fitting, protocol
from .report import checks

COLUMNS = (("n", "N", "d"), ("kind", "operands", ""), ("workers", "workers", "d"), ("method", "mode", ""),
           ("time_s", "seconds", ".4g"), ("check_error", "sampled rows' error", ".2e"))


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sizes", type=numbers(int, "sizes N"), default=None,
                   help="sizes N (default: 65536 on GPUs, 512 on CPU workers)")
    p.add_argument("--workers", type=numbers(int, "worker counts"), default=None,
                   help="worker counts, one GPU each (default 1,2,4; counts above this machine's GPUs are left out)")
    p.add_argument("--kinds", default=",".join(KINDS),
                   help="where the operands are: host (NumPy in the client), resident (dask arrays on the workers)")
    p.add_argument("--protocol", choices=PROTOCOLS, default="auto",
                   help="how the workers talk: tcp, or ucx (distributed-ucxx: CUDA IPC between GPUs of one host); "
                        "auto takes ucx on GPU workers where distributed-ucxx is installed")
    p.add_argument("--lock-pages", default="stream",
                   help="how the workers page-lock host operands (lock_pages of gpu.multigpu.dask_matmul.matmul), "
                        f"some of {','.join(LOCKS)}: stream (the default) streams A and B through a pinned ring and "
                        "locks C's pieces beside the products, ahead locks every operand's pieces so, true locks "
                        "each range whole first; several are measured side by side")
    p.add_argument("--outputs", default="new",
                   help=f"C's file at each one shot, some of {','.join(OUTPUTS)}: new (its pages first touched by the "
                        "product) or filled (written before, as an existing output's are)")


def _listed(text: str) -> tuple[str, ...]:
    """A comma-separated option's names (an empty one is refused by :class:`Plan`)."""
    return tuple(k.strip() for k in text.split(",") if k.strip())


@command("multigpu", options=MEASURING, arguments=_arguments)
def cmd_multigpu(args: argparse.Namespace, db_path: Path) -> int:
    backend = get_backend(args.backend)
    default = PLANS[(backend.name, False)]
    plan = Plan(tuple(args.sizes or default.sizes), tuple(args.workers or default.workers),
                _listed(args.kinds), protocol(backend, args.protocol), _listed(args.lock_pages), _listed(args.outputs))
    points, left_out = fitting(backend, plan)
    with measuring_run(args, db_path, backend) as ctx:
        counts, rows = run_points(ctx, points, left_out)
    emit_sweep(args, backend.name, ctx.env_key, counts, rows, checks(rows), COLUMNS)
    return 0
