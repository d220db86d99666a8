"""The segmented benchmark: points and memory, the largest-N table against the paper's
K40, checked works, stored rows, resuming, ``--json`` and ``reproduce``, all on NumPy (the emulation)."""

import numpy as np
import pytest

from experiments.core.command import COMMANDS
from experiments.core.database import ResultsDB
from experiments.core.registry import EXPERIMENTS, load
from experiments.segmented import bench, points
from experiments.segmented.points import PLANS, Point, custom_points, largest_sizes
from experiments.segmented.report import EMULATION, METHODS
from gpu.backend import get_backend
from modeling.decomposition import segment_bytes_1d, segment_bytes_2d

GiB = 2**30


def test_the_k40_sizes_follow_from_the_spec_formulas():
    """12 GB of device in two 6 GB buffers and 512 GiB of host, FP32 (the paper's machine)."""
    found = largest_sizes(12e9, 512 * GiB, 4)
    assert found["unsplit"] == 31616                       # the paper: 31,584
    assert found["1d"] == 38688 and found["1d_m"] == 38688 // 32        # the paper: 38,496; one tile row a task
    assert segment_bytes_1d(38688, found["1d_m"], 4) <= 6e9 < segment_bytes_1d(38720, 38720 // 32, 4)
    assert found["2d"] == 214016                           # host-bound; the paper ran 207,680 of 482 GiB
    m = found["2d_m"]
    assert m == 62**2 and segment_bytes_2d(214016, m, 4) <= 6e9 < segment_bytes_2d(214016, 61**2, 4)
    fp64 = largest_sizes(12e9, 512 * GiB, 8)
    assert fp64["unsplit"] < found["unsplit"] and fp64["2d"] < found["2d"]


def test_points_refuse_bad_sizes_and_segments():
    be = get_backend("numpy")
    assert [p.n for p in custom_points(be, None)] == list(PLANS[("numpy", False)])
    assert custom_points(be, [576, 288, 576], 9, "float64") == [Point(288, "float64", 9), Point(576, "float64", 9)]
    for sizes, m, message in (([], 4, "--n is empty"), ([100], 4, "N = 100 must be a multiple of the tile 32"),
                              ([64], 4, "at least M = 4 tile rows"), ([128], 3, "perfect square")):
        with pytest.raises(ValueError, match=message):
            custom_points(be, sizes, m)


def test_monkeypatched_host_memory_leaves_points_out(monkeypatch):
    be = get_backend("numpy")
    wanted = [Point(128), Point(256)]
    monkeypatch.setattr(points, "host_available", lambda: int(points.needs(Point(128), True)[1] / 0.9) + 1)
    assert points.fitting_points(be, wanted) == ([Point(128)], 1)
    monkeypatch.setattr(points, "host_available", lambda: 1000)
    with pytest.raises(ValueError, match="no segmented size fits"):
        points.fitting_points(be, wanted)


def test_a_wrong_product_is_refused_before_timing(monkeypatch):
    arrays = bench.Arrays(get_backend("numpy"), Point(128))
    works, errors = bench.checked_works(arrays, "here")
    assert list(works) == list(METHODS) and all(0 <= e < 1e-5 for e in errors.values())
    assert np.allclose(arrays.C, arrays.A.astype(np.float64) @ arrays.B, rtol=1e-5)
    monkeypatch.setattr(bench, "run", lambda ops, found, A, B, C, buffers: C[:, :64].fill(0.0))
    with pytest.raises(RuntimeError, match="1d at here computed a wrong product"):
        bench.checked_works(arrays, "here")


def test_command_stores_every_method_resumes_and_prints_json(run_json, db_path):
    argv = ("segmented", "--backend", "numpy", "--n", "128,256", "--db", str(db_path))
    out = run_json(*argv)
    summary = out["summary"]
    assert summary["points measured"] == 2 and summary["points left out (memory)"] == 0
    assert summary["largest N (float32)"].startswith("unsplit ") and out["verdict"] == []
    assert [(r["n"], r["method"]) for r in out["rows"]] == [(n, m) for n in (128, 256) for m in METHODS]
    for r in out["rows"]:
        assert r["tflops"] == pytest.approx(2 * r["n"] ** 3 / r["time_s"] / 1e12) and r["check_error"] < 1e-5
        assert r["executor"] == EMULATION and r["m"] == 4 and r["dtype"] == "float32"
        assert (r["over_whole"] == 1.0) == (r["method"] == "whole")
    with ResultsDB(db_path) as db:
        stored = db.measurements("segmented")
    assert len(stored) == 8
    for m in stored:
        assert set(m.params) == {"n", "dtype", "m", "regime"} and len(m.samples) >= 10
        assert m.meta["over_whole"] == pytest.approx(m.value / m.meta["whole_s"])
    again = run_json(*argv)
    assert (again["summary"]["points measured"], again["summary"]["points already stored"]) == (0, 2)
    assert [r["time_s"] for r in again["rows"]] == [r["time_s"] for r in out["rows"]]


def test_reproduce_runs_it_end_to_end_with_the_largest_n_table(run_json, db_path, tmp_path, monkeypatch):
    monkeypatch.setitem(PLANS, ("numpy", True), (128,))
    load()
    out = run_json("reproduce", "--quick", "--backend", "numpy", "--only", "segmented", "--db", str(db_path),
                   "--out", str(tmp_path))
    found = out["experiments"]["segmented"]
    assert found["points measured"] == 1 and found["scope"] == "N = 128; float32; M = 4"
    assert found["index-translation overhead"].endswith("at N = 128 (float32, NumPy emulation)")
    assert list(found["time over the whole-array kernel"][0]) == ["N", "M", *METHODS]
    limits = {r["dtype"]: r for r in found["largest N on this machine"]}
    assert set(limits) == {"float32", "float64"} and limits["float32"]["unsplit (M = 1)"] % 32 == 0
    assert any("emulated" in note for note in found["notes"])
    assert "### segmented" in (tmp_path / "SUMMARY.md").read_text()


def test_the_registries_hold_the_experiment_and_the_command():
    load()
    assert "segmented" in EXPERIMENTS and ("segmented",) in COMMANDS
