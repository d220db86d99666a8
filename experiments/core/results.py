"""The commands of the results database: ``results list``, ``results export`` and ``results import``.

They touch the database only, so this module imports nothing of the GPU layer or the families:
listing or exporting starts as fast as Python and SQLite do. ``list`` and ``export`` open the file
read-only: they leave the folder as they found it and record no run.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .command import command, emit, table
from .database import ResultsDB


@command("results list")
def cmd_results_list(args: argparse.Namespace, db_path: Path) -> int:
    with ResultsDB(db_path, readonly=True) as db:
        runs = db.runs()
    columns = (("id", "run", "d"), ("started_at", "started (UTC)", ""), ("status", "status", ""),
               ("measurements", "points", "d"), ("superseded", "superseded", "d"), ("device", "device", ""),
               ("command", "command", ""))
    emit(args, {"db": str(db_path), "runs": runs}, lambda: table(runs, columns) if runs else f"no runs in {db_path}")
    return 0


def _export_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", default="-", help="CSV file (default: stdout)")
    p.add_argument("--experiment", default=None, help="only this experiment")
    p.add_argument("--history", action="store_true",
                   help="also the rows superseded by a later measurement of the same point (--force, or a "
                        "newer import), kept for provenance; importing the file restores both")


@command("results export", arguments=_export_arguments)
def cmd_results_export(args: argparse.Namespace, db_path: Path) -> int:
    target = sys.stdout if args.output == "-" else args.output
    if args.json and target is sys.stdout:
        raise ValueError("--json with CSV on stdout would mix formats; give -o FILE")
    with ResultsDB(db_path, readonly=True) as db:
        count = db.export_csv(target, args.experiment, history=args.history)
    if target is not sys.stdout:
        emit(args, {"path": str(args.output), "rows": count}, lambda: f"{count} rows -> {args.output}")
    return 0


@command("results import", arguments=lambda p: p.add_argument("file", type=Path))
def cmd_results_import(args: argparse.Namespace, db_path: Path) -> int:
    if not args.file.is_file():
        raise FileNotFoundError(f"no such CSV file: {args.file}")
    with ResultsDB(db_path) as db:
        count = db.import_csv(args.file)
    emit(args, {"db": str(db_path), "rows": count}, lambda: f"{count} rows imported into {db_path}")
    return 0
