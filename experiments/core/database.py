"""SQLite results database: runs (one command on one environment) and their measurements.

Every measurement is committed as soon as it is added, so an interrupted sweep loses
nothing already measured and can resume by asking ``has(...)`` for each point.
Measurements come back as :class:`Measurement` records.
"""
from __future__ import annotations

import contextlib
import csv
import json
import math
import os
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

DEFAULT_PATH = Path("results") / "gemmlab.sqlite"
SCHEMA_VERSION = 1
RUN_STATUSES = ("finished", "interrupted", "failed")
CSV_COLUMNS = ("experiment", "method", "params", "env_key", "value", "unit", "samples",
               "meta", "created_at", "run_command", "environment")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs(id INTEGER PRIMARY KEY, command TEXT, env_key TEXT,
    environment TEXT, status TEXT, started_at TEXT, finished_at TEXT);
CREATE TABLE IF NOT EXISTS measurements(id INTEGER PRIMARY KEY, run_id INTEGER REFERENCES runs(id),
    experiment TEXT, method TEXT, params TEXT, env_key TEXT, value REAL, unit TEXT,
    samples TEXT, meta TEXT, created_at TEXT);
CREATE INDEX IF NOT EXISTS measurements_point ON measurements(experiment, method, env_key, params);
"""


@dataclass(frozen=True)
class Measurement:
    """One stored measurement: a value with its unit at a point (``params``) of an experiment,
    measured by ``method`` in the environment ``env_key``, with its samples and metadata."""

    id: int
    run_id: int
    experiment: str
    method: str
    params: dict[str, Any]
    env_key: str
    value: float
    unit: str
    samples: list[float]
    meta: dict[str, Any]
    created_at: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def default_path() -> Path:
    """Database location: $GEMMLAB_DB if set, else DEFAULT_PATH relative to the cwd."""
    env = os.environ.get("GEMMLAB_DB")
    return Path(env) if env else DEFAULT_PATH


def _now() -> str:
    """Current UTC time as ISO-8601 with microseconds (orders rows made close together)."""
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def _to_python(obj: Any) -> Any:
    """JSON fallback: numpy-like scalars (anything with a 0-d ``item()``) become Python values."""
    item = getattr(obj, "item", None)
    if callable(item) and getattr(obj, "shape", None) == ():
        return item()
    raise TypeError(f"{type(obj).__name__} is not JSON serializable")


def _dumps(obj: Any) -> str:
    """JSON text for stored documents (environment, meta); numpy scalars accepted."""
    return json.dumps(obj, default=_to_python)


def canonical_params(params: Mapping[str, Any]) -> str:
    """One canonical JSON text per parameter set, so equal points compare equal in SQL."""
    for key in params:
        if not isinstance(key, str):
            raise TypeError(f"parameter key {key!r} is not a string")
    try:
        return json.dumps(dict(params), sort_keys=True, separators=(",", ":"),
                          default=_to_python, allow_nan=False)
    except (TypeError, ValueError):
        for key, val in params.items():
            try:
                json.dumps(val, default=_to_python, allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise TypeError(f"parameter {key!r} cannot be stored as JSON: {exc}") from None
        raise


class ResultsDB:
    """Results database file; open it, start a run, add measurements, finish the run."""

    def __init__(self, path: str | os.PathLike | None = None) -> None:
        self.path = Path(path) if path is not None else default_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(self.path, timeout=30.0)
        self._conn.row_factory = sqlite3.Row
        try:
            self._init_schema()
        except BaseException:
            self._conn.close()
            raise

    def _init_schema(self) -> None:
        """Check the on-disk schema version, then enable WAL and create missing tables."""
        version = self._conn.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise RuntimeError(f"{self.path}: schema version {version} is newer than the "
                               f"supported version {SCHEMA_VERSION}; upgrade gemmlab")
        self._conn.execute("PRAGMA busy_timeout = 30000")
        self._conn.execute("PRAGMA journal_mode = WAL")
        self._conn.execute("PRAGMA foreign_keys = ON")
        with self._conn:
            self._conn.executescript(_SCHEMA)
            self._conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def checkpoint(self) -> None:
        """Move the write-ahead log into the database file, so that copying the one file
        (results from a GPU machine, say) carries every committed measurement."""
        self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def close(self) -> None:
        """Checkpoint and close the connection (everything is already committed)."""
        self.checkpoint()
        self._conn.close()

    def __enter__(self) -> ResultsDB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start_run(self, command: str, environment: Mapping, env_key: str) -> int:
        """Record a new run in status "running" and return its id."""
        with self._conn:
            cur = self._conn.execute(
                "INSERT INTO runs(command, env_key, environment, status, started_at) "
                "VALUES (?, ?, ?, 'running', ?)",
                (command, env_key, _dumps(dict(environment)), _now()))
        return int(cur.lastrowid)

    def finish_run(self, run_id: int, status: str = "finished") -> None:
        """Mark a run as ended with the given status and the current time."""
        if status not in RUN_STATUSES:
            raise ValueError(f"run status must be one of {RUN_STATUSES}, not {status!r}")
        with self._conn:
            cur = self._conn.execute("UPDATE runs SET status = ?, finished_at = ? WHERE id = ?",
                                     (status, _now(), run_id))
        if cur.rowcount == 0:
            raise KeyError(f"no run with id {run_id} in {self.path}")

    def runs(self) -> list[dict]:
        """All runs, newest first, with their device and number of measurements."""
        rows = self._conn.execute(
            "SELECT r.*, (SELECT COUNT(*) FROM measurements m WHERE m.run_id = r.id) AS n "
            "FROM runs r ORDER BY r.id DESC").fetchall()
        out = []
        for r in rows:
            env = json.loads(r["environment"] or "{}")
            out.append({"id": r["id"], "command": r["command"], "env_key": r["env_key"],
                        "status": r["status"], "started_at": r["started_at"],
                        "finished_at": r["finished_at"],
                        "device": env.get("device") or env.get("cpu") or "",
                        "measurements": r["n"]})
        return out

    def environment(self, env_key: str) -> dict:
        """Environment description of the newest run with this key."""
        row = self._conn.execute("SELECT environment FROM runs WHERE env_key = ? "
                                 "ORDER BY id DESC LIMIT 1", (env_key,)).fetchone()
        if row is None:
            raise KeyError(f"no run with environment key {env_key!r} in {self.path}")
        return json.loads(row["environment"])

    def env_keys(self) -> list[str]:
        """Distinct environment keys, the most recently used first."""
        rows = self._conn.execute("SELECT env_key FROM runs GROUP BY env_key "
                                  "ORDER BY MAX(id) DESC").fetchall()
        return [r["env_key"] for r in rows]

    def has(self, experiment: str, method: str, params: Mapping, env_key: str) -> bool:
        """Whether this point was already measured on this environment (resume check)."""
        return self._exists(experiment, method, env_key, canonical_params(params))

    def _exists(self, experiment: str, method: str, env_key: str, pkey: str,
                created_at: str | None = None) -> bool:
        """Whether a row of this point exists (made at ``created_at``, if given)."""
        sql = ("SELECT 1 FROM measurements WHERE experiment = ? AND method = ? AND env_key = ? "
               "AND params = ?")
        args = [experiment, method, env_key, pkey]
        if created_at is not None:
            sql += " AND created_at = ?"
            args.append(created_at)
        return self._conn.execute(sql + " LIMIT 1", args).fetchone() is not None

    def add(self, run_id: int, experiment: str, method: str, params: Mapping, *,
            value: float, unit: str, samples: Sequence[float] = (),
            meta: Mapping | None = None) -> int:
        """Store one measurement of a run and commit at once; returns its id."""
        return self._insert(run_id, experiment, method, params, value, unit, samples, meta, _now())

    def _insert(self, run_id: int, experiment: str, method: str, params: Mapping, value: float,
                unit: str, samples: Sequence[float], meta: Mapping | None, created_at: str) -> int:
        """Validate and insert one measurement row with an explicit creation time."""
        pkey = canonical_params(params)
        value = float(value)
        if not math.isfinite(value):
            raise ValueError(f"non-finite value {value!r} for {experiment}/{method} {pkey}")
        row = self._conn.execute("SELECT env_key FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            raise KeyError(f"no run with id {run_id} in {self.path}")
        with self._conn:
            cur = self._conn.execute(
                "INSERT INTO measurements(run_id, experiment, method, params, env_key, value, "
                "unit, samples, meta, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (run_id, experiment, method, pkey, row["env_key"], value, unit,
                 json.dumps([float(s) for s in samples]), _dumps(dict(meta or {})), created_at))
        return int(cur.lastrowid)

    def _rows(self, experiment: str | None, method: str | None, env_key: str | None,
              latest: bool) -> list[sqlite3.Row]:
        """Measurement rows joined with their run, filtered and ordered."""
        where, args = [], []
        for col, val in (("experiment", experiment), ("method", method), ("env_key", env_key)):
            if val is not None:
                where.append(f"m.{col} = ?")
                args.append(val)
        if latest:
            where.append("m.id IN (SELECT id FROM (SELECT id, ROW_NUMBER() OVER (PARTITION BY "
                         "experiment, method, params, env_key ORDER BY created_at DESC, id DESC) "
                         "AS rank FROM measurements) WHERE rank = 1)")
        sql = ("SELECT m.*, r.command AS run_command, r.environment AS environment "
               "FROM measurements m LEFT JOIN runs r ON r.id = m.run_id")
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY m.experiment, m.method, m.env_key, m.id"
        return self._conn.execute(sql, args).fetchall()

    def measurements(self, experiment: str | None = None, *, method: str | None = None,
                     env_key: str | None = None, latest: bool = True) -> list[Measurement]:
        """Stored measurements; with latest=True a re-measured point shows only its newest row."""
        return [Measurement(r["id"], r["run_id"], r["experiment"], r["method"], json.loads(r["params"]),
                            r["env_key"], r["value"], r["unit"], json.loads(r["samples"]), json.loads(r["meta"]),
                            r["created_at"])
                for r in self._rows(experiment, method, env_key, latest)]

    def export_csv(self, dest: str | os.PathLike | TextIO, experiment: str | None = None) -> int:
        """Write the latest measurements (with their run's command and environment) as CSV."""
        rows = self._rows(experiment, None, None, True)
        with _open_text(dest, "w") as fh:
            writer = csv.writer(fh)
            writer.writerow(CSV_COLUMNS)
            for r in rows:
                writer.writerow([repr(r[c]) if c == "value" else r[c] for c in CSV_COLUMNS])
        return len(rows)

    def import_csv(self, src: str | os.PathLike | TextIO) -> int:
        """Add the rows of an export not already present; one new run per environment key."""
        is_path = isinstance(src, (str, os.PathLike))
        name = Path(src if is_path else getattr(src, "name", "stream")).name
        run_ids: dict[str, int] = {}
        added = 0
        with _open_text(src, "r") as fh:
            for rec in csv.DictReader(fh):
                params = json.loads(rec["params"])
                if self._exists(rec["experiment"], rec["method"], rec["env_key"],
                                canonical_params(params), rec["created_at"]):
                    continue
                key = rec["env_key"]
                if key not in run_ids:
                    run_ids[key] = self.start_run(f"import {name}",
                                                  json.loads(rec["environment"] or "{}"), key)
                self._insert(run_ids[key], rec["experiment"], rec["method"], params,
                             float(rec["value"]), rec["unit"], json.loads(rec["samples"]),
                             json.loads(rec["meta"] or "{}"), rec["created_at"])
                added += 1
        for run_id in run_ids.values():
            self.finish_run(run_id)
        return added


@contextlib.contextmanager
def _open_text(target: str | os.PathLike | TextIO, mode: str) -> Iterator[TextIO]:
    """Yield a text stream: open a path (and close it after), or pass a stream through."""
    if not isinstance(target, (str, os.PathLike)):
        yield target
        return
    with open(target, mode, newline="", encoding="utf-8") as fh:
        yield fh
