"""The lab-wide commands: ``info``, ``kernels``, ``figures`` and ``reproduce`` (the results database's own commands
are in :mod:`experiments.core.results`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from gpu.backend import cutlass_int8, get_backend
from gpu.backend.telemetry import reason_names

from . import reproduce
from .command import MEASURING, command, emit, measuring_run
from .database import ResultsDB
from .environment import env_key, environment

DEFAULT_FIGURES = Path("paper_figs")


@command("info", options=("common", "backend"))
def cmd_info(args: argparse.Namespace, db_path: Path) -> int:
    backend = get_backend(args.backend)
    env = environment(backend)
    now = backend.telemetry().read().as_dict() if backend.telemetry() is not None else None
    payload = {"backend": backend.name, "env_key": env_key(env), "environment": env, "telemetry": now}
    emit(args, payload, lambda: "\n".join(
        [f"{'env_key':>18}: {payload['env_key']}"] + [f"{k:>18}: {v}" for k, v in env.items()]
        + ([f"{'now':>18}: SM {now['sm_mhz']} MHz, {now['power_w']:.0f} W, throttle reasons "
            f"{', '.join(reason_names(now['reasons'])) or 'none'}"] if now else [])))
    return 0


def _kernels_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--build", action="store_true",
                   help="compile the kernel of every compute capability that has one chosen (about a minute each)")
    p.add_argument("--nvcc", default=None, metavar="PATH", help="the nvcc to build with (default: nvcc on PATH)")
    p.add_argument("--cutlass", default=None, metavar="DIR",
                   help="a CUTLASS checkout (default: $CUTLASS_PATH, else the nvidia-cutlass package's headers)")


@command("kernels", arguments=_kernels_arguments)
def cmd_kernels(args: argparse.Namespace, db_path: Path) -> int:
    built = [str(cutlass_int8.build(cc, nvcc=args.nvcc, cutlass=args.cutlass))
             for cc in cutlass_int8.KERNELS] if args.build else []
    payload = {**cutlass_int8.status(nvcc=args.nvcc, cutlass=args.cutlass), "built_now": built}
    emit(args, payload, lambda: "\n".join(
        [f"kernel folder: {payload['kernel_dir']} (GEMMLAB_KERNEL_DIR)",
         f"nvcc: {payload['nvcc'] or 'not found'}",
         f"CUTLASS headers: {', '.join(payload['cutlass_headers']) or 'not found (pip install nvidia-cutlass)'}"]
        + [f"compute capability {cc}: {k['kernel']} from k = {k['min_k']}, "
           f"{'built' if k['built'] else 'not built (gemmlab kernels --build)'}: {k['library']}"
           for cc, k in payload["kernels"].items()]))
    return 0


def _paths(figures: dict[str, list[Path]]) -> dict[str, list[str]]:
    return {name: [str(p) for p in paths] for name, paths in figures.items()}


def _figures_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, default=DEFAULT_FIGURES, help="output folder (default: paper_figs)")


@command("figures", arguments=_figures_arguments)
def cmd_figures(args: argparse.Namespace, db_path: Path) -> int:
    with ResultsDB(db_path, readonly=True) as db:
        figures = reproduce.render_figures(db, args.out)
    emit(args, {"figures": _paths(figures)}, lambda: "\n".join(
        f"{name}: {', '.join(map(str, paths))}" for name, paths in figures.items())
        or f"no stored results to draw in {db_path}")
    return 0


def _reproduce_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quick", action="store_true", help="small sweeps (minutes on a CPU)")
    p.add_argument("--only", nargs="+", default=None, metavar="EXPERIMENT", help="run only these")
    p.add_argument("--papers", action="store_true", help="measure nothing: draw each seed paper's published "
                   "numbers beside the committed results/published measurements into OUT/papers (no GPU, no database)")
    _figures_arguments(p)


@command("reproduce", options=MEASURING, arguments=_reproduce_arguments)
def cmd_reproduce(args: argparse.Namespace, db_path: Path) -> int:
    if args.papers:
        from ..papers import reproduce_papers  # matplotlib and the exports only when asked for
        return reproduce_papers(args)
    backend = get_backend(args.backend)
    selected = reproduce.select(args.only)
    with measuring_run(args, db_path, backend) as ctx:
        summaries = reproduce.run_experiments(ctx, selected)
        env = ctx.db.environment(ctx.env_key)
    with ResultsDB(db_path) as db:
        figures = reproduce.render_figures(db, args.out)
        summary = reproduce.write_summary(args.out, args.command_line, db, env, summaries, figures)
    payload = {"backend": backend.name, "env_key": ctx.env_key,
               "experiments": {name: s.as_dict() for name, s in summaries.items()},
               "figures": _paths(figures), "summary": str(summary)}
    emit(args, payload, lambda: summary.read_text())
    return 0
