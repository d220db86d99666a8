"""The level-prediction commands: ``calibrate``, ``fit``, ``predict`` and ``levels``."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gpu.backend import Backend, get_backend
from gpu.outofcore import rates as outofcore_rates
from gpu.profile import device_name
from gpu.strassen import Config
from modeling import fits, hardware

from ..core import reproduce
from ..core.command import MEASURING, byte_size, command, emit, measuring_run, sizes, table
from ..core.database import ResultsDB
from ..core.registry import FIGURES, load
from ..core.summary import markdown_table
from ..frontdoor import calibrate as methods_calibration
from ..frontdoor.commands import shape
from ..frontdoor.methods import add_methods
from . import calibration, configurations, estimate, models, transfer_tables, validation
from .answer import answer_lines, speedup_line
from .auto import AUTO_KEY, AutoJudgement, judge_auto, with_judgement
from .experiments import validation_summary
from .predict import Source, fit_report, predict
from .profile import update_profile, write_profile

CALIBRATION_COLUMNS = (("size", "N", "d"), ("gemm_s", "Gemm (s)", ".4e"), ("tflops", "TFLOP/s", ".3f"),
                       ("geam_s", "Geam (s)", ".4e"), ("gbs", "GB/s", ".1f"), ("samples", "samples", "d"),
                       ("stable", "stable", ""))


def _calibrate_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sizes", type=sizes, default=None,
                   help="matrix sizes, comma- or space-separated (default: sized for the backend)")
    p.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    p.add_argument("--quick", action="store_true", help="the short default sweep")
    p.add_argument("--context", action="store_true",
                   help="time the calls as one Strassen level issues them: back to back on N x N quadrant "
                        "views of 2N x 2N operands (curves for the recursive predictor's inner calls)")
    p.add_argument("--transfer", action="store_true",
                   help="instead, measure the out-of-core engine's rates (pinned copies each way, a device copy, "
                        "a GEMM) and keep them in the device profile, where gpu.outofcore.matmul sizes its "
                        "blocks and panels by them")
    p.add_argument("--configurations", action="store_true",
                   help="instead, time the Strassen configurations a default strassen.matmul call may choose, as "
                        "called, beside DGEMM at each size (default sizes 2048-49152 on a GPU; the estimated time "
                        "is printed first), and write the device profile's configurations section")
    p.add_argument("--candidates", type=lambda text: [c for c in text.split(",") if c.strip()], default=None,
                   metavar="NAMES",
                   help="with --configurations: the configurations to time, comma-separated, such as "
                        "L3:winograd+flat+graph,L4:lai7/winograd+fused (default: the catalogue, pruned per size "
                        "by bottom size and memory)")
    p.add_argument("--dry-run", action="store_true",
                   help="with --configurations: print the plan and its estimated time; measure nothing")
    p.add_argument("--methods", action="store_true",
                   help="instead, time the front door's methods (Ozaki II and I at the DGEMM target, split-K) as "
                        "called beside the library GEMM at a grid of shapes (--shapes M:K:N,... to choose), and "
                        "write the device profile's methods section, which gpu.matmul ranks by")
    p.add_argument("--shapes", type=lambda text: [shape(t) for t in text.split(",") if t.strip()], default=None,
                   metavar="M:K:N,...", help="with --methods: the shapes (default: sized for the backend)")
    p.add_argument("--complex", action="store_true",
                   help="with --methods --shapes: the shapes as complex128 products (Ozaki II complex beside ZGEMM)")


@command("calibrate", options=MEASURING, arguments=_calibrate_arguments)
def cmd_calibrate(args: argparse.Namespace, db_path: Path) -> int:
    backend = get_backend(args.backend)
    if args.transfer:
        return transfer_rates(args, backend)
    if args.configurations:
        return calibrate_configurations(args, db_path, backend)
    if args.methods:
        return calibrate_methods(args, db_path, backend)
    if args.context:
        chosen = args.sizes
        calibration.plan_sizes(backend, [2 * n for n in chosen] if chosen else None, args.quick, args.dtype)
    else:
        chosen = calibration.plan_sizes(backend, args.sizes, args.quick, args.dtype)
    run = calibration.calibrate_context if args.context else calibration.calibrate
    with measuring_run(args, db_path, backend) as ctx:
        rows, outcome = run(ctx, chosen, args.dtype)
        device = ctx.db.environment(ctx.env_key).get("device")
        profile = update_profile(ctx)
    points = [r.as_dict() for r in rows]
    payload = {"backend": backend.name, "device": device, "env_key": ctx.env_key, "dtype": args.dtype,
               "context": args.context, "measured": outcome.measured, "skipped": outcome.skipped, "points": points,
               "profile": profile}
    emit(args, payload, lambda: (
        f"{device} ({backend.name}, {args.dtype}): {outcome.measured} measured, "
        f"{outcome.skipped} already stored (use --force to measure again)\n"
        + table(points, CALIBRATION_COLUMNS) + f"\ndevice profile: {profile}"))
    return 0


def calibrate_methods(args: argparse.Namespace, db_path: Path, backend: Backend) -> int:
    """``gemmlab calibrate --methods``: the front door's methods as called, into the profile's methods section."""
    with measuring_run(args, db_path, backend) as ctx:
        counts, path = methods_calibration.calibrate(ctx, args.shapes, complex_=args.complex)
    emit(args, {**counts, "profile": path}, lambda: "\n".join(f"{k}: {v}" for k, v in counts.items())
         + f"\ndevice profile: {path}")
    return 0


def transfer_rates(args: argparse.Namespace, backend: Backend) -> int:
    """``gemmlab calibrate --transfer``: the out-of-core engine's rates, into the device profile."""
    measured = outofcore_rates.measure(backend)
    path = outofcore_rates.save(backend, measured)
    payload = {"backend": backend.name, "device": device_name(backend), "rates": measured, "profile": str(path)}
    emit(args, payload, lambda: f"{payload['device']} ({backend.name}): " + ", ".join(
        f"{key} {value:.4g}" for key, value in measured.items()) + f"\ndevice profile: {path}")
    return 0


def calibrate_configurations(args: argparse.Namespace, db_path: Path, backend: Backend) -> int:
    """``gemmlab calibrate --configurations``: the plan and its estimate (printed before anything is
    measured), the groups measured, and the device profile written with its configurations section."""
    planned = configurations.plan(backend, args.sizes, args.candidates)
    free = backend.memory_info()[0]
    est = configurations.estimate(planned, free)
    plan_text = configurations.describe(planned, est)
    payload: dict[str, Any] = {"backend": backend.name, "plan": {n: [c.name for c in cs] for n, cs in planned.items()},
                               "estimated_seconds": est.seconds, "estimate": est.how}
    if args.dry_run:
        emit(args, payload, lambda: plan_text)
        return 0
    if not args.json:
        print(plan_text, flush=True)
    with measuring_run(args, db_path, backend) as ctx:
        rows = configurations.calibrate_configurations(ctx, planned)
        payload["profile"] = update_profile(ctx)
    payload["measured"] = rows
    emit(args, payload, lambda: "\n".join(
        [f"N = {r['size']}: DGEMM {1e3 * r['gemm_s']:.3f} ms ({r['samples']} samples); "
         + ", ".join(f"{name} {s:.3f}x" for name, s in r["speedups"].items()) for r in rows]
        + [f"device profile: {payload['profile']}"]))
    return 0


def _profile_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, default=None, metavar="DIR",
                   help="directory to write the profile into (default: $GEMMLAB_PROFILES or results/profiles); "
                        "gpu/profiles is the one the package bundles")
    p.add_argument("--transfer-levels", action="store_true",
                   help="instead, write the transfer model's level tables for the GPUs of the hardware table "
                        "that have no bundled profile (DIR/transfer-levels.json)")
    p.add_argument("--transfer-methods", action="store_true",
                   help="instead, write the methods sections the transfer model predicts for the GPUs of the "
                        "hardware table whose bundled profile has no measured methods section (or that have none), "
                        "trained on the bundled methods sections and the H100's published runs "
                        "(DIR/transfer-methods.json)")
    p.add_argument("--methods", nargs="+", type=Path, default=None, metavar="FILE",
                   help="instead, add to the profile of the files' device (in DIR) the methods section the front "
                        "door (gpu.matmul) ranks by, from as-called result files (results/published/h200/"
                        "h200-*-as-called.json)")


@command("profile", options=("common", "stored", "regime"), arguments=_profile_arguments)
def cmd_profile(args: argparse.Namespace, db_path: Path) -> int:
    """Write a device profile from stored results (the calibration, the level sweeps and the configurations
    timed), or the transfer model's level tables or methods sections, with no measurement."""
    if args.transfer_levels:
        path = transfer_tables.write(args.out or Path("gpu") / "profiles", db_path)
        emit(args, {"path": str(path)}, lambda: f"transfer-model level tables: {path}")
        return 0
    if args.transfer_methods:
        from ..frontdoor import transfer as transfer_methods  # the fit: only this option needs it

        path = transfer_methods.write(args.out or Path("gpu") / "profiles")
        emit(args, {"path": str(path)}, lambda: f"transfer-model methods sections: {path}")
        return 0
    if args.methods:
        path = add_methods(args.methods, args.regime, args.out)
        emit(args, {"profile": str(path)}, lambda: f"methods section from {len(args.methods)} files: {path}")
        return 0
    with ResultsDB(db_path, readonly=True) as db:
        key = models.select_env(db, args.env, args.device, None if args.env or args.device else
                                get_backend("auto").device_info())
        path = write_profile(db, key, args.command_line, args.regime, args.out)
    emit(args, {"env_key": key, "profile": str(path)}, lambda: f"device profile of env {key}: {path}")
    return 0


FIT_OPTIONS = ("common", "stored", "backend", "range", "regime")
FIT_COLUMNS = (("weighting", "weighting", ""), ("curve", "curve", ""),
               ("coefficients", "coefficients (ms, highest power first)", ""),
               ("sse", "SSE (ms^2)", ".4g"), ("r2", "R^2", ".6f"), ("rel_rms", "rms rel. error", ".3f"))


def _source(args: argparse.Namespace) -> Source:
    return Source(args.backend, args.env, args.device, getattr(args, "coefficients", None), getattr(args, "gpu", None),
                  args.range, getattr(args, "weighting", "relative"), args.regime)


@command("fit", options=FIT_OPTIONS)
def cmd_fit(args: argparse.Namespace, db_path: Path) -> int:
    payload, rows = fit_report(db_path, _source(args))
    emit(args, payload, lambda: f"{payload['device']} (env {payload['env_key']}), sizes {payload['sizes']}\n"
         + table(rows, FIT_COLUMNS) + "\n" + "\n".join(
             f"P ({w}): " + (f"{v['P']:.0f}" if v["P"] else v["note"]) for w, v in payload["fits"].items()))
    return 0


def _predict_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--size", type=int, required=True, help="matrix size N")
    source = p.add_mutually_exclusive_group()
    source.add_argument("--coefficients", type=Path, default=None, metavar="FILE",
                        help='JSON {"gemm": [p1, p2, p3, p4], "geam": [q1, q2, q3], "units": "ms"}, '
                             'highest power first')
    source.add_argument("--gpu", default=None, metavar="NAME",
                        help=f"a GPU of the hardware table ({', '.join(hardware.GPUS)}), no measurement of it "
                             "needed: the transfer model (Gemm and Geam learned from the calibrated GPUs, launch "
                             "overhead the median of their measured ones) where no calibration of it is stored or "
                             "bundled; for one that has one, Otsuka's analytic model from its peak rates, without "
                             "launch overhead (--device predicts from the calibration itself). Says whether A, B and "
                             "C fit in its memory")
    p.add_argument("--weighting", choices=fits.WEIGHTINGS, default="relative",
                   help="least-squares weighting of the thesis rule's fits (default: relative error)")
    p.add_argument("--max-level", type=int, default=4, help="deepest level to consider (default 4)")
    p.add_argument("--schedule", default="rum", help="schedule whose table gives the counts (default rum)")
    p.add_argument("--fused", action="store_true", help="fused additions (counts from gpu.strassen.fusion)")
    p.add_argument("--workspace", type=byte_size, default=None, metavar="BYTES",
                   help="choose each level's schedule within this memory beyond RUM's (e.g. 40G; see "
                        "gpu.strassen.plans) and predict each level's plan; with --fused, where it pays")
    p.add_argument("--launch-us", type=float, default=None,
                   help="host time per library call in microseconds (default: stored or fitted for a stored "
                        "calibration; transferred for --gpu through the transfer model; 0 for the analytic model, "
                        "and for --coefficients unless the file gives launch_us)")


@command("predict", options=FIT_OPTIONS, arguments=_predict_arguments)
def cmd_predict(args: argparse.Namespace, db_path: Path) -> int:
    launch = None if args.launch_us is None else args.launch_us / 1e3
    config = Config(args.schedule, fused=args.fused)
    payload = predict(db_path, _source(args), args.size, config, args.max_level, launch, args.workspace)

    def text() -> str:
        def fmt(bs: Sequence[float | None]) -> str:
            return ", ".join("-" if b is None else f"{b:.0f}" for b in bs)
        thesis = (f"thesis rule: {payload['no_crossover']['note']}" if payload["P"] is None else
                  f"thesis rule: P = {payload['P']:.0f}, boundaries (2P, 4P, ...) {fmt(payload['boundaries'])}, "
                  f"level {payload['level']}")
        if payload["thesis_extrapolated"] and payload["P"] is not None:
            thesis += f" (extrapolated: N = {args.size} lies outside the fitted sizes)"
        return "\n".join([
            f"{payload['source']}; N = {args.size}, {args.schedule}{' fused' if args.fused else ''}", thesis,
            f"recursive:   P = {fmt([payload['P_recursive']])}, boundaries {fmt(payload['boundaries_recursive'])}, "
            f"level {payload['level_recursive']}",
            *speedup_line(payload), *_plan_lines(payload.get("workspace")), *answer_lines(payload)])

    emit(args, payload, text)
    return 0


def _plan_lines(plans: dict[str, Any] | None) -> list[str]:
    """The per-level plans of ``predict --workspace``, one line per level."""
    if not plans:
        return []
    lines = [f"within {plans['bytes'] / 2**30:.2f} GiB beyond RUM (best level {plans['level']}):"]
    for lv, row in plans["levels"].items():
        lines.append(f"  L{lv} {row['plan']:<22} {row['speedup']:.3f}x  extra {row['extra_bytes'] / 2**30:.2f} GiB  "
                     f"(levels: {', '.join(row['schedules']) or 'GEMM'})")
    return lines


LEVEL_COLUMNS = (("size", "N", "d"), ("best", "best", "d"), ("thesis rule (relative)", "thesis (rel.)", "d"),
                 ("thesis rule (absolute)", "thesis (LS)", "d"), ("recursive", "recursive", "d"),
                 ("times", "time by level (ms; over GEMM with --stored speedup)", ""))


def _levels_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sizes", type=sizes, default=None, help="matrix sizes (default: the backend's sweep)")
    p.add_argument("--max-level", type=int, default=None, help="deepest level (default: 4 on GPU)")
    p.add_argument("--min-bottom", type=int, default=None,
                   help="measure a level only where its bottom products are at least this size (default: 2048 on GPU)")
    p.add_argument("--schedule", default="rum", help="schedule (default rum)")
    p.add_argument("--fused", action="store_true", help="fused additions")
    p.add_argument("--parallel", action="store_true", help="the schedule's CUDA streams (rum2)")
    p.add_argument("--quick", action="store_true", help="the short sweep")
    p.add_argument("--dry-run", action="store_true", help="print the plan and its estimated time; measure nothing")
    p.add_argument("--stored", choices=("levels", "speedup"), default=None,
                   help="measure nothing: judge the predictors on the stored level sweep, or on the "
                        "strassen-speedup points, of --env/--device (default: this device)")
    p.add_argument("--auto", action="store_true",
                   help="also time matmul(level='auto') with this configuration in each size's group (a size "
                        "whose levels are stored times DGEMM and auto only) and judge it against the best level")
    p.add_argument("--summary", type=Path, default=None, metavar="DIR",
                   help="also write DIR/SUMMARY.md (the level-validation summary: predictors, and level='auto' "
                        "where its rows are stored) and the level figures, from the stored rows")


@command("levels", options=(*MEASURING, "stored"), arguments=_levels_arguments)
def cmd_levels(args: argparse.Namespace, db_path: Path) -> int:
    backend = get_backend(args.backend)
    config = Config(args.schedule, args.parallel, args.fused)
    plan = validation.custom_plan(backend, args.quick, args.sizes, args.max_level, config, args.min_bottom,
                                  args.auto)
    if args.stored:
        with ResultsDB(db_path, readonly=True) as db:
            here = None if args.env or args.device else backend.device_info()
            key = models.select_env(db, args.env, args.device, here)
            if args.stored == "levels":
                report = validation.judge(db, key, config, args.sizes, regime=args.regime)
            else:
                sweep = validation.speedup_sweep(db, key, config, args.regime)
                report = validation.judge_times(db, key, config, sweep, unit="gemm", regime=args.regime)
            found = judge_auto(db, key, config, report.times, args.regime, list(report.times))
            summary = with_judgement(report.summary(), found)
        if args.summary:
            summary["SUMMARY.md"] = write_levels_summary(args, db_path, key, report, found, "not written (--stored)")
        return _emit_levels(args, backend, key, summary, report, found)
    if args.dry_run:
        est = estimate.estimate(plan, backend, db_path, args.regime, args.quick, args.force)
        payload = {"plan": {n: plan.levels(n) for n in plan.sizes}, "estimated_seconds": est.seconds,
                   "estimated_most_seconds": est.most, "estimate": est.how, "estimated_parts_s": est.parts,
                   "groups": est.groups}
        emit(args, payload, lambda: "\n".join(
            [f"N = {n}: levels {lv}" for n, lv in payload["plan"].items()]
            + [f"estimated time: ? ({est.how})" if est.seconds is None else
               f"estimated time: {est.seconds:.0f} s, up to {est.most:.0f} s if every batch is measured again "
               f"({est.how}; {est.groups} groups to time, points already stored left out)"]
            + [f"  {part}: {s:.0f} s" for part, s in est.parts.items()]))
        return 0
    with measuring_run(args, db_path, backend) as ctx:
        summary, report, found = validation.run_plan(ctx, plan)
        summary["device profile"] = update_profile(ctx)
    if args.summary:
        summary["SUMMARY.md"] = write_levels_summary(args, db_path, ctx.env_key, report, found,
                                                     summary["device profile"], summary)
    return _emit_levels(args, backend, ctx.env_key, summary, report, found)


def write_levels_summary(args: argparse.Namespace, db_path: Path, key: str, report: validation.Report,
                         found: AutoJudgement, profile: str, counts: dict[str, Any] | None = None) -> str:
    """``SUMMARY.md`` of the level sweep in ``args.summary``: the level-validation summary of env ``key``
    (with ``level="auto"`` judged where stored) and the calibration and level figures, all from the
    stored rows, as ``gemmlab reproduce`` writes them; its path."""
    counts = counts or {"points measured": 0, "points already stored": 0}
    wanted = {calibration.EXPERIMENT, validation.EXPERIMENT}
    load()
    with ResultsDB(db_path, readonly=True) as db:
        figures = {name: paths for name, fig in FIGURES.items()
                   if wanted & set(fig.experiments) and (paths := fig.render(db, args.summary))}
        path = reproduce.write_summary(args.summary, args.command_line, db, db.environment(key),
                                       {validation.EXPERIMENT: validation_summary(counts, report, profile, found)},
                                       figures)
    return str(path)


def _emit_levels(args: argparse.Namespace, backend: Backend, key: str, summary: dict[str, Any],
                 report: validation.Report, found: AutoJudgement | None = None) -> int:
    rows = report.rows()
    payload = {"backend": backend.name, "env_key": key, "summary": summary, "rows": rows}
    for r in rows:
        r["times"] = " ".join(f"{t:.4g}" for t in (r.get("times_ms") or r["times_over_gemm"]).values())

    def text() -> str:
        lines = [f"{k}: {v}" for k, v in summary.items() if k != AUTO_KEY] + [table(rows, LEVEL_COLUMNS)]
        if found and found.points:
            t = found.table()
            lines += ["", t.title, *markdown_table(t.columns, t.rows, t.formats), "",
                      *(f"{'met' if c.met else 'NOT met' if c.met is False else 'not judged'}: {c.target}: {c.measured}"
                        for c in found.checks())]
        return "\n".join(lines)

    emit(args, payload, text)
    return 0
