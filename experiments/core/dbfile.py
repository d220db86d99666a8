"""The results database file: opening it read-only or for writing, its schema versions, and
SQLite's errors turned into one-line :class:`DatabaseError` messages that name the file and the way out.

The rules, so that a mistyped path or a damaged file never costs stored results:

* **read-only opens write nothing**: no schema, no journal-mode change, no migration, no new file.
  A missing file in an existing directory is a database with nothing stored yet (an empty
  in-memory database stands in for it).
* **write opens** create the file (in an existing directory only: the parent is created for the
  default location ``results/gemmlab.sqlite`` and no other, so a mistyped ``--db`` is an error, not
  a new empty database), create or migrate the schema in one transaction, and switch to WAL, so that
  readers and the writer of a long sweep never wait for each other.
* **the last writer to close leaves one file** (:func:`release`): the log merged into it and the file
  back in rollback-journal mode, which a read-only open reads without creating ``-wal`` or ``-shm``
  files (SQLite creates both for any reader of a file in WAL mode, and only a writer may remove them).
  So the commands that only read leave the folder as they found it, and copying the one file copies
  every result. A file still in WAL mode (a writer running, one that crashed, or a reader that was
  open when the last writer closed) is read through its log as usual, and the next writer to close
  returns it to one file.
* **nothing is overwritten**: a file that is not a gemmlab results database (a CSV, another
  application's SQLite file, a truncated copy) is refused with the way out, never initialised over;
  so is a schema newer than this version of gemmlab knows.

Schema versions: 1 kept every re-measured row in ``measurements`` (readers picked the newest);
2 keeps only the newest row of each point there (a unique index says so) and moves superseded
rows to ``history``. A version-1 file is migrated on its first write open and read as it is by a
read-only open.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

SCHEMA_VERSION = 2
#: Columns of a measurement row, in ``measurements`` and ``history`` alike.
COLUMNS = ("id", "run_id", "experiment", "method", "params", "env_key", "value", "unit", "samples", "meta",
           "created_at")
#: Seconds a command waits for another process's write lock before giving up.
LOCK_TIMEOUT = 30.0

_MEASUREMENT_COLUMNS = ("id INTEGER PRIMARY KEY, run_id INTEGER REFERENCES runs(id), experiment TEXT, "
                        "method TEXT, params TEXT, env_key TEXT, value REAL, unit TEXT, samples TEXT, "
                        "meta TEXT, created_at TEXT")
_RUNS = ("CREATE TABLE IF NOT EXISTS runs(id INTEGER PRIMARY KEY, command TEXT, env_key TEXT, "
         "environment TEXT, status TEXT, started_at TEXT, finished_at TEXT)")
_MEASUREMENTS = f"CREATE TABLE IF NOT EXISTS measurements({_MEASUREMENT_COLUMNS})"
#: ``superseded_by``: the id of the row that was the point's newest when this one was moved here.
_HISTORY = f"CREATE TABLE IF NOT EXISTS history({_MEASUREMENT_COLUMNS}, superseded_by INTEGER)"
_POINT = "experiment, method, env_key, params"
_CURRENT_INDEX = f"CREATE UNIQUE INDEX IF NOT EXISTS measurements_point ON measurements({_POINT})"
_HISTORY_INDEX = f"CREATE INDEX IF NOT EXISTS history_point ON history({_POINT})"
#: The newest row of each point in a version-1 table (newest: latest created_at, then highest id).
NEWEST_V1 = (f"SELECT id FROM (SELECT id, ROW_NUMBER() OVER (PARTITION BY {_POINT} ORDER BY created_at DESC, "
             "id DESC) AS rank FROM measurements) WHERE rank = 1")

#: Where stored results can come back from when a database file has to be set aside.
REIMPORT = ("stored results can be re-imported with gemmlab results import from CSV exports "
            "(results/published, or your own gemmlab results export -o FILE)")


class DatabaseError(RuntimeError):
    """The results database cannot be opened, read or written; the message is one line naming the
    file and what to do. A RuntimeError, so the command line reports it as one line."""

    def __init__(self, path: Path, message: str) -> None:
        super().__init__(message)
        self.path = path


def _codes(exc: sqlite3.Error) -> tuple[int | None, str]:
    """(primary SQLite result code or None, lower-case message) of an error."""
    code = getattr(exc, "sqlite_errorcode", None)       # Python 3.11+
    return (code & 0xFF if code is not None else None), str(exc).lower()


def translate(exc: sqlite3.Error, path: Path) -> DatabaseError:
    """One-line error for a failure of SQLite on ``path``, by its result code (or message)."""
    code, text = _codes(exc)
    if code in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB) or "not a database" in text or "malformed" in text:
        return malformed(path, str(exc))
    if code == sqlite3.SQLITE_READONLY or "readonly" in text:
        return read_only(path)
    if code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED) or "locked" in text:
        return DatabaseError(path, f"the results database {path} stayed locked by another process for "
                                   f"{LOCK_TIMEOUT:.0f} s; run again when that process has finished")
    if code == sqlite3.SQLITE_FULL:
        return DatabaseError(path, f"no space left to write the results database {path}; free disk space and "
                                   "run again (everything stored before is kept)")
    if code == sqlite3.SQLITE_CANTOPEN or "unable to open" in text:
        return DatabaseError(path, f"cannot open the results database {path} ({exc}); check that --db names a "
                                   "readable file in a readable directory")
    return DatabaseError(path, f"results database {path}: {exc}")


def malformed(path: Path, reason: str) -> DatabaseError:
    return DatabaseError(path, f"{path} is not a readable gemmlab results database ({reason}): move it aside "
                               "(gemmlab never overwrites it) and run again to start a new one; " + REIMPORT)


def read_only(path: Path) -> DatabaseError:
    return DatabaseError(path, f"cannot write the results database {path}: the file or its directory is "
                               "read-only; give --db a writable path, or fix the permissions (commands that "
                               "only read, such as results list, results export and figures, still work)")


@contextmanager
def guarded(path: Path) -> Iterator[None]:
    """Turn any SQLite error raised inside into a :class:`DatabaseError` about ``path``."""
    try:
        yield
    except sqlite3.Error as exc:
        raise translate(exc, path) from exc


# --------------------------------------------------------------------------- opening

def connect(path: Path, readonly: bool, create_parent: bool = False) -> tuple[sqlite3.Connection, int]:
    """An open connection to ``path`` and its schema version (2 after a write open).

    ``create_parent``: create a missing parent directory (the default location only). Without it
    a missing parent is an error, for reading and writing alike: it is a mistyped path.
    Connections are in autocommit mode; writers run explicit ``BEGIN IMMEDIATE`` transactions.
    """
    parent = path.parent
    if path.is_dir():
        raise DatabaseError(path, f"--db {path} is a directory; give a file such as {path / 'gemmlab.sqlite'}")
    if not parent.is_dir():
        if parent.exists():
            raise DatabaseError(path, f"{parent} is not a directory, so it cannot hold the results database "
                                      f"{path}; fix --db")
        if not create_parent:
            raise DatabaseError(path, f"no directory {parent} for the results database {path}; create it or fix "
                                      "--db")
        if readonly:
            return empty(), SCHEMA_VERSION
        parent.mkdir(parents=True, exist_ok=True)
    if readonly:
        if not path.exists():
            return empty(), SCHEMA_VERSION
        return _open_readonly(path)
    return _open_for_writing(path)


def empty() -> sqlite3.Connection:
    """An empty read-only database in memory: what a missing file holds ("nothing stored yet")."""
    conn = _configure(sqlite3.connect(":memory:", isolation_level=None))
    for statement in (_RUNS, _MEASUREMENTS, _HISTORY, _CURRENT_INDEX, _HISTORY_INDEX):
        conn.execute(statement)
    conn.execute("PRAGMA query_only = ON")
    return conn


def _configure(conn: sqlite3.Connection) -> sqlite3.Connection:
    conn.row_factory = sqlite3.Row
    return conn


def _open_readonly(path: Path) -> tuple[sqlite3.Connection, int]:
    """Open with ``mode=ro``; in a read-only directory fall back to ``immutable=1`` when that is safe.

    SQLite reads a WAL database through its ``-shm`` index, which it must be able to create; in a
    directory we cannot write (a shared or archived results folder) ``mode=ro`` fails. ``immutable=1``
    reads the main file without that index and without locks, which is correct only while nothing
    else can change the file under us and every committed result is in the main file: so it is used
    only when the directory is read-only to us (a writer would need to create its log there) and
    there is no ``-wal`` file with content (gemmlab merges the log into the file on closing).
    A pending log in a read-only directory is an error that says how to merge it.

    A file that gemmlab's writers closed is in rollback-journal mode, and ``mode=ro`` reads it with
    no other file, in any directory. Only while the file is in WAL mode does a reader in a writable
    directory create SQLite's ``-wal`` and ``-shm`` files if they are missing, with its own ownership
    and the database file's permissions (SQLite's rule for WAL readers); in a folder shared by several
    users, let the group write them.
    """
    uri = path.resolve().as_uri()
    conn = _configure(sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=LOCK_TIMEOUT, isolation_level=None))
    try:
        conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
    except sqlite3.OperationalError as exc:
        conn.close()
        code, text = _codes(exc)
        cannot_index = code in (sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN) or "readonly" in text \
            or "unable to open" in text
        wal = path.with_name(path.name + "-wal")
        if not cannot_index or os.access(path.parent, os.W_OK):
            raise translate(exc, path) from exc
        if wal.exists() and wal.stat().st_size > 0:
            raise DatabaseError(path, f"cannot read {path}: its write-ahead log {wal} holds results not yet merged "
                                      f"into it, and SQLite cannot read the log in the read-only directory "
                                      f"{path.parent}; make the directory writable once (any gemmlab command then "
                                      "merges the log) or copy both files elsewhere") from exc
        conn = _configure(sqlite3.connect(f"{uri}?immutable=1", uri=True, isolation_level=None))
    except sqlite3.Error as exc:
        conn.close()
        raise translate(exc, path) from exc
    try:
        with guarded(path):
            version = stored_version(conn, path)
    except BaseException:
        conn.close()
        raise
    if version == 0:            # an empty file: nothing stored yet
        conn.close()
        return empty(), SCHEMA_VERSION
    return conn, version


def _open_for_writing(path: Path) -> tuple[sqlite3.Connection, int]:
    """Open (creating the file in its existing directory), create or migrate the schema, use WAL."""
    if (path.exists() and not os.access(path, os.W_OK)) or not os.access(path.parent, os.W_OK):
        raise read_only(path)
    conn = _configure(sqlite3.connect(path, timeout=LOCK_TIMEOUT, isolation_level=None))
    try:
        with guarded(path):
            conn.execute(f"PRAGMA busy_timeout = {int(1000 * LOCK_TIMEOUT)}")
            if stored_version(conn, path) < SCHEMA_VERSION:
                _upgrade(conn, path)
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA foreign_keys = ON")
    except BaseException:
        conn.close()
        raise
    return conn, SCHEMA_VERSION


def release(conn: sqlite3.Connection) -> None:
    """Before a writer closes: merge the write-ahead log into the file and, when no other connection has
    the file open, return it to rollback-journal mode, which deletes the ``-wal`` and ``-shm`` files and
    lets read-only opens read the file alone. With another connection open (a reader, a second writer)
    the switch is not waited for: the file stays in WAL mode and the last writer to close does it."""
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute("PRAGMA busy_timeout = 0")
    try:
        conn.execute("PRAGMA journal_mode = DELETE")
    except sqlite3.OperationalError as exc:
        code, text = _codes(exc)
        if code not in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED) and "locked" not in text:
            raise


# --------------------------------------------------------------------------- schema versions

def stored_version(conn: sqlite3.Connection, path: Path) -> int:
    """The schema version of an open file (0: an empty file); DatabaseError for a file newer than
    this gemmlab or one that is some other SQLite database."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if version > SCHEMA_VERSION:
        raise DatabaseError(path, f"{path} has results database schema version {version}, newer than the "
                                  f"version {SCHEMA_VERSION} this gemmlab reads; upgrade gemmlab (the file is "
                                  "left as it is)")
    if version == 0 and not tables:
        return 0
    if version == 0 and {"runs", "measurements"} <= tables:
        version = 1             # tables made by version 1, interrupted before it set the version
    needed = {"runs", "measurements"} | ({"history"} if version >= 2 else set())
    if version == 0 or not needed <= tables:
        raise DatabaseError(path, f"{path} is an SQLite file but not a gemmlab results database (tables: "
                                  f"{', '.join(sorted(tables)) or 'none'}); give --db another file (gemmlab never "
                                  "writes into it)")
    return version


def _upgrade(conn: sqlite3.Connection, path: Path) -> None:
    """Create the schema in an empty file, or migrate version 1, in one transaction (the version is
    read again under the write lock: another process may have upgraded it meanwhile)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = stored_version(conn, path)
        if version < SCHEMA_VERSION:
            for statement in (_RUNS, _MEASUREMENTS, _HISTORY):
                conn.execute(statement)
            if version == 1:
                _move_superseded_v1(conn)
            for statement in (_CURRENT_INDEX, _HISTORY_INDEX):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        with suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
        raise


def _move_superseded_v1(conn: sqlite3.Connection) -> None:
    """Version 1 to 2: every row but the newest of its point moves to ``history``, superseded by it."""
    cols = ", ".join(COLUMNS)
    on = " AND ".join(f"m.{c} = n.{c}" for c in ("experiment", "method", "env_key", "params"))
    conn.execute(f"INSERT INTO history({cols}, superseded_by) SELECT {', '.join('m.' + c for c in COLUMNS)}, n.id "
                 f"FROM measurements m JOIN (SELECT * FROM measurements WHERE id IN ({NEWEST_V1})) n ON {on} "
                 "WHERE m.id != n.id")
    conn.execute("DELETE FROM measurements WHERE id IN (SELECT id FROM history)")
    conn.execute("DROP INDEX IF EXISTS measurements_point")
