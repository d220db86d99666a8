"""The ``gemmlab`` command line. Every command takes ``--json`` for machine-readable output."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from accuracy.methods import default_methods, parse_methods
from gpu.backend import BACKENDS, Backend, BackendUnavailable, get_backend
from gpu.hazards import plan
from gpu.liveness import analyze, protected
from gpu.schedules import SCHEDULES, get_schedule
from modeling import crossover, fits, hardware
from modeling.analytic import analytic_model
from modeling.recursive import RecursiveModel

from . import accuracy_audit, calibration, levels, models, ozaki_bench, reproduce, strassen_bench
from .database import ResultsDB, default_path
from .environment import env_key, environment
from .registry import Context, recorded_run

DEFAULT_FIGURES = Path("paper_figs")


def _numbers(cast: Callable[[str], Any], what: str) -> Callable[[str], list]:
    """An argparse type: a comma- or space-separated list (empty: refused by the command's planner)."""
    def parse(text: str) -> list:
        try:
            return [cast(s) for s in text.replace(",", " ").split()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be {_KINDS[cast]}, got {text!r}") from None
    return parse


_KINDS = {int: "integers", float: "numbers"}
_sizes = _numbers(int, "sizes")


def _range(text: str) -> tuple[float, float]:
    try:
        lo, hi = (float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"a range is LO,HI such as 2048,32768, got {text!r}") from None
    if not 0 < lo < hi:
        raise argparse.ArgumentTypeError(f"a range needs 0 < LO < HI, got {text!r}")
    return lo, hi


def _counts(text: str) -> list[int]:
    """An argparse type: integers and ranges, ``2-9`` or ``2,3,5`` or ``2-4,8``."""
    out: list[int] = []
    try:
        for part in text.replace(",", " ").split():
            lo, _, hi = part.partition("-")
            out += list(range(int(lo), int(hi or lo) + 1))
    except ValueError:
        raise argparse.ArgumentTypeError(f"slice counts must be integers or ranges such as 2-9, got {text!r}") from None
    return sorted(set(out))


def _common() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print machine-readable JSON on stdout")
    common.add_argument("--db", type=Path, default=None,
                        help=f"results database (default: $GEMMLAB_DB or {default_path()})")
    return common


def _backend_option() -> argparse.ArgumentParser:
    opts = argparse.ArgumentParser(add_help=False)
    opts.add_argument("--backend", choices=BACKENDS + ("auto",), default="auto",
                      help="numpy (CPU), cupy (GPU) or auto: CuPy when a GPU is usable (default)")
    return opts


def _measuring() -> argparse.ArgumentParser:
    opts = argparse.ArgumentParser(add_help=False, parents=[_backend_option()])
    opts.add_argument("--force", action="store_true", help="measure again points already stored")
    opts.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                      help="progress bars on stderr (default: when stderr is a terminal)")
    return opts


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gemmlab", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common, measuring = _common(), _measuring()

    p = sub.add_parser("info", parents=[common, _backend_option()], help="backend, device and versions")
    p.set_defaults(handler=cmd_info)

    p = sub.add_parser("calibrate", parents=[common, measuring], help="measure Gemm(x) and Geam(x)")
    p.add_argument("--sizes", type=_sizes, default=None,
                   help="matrix sizes, comma- or space-separated (default: sized for the backend)")
    p.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    p.add_argument("--quick", action="store_true", help="the short default sweep")
    p.add_argument("--context", action="store_true",
                   help="time the calls as one Strassen level issues them: back to back on N x N quadrant "
                        "views of 2N x 2N operands (curves for the recursive predictor's inner calls)")
    p.set_defaults(handler=cmd_calibrate)

    results = sub.add_parser("results", help="stored runs and measurements")
    rsub = results.add_subparsers(dest="action", required=True, metavar="ACTION")
    p = rsub.add_parser("list", parents=[common], help="runs, newest first")
    p.set_defaults(handler=cmd_results_list)
    p = rsub.add_parser("export", parents=[common], help="measurements as CSV")
    p.add_argument("-o", "--output", default="-", help="CSV file (default: stdout)")
    p.add_argument("--experiment", default=None, help="only this experiment")
    p.set_defaults(handler=cmd_results_export)
    p = rsub.add_parser("import", parents=[common], help="read a CSV export into the database")
    p.add_argument("file", type=Path)
    p.set_defaults(handler=cmd_results_import)

    p = sub.add_parser("strassen", parents=[common, measuring],
                       help="Strassen speed-up over the library GEMM at chosen sizes and levels")
    p.add_argument("--sizes", type=_sizes, default=None, help="matrix sizes (default: the backend's sweep)")
    p.add_argument("--levels", type=_sizes, default=None, help="Strassen levels (default: 1-4 on GPU)")
    p.set_defaults(handler=cmd_strassen, quick=False)

    p = sub.add_parser("audit", parents=[common, measuring],
                       help="error of GEMM methods against the correctly rounded product (resumes)")
    p.add_argument("--methods", default=",".join(default_methods()),
                   help="comma-separated: fp32, fp64, strassen-<schedule>-L<level>, ... "
                        f"(default: {','.join(default_methods())})")
    p.add_argument("--n", type=_sizes, default=[1024], help="sizes N of the N x N x N products (default: 1024)")
    p.add_argument("--phi", type=_numbers(float, "phi values"), default=list(accuracy_audit.PHIS),
                   help="spreads of the inputs (ru - 0.5) exp(phi rn) (default: 0.1,1,2)")
    p.add_argument("--seeds", type=_numbers(int, "seeds"), default=[1, 2, 3], help="input seeds (default: 1,2,3)")
    p.set_defaults(handler=cmd_audit, quick=False)

    p = sub.add_parser("ozaki", parents=[common, measuring],
                       help="Ozaki scheme: time against DGEMM and SGEMM and max relative error, per format "
                            "and slice count (resumes)")
    p.add_argument("--sizes", type=_sizes, default=None,
                   help="N of the N x N x N products (default: 4096,8192,16384 on GPU, 256,512 on CPU)")
    p.add_argument("--formats", default=None,
                   help=f"slice formats, comma-separated: {','.join(ozaki_bench.ALL_FORMATS)} (r: the "
                        f"paper's rounded tails; default: {','.join(ozaki_bench.GPU_FORMATS)} on GPU, "
                        "fp32r,fp32 on CPU, where the others are emulated)")
    p.add_argument("--slices", type=_counts, default=None, help="slice counts, e.g. 2-9 or 2,4,6 (default: 2-10 "
                                                                  "on GPU, 2-6 on CPU)")
    p.add_argument("--phi", type=_numbers(float, "phi values"), default=list(ozaki_bench.PHIS),
                   help="input spreads for the errors (default: 0.1,1,2)")
    p.add_argument("--rows", type=int, default=None,
                   help=f"rows sampled for the errors (default: all up to N={ozaki_bench.FULL_ROWS_MAX}, "
                        f"else {ozaki_bench.SAMPLED_ROWS})")
    p.add_argument("--slow-factor", type=float, default=3.0,
                   help="configurations slower than this many DGEMMs are timed by one run (default: 3)")
    p.add_argument("--max-ratio", type=float, default=25.0,
                   help="do not run configurations predicted slower than this many DGEMMs (from the previous "
                        "slice count); they are stored as predicted (default: 25; 0: run everything)")
    p.add_argument("--errors", action=argparse.BooleanOptionalAction, default=True, help="measure errors")
    p.add_argument("--timing", action=argparse.BooleanOptionalAction, default=True, help="measure times")
    p.set_defaults(handler=cmd_ozaki, quick=False)

    sched = sub.add_parser("schedule", help="Strassen schedules: list, liveness analysis, stream waits")
    ssub = sched.add_subparsers(dest="action", required=True, metavar="ACTION")
    p = ssub.add_parser("list", parents=[common], help="the registered schedules")
    p.set_defaults(handler=cmd_schedule_list)
    p = ssub.add_parser("analyze", parents=[common], help="free spaces, supports and recursion (state table)")
    p.add_argument("name")
    p.add_argument("--table", action="store_true", help="also print the full state table")
    p.set_defaults(handler=cmd_schedule_analyze)
    p = ssub.add_parser("streams", parents=[common], help="cross-stream waits derived from read/write sets")
    p.add_argument("name")
    p.add_argument("--no-aliases", dest="aliased", action="store_false",
                   help="as the schedule runs below the top level (no level-1 aliases)")
    p.set_defaults(handler=cmd_schedule_streams)

    stored = argparse.ArgumentParser(add_help=False)
    stored.add_argument("--env", default=None, metavar="KEY",
                        help="stored environment whose calibration to use (default: this device's newest)")
    stored.add_argument("--device", default=None, metavar="TEXT",
                        help="the newest stored calibration of a device whose name contains TEXT")
    fitting = argparse.ArgumentParser(add_help=False, parents=[stored, _backend_option()])
    fitting.add_argument("--range", type=_range, default=None, metavar="LO,HI",
                         help="calibrated sizes to fit, and where to search the crossover")

    p = sub.add_parser("fit", parents=[common, fitting], help="fit Gemm (cubic) and Geam (quadratic) to a stored calibration")
    p.set_defaults(handler=cmd_fit)

    p = sub.add_parser("predict", parents=[common, fitting],
                       help="crossover P, level boundaries and the best Strassen level for a size")
    p.add_argument("--size", type=int, required=True, help="matrix size N")
    source = p.add_mutually_exclusive_group()
    source.add_argument("--coefficients", type=Path, default=None, metavar="FILE",
                        help='JSON {"gemm": [p1, p2, p3, p4], "geam": [q1, q2, q3], "units": "ms"}, highest power first')
    source.add_argument("--gpu", default=None, metavar="NAME",
                        help=f"analytic model of a GPU from the hardware table ({', '.join(hardware.GPUS)}); no GPU needed")
    p.add_argument("--weighting", choices=fits.WEIGHTINGS, default="relative",
                   help="least-squares weighting of the thesis rule's fits (default: relative error)")
    p.add_argument("--max-level", type=int, default=4, help="deepest level to consider (default 4)")
    p.add_argument("--schedule", default="rum", help="schedule whose table gives the counts (default rum)")
    p.add_argument("--fused", action="store_true", help="fused additions (counts from gpu.fusion)")
    p.add_argument("--launch-us", type=float, default=None,
                   help="host time per library call in microseconds (default: stored or fitted; 0 for --gpu "
                        "and --coefficients unless the file gives launch_us)")
    p.set_defaults(handler=cmd_predict)

    p = sub.add_parser("levels", parents=[common, measuring, stored],
                       help="measure the best Strassen level over a size sweep and judge the predictors")
    p.add_argument("--sizes", type=_sizes, default=None, help="matrix sizes (default: the backend's sweep)")
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
    p.set_defaults(handler=cmd_levels)

    p = sub.add_parser("figures", parents=[common], help="render every figure from stored results")
    p.add_argument("--out", type=Path, default=DEFAULT_FIGURES, help="output folder (default: paper_figs)")
    p.set_defaults(handler=cmd_figures)

    p = sub.add_parser("reproduce", parents=[common, measuring],
                       help="run every registered experiment and render every figure")
    p.add_argument("--quick", action="store_true", help="small sweeps (minutes on a CPU)")
    p.add_argument("--only", nargs="+", default=None, metavar="EXPERIMENT", help="run only these")
    p.add_argument("--out", type=Path, default=DEFAULT_FIGURES, help="output folder (default: paper_figs)")
    p.set_defaults(handler=cmd_reproduce)
    return parser


def _emit(args: argparse.Namespace, payload: Any, text: Callable[[], str]) -> None:
    print(json.dumps(payload, indent=2, default=str) if args.json else text())


def _progress(args: argparse.Namespace) -> bool:
    return sys.stderr.isatty() if args.progress is None else args.progress


def _table(rows: list[dict[str, Any]], columns: Sequence[tuple[str, str, str]]) -> str:
    """Plain-text table; ``columns`` are (key, header, format spec)."""
    cells = [[h for _, h, _ in columns]]
    cells += [[format(r.get(k, ""), f) if r.get(k) is not None else "" for k, _, f in columns] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in cells)


def cmd_info(args: argparse.Namespace, db_path: Path) -> int:
    backend = get_backend(args.backend)
    env = environment(backend)
    payload = {"backend": backend.name, "env_key": env_key(env), "environment": env}
    _emit(args, payload, lambda: "\n".join(
        [f"{'env_key':>18}: {payload['env_key']}"] + [f"{k:>18}: {v}" for k, v in env.items()]))
    return 0


CALIBRATION_COLUMNS = (("size", "N", "d"), ("gemm_s", "Gemm (s)", ".4e"), ("tflops", "TFLOP/s", ".3f"),
                       ("geam_s", "Geam (s)", ".4e"), ("gbs", "GB/s", ".1f"), ("samples", "samples", "d"),
                       ("stable", "stable", ""))


@contextmanager
def _measuring_run(args: argparse.Namespace, db_path: Path, backend: Backend) -> Iterator[Context]:
    """The database and a recorded run for a command that measures."""
    with ResultsDB(db_path) as db, recorded_run(backend, db, args.command_line, quick=args.quick,
                                                force=args.force, progress=_progress(args)) as ctx:
        yield ctx


def cmd_calibrate(args: argparse.Namespace, db_path: Path) -> int:
    backend = get_backend(args.backend)
    if args.context:
        sizes = args.sizes
        calibration.plan_sizes(backend, [2 * n for n in sizes] if sizes else None, args.quick, args.dtype)
    else:
        sizes = calibration.plan_sizes(backend, args.sizes, args.quick, args.dtype)
    run = calibration.calibrate_context if args.context else calibration.calibrate
    with _measuring_run(args, db_path, backend) as ctx:
        rows, outcome = run(ctx, sizes, args.dtype)
        device = ctx.db.environment(ctx.env_key).get("device")
    payload = {"backend": backend.name, "device": device, "env_key": ctx.env_key, "dtype": args.dtype,
               "context": args.context, "measured": outcome.measured, "skipped": outcome.skipped, "points": rows}
    _emit(args, payload, lambda: (
        f"{device} ({backend.name}, {args.dtype}): {outcome.measured} measured, "
        f"{outcome.skipped} already stored (use --force to measure again)\n"
        + _table(rows, CALIBRATION_COLUMNS)))
    return 0


def cmd_results_list(args: argparse.Namespace, db_path: Path) -> int:
    with ResultsDB(db_path) as db:
        runs = db.runs()
    columns = (("id", "run", "d"), ("started_at", "started (UTC)", ""), ("status", "status", ""),
               ("measurements", "points", "d"), ("device", "device", ""), ("command", "command", ""))
    _emit(args, {"db": str(db_path), "runs": runs},
          lambda: _table(runs, columns) if runs else f"no runs in {db_path}")
    return 0


def cmd_results_export(args: argparse.Namespace, db_path: Path) -> int:
    with ResultsDB(db_path) as db:
        target = sys.stdout if args.output == "-" else args.output
        if args.json and target is sys.stdout:
            raise ValueError("--json with CSV on stdout would mix formats; give -o FILE")
        count = db.export_csv(target, args.experiment)
    if target is not sys.stdout:
        _emit(args, {"path": str(args.output), "rows": count}, lambda: f"{count} rows -> {args.output}")
    return 0


def cmd_results_import(args: argparse.Namespace, db_path: Path) -> int:
    if not args.file.is_file():
        raise FileNotFoundError(f"no such CSV file: {args.file}")
    with ResultsDB(db_path) as db:
        count = db.import_csv(args.file)
    _emit(args, {"db": str(db_path), "rows": count}, lambda: f"{count} rows imported into {db_path}")
    return 0


STRASSEN_COLUMNS = (("size", "N", "d"), ("level", "L", "d"), ("method", "configuration", ""),
                    ("speedup", "speed-up", ".4f"), ("time_s", "time (s)", ".4e"), ("gemm_s", "GEMM (s)", ".4e"),
                    ("stable", "stable", ""))


def cmd_strassen(args: argparse.Namespace, db_path: Path) -> int:
    backend = get_backend(args.backend)
    plan = strassen_bench.custom_plan(backend, args.sizes, args.levels)
    with _measuring_run(args, db_path, backend) as ctx:
        summary, rows = strassen_bench.run_plan(ctx, plan)
    _emit(args, {"backend": backend.name, "env_key": ctx.env_key, "summary": summary, "rows": rows},
          lambda: "\n".join(f"{k}: {v}" for k, v in summary.items()) + "\n" + _table(rows, STRASSEN_COLUMNS))
    return 0


AUDIT_COLUMNS = (("method", "method", ""), ("n", "N", "d"), ("phi", "phi", "g"), ("seeds", "seeds", "d"),
                 ("mean_max_rel", "mean max_rel", ".3e"), ("max_max_rel", "max max_rel", ".3e"),
                 ("mean_nrm", "mean nrm", ".3e"), ("max_bits", "wrong bits", ".1f"),
                 ("zeros_exact", "exact zeros", "d"), ("zeros", "zero refs", "d"),
                 ("nonfinite_seeds", "non-finite", "d"))
AUDIT_NOTE = ("max_rel: max |c - c*| / |c*| over c* != 0 (the papers' measure); nrm: ||C - C*||_F / ||C*||_F; "
              "wrong bits: log2(1 + max ulps); c*: the correctly rounded product")


def cmd_audit(args: argparse.Namespace, db_path: Path) -> int:
    backend = get_backend(args.backend)
    methods = [m.name for m in parse_methods(args.methods)]
    plan = accuracy_audit.AuditPlan(tuple(args.n), tuple(args.phi), tuple(args.seeds))
    with _measuring_run(args, db_path, backend) as ctx:
        outcome, rows = accuracy_audit.run_audit(ctx, methods, plan)
        device = ctx.db.environment(ctx.env_key).get("device")
    summary = accuracy_audit.summarize(rows)
    payload = {"backend": backend.name, "device": device, "env_key": ctx.env_key, "measured": outcome.measured,
               "skipped": outcome.skipped, "rows": rows, "summary": summary}
    _emit(args, payload, lambda: (
        f"{device} ({backend.name}): {outcome.measured} audited, {outcome.skipped} already stored "
        f"(use --force to audit again)\n" + _table(summary, AUDIT_COLUMNS) + "\n" + AUDIT_NOTE))
    return 0


def _ms(x: Any) -> str:
    return f"{1e3 * x:.3f}" if x is not None else ""


def cmd_ozaki(args: argparse.Namespace, db_path: Path) -> int:
    backend = get_backend(args.backend)
    base = ozaki_bench.BENCH_DEFAULTS[backend.name]
    formats = tuple(f for f in (args.formats or "").replace(",", " ").split()) or base.formats
    plan = ozaki_bench.BenchPlan(tuple(args.sizes) if args.sizes else base.sizes, formats,
                                 tuple(args.slices) if args.slices else base.slices, tuple(args.phi), args.rows,
                                 args.slow_factor, args.max_ratio or None, args.errors, args.timing)
    ozaki_bench.check_sizes(backend, plan)
    with _measuring_run(args, db_path, backend) as ctx:
        summary, rows = ozaki_bench.run_bench(ctx, plan)
        device = ctx.db.environment(ctx.env_key).get("device")
    payload = {"backend": backend.name, "device": device, "env_key": ctx.env_key, "summary": summary, "rows": rows}
    cols = [("n", "N", "d"), ("label", "method", ""), ("time_s", "time (ms)", ""),
            ("speedup_vs_dgemm", "speed-up vs DGEMM", ".3f"), ("slowdown_vs_sgemm", "x SGEMM time", ".2f")]
    cols += [(f"max_rel_phi{phi:g}", f"max_rel phi={phi:g}", ".2e") for phi in plan.phis]
    cols += [("protocol", "timing", "")]
    shown = [{**r, "time_s": _ms(r["time_s"])} for r in rows]
    _emit(args, payload, lambda: (f"{device} ({backend.name}): " + "; ".join(
        f"{k}: {v}" for k, v in summary.items()) + "\n" + _table(shown, cols)))
    return 0


def cmd_schedule_list(args: argparse.Namespace, db_path: Path) -> int:
    rows = [{"name": s.name, "steps": len(s.steps), "products": len(s.products),
             "temporaries": len(s.temporaries), "streams": len(s.streams), "support": s.support,
             "description": s.description} for s in SCHEDULES.values()]
    cols = (("name", "schedule", ""), ("steps", "steps", "d"), ("products", "products", "d"),
            ("temporaries", "temps", "d"), ("streams", "streams", "d"), ("description", "description", ""))
    _emit(args, {"schedules": rows}, lambda: _table(rows, cols))
    return 0


def cmd_schedule_analyze(args: argparse.Namespace, db_path: Path) -> int:
    report = analyze(get_schedule(args.name).name)
    payload = report.as_dict()
    payload["protected_copies"] = {str(lv): {str(i + 1): list(r) for i, r in protected(args.name, lv).items()}
                                   for lv in range(2, 5) if report.recursible and protected(args.name, lv)}

    def text() -> str:
        rows = [{"step": p.step, "text": p.step_text, "free": " ".join(p.free) or "-",
                 "support": p.support or "-"} for p in report.products]
        lines = [f"{args.name}: {'recursible' if report.recursible else 'NOT recursible'}",
                 _table(rows, (("step", "step", "d"), ("text", "multiplication", ""),
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

    _emit(args, payload, text)
    return 0


def cmd_schedule_streams(args: argparse.Namespace, db_path: Path) -> int:
    result = plan(get_schedule(args.name).name, aliased=args.aliased)
    rows = [{"step": w.step, "stream": result.stream_of[w.step - 1], "after": w.after,
             "after_stream": result.stream_of[w.after - 1], "kinds": "+".join(w.kinds),
             "spaces": " ".join(w.spaces)} for w in result.waits]
    cols = (("step", "step", "d"), ("stream", "on stream", "d"), ("after", "waits for step", "d"),
            ("after_stream", "on stream", "d"), ("kinds", "hazard", ""), ("spaces", "spaces", ""))
    _emit(args, result.as_dict(), lambda: (
        f"{args.name}: streams {list(result.streams)}, {len(result.waits)} event waits"
        + (f", stream 1 joins steps {list(result.join)}" if result.join else "") + "\n"
        + (_table(rows, cols) if rows else "no cross-stream waits")))
    return 0


FIT_COLUMNS = (("weighting", "weighting", ""), ("curve", "curve", ""), ("coefficients", "coefficients (ms, highest power first)", ""),
               ("sse", "SSE (ms^2)", ".4g"), ("r2", "R^2", ".6f"), ("rel_rms", "rms rel. error", ".3f"))


def _stored_key(args: argparse.Namespace, db: ResultsDB) -> str:
    """The calibrated environment of --env, --device, or this machine's device."""
    current = None
    if args.env is None and args.device is None:
        current = get_backend(args.backend).device_info()
    return models.select_env(db, args.env, args.device, current)


def cmd_fit(args: argparse.Namespace, db_path: Path) -> int:
    with ResultsDB(db_path) as db:
        key = _stored_key(args, db)
        device = db.environment(key).get("device", key)
        fitted = {w: models.time_model(db, key, w, args.range) for w in fits.WEIGHTINGS}
    payload: dict[str, Any] = {"env_key": key, "device": device, "units": "ms", "fits": {}}
    rows = []
    for w, model in fitted.items():
        try:
            P: float | None = crossover.crossover_point(model, *(args.range or (None, None)))
            note = ""
        except ValueError as exc:
            P, note = None, str(exc)
        payload["fits"][w] = {**model.as_dict(), "P": P, **({"note": note} if note else {})}
        for curve in ("gemm", "geam"):
            f = getattr(model, curve)
            rows.append({"weighting": w, "curve": curve, "coefficients": " ".join(f"{c:+.6e}" for c in f.coef),
                         "sse": f.sse, "r2": f.r2, "rel_rms": f.rel_rms})
    _emit(args, payload, lambda: f"{device} (env {key}), sizes {fitted['relative'].size_range}\n"
          + _table(rows, FIT_COLUMNS) + "\n" + "\n".join(
              f"P ({w}): " + (f"{v['P']:.0f}" if v["P"] else v["note"]) for w, v in payload["fits"].items()))
    return 0


DEFAULT_SEARCH = (512.0, 131072.0)


def _prediction_models(args: argparse.Namespace, db_path: Path) -> tuple[Any, RecursiveModel, dict[str, Any]]:
    """(one-level speed-up function of x, recursive model, what they came from) for ``predict``."""
    config = strassen_bench.Config(args.schedule, fused=args.fused)
    launch = None if args.launch_us is None else args.launch_us / 1e3
    if args.gpu:
        gpu = hardware.lookup(args.gpu)
        model = replace(analytic_model(gpu, config.schedule, config.fused), launch_ms=launch or 0.0)
        return (lambda x: model.speedup(x, 1)), model, {"source": f"analytic model of {gpu.name}", "gpu": gpu.as_dict(),
                                                         "range": args.range or DEFAULT_SEARCH,
                                                         "launch_overhead_us": 1e3 * model.launch_ms}
    if args.coefficients:
        doc = json.loads(args.coefficients.read_text())
        tm = fits.from_coefficients(doc, str(args.coefficients))
        h = launch if launch is not None else float(doc.get("launch_us", 0.0)) / 1e3
        model = RecursiveModel(tm.gemm, tm.geam, config.schedule, config.fused, h)
        info = {"source": f"coefficients in {args.coefficients}", "range": args.range or DEFAULT_SEARCH,
                "launch_overhead_us": 1e3 * h}
    else:
        with ResultsDB(db_path) as db:
            key = _stored_key(args, db)
            tm = models.time_model(db, key, args.weighting, args.range)
            model, origin = models.stored_predictor(db, key, config)
        if launch is not None:
            model, origin = replace(model, launch_ms=launch), "given"
        lo, hi = crossover.search_range(tm, *(args.range or (None, None)))
        info = {"source": tm.source, "env_key": key, "range": (lo, hi), "launch_overhead_us": 1e3 * model.launch_ms,
                "launch_overhead_source": origin, "fits": tm.as_dict()}
    return (lambda x: crossover.speedup(tm, x, config.schedule)), model, info


def cmd_predict(args: argparse.Namespace, db_path: Path) -> int:
    if args.size <= 0 or not 1 <= args.max_level <= 10:
        raise ValueError(f"need --size > 0 and --max-level in 1..10, got {args.size} and {args.max_level}")
    one_level, model, info = _prediction_models(args, db_path)
    lo, hi = info["range"]
    P = crossover.crossing(lambda x: one_level(x) - 1.0, lo, hi, "SpeedUp(x) = 1")
    levels_ = range(args.max_level + 1)
    rec = model.boundaries(args.max_level, lo, 2 ** args.max_level * hi)
    payload = {"size": args.size, "schedule": args.schedule, "fused": args.fused, **info, "P": P,
               "boundaries": crossover.thesis_boundaries(P, args.max_level)[1:],
               "level": crossover.thesis_level(args.size, P, args.max_level),
               "level_recursive": model.level(args.size, levels_), "P_recursive": rec[0],
               "boundaries_recursive": rec[1:], "speedup_one_level": one_level(args.size),
               "times_ms": {lv: model.time(args.size, lv) for lv in levels_},
               "speedups": {lv: model.speedup(args.size, lv) for lv in levels_}}

    def text() -> str:
        def fmt(bs: Sequence[float | None]) -> str:
            return ", ".join("-" if b is None else f"{b:.0f}" for b in bs)
        return "\n".join([
            f"{info['source']}; N = {args.size}, {args.schedule}{' fused' if args.fused else ''}",
            f"thesis rule: P = {P:.0f}, boundaries (2P, 4P, ...) {fmt(payload['boundaries'])}, level {payload['level']}",
            f"recursive:   P = {fmt(rec[:1])}, boundaries {fmt(rec[1:])}, level {payload['level_recursive']}",
            "predicted speed-up by level: " + ", ".join(f"L{lv} {s:.3f}" for lv, s in payload["speedups"].items())])

    _emit(args, payload, text)
    return 0


LEVEL_COLUMNS = (("size", "N", "d"), ("best", "best", "d"), ("thesis rule (relative)", "thesis (rel.)", "d"),
                 ("thesis rule (absolute)", "thesis (LS)", "d"), ("recursive", "recursive", "d"),
                 ("times", "time by level (ms; over GEMM with --stored speedup)", ""))


def _estimate(plan: levels.LevelPlan, backend: Backend, db_path: Path) -> tuple[float | None, str]:
    """Seconds the plan should take: by the stored predictor of this device, else its analytic model."""
    info = backend.device_info()
    if db_path.is_file():
        with ResultsDB(db_path) as db:
            try:
                model, _ = models.stored_predictor(db, models.select_env(db, current=info), plan.config)
                return levels.estimate_seconds(plan, model), "stored calibration"
            except ValueError:
                pass
    try:
        gpu = hardware.lookup(info.get("device", ""))
    except ValueError:
        return None, "no calibration or hardware row for this device"
    return levels.estimate_seconds(plan, analytic_model(gpu, plan.config.schedule, plan.config.fused)), \
        f"analytic model of {gpu.name}"


def cmd_levels(args: argparse.Namespace, db_path: Path) -> int:
    backend = get_backend(args.backend)
    config = strassen_bench.Config(args.schedule, args.parallel, args.fused)
    plan = levels.custom_plan(backend, args.quick, args.sizes, args.max_level, config, args.min_bottom)
    if args.stored:
        with ResultsDB(db_path) as db:
            key = models.select_env(db, args.env, args.device, None if args.env or args.device else backend.device_info())
            if args.stored == "levels":
                report = levels.judge(db, key, config)
            else:
                report = levels.judge_times(db, key, config, levels.speedup_sweep(db, key, config), unit="gemm")
        return _emit_levels(args, backend, key, report.summary(), report)
    if args.dry_run:
        seconds, how = _estimate(plan, backend, db_path)
        payload = {"plan": {n: plan.levels(n) for n in plan.sizes}, "estimated_seconds": seconds, "estimate": how}
        _emit(args, payload, lambda: "\n".join([f"N = {n}: levels {lv}" for n, lv in payload["plan"].items()]
                                               + [f"estimated time: {'?' if seconds is None else f'{seconds:.0f} s'} ({how})"]))
        return 0
    with _measuring_run(args, db_path, backend) as ctx:
        summary, report = levels.run_plan(ctx, plan)
    return _emit_levels(args, backend, ctx.env_key, summary, report)


def _emit_levels(args: argparse.Namespace, backend: Backend, key: str, summary: dict[str, Any],
                 report: levels.Report) -> int:
    rows = report.rows()
    payload = {"backend": backend.name, "env_key": key, "summary": summary, "rows": rows}
    for r in rows:
        r["times"] = " ".join(f"{t:.4g}" for t in (r.get("times_ms") or r["times_over_gemm"]).values())
    _emit(args, payload, lambda: "\n".join(f"{k}: {v}" for k, v in summary.items()) + "\n" + _table(rows, LEVEL_COLUMNS))
    return 0


def _paths(figures: dict[str, list[Path]]) -> dict[str, list[str]]:
    return {name: [str(p) for p in paths] for name, paths in figures.items()}


def cmd_figures(args: argparse.Namespace, db_path: Path) -> int:
    with ResultsDB(db_path) as db:
        figures = reproduce.render_figures(db, args.out)
    _emit(args, {"figures": _paths(figures)}, lambda: "\n".join(
        f"{name}: {', '.join(map(str, paths))}" for name, paths in figures.items())
        or f"no stored results to draw in {db_path}")
    return 0


def cmd_reproduce(args: argparse.Namespace, db_path: Path) -> int:
    backend = get_backend(args.backend)
    selected = reproduce.select(args.only)
    with _measuring_run(args, db_path, backend) as ctx:
        summaries = reproduce.run_experiments(ctx, selected)
        env = ctx.db.environment(ctx.env_key)
    with ResultsDB(db_path) as db:
        figures = reproduce.render_figures(db, args.out)
        summary = reproduce.write_summary(args.out, args.command_line, db, env, summaries, figures)
    payload = {"backend": backend.name, "env_key": ctx.env_key, "experiments": summaries,
               "figures": _paths(figures), "summary": str(summary)}
    _emit(args, payload, lambda: summary.read_text())
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.command_line = "gemmlab " + shlex.join(argv)
    db_path = args.db or default_path()
    try:
        return args.handler(args, db_path)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # reader gone (| head): stop quietly
        return 0
    except KeyboardInterrupt:
        print("gemmlab: interrupted; every point measured so far is stored: run the same command "
              "again to resume", file=sys.stderr)
        return 130
    except (BackendUnavailable, ValueError, FileNotFoundError, RuntimeError) as exc:
        print(f"gemmlab {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
