"""Tests for experiments.database: storage, resume checks, latest semantics, CSV round trip."""
from __future__ import annotations

import csv
import io
import json
import math
import sqlite3
import struct

import numpy as np
import pytest

from experiments.core.database import (
    DEFAULT_PATH,
    SCHEMA_VERSION,
    ResultsDB,
    canonical_params,
    default_path,
    imported_command,
)

ENV = {"device": "NVIDIA H100", "driver": "560.35", "cuda": "12.6"}
SAMPLES = [0.1 + 0.2, 1e-310, math.pi / 3, 2.0**-1074, 1.7976931348623157e308, -0.0]


def bits(xs):
    return [struct.pack("<d", x) for x in xs]


@pytest.fixture
def db(tmp_path):
    with ResultsDB(tmp_path / "r.sqlite") as d:
        yield d


def test_round_trip_preserves_samples_and_meta_bit_exact(db):
    run = db.start_run("gemmlab sweep", ENV, "h100")
    meta = {"kernel": "sgemm_128x128", "flops": 2 * 4096**3, "ratio": 1 / 3, "tags": ["a", 1]}
    mid = db.add(run, "gemm", "cublas", {"n": 4096, "dtype": "fp32"},
                 value=0.1 + 0.7, unit="ms", samples=SAMPLES, meta=meta)
    [m] = db.measurements()
    assert m.id == mid and m.run_id == run
    assert (m.experiment, m.method, m.env_key, m.unit) == ("gemm", "cublas", "h100", "ms")
    assert m.params == {"n": 4096, "dtype": "fp32"}
    assert bits([m.value]) == bits([0.1 + 0.7])
    assert bits(m.samples) == bits(SAMPLES)
    assert m.meta == meta and m.meta["ratio"].hex() == (1 / 3).hex()
    assert m.created_at.endswith("+00:00")


def test_numpy_samples_and_params_accepted(db):
    run = db.start_run("c", ENV, "k")
    db.add(run, "e", "m", {"n": np.int64(64), "alpha": np.float32(0.5)}, value=np.float64(1.5),
           unit="s", samples=np.array([1.0, 2.5]))
    assert db.has("e", "m", {"alpha": 0.5, "n": 64}, "k")
    assert db.measurements()[0].samples == [1.0, 2.5]


def test_wal_mode_active(db):
    assert db._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    other = sqlite3.connect(db.path)
    try:
        assert other.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        other.close()


def test_has_matches_only_same_env_and_exact_params(db):
    run = db.start_run("c", ENV, "envA")
    db.start_run("c", ENV, "envB")
    assert not db.has("gemm", "ozaki", {"n": 256, "k": 7}, "envA")
    db.add(run, "gemm", "ozaki", {"n": 256, "k": 7}, value=1.0, unit="ms")
    assert db.has("gemm", "ozaki", {"n": 256, "k": 7}, "envA")
    assert db.has("gemm", "ozaki", {"k": 7, "n": 256}, "envA")
    assert not db.has("gemm", "ozaki", {"n": 256, "k": 8}, "envA")
    assert not db.has("gemm", "ozaki", {"n": 256}, "envA")
    assert not db.has("gemm", "ozaki", {"n": 256, "k": 7}, "envB")
    assert not db.has("gemm", "strassen", {"n": 256, "k": 7}, "envA")
    assert not db.has("trsm", "ozaki", {"n": 256, "k": 7}, "envA")


def test_latest_keeps_newest_row_per_point(db):
    run = db.start_run("c", ENV, "k")
    old = db.add(run, "gemm", "cublas", {"n": 1}, value=1.0, unit="ms")
    other = db.add(run, "gemm", "cublas", {"n": 2}, value=5.0, unit="ms")
    run2 = db.start_run("c --force", ENV, "k")
    new = db.add(run2, "gemm", "cublas", {"n": 1}, value=2.0, unit="ms")
    latest = db.measurements("gemm")
    assert [m.id for m in latest] == [other, new]
    assert {m.params["n"]: m.value for m in latest} == {1: 2.0, 2: 5.0}
    assert [m.id for m in db.measurements("gemm", latest=False)] == [old, other, new]


def test_measurements_filters_and_order(db):
    ra = db.start_run("c", ENV, "b-env")
    rb = db.start_run("c", ENV, "a-env")
    db.add(ra, "gemm", "z", {"n": 1}, value=1.0, unit="ms")
    db.add(rb, "gemm", "z", {"n": 1}, value=2.0, unit="ms")
    db.add(ra, "gemm", "a", {"n": 1}, value=3.0, unit="ms")
    db.add(ra, "accuracy", "a", {"n": 1}, value=4.0, unit="rel")
    assert [m.value for m in db.measurements()] == [4.0, 3.0, 2.0, 1.0]
    assert [m.value for m in db.measurements("gemm", method="z")] == [2.0, 1.0]
    assert [m.value for m in db.measurements(env_key="b-env")] == [4.0, 3.0, 1.0]
    assert db.measurements("nothing") == []


def test_runs_counts_status_and_device(db):
    r1 = db.start_run("first", ENV, "gpu")
    r2 = db.start_run("second", {"cpu": "EPYC 9654"}, "cpu")
    r3 = db.start_run("third", {}, "bare")
    for n in range(3):
        db.add(r1, "e", "m", {"n": n}, value=float(n), unit="s")
    db.add(r2, "e", "m", {"n": 0}, value=1.0, unit="s")
    db.finish_run(r1)
    db.finish_run(r2, "interrupted")
    runs = db.runs()
    assert [r["id"] for r in runs] == [r3, r2, r1]
    by_id = {r["id"]: r for r in runs}
    assert by_id[r1]["measurements"] == 3 and by_id[r2]["measurements"] == 1
    assert by_id[r3]["measurements"] == 0
    assert by_id[r1]["status"] == "finished" and by_id[r1]["finished_at"]
    assert by_id[r2]["status"] == "interrupted"
    assert by_id[r3]["status"] == "running" and by_id[r3]["finished_at"] is None
    assert [by_id[r]["device"] for r in (r1, r2, r3)] == ["NVIDIA H100", "EPYC 9654", ""]
    assert by_id[r1]["command"] == "first" and by_id[r1]["env_key"] == "gpu"


def test_invalid_status_raises(db):
    run = db.start_run("c", ENV, "k")
    with pytest.raises(ValueError, match="done"):
        db.finish_run(run, "done")
    assert db.runs()[0]["status"] == "running"
    db.finish_run(run, "failed")
    assert db.runs()[0]["status"] == "failed"


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_value_raises(db, bad):
    run = db.start_run("c", ENV, "k")
    with pytest.raises(ValueError, match=r"gemm/cublas.*\"n\":8"):
        db.add(run, "gemm", "cublas", {"n": 8}, value=bad, unit="ms")
    assert db.measurements(latest=False) == []


def test_add_to_unknown_run_raises(db):
    with pytest.raises(KeyError):
        db.add(99, "e", "m", {}, value=1.0, unit="s")


def test_environment_and_env_keys(db):
    db.start_run("c", {"device": "old"}, "k1")
    db.start_run("c", {"device": "x"}, "k2")
    db.start_run("c", {"device": "new"}, "k1")
    assert db.environment("k1") == {"device": "new"}
    assert db.env_keys() == ["k1", "k2"]
    with pytest.raises(KeyError, match="missing"):
        db.environment("missing")


def test_canonical_params_numpy_and_order():
    text = canonical_params({"b": np.int32(3), "a": np.float64(0.25), "c": np.bool_(True),
                             "d": [np.int64(1), "x"]})
    assert text == '{"a":0.25,"b":3,"c":true,"d":[1,"x"]}'
    assert canonical_params({"y": 1, "x": 2}) == canonical_params({"x": 2, "y": 1})


@pytest.mark.parametrize("bad", [object(), {1, 2}, np.zeros(3), math.nan])
def test_canonical_params_rejects_non_json_naming_key(bad):
    with pytest.raises(TypeError, match="offender"):
        canonical_params({"ok": 1, "offender": bad})


def test_csv_round_trip_into_fresh_db(tmp_path, db):
    r1 = db.start_run("sweep gemm", ENV, "h100")
    r2 = db.start_run("sweep cpu", {"cpu": "EPYC", "threads": 64}, "epyc")
    db.add(r1, "gemm", "cublas", {"n": 1}, value=0.1, unit="ms", samples=[0.1, 0.2])
    db.add(r1, "gemm", "cublas", {"n": 1}, value=0.3, unit="ms", samples=SAMPLES,
           meta={"note": 'quote " and, comma\nnewline'})
    db.add(r2, "gemm", "mkl", {"n": 2, "dtype": "fp64"}, value=1 / 3, unit="ms")
    path = tmp_path / "out.csv"
    assert db.export_csv(path) == 2
    with ResultsDB(tmp_path / "fresh.sqlite") as fresh:
        assert fresh.import_csv(path) == 2
        key = lambda m: (m.experiment, m.method, m.env_key, m.created_at)
        fields = ("experiment", "method", "params", "env_key", "value", "unit", "meta",
                  "created_at")
        src, dst = db.measurements(), fresh.measurements()
        assert [[getattr(m, f) for f in fields] for m in sorted(src, key=key)] == \
               [[getattr(m, f) for f in fields] for m in sorted(dst, key=key)]
        assert [bits(m.samples) for m in sorted(src, key=key)] == \
               [bits(m.samples) for m in sorted(dst, key=key)]
        assert bits([m.value for m in dst]) == bits([m.value for m in src])
        assert fresh.environment("h100") == ENV
        assert fresh.environment("epyc") == {"cpu": "EPYC", "threads": 64}
        runs = fresh.runs()
        assert {r["command"] for r in runs} == {"sweep gemm (imported from out.csv)",
                                                 "sweep cpu (imported from out.csv)"}
        assert {r["status"] for r in runs} == {"finished"}
        assert sorted(r["env_key"] for r in runs) == ["epyc", "h100"]


def test_import_twice_adds_nothing(tmp_path, db):
    run = db.start_run("c", ENV, "k")
    for n in range(4):
        db.add(run, "e", "m", {"n": n}, value=float(n), unit="s")
    buf = io.StringIO()
    assert db.export_csv(buf, experiment="e") == 4
    with ResultsDB(tmp_path / "fresh.sqlite") as fresh:
        assert fresh.import_csv(io.StringIO(buf.getvalue())) == 4
        n_runs = len(fresh.runs())
        assert fresh.import_csv(io.StringIO(buf.getvalue())) == 0
        assert len(fresh.measurements(latest=False)) == 4
        assert len(fresh.runs()) == n_runs
    assert db.import_csv(io.StringIO(buf.getvalue())) == 0


def test_rows_of_one_key_measured_at_two_commits_keep_their_commits_through_an_import(tmp_path, db):
    """The environment key leaves the commit out (rows of two commits are one series); an import still gives
    each row the environment it was measured in, so a merged export names every row's code."""
    for commit, n in (("aaa", 1), ("bbb", 2)):
        run = db.start_run("c", {**ENV, "git_commit": commit}, "k")
        db.add(run, "e", "m", {"n": n}, value=float(n), unit="s")
    buf = io.StringIO()
    assert db.export_csv(buf) == 2
    with ResultsDB(tmp_path / "fresh.sqlite") as fresh:
        assert fresh.import_csv(io.StringIO(buf.getvalue())) == 2
        again = io.StringIO()
        fresh.export_csv(again)
    with ResultsDB(tmp_path / "third.sqlite") as third:
        third.import_csv(io.StringIO(again.getvalue()))
        last = io.StringIO()
        third.export_csv(last)
    rows = list(csv.DictReader(io.StringIO(last.getvalue())))
    assert {json.loads(r["params"])["n"]: json.loads(r["environment"])["git_commit"] for r in rows} == {
        1: "aaa", 2: "bbb"}


def test_export_filters_by_experiment(db):
    run = db.start_run("c", ENV, "k")
    db.add(run, "a", "m", {}, value=1.0, unit="s")
    db.add(run, "b", "m", {}, value=2.0, unit="s")
    buf = io.StringIO()
    assert db.export_csv(buf, experiment="b") == 1
    lines = buf.getvalue().splitlines()
    assert lines[0].split(",")[:3] == ["experiment", "method", "params"]
    assert len(lines) == 2 and lines[1].startswith("b,m,")


def test_default_path_honors_env_var(monkeypatch, tmp_path):
    monkeypatch.delenv("GEMMLAB_DB", raising=False)
    assert default_path() == DEFAULT_PATH == __import__("pathlib").Path("results/gemmlab.sqlite")
    target = tmp_path / "sub" / "custom.sqlite"
    target.parent.mkdir()
    monkeypatch.setenv("GEMMLAB_DB", str(target))
    assert default_path() == target
    with ResultsDB() as d:
        assert d.path == target
    assert target.exists()


def test_only_the_default_location_gets_its_folder_created(monkeypatch, tmp_path):
    monkeypatch.delenv("GEMMLAB_DB", raising=False)
    monkeypatch.chdir(tmp_path)
    with ResultsDB() as d:
        assert d.path == DEFAULT_PATH
    assert (tmp_path / DEFAULT_PATH).is_file()


def test_reopen_keeps_data(tmp_path):
    path = tmp_path / "nested" / "dir" / "r.sqlite"
    path.parent.mkdir(parents=True)
    with ResultsDB(path) as d:
        run = d.start_run("c", ENV, "k")
        d.add(run, "e", "m", {"n": 1}, value=4.5, unit="s", samples=[4.5, 4.6])
    with ResultsDB(path) as d:
        assert d.has("e", "m", {"n": 1}, "k")
        assert [(m.value, m.samples) for m in d.measurements()] == [(4.5, [4.5, 4.6])]
        assert d.runs()[0]["measurements"] == 1


def test_newer_schema_version_raises(tmp_path):
    path = tmp_path / "future.sqlite"
    ResultsDB(path).close()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(RuntimeError, match="future.sqlite"):
        ResultsDB(path)


def test_import_of_an_older_export_keeps_the_newer_measurement(tmp_path):
    src = tmp_path / "src.sqlite"
    with ResultsDB(src) as db:
        run = db.start_run("cal", {"device": "X"}, "k")
        db.add(run, "cal", "gemm", {"size": 8}, value=1.0, unit="s")
        db.export_csv(tmp_path / "old.csv")
        db.add(run, "cal", "gemm", {"size": 8}, value=2.0, unit="s")
        db.export_csv(tmp_path / "new.csv")
    with ResultsDB(tmp_path / "dst.sqlite") as db:
        db.import_csv(tmp_path / "new.csv")
        db.import_csv(tmp_path / "old.csv")
        assert [m.value for m in db.measurements("cal")] == [2.0]


def test_checkpoint_leaves_every_row_in_the_main_file(tmp_path):
    src = tmp_path / "a.sqlite"
    db = ResultsDB(src)
    run = db.start_run("cal", {"device": "X"}, "k")
    db.add(run, "cal", "gemm", {"size": 8}, value=1.5, unit="s")
    db.checkpoint()
    copy = tmp_path / "copy.sqlite"
    copy.write_bytes(src.read_bytes())
    with ResultsDB(copy) as other:
        assert [m.value for m in other.measurements("cal")] == [1.5]
    db.close()


def test_an_import_keeps_the_command_that_made_each_row_once(tmp_path, db):
    """Rows imported twice over keep their first command, marked once; rows with no command get the file's."""
    run = db.start_run("gemmlab sweep --n 4", ENV, "k")
    db.add(run, "e", "m", {"n": 1}, value=1.0, unit="s")
    first, second = tmp_path / "a.csv", tmp_path / "b.csv"
    db.export_csv(first)
    with ResultsDB(tmp_path / "one.sqlite") as one:
        one.import_csv(first)
        one.export_csv(second)
    with ResultsDB(tmp_path / "two.sqlite") as two:
        two.import_csv(second)
        assert [r["command"] for r in two.runs()] == ["gemmlab sweep --n 4 (imported from a.csv)"]
    assert imported_command("", "c.csv") == "import c.csv" and imported_command("import d.csv", "c.csv") == \
        "import d.csv"
