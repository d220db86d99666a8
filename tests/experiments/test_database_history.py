"""Re-measured points: the newest row of a point is its measurement, earlier rows
move to the history table in the same transaction, so exports and figures never mix them, while
``--history`` keeps them for provenance. Version-1 files migrate on their first write open. The
import checks the whole file and adds nothing when any row is bad (item 6)."""

from __future__ import annotations

import csv
import io
import json
import sqlite3

import pytest

from experiments import cli
from experiments.core.database import SCHEMA_VERSION, ResultsDB
from experiments.strassen.bench import CONFIGS

ENV = {"device": "CPU: test", "backend": "numpy"}
V1_SCHEMA = """
CREATE TABLE runs(id INTEGER PRIMARY KEY, command TEXT, env_key TEXT, environment TEXT, status TEXT,
    started_at TEXT, finished_at TEXT);
CREATE TABLE measurements(id INTEGER PRIMARY KEY, run_id INTEGER REFERENCES runs(id), experiment TEXT,
    method TEXT, params TEXT, env_key TEXT, value REAL, unit TEXT, samples TEXT, meta TEXT, created_at TEXT);
CREATE INDEX measurements_point ON measurements(experiment, method, env_key, params);
PRAGMA user_version = 1;
"""


def table_rows(path, table: str) -> list[tuple]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(f"SELECT id, experiment, method, env_key, params FROM {table} ORDER BY id").fetchall()
    finally:
        conn.close()


def points(rows) -> list[tuple]:
    return [tuple(r[1:]) for r in rows]


def csv_rows(path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_strassen_force_keeps_one_row_per_point_and_the_earlier_ones_in_history(run_json, db_path, tmp_path):
    argv = ("strassen", "--backend", "numpy", "--sizes", "64", "--levels", "1", "--db", db_path)
    run_json(*argv)
    first = table_rows(db_path, "measurements")
    run_json(*argv, "--force")
    current, history = table_rows(db_path, "measurements"), table_rows(db_path, "history")
    assert len(current) == len(first) == len(set(points(current))) >= len(CONFIGS)
    assert history == first, "every earlier row, with its id, is in the history table"
    assert sorted(points(history)) == sorted(points(current)) and min(r[0] for r in current) > max(r[0] for r in first)
    with ResultsDB(db_path) as db:
        assert [m.id for m in db.measurements()] == [r[0] for r in sorted(current, key=lambda r: (r[1:4], r[0]))]
        assert len(db.measurements(latest=False)) == 2 * len(current)
        assert db.runs()[-1]["superseded"] == len(first) and db.runs()[0]["superseded"] == 0
    out = tmp_path / "e.csv"
    assert run_json("results", "export", "-o", out, "--db", db_path)["rows"] == len(current)
    keys = [(r["experiment"], r["method"], r["env_key"], r["params"]) for r in csv_rows(out)]
    assert len(keys) == len(set(keys)), "an export holds one row per point"
    assert run_json("results", "export", "--history", "-o", out, "--db", db_path)["rows"] == 2 * len(current)


def test_a_history_export_rebuilds_both_tables(tmp_path):
    src = tmp_path / "src.sqlite"
    with ResultsDB(src) as db:
        run = db.start_run("c", ENV, "k")
        for value in (1.0, 2.0, 3.0):
            db.add(run, "e", "m", {"n": 1}, value=value, unit="s")
        db.add(run, "e", "m", {"n": 2}, value=9.0, unit="s")
        db.export_csv(tmp_path / "all.csv", history=True)
        expected = [(m.value, m.created_at) for m in db.measurements(latest=False)]
    with ResultsDB(tmp_path / "dst.sqlite") as db:
        assert db.import_csv(tmp_path / "all.csv") == 4
        assert [m.value for m in db.measurements()] == [3.0, 9.0]
        assert sorted((m.value, m.created_at) for m in db.measurements(latest=False)) == sorted(expected)
        assert db.import_csv(tmp_path / "all.csv") == 0


def test_an_older_import_goes_to_history_and_ids_are_never_reused(tmp_path):
    src = tmp_path / "src.sqlite"
    with ResultsDB(src) as db:
        run = db.start_run("c", ENV, "k")
        db.add(run, "e", "m", {"n": 1}, value=1.0, unit="s")
        db.export_csv(tmp_path / "old.csv")
    with ResultsDB(tmp_path / "dst.sqlite") as db:
        run = db.start_run("c", ENV, "k")
        newest = db.add(run, "e", "m", {"n": 1}, value=2.0, unit="s")
        assert db.import_csv(tmp_path / "old.csv") == 1
        assert [m.value for m in db.measurements()] == [2.0]
        old = [m.id for m in db.measurements(latest=False) if m.value == 1.0]
        assert old == [newest + 1]
        assert db.add(run, "e", "m", {"n": 3}, value=4.0, unit="s") == newest + 2


def test_version_1_migrates_on_the_first_write_open(tmp_path):
    path = tmp_path / "v1.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(V1_SCHEMA)
    conn.execute("INSERT INTO runs VALUES (1, 'old', 'k', ?, 'finished', 't0', 't1')", (json.dumps(ENV),))
    for id_, n, value, created in ((1, 1, 1.0, "2024-01-01"), (2, 2, 5.0, "2024-01-02"), (3, 1, 2.0, "2024-01-03"),
                                   (4, 1, 0.5, "2023-12-31")):
        conn.execute("INSERT INTO measurements VALUES (?, 1, 'e', 'm', ?, 'k', ?, 's', '[]', '{}', ?)",
                     (id_, json.dumps({"n": n}, separators=(",", ":")), value, created))
    conn.commit()
    conn.close()
    with ResultsDB(path, readonly=True) as db:
        before = [m.as_dict() for m in db.measurements(latest=False)]
        assert [m.value for m in db.measurements()] == [5.0, 2.0]
    with ResultsDB(path) as db:
        assert db.schema_version == SCHEMA_VERSION
        assert [m.as_dict() for m in db.measurements(latest=False)] == before
        assert [m.value for m in db.measurements()] == [5.0, 2.0]
    assert [r[0] for r in table_rows(path, "measurements")] == [2, 3]
    assert [r[0] for r in table_rows(path, "history")] == [1, 4]
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT DISTINCT superseded_by FROM history").fetchall() == [(3,)]
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    with pytest.raises(sqlite3.IntegrityError):          # the schema itself holds one current row per point
        conn.execute("INSERT INTO measurements(run_id, experiment, method, params, env_key) "
                     "SELECT run_id, experiment, method, params, env_key FROM measurements LIMIT 1")
    conn.close()


# --------------------------------------------------------------------------- import checks

def export_text(rows: int = 3) -> str:
    buf = io.StringIO()
    with ResultsDB() as db:         # the per-test default database, not the one imported into
        run = db.start_run("c", ENV, "k")
        for n in range(rows):
            db.add(run, "e", "m", {"n": n}, value=float(n), unit="s", samples=[1.0, 2.0])
        db.export_csv(buf)
    return buf.getvalue()


def import_error(capsys, path, db) -> str:
    assert cli.main(["results", "import", str(path), "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    return err


def test_importing_a_file_that_is_not_an_export_says_what_one_is(capsys, db_path, tmp_path):
    path = tmp_path / "notes.csv"
    path.write_text("size,gemm_s\n1024,0.5\n")
    err = import_error(capsys, path, db_path)
    assert "notes.csv is not a results export" in err and "lacks the columns experiment, method, params" in err
    assert "gemmlab results export -o FILE" in err
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00binary")
    assert "is not a CSV text file" in import_error(capsys, path, db_path)
    with ResultsDB(db_path) as db:
        assert db.runs() == []


@pytest.mark.parametrize("column, bad, says", [("params", "{not json", "params is not JSON"),
                                               ("value", "fast", "value is not a number"),
                                               ("samples", '{"a": 1}', "samples must be a JSON list")])
def test_a_bad_row_names_its_line_and_nothing_is_imported(capsys, db_path, tmp_path, column, bad, says):
    lines = export_text().splitlines(keepends=True)
    rows = list(csv.DictReader(lines))
    rows[2][column] = bad
    path = tmp_path / "x.csv"
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    err = import_error(capsys, path, db_path)
    assert "x.csv, line 4: " + says in err and "nothing was imported" in err
    with ResultsDB(db_path) as db:
        assert db.runs() == [] and db.measurements(latest=False) == []
