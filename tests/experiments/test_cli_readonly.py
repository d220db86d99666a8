"""Commands that only read leave the database's folder and its runs as they found them: no ``-wal`` or
``-shm`` files beside it, no run recorded; a reader still sees what a writer in another process commits."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from experiments import cli
from experiments.core.database import ResultsDB

ROOT = Path(__file__).resolve().parents[2]
ENV = {"device": "test device", "backend": "numpy"}
#: Every command that only reads the database (the README's list), as arguments after ``gemmlab``.
READ_ONLY = {
    "results list": ["results", "list"],
    "results export": ["results", "export", "-o", "{out}/rows.csv"],
    "figures": ["figures", "--out", "{out}/figures"],
    "fit": ["fit", "--backend", "numpy", "--device", "H100"],
    "predict": ["predict", "--size", "16384", "--backend", "numpy", "--device", "H100"],
    "levels --stored": ["levels", "--stored", "levels", "--backend", "numpy", "--device", "H100"],
    "levels --dry-run": ["levels", "--dry-run", "--quick", "--backend", "numpy"],
    "strassen --stored": ["strassen", "--stored", "--backend", "numpy", "--device", "H100"],
}


def files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def run_count(path: Path) -> int:
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?immutable=1", uri=True)
    try:
        return conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
    finally:
        conn.close()


@pytest.fixture
def stored(published_db, tmp_path):
    """A folder holding only a copy of the published results database, as gemmlab leaves it."""
    folder = tmp_path / "db"
    folder.mkdir()
    return Path(shutil.copy(published_db, folder / "results.sqlite"))


@pytest.mark.parametrize("name", READ_ONLY)
def test_a_read_only_command_leaves_the_folder_and_the_runs_as_they_were(capsys, stored, tmp_path, name):
    before, runs = files(stored.parent), run_count(stored)
    argv = [a.format(out=tmp_path) for a in READ_ONLY[name]]
    assert cli.main([*argv, "--json", "--db", str(stored)]) == 0, capsys.readouterr().err
    json.loads(capsys.readouterr().out)
    assert files(stored.parent) == before
    assert run_count(stored) == runs


def test_a_writer_leaves_one_file_that_readers_open_without_a_log(tmp_path):
    path = tmp_path / "r.sqlite"
    with ResultsDB(path) as db:
        run = db.start_run("test", ENV, "k")
        db.add(run, "e", "m", {"n": 1}, value=1.0, unit="s")
        assert db._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal", "writers run in WAL mode"
    assert files(tmp_path) == ["r.sqlite"]
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    conn.close()
    with ResultsDB(path, readonly=True) as db:
        assert [m.value for m in db.measurements()] == [1.0]
    assert files(tmp_path) == ["r.sqlite"]


def test_a_database_left_in_wal_mode_is_returned_to_one_file_by_the_next_writer(tmp_path):
    path = tmp_path / "old.sqlite"
    with ResultsDB(path) as db:
        db.start_run("test", ENV, "k")
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode = WAL")      # as an older gemmlab, or a crashed writer, left it
    conn.close()
    with ResultsDB(path) as db:
        db.start_run("again", ENV, "k")
    assert files(tmp_path) == ["old.sqlite"]
    with ResultsDB(path, readonly=True) as db:
        assert [r["command"] for r in db.runs()] == ["again", "test"]
    assert files(tmp_path) == ["old.sqlite"]


def test_a_reader_open_while_the_writer_closes_keeps_reading_and_the_next_writer_cleans_up(tmp_path):
    path = tmp_path / "r.sqlite"
    writer = ResultsDB(path)
    run = writer.start_run("test", ENV, "k")
    reader = ResultsDB(path, readonly=True)
    writer.add(run, "e", "m", {"n": 1}, value=1.0, unit="s")
    assert [m.value for m in reader.measurements()] == [1.0], "a reader sees what the writer committed"
    writer.close()                                  # the reader still has the file open: it stays in WAL
    assert [m.value for m in reader.measurements()] == [1.0]
    reader.close()
    with ResultsDB(path) as db:
        db.add(run, "e", "m", {"n": 2}, value=2.0, unit="s")
    assert files(tmp_path) == ["r.sqlite"]


WRITER = """
import sys, time
from experiments.core.database import ResultsDB
with ResultsDB(sys.argv[1]) as db:
    run = db.start_run("writer", {"device": "test"}, "k")
    print("started", flush=True)
    for n in range(int(sys.argv[2])):
        db.add(run, "e", "m", {"n": n}, value=float(n), unit="s")
        time.sleep(0.01)
"""


def test_results_list_reads_while_another_process_writes(capsys, tmp_path):
    path = tmp_path / "r.sqlite"
    ResultsDB(path).close()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(path), "150"], env=env, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert writer.stdout.readline().strip() == "started"
        seen = []
        while writer.poll() is None:
            assert cli.main(["results", "list", "--json", "--db", str(path)]) == 0
            [run] = json.loads(capsys.readouterr().out)["runs"]
            seen.append(run["measurements"])
    finally:
        writer.wait(timeout=60)
    assert writer.returncode == 0
    assert seen == sorted(seen) and len(seen) > 1
    assert cli.main(["results", "list", "--json", "--db", str(path)]) == 0
    assert json.loads(capsys.readouterr().out)["runs"][0]["measurements"] == 150
