"""The Strassen commands: ``gemmlab strassen`` (the speed-up sweep) and ``gemmlab schedule ...``."""

from __future__ import annotations

import argparse
from pathlib import Path

from gpu.backend import get_backend
from gpu.strassen import SCHEDULES, get_schedule
from gpu.strassen.hazards import plan
from gpu.strassen.liveness import analyze, protected

from ..core.command import MEASURING, command, emit, measuring_run, sizes, table
from ..core.database import ResultsDB
from ..core.environment import choose_env
from ..core.summary import Summary
from . import bench, targets
from .rows import EXPERIMENT, defaults_rows, speedup_table

STRASSEN_COLUMNS = (("size", "N", "d"), ("level", "L", "d"), ("method", "configuration", ""),
                    ("speedup", "speed-up", ".4f"), ("time_s", "time (s)", ".4e"), ("gemm_s", "GEMM (s)", ".4e"),
                    ("as_called_s", "as called (s)", ".4e"), ("ratio_as_called", "vs GEMM as called", ".4f"),
                    ("host_s", "host (s)", ".2e"), ("stable", "stable", ""))


def _strassen_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sizes", type=sizes, default=None, help="matrix sizes (default: the backend's sweep)")
    p.add_argument("--levels", type=sizes, default=None, help="Strassen levels (default: 1-4 on GPU)")
    p.add_argument("--configs", default=None,
                   help="configurations, comma-separated, e.g. rum+fused,winograd+fused+graph (default: every "
                        "one the backend runs; +graph: replayed as a CUDA graph)")
    p.add_argument("--stored", action="store_true",
                   help=f"measure nothing: judge the Strassen targets ({_targets_text()}) on the stored rows of "
                        "every regime: the best configuration per size with its SM clock and power, the best "
                        "zero-memory one beside it")


def _targets_text() -> str:
    """The targets of ``--stored`` in words, from :mod:`experiments.strassen.targets`."""
    regimes = dict.fromkeys(t.regime for t in targets.TARGETS)
    return "best speed-up over DGEMM: " + "; ".join(
        f"{regime} " + ", ".join(f">= {t.minimum:.2f}x at N = {t.size}" for t in targets.TARGETS if t.regime == regime)
        for regime in regimes) + f"; faster than DGEMM from N = {targets.CROSSOVER} or below"


def stored_env(db: ResultsDB, env: str | None, device: str | None, here: dict) -> str:
    """The environment whose Strassen rows to judge: ``env`` (a key), else the newest whose device name holds
    ``device``, else the newest of this device and backend."""
    envs = [(k, db.environment(k)) for k in db.env_keys() if db.measurements(EXPERIMENT, env_key=k)]
    return choose_env(envs, f"{EXPERIMENT} rows", db.path, env, device, here,
                      "Import a published CSV (gemmlab results import) or choose one with --env or --device")


def _emit_stored(args: argparse.Namespace, key: str, summary: Summary) -> int:
    payload = {"env_key": key, **summary.as_dict()}
    emit(args, payload, lambda: "\n".join([summary.scope, *summary.markdown()]))
    return 0


@command("strassen", options=(*MEASURING, "stored"), arguments=_strassen_arguments)
def cmd_strassen(args: argparse.Namespace, db_path: Path) -> int:
    backend = get_backend(args.backend)
    if args.stored:
        with ResultsDB(db_path, readonly=True) as db:
            key = stored_env(db, args.env, args.device, {} if args.env or args.device else backend.device_info())
            rows, defaults = speedup_table(db, key), defaults_rows(db, key)
        return _emit_stored(args, key, targets.judge(rows, defaults))
    names = None if args.configs is None else [c for c in args.configs.replace(",", " ").split()]
    sweep_plan = bench.custom_plan(backend, args.sizes, args.levels, names)
    with measuring_run(args, db_path, backend) as ctx:
        summary, rows = bench.run_plan(ctx, sweep_plan)
        sizes_run = {r.size for r in rows}
        rows += [r for r in defaults_rows(ctx.db, ctx.env_key, regime=ctx.regime) if r.size in sizes_run]
    shown = [r.as_dict() for r in rows]
    emit(args, {"backend": backend.name, "env_key": ctx.env_key, "summary": summary, "rows": shown},
         lambda: "\n".join(f"{k}: {v}" for k, v in summary.items()) + "\n" + table(shown, STRASSEN_COLUMNS))
    return 0


@command("schedule list")
def cmd_schedule_list(args: argparse.Namespace, db_path: Path) -> int:
    rows = [{"name": s.name, "steps": len(s.steps), "products": len(s.products),
             "temporaries": len(s.temporaries), "streams": len(s.streams), "support": s.support,
             "description": s.description} for s in SCHEDULES.values()]
    cols = (("name", "schedule", ""), ("steps", "steps", "d"), ("products", "products", "d"),
            ("temporaries", "temps", "d"), ("streams", "streams", "d"), ("description", "description", ""))
    emit(args, {"schedules": rows}, lambda: table(rows, cols))
    return 0


def _analyze_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("name")
    p.add_argument("--table", action="store_true", help="also print the full state table")


@command("schedule analyze", arguments=_analyze_arguments)
def cmd_schedule_analyze(args: argparse.Namespace, db_path: Path) -> int:
    report = analyze(get_schedule(args.name).name)
    payload = report.as_dict()
    payload["protected_copies"] = {str(lv): {str(i + 1): list(r) for i, r in protected(args.name, lv).items()}
                                   for lv in range(2, 5) if report.recursible and protected(args.name, lv)}

    def text() -> str:
        rows = [{"step": p.step, "text": p.step_text, "free": " ".join(p.free) or "-",
                 "support": p.support or "-"} for p in report.products]
        lines = [f"{args.name}: {'recursible' if report.recursible else 'NOT recursible'}",
                 table(rows, (("step", "step", "d"), ("text", "multiplication", ""),
                              ("free", "free spaces", ""), ("support", "support", "")))]
        lines += [f"blocks recursion: step {b.step}: {b.reason}" for b in report.blocking]
        for lv, steps in payload["protected_copies"].items():
            lines.append(f"at {lv} levels, copies operands before products " + ", ".join(
                f"{i} ({'/'.join(r)})" for i, r in steps.items()) + ": the level below overwrites them")
        if args.table:
            lines.append(" ".join(["row"] + [s.rjust(3) for s in report.spaces]))
            lines += [" ".join([str(i).rjust(3)] + [str(v).rjust(3) for v in row])
                      for i, row in enumerate(report.table)]
        return "\n".join(lines)

    emit(args, payload, text)
    return 0


def _streams_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("name")
    p.add_argument("--no-aliases", dest="aliased", action="store_false",
                   help="as the schedule runs below the top level (no level-1 aliases)")


@command("schedule streams", arguments=_streams_arguments)
def cmd_schedule_streams(args: argparse.Namespace, db_path: Path) -> int:
    result = plan(get_schedule(args.name).name, aliased=args.aliased)
    rows = [{"step": w.step, "stream": result.stream_of[w.step - 1], "after": w.after,
             "after_stream": result.stream_of[w.after - 1], "kinds": "+".join(w.kinds),
             "spaces": " ".join(w.spaces)} for w in result.waits]
    cols = (("step", "step", "d"), ("stream", "on stream", "d"), ("after", "waits for step", "d"),
            ("after_stream", "on stream", "d"), ("kinds", "hazard", ""), ("spaces", "spaces", ""))
    emit(args, result.as_dict(), lambda: (
        f"{args.name}: streams {list(result.streams)}, {len(result.waits)} event waits"
        + (f", stream 1 joins steps {list(result.join)}" if result.join else "") + "\n"
        + (table(rows, cols) if rows else "no cross-stream waits")))
    return 0
