"""The results database fails safely: damaged, foreign, read-only or mistyped
files give one line naming the file and the way out, read-only commands write nothing, nothing is
overwritten, an import checks the whole file first."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import stat

import pytest

from experiments import cli
from experiments.core.database import ResultsDB

ENV = {"device": "CPU: test", "backend": "numpy"}
#: Version 1 of the schema, as files written before the history table hold it.
V1_SCHEMA = """
CREATE TABLE runs(id INTEGER PRIMARY KEY, command TEXT, env_key TEXT, environment TEXT, status TEXT,
    started_at TEXT, finished_at TEXT);
CREATE TABLE measurements(id INTEGER PRIMARY KEY, run_id INTEGER REFERENCES runs(id), experiment TEXT,
    method TEXT, params TEXT, env_key TEXT, value REAL, unit TEXT, samples TEXT, meta TEXT, created_at TEXT);
CREATE INDEX measurements_point ON measurements(experiment, method, env_key, params);
PRAGMA user_version = 1;
"""
ROOT = os.geteuid() == 0
needs_permissions = pytest.mark.skipif(ROOT, reason="root ignores file permissions")


def one_line_error(capsys, *argv: str) -> str:
    """stderr of ``gemmlab *argv``, which must exit 2 with exactly one line (no traceback)."""
    assert cli.main(list(argv)) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"gemmlab {argv[0]}: error: ")
    return err


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def stored_db(path, points: int = 200):
    """A database with one run and ``points`` measurements with long samples (many pages)."""
    with ResultsDB(path) as db:
        run = db.start_run("test", ENV, "k")
        for n in range(points):
            db.add(run, "calibration", "gemm", {"size": n, "dtype": "float64"}, value=1.0 + n, unit="s",
                   samples=[0.1 * i for i in range(50)])
    return path


def v1_db(path):
    """A version-1 file in rollback-journal mode: point n=1 measured twice, n=2 once."""
    conn = sqlite3.connect(path)
    conn.executescript(V1_SCHEMA)
    conn.execute("INSERT INTO runs VALUES (1, 'old', 'k', ?, 'finished', 't0', 't1')", (json.dumps(ENV),))
    rows = [(1, '{"n":1}', 1.0, "2024-01-01T00:00:00+00:00"), (2, '{"n":2}', 5.0, "2024-01-01T00:00:01+00:00"),
            (3, '{"n":1}', 2.0, "2024-01-02T00:00:00+00:00")]
    for id_, params, value, created in rows:
        conn.execute("INSERT INTO measurements VALUES (?, 1, 'e', 'm', ?, 'k', ?, 's', '[]', '{}', ?)",
                     (id_, params, value, created))
    conn.commit()
    conn.close()
    return path


# --------------------------------------------------------------------------- damaged and foreign files

def _text(path):
    path.write_text("experiment,method\nnot,a database\n")


def _truncated(path):
    stored_db(path)
    path.write_bytes(path.read_bytes()[:8192])


def _foreign(path):
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE photos(name TEXT)")
    conn.commit()
    conn.close()


def _newer(path):
    stored_db(path, 1)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()


BAD_FILES = {"text": (_text, "move it aside"), "truncated": (_truncated, "move it aside"),
             "foreign": (_foreign, "not a gemmlab results database"), "newer": (_newer, "upgrade gemmlab")}
COMMANDS = {"results list": ["results", "list"], "results export": ["results", "export"],
            "figures": ["figures", "--out", "FIGS"], "fit": ["fit", "--backend", "numpy"],
            "predict": ["predict", "--size", "100", "--backend", "numpy"],
            "levels --stored": ["levels", "--stored", "levels", "--backend", "numpy"],
            "calibrate": ["calibrate", "--backend", "numpy", "--sizes", "16", "--no-progress"],
            "results import": ["results", "import", "CSV"]}


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("kind", BAD_FILES)
def test_a_bad_database_file_is_one_line_naming_it_and_is_never_touched(capsys, tmp_path, kind, command):
    make, hint = BAD_FILES[kind]
    path = tmp_path / f"{kind}.sqlite"
    make(path)
    before = digest(path)
    csv_path = tmp_path / "x.csv"
    with ResultsDB(tmp_path / "good.sqlite") as good:
        good.export_csv(csv_path)
    argv = [{"FIGS": str(tmp_path / "figs"), "CSV": str(csv_path)}.get(a, a) for a in COMMANDS[command]]
    err = one_line_error(capsys, *argv, "--db", str(path))
    assert str(path) in err and hint in err
    if kind in ("text", "truncated"):
        assert "gemmlab results import" in err, "the way back: re-import the CSV exports"
    assert digest(path) == before


def test_a_mistyped_directory_is_an_error_and_creates_nothing(capsys, tmp_path):
    missing = tmp_path / "no" / "such" / "dir"
    db = str(missing / "x.sqlite")
    for argv in (["results", "list"], ["figures", "--out", str(tmp_path / "f")], ["fit", "--backend", "numpy"],
                 ["calibrate", "--backend", "numpy", "--sizes", "16", "--no-progress"],
                 ["levels", "--dry-run", "--backend", "numpy", "--quick"]):
        err = one_line_error(capsys, *argv, "--db", db)
        assert f"no directory {missing} for the results database" in err and "fix --db" in err
    assert not (tmp_path / "no").exists()


def test_a_missing_file_reads_as_empty_and_is_not_created(run_json, tmp_path):
    path = tmp_path / "absent.sqlite"
    assert run_json("results", "list", "--db", path)["runs"] == []
    assert run_json("figures", "--db", path, "--out", tmp_path / "f")["figures"] == {}
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("absent")]


def test_read_only_commands_write_nothing_and_read_version_1_as_it_is(run_json, tmp_path):
    path = v1_db(tmp_path / "old.sqlite")
    before = digest(path)
    runs = run_json("results", "list", "--db", path)["runs"]
    assert [(r["measurements"], r["superseded"]) for r in runs] == [(3, 1)]
    out = tmp_path / "out.csv"
    assert run_json("results", "export", "-o", out, "--db", path)["rows"] == 2     # the newest row per point
    assert run_json("results", "export", "--history", "-o", out, "--db", path)["rows"] == 3
    run_json("figures", "--db", path, "--out", tmp_path / "f")
    assert digest(path) == before, "no schema, journal mode or version written"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("old")) == ["old.sqlite"]
    with ResultsDB(path, readonly=True) as db:
        assert db.schema_version == 1
        assert [m.value for m in db.measurements()] == [5.0, 2.0]


def test_a_stray_sqlite_error_is_still_one_line(capsys, monkeypatch, tmp_path):
    from experiments.core import commands

    def broken(*args, **kwargs):
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(commands.ResultsDB, "runs", broken)
    stored_db(tmp_path / "r.sqlite", 1)
    assert "disk I/O error" in one_line_error(capsys, "results", "list", "--db", str(tmp_path / "r.sqlite"))


# --------------------------------------------------------------------------- permissions

@needs_permissions
def test_a_read_only_file_is_read_and_a_write_is_one_line(run_json, capsys, tmp_path):
    path = stored_db(tmp_path / "r.sqlite", 3)
    path.chmod(stat.S_IRUSR)
    assert run_json("results", "list", "--db", path)["runs"][0]["measurements"] == 3
    err = one_line_error(capsys, "calibrate", "--backend", "numpy", "--sizes", "16", "--no-progress", "--db", str(path))
    assert f"cannot write the results database {path}" in err and "--db" in err


@needs_permissions
def test_a_wal_database_in_a_read_only_directory_is_read(run_json, capsys, tmp_path):
    folder = tmp_path / "shared"
    folder.mkdir()
    path = stored_db(folder / "r.sqlite", 3)
    folder.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        assert run_json("results", "list", "--db", path)["runs"][0]["measurements"] == 3
        assert run_json("results", "export", "-o", tmp_path / "x.csv", "--db", path)["rows"] == 3
        assert sorted(p.name for p in folder.iterdir()) == ["r.sqlite"]
        err = one_line_error(capsys, "results", "import", str(tmp_path / "x.csv"), "--db", str(path))
        assert "cannot write" in err
    finally:
        folder.chmod(stat.S_IRWXU)


@needs_permissions
def test_a_pending_log_in_a_read_only_directory_is_one_line(capsys, tmp_path):
    folder = tmp_path / "shared"
    folder.mkdir()
    path = folder / "r.sqlite"
    db = ResultsDB(path)                    # still open: its log holds the rows
    db.start_run("test", ENV, "k")
    snapshot = {p.name: p.read_bytes() for p in folder.iterdir()}
    db.close()
    for p in folder.iterdir():
        p.unlink()
    for name, data in snapshot.items():
        if not name.endswith("-shm"):
            (folder / name).write_bytes(data)
    folder.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        err = one_line_error(capsys, "results", "list", "--db", str(path))
        assert "write-ahead log" in err and "r.sqlite-wal" in err
    finally:
        folder.chmod(stat.S_IRWXU)
