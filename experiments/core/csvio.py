"""The CSV export format of the results database: writing it, and reading it back checked.

An export has one header row, exactly :data:`CSV_COLUMNS`, and one row per measurement: its
point (experiment, method, params as JSON, env_key), its value (``repr`` of the float, so it
reads back bit-exact) and unit, its samples (a JSON list), its metadata (a JSON object), when
it was made, and the command and environment (a JSON object) of the run that made it.

:func:`read_export` checks the whole file before the database sees any of it: a file that is
not an export names the missing columns and what an export is, and a bad row names its line.
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

CSV_COLUMNS = ("experiment", "method", "params", "env_key", "value", "unit", "samples",
               "meta", "created_at", "run_command", "environment")
#: What a valid file looks like, for the messages about one that is not.
WHAT_AN_EXPORT_IS = ("an export is a CSV file with the header row " + ",".join(CSV_COLUMNS)
                     + ", as gemmlab results export -o FILE writes it")


@dataclass(frozen=True)
class ExportRow:
    """One parsed row of an export, with the line it starts on."""

    line: int
    experiment: str
    method: str
    params: dict[str, Any]
    env_key: str
    value: float
    unit: str
    samples: list[float]
    meta: dict[str, Any]
    created_at: str
    environment: dict[str, Any]
    run_command: str = ""


def write_export(fh: TextIO, rows: Iterable[Mapping[str, Any]]) -> int:
    """Write the header and one row per mapping (which has every column); returns the row count."""
    writer = csv.writer(fh)
    writer.writerow(CSV_COLUMNS)
    count = 0
    for r in rows:
        writer.writerow([repr(r[c]) if c == "value" else r[c] for c in CSV_COLUMNS])
        count += 1
    return count


def read_export(fh: TextIO, name: str) -> list[ExportRow]:
    """Every row of an export, checked; ValueError naming ``name`` (and the line) for anything else."""
    try:
        reader = csv.DictReader(fh)
        header = reader.fieldnames
        if not header:
            raise ValueError(f"{name} is empty, not a results export; {WHAT_AN_EXPORT_IS}")
        missing = [c for c in CSV_COLUMNS if c not in header]
        if missing:
            found = _short(",".join(h or "" for h in header), 60)
            raise ValueError(f"{name} is not a results export: its header {found} lacks the columns "
                             f"{', '.join(missing)}; {WHAT_AN_EXPORT_IS}")
        rows, start = [], reader.line_num + 1
        for rec in reader:
            rows.append(_parse(rec, start, name))
            start = reader.line_num + 1
        return rows
    except (UnicodeDecodeError, csv.Error) as exc:
        raise ValueError(f"{name} is not a CSV text file ({exc}); {WHAT_AN_EXPORT_IS}") from None


def _json(text: str | None, kind: type, column: str, empty: Any = None) -> Any:
    """A JSON value of ``kind`` (``empty`` stands for a blank cell where allowed)."""
    if not text and empty is not None:
        return empty
    try:
        value = json.loads(text or "")
    except json.JSONDecodeError as exc:
        raise ValueError(f"{column} is not JSON ({exc.msg}): {_short(text)}") from None
    if not isinstance(value, kind):
        raise ValueError(f"{column} must be a JSON {'object' if kind is dict else 'list'}, got {_short(text)}")
    return value


def _short(text: str | None, width: int = 40) -> str:
    text = repr(text)
    return text if len(text) <= width else text[: width - 3] + "..."


def _parse(rec: dict[str | None, str | None], line: int, name: str) -> ExportRow:
    """One record checked field by field; ValueError with ``name`` and ``line``."""
    try:
        named = [k for k in rec if k is not None]
        got = len(named) + len(rec[None]) if None in rec else sum(rec[k] is not None for k in named)
        if got != len(named):
            raise ValueError(f"has {got} fields where the header has {len(named)}")
        for column in ("experiment", "method", "env_key", "created_at"):
            if not rec[column]:
                raise ValueError(f"{column} is empty")
        try:
            value = float(rec["value"] or "")
        except ValueError:
            raise ValueError(f"value is not a number: {_short(rec['value'])}") from None
        if not math.isfinite(value):
            raise ValueError(f"value is not finite: {rec['value']}")
        samples = _json(rec["samples"], list, "samples", empty=[])
        if not all(isinstance(s, (int, float)) and not isinstance(s, bool) for s in samples):
            raise ValueError("samples must be a JSON list of numbers")
        return ExportRow(line, str(rec["experiment"]), str(rec["method"]), _json(rec["params"], dict, "params"),
                         str(rec["env_key"]), value, str(rec["unit"]), [float(s) for s in samples],
                         _json(rec["meta"], dict, "meta", empty={}), str(rec["created_at"]),
                         _json(rec["environment"], dict, "environment", empty={}), str(rec["run_command"] or ""))
    except ValueError as exc:
        raise ValueError(f"{name}, line {line}: {exc}; nothing was imported") from None


@contextlib.contextmanager
def open_text(target: str | os.PathLike | TextIO, mode: str) -> Iterator[TextIO]:
    """Yield a text stream: open a path (and close it after), or pass a stream through."""
    if not isinstance(target, (str, os.PathLike)):
        yield target
        return
    with open(target, mode, newline="", encoding="utf-8") as fh:
        yield fh


def stream_name(src: str | os.PathLike | TextIO) -> str:
    """The file name of a path or stream, for messages and the import run's command."""
    if isinstance(src, (str, os.PathLike)):
        return Path(src).name
    return Path(getattr(src, "name", "stream")).name
