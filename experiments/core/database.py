"""SQLite results database: runs (one command on one environment) and their measurements.

Every measurement is committed as soon as it is added, so an interrupted sweep loses
nothing already measured and can resume by asking ``has(...)`` for each point.
Measurements come back as :class:`Measurement` records.

A point (experiment, method, params, environment) has one current measurement, its newest.
Measuring it again (``--force``) or importing a newer row moves the earlier one to the
``history`` table in the same transaction, so :meth:`ResultsDB.measurements`, exports and
figures see one row per point, while ``measurements(latest=False)`` and
``export_csv(history=True)`` still give every row ever stored, for provenance.

Commands that only read open the file with ``readonly=True``; how the file is opened, its
schema versions and the one-line errors for a damaged or unwritable file are in
:mod:`experiments.core.dbfile`, the CSV format in :mod:`experiments.core.csvio`.
"""
from __future__ import annotations

import json
import math
import os
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

from .csvio import CSV_COLUMNS, ExportRow, open_text, read_export, stream_name, write_export
from .dbfile import COLUMNS, NEWEST_V1, SCHEMA_VERSION, DatabaseError, connect, guarded, release

DEFAULT_PATH = Path("results") / "gemmlab.sqlite"
RUN_STATUSES = ("finished", "interrupted", "failed")
__all__ = ["CSV_COLUMNS", "DEFAULT_PATH", "SCHEMA_VERSION", "DatabaseError", "Measurement", "ResultsDB",
           "canonical_params", "default_path", "imported_command"]


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


def imported_command(command: str, name: str) -> str:
    """The command of a run that imports rows from file ``name`` made by ``command``: that command, marked as
    imported once (a row imported again keeps the first mark), or ``import NAME`` where none is recorded."""
    if not command or command.startswith("import "):
        return command or f"import {name}"
    return command if "(imported from " in command else f"{command} (imported from {name})"


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
    """Results database file; open it, start a run, add measurements, finish the run.

    ``readonly=True`` (the commands that only read) writes nothing, not even the schema or the
    journal mode, creates no file beside a database that gemmlab closed, reads a version-1 file without
    migrating it, and reads a missing file in an
    existing directory as an empty database without creating it. Any failure of SQLite, on
    opening or in a query, comes out as one :class:`DatabaseError` naming the file and the way out.
    """

    def __init__(self, path: str | os.PathLike | None = None, *, readonly: bool = False) -> None:
        self.path = Path(path) if path is not None else default_path()
        self.readonly = readonly
        self._depth = 0          # nesting of _transaction
        self._conn, self.schema_version = connect(self.path, readonly, create_parent=self.path == DEFAULT_PATH)

    # ----------------------------------------------------------------------- connection

    def _query(self, sql: str, args: Sequence[Any] = ()) -> list[sqlite3.Row]:
        """Every row of one read, with SQLite's errors as DatabaseError."""
        with guarded(self.path):
            return self._conn.execute(sql, args).fetchall()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, committed at the end or rolled back on any error; nested uses join
        the outer one. ``BEGIN IMMEDIATE`` takes the write lock first, so two writers queue instead
        of failing when a read turns into a write."""
        if self.readonly:
            raise DatabaseError(self.path, f"{self.path} is open read-only (ResultsDB(readonly=True)); "
                                           "open it without readonly to write")
        if self._depth:
            self._depth += 1
            try:
                yield self._conn
            finally:
                self._depth -= 1
            return
        with guarded(self.path):
            self._conn.execute("BEGIN IMMEDIATE")
        self._depth = 1
        try:
            with guarded(self.path):
                yield self._conn
                self._conn.execute("COMMIT")
        except BaseException:
            with suppress(sqlite3.Error):
                self._conn.execute("ROLLBACK")
            raise
        finally:
            self._depth = 0

    def _source(self, current: bool) -> str:
        """The measurement rows as a table expression: each point's current row, or every row stored."""
        cols = ", ".join(COLUMNS)
        if self.schema_version >= 2:
            return "measurements" if current else \
                f"(SELECT {cols} FROM measurements UNION ALL SELECT {cols} FROM history)"
        return f"(SELECT * FROM measurements WHERE id IN ({NEWEST_V1}))" if current else "measurements"

    def checkpoint(self) -> None:
        """Move the write-ahead log into the database file, so that copying the one file
        (results from a GPU machine, say) carries every committed measurement."""
        if not self.readonly:
            with guarded(self.path):
                self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def close(self) -> None:
        """Close the connection (everything is already committed). A writer first merges the log into
        the file and, as the file's last user, leaves it one file that readers open without creating
        ``-wal`` or ``-shm`` files (:func:`~experiments.core.dbfile.release`)."""
        try:
            if not self.readonly:
                with guarded(self.path):
                    release(self._conn)
        finally:
            self._conn.close()

    def __enter__(self) -> ResultsDB:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is None:
            self.close()
            return
        with suppress(DatabaseError):      # the error in flight is the one to report
            self.close()

    # ----------------------------------------------------------------------- runs

    def start_run(self, command: str, environment: Mapping, env_key: str) -> int:
        """Record a new run in status "running" and return its id."""
        with self._transaction() as conn:
            cur = conn.execute("INSERT INTO runs(command, env_key, environment, status, started_at) "
                               "VALUES (?, ?, ?, 'running', ?)", (command, env_key, _dumps(dict(environment)), _now()))
        return int(cur.lastrowid)

    def finish_run(self, run_id: int, status: str = "finished") -> None:
        """Mark a run as ended with the given status and the current time."""
        if status not in RUN_STATUSES:
            raise ValueError(f"run status must be one of {RUN_STATUSES}, not {status!r}")
        with self._transaction() as conn:
            cur = conn.execute("UPDATE runs SET status = ?, finished_at = ? WHERE id = ?", (status, _now(), run_id))
            if cur.rowcount == 0:
                raise KeyError(f"no run with id {run_id} in {self.path}")

    def runs(self) -> list[dict]:
        """All runs, newest first, with their device, the measurements they stored and how many of
        those a later measurement of the same point has superseded."""
        def per_run(current: bool) -> dict[int, int]:
            rows = self._query(f"SELECT run_id, COUNT(*) AS n FROM {self._source(current)} GROUP BY run_id")
            return {r["run_id"]: r["n"] for r in rows}
        stored, current = per_run(False), per_run(True)
        out = []
        for r in self._query("SELECT * FROM runs ORDER BY id DESC"):
            env = json.loads(r["environment"] or "{}")
            out.append({"id": r["id"], "command": r["command"], "env_key": r["env_key"],
                        "status": r["status"], "started_at": r["started_at"],
                        "finished_at": r["finished_at"],
                        "device": env.get("device") or env.get("cpu") or "",
                        "measurements": stored.get(r["id"], 0),
                        "superseded": stored.get(r["id"], 0) - current.get(r["id"], 0)})
        return out

    def environment(self, env_key: str) -> dict:
        """Environment description of the newest run with this key."""
        rows = self._query("SELECT environment FROM runs WHERE env_key = ? ORDER BY id DESC LIMIT 1", (env_key,))
        if not rows:
            raise KeyError(f"no run with environment key {env_key!r} in {self.path}")
        return json.loads(rows[0]["environment"])

    def env_keys(self) -> list[str]:
        """Distinct environment keys, the most recently used first."""
        return [r["env_key"] for r in self._query("SELECT env_key FROM runs GROUP BY env_key ORDER BY MAX(id) DESC")]

    # ----------------------------------------------------------------------- measurements

    def has(self, experiment: str, method: str, params: Mapping, env_key: str) -> bool:
        """Whether this point was already measured on this environment (resume check)."""
        return self._exists(experiment, method, env_key, canonical_params(params))

    def _exists(self, experiment: str, method: str, env_key: str, pkey: str,
                created_at: str | None = None) -> bool:
        """Whether a row of this point exists (made at ``created_at``, if given: current or superseded)."""
        sql = (f"SELECT 1 FROM {'measurements' if created_at is None else self._source(False)} "
               "WHERE experiment = ? AND method = ? AND env_key = ? AND params = ?")
        args = [experiment, method, env_key, pkey]
        if created_at is not None:
            sql += " AND created_at = ?"
            args.append(created_at)
        return bool(self._query(sql + " LIMIT 1", args))

    def add(self, run_id: int, experiment: str, method: str, params: Mapping, *,
            value: float, unit: str, samples: Sequence[float] = (),
            meta: Mapping | None = None) -> int:
        """Store one measurement of a run and commit at once; returns its id. An earlier row of the
        same point (a forced re-measure) moves to the history table in the same transaction."""
        pkey = canonical_params(params)
        value = float(value)
        if not math.isfinite(value):
            raise ValueError(f"non-finite value {value!r} for {experiment}/{method} {pkey}")
        samples_text, meta_text = json.dumps([float(s) for s in samples]), _dumps(dict(meta or {}))
        with self._transaction():
            return self._store(run_id, experiment, method, pkey, value, unit, samples_text, meta_text, _now())

    def _store(self, run_id: int, experiment: str, method: str, pkey: str, value: float, unit: str,
               samples: str, meta: str, created_at: str) -> int:
        """Insert one row (inside a transaction) as its point's current row when it is the newest,
        moving the previous one to history, else straight into history; returns its id. Ids are
        shared by both tables and never reused, so an id names one row for good."""
        conn = self._conn
        run = conn.execute("SELECT env_key FROM runs WHERE id = ?", (run_id,)).fetchone()
        if run is None:
            raise KeyError(f"no run with id {run_id} in {self.path}")
        new_id = conn.execute("SELECT COALESCE(MAX(id), 0) + 1 FROM (SELECT MAX(id) AS id FROM measurements "
                              "UNION ALL SELECT MAX(id) FROM history)").fetchone()[0]
        row = (new_id, run_id, experiment, method, pkey, run["env_key"], value, unit, samples, meta, created_at)
        current = conn.execute("SELECT id, created_at FROM measurements WHERE experiment = ? AND method = ? "
                               "AND env_key = ? AND params = ?", (experiment, method, run["env_key"], pkey)).fetchone()
        cols, marks = ", ".join(COLUMNS), ", ".join("?" * len(COLUMNS))
        if current is not None and current["created_at"] > created_at:     # an older row (an import)
            conn.execute(f"INSERT INTO history({cols}, superseded_by) VALUES ({marks}, ?)", (*row, current["id"]))
            return new_id
        if current is not None:
            conn.execute(f"INSERT INTO history({cols}, superseded_by) SELECT {cols}, ? FROM measurements "
                         "WHERE id = ?", (new_id, current["id"]))
            conn.execute("DELETE FROM measurements WHERE id = ?", (current["id"],))
        conn.execute(f"INSERT INTO measurements({cols}) VALUES ({marks})", row)
        return new_id

    def _rows(self, experiment: str | None, method: str | None, env_key: str | None,
              latest: bool) -> list[sqlite3.Row]:
        """Measurement rows joined with their run, filtered and ordered."""
        where, args = [], []
        for col, val in (("experiment", experiment), ("method", method), ("env_key", env_key)):
            if val is not None:
                where.append(f"m.{col} = ?")
                args.append(val)
        sql = (f"SELECT m.*, r.command AS run_command, r.environment AS environment "
               f"FROM {self._source(latest)} m LEFT JOIN runs r ON r.id = m.run_id")
        if where:
            sql += " WHERE " + " AND ".join(where)
        return self._query(sql + " ORDER BY m.experiment, m.method, m.env_key, m.id", args)

    def measurements(self, experiment: str | None = None, *, method: str | None = None,
                     env_key: str | None = None, latest: bool = True) -> list[Measurement]:
        """Stored measurements: the current (newest) row of each point, or with ``latest=False``
        every row ever stored, superseded ones included; ordered by experiment, method, environment, id."""
        return [Measurement(r["id"], r["run_id"], r["experiment"], r["method"], json.loads(r["params"]),
                            r["env_key"], r["value"], r["unit"], json.loads(r["samples"]), json.loads(r["meta"]),
                            r["created_at"])
                for r in self._rows(experiment, method, env_key, latest)]

    # ----------------------------------------------------------------------- CSV

    def export_csv(self, dest: str | os.PathLike | TextIO, experiment: str | None = None, *,
                   history: bool = False) -> int:
        """Write the current measurements (with their run's command and environment) as CSV;
        ``history=True``: every row, superseded ones too (importing that file rebuilds both)."""
        rows = self._rows(experiment, None, None, not history)
        with open_text(dest, "w") as fh:
            return write_export(fh, rows)

    def import_csv(self, src: str | os.PathLike | TextIO) -> int:
        """Add the rows of an export not already stored (same point and creation time); one new run
        per environment and command recorded (rows of one key measured at different commits keep their
        own), named by the command that made its rows, ``(imported from FILE)`` added, so that an export of
        the database still says how each row was measured. The file is checked whole first and imported in
        one transaction, so a bad file or row adds nothing. A row older than the stored one of its point
        goes to history."""
        name = stream_name(src)
        with open_text(src, "r") as fh:
            rows = read_export(fh, name)
        run_ids: dict[tuple[str, str, str], int] = {}
        added = 0
        with self._transaction():
            for rec in rows:
                pkey = self._import_key(rec, name)
                if self._exists(rec.experiment, rec.method, rec.env_key, pkey, rec.created_at):
                    continue
                run = (rec.env_key, json.dumps(rec.environment, sort_keys=True, default=str), rec.run_command)
                if run not in run_ids:
                    run_ids[run] = self.start_run(imported_command(rec.run_command, name), rec.environment,
                                                  rec.env_key)
                self._store(run_ids[run], rec.experiment, rec.method, pkey, rec.value, rec.unit,
                            json.dumps(rec.samples), _dumps(rec.meta), rec.created_at)
                added += 1
            for run_id in run_ids.values():
                self.finish_run(run_id)
        return added

    @staticmethod
    def _import_key(rec: ExportRow, name: str) -> str:
        try:
            return canonical_params(rec.params)
        except TypeError as exc:
            raise ValueError(f"{name}, line {rec.line}: {exc}; nothing was imported") from None
