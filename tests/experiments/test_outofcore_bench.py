"""The out-of-core benchmark: points and memory fitting, the engine's CPU plans,
checked works, stored rows, resuming, ``--json``, the figure and the registries, all on NumPy."""

import numpy as np
import pytest

from experiments.core.database import ResultsDB
from experiments.core.registry import EXPERIMENTS, FIGURES, load
from experiments.outofcore import bench, figures, points
from experiments.outofcore.points import PLANS, Point, engine_plan, plan_points
from experiments.outofcore.report import outofcore_summary
from experiments.outofcore.rows import METHODS, OutofcoreRow
from gpu.backend import get_backend

GiB = 2**30


def test_gpu_sizes_fit_host_and_device_memory_and_the_rest_is_counted():
    sizes = PLANS[("cupy", False)]
    assert sizes == (8192, 16384, 32768, 49152, 65536)
    fits, skipped = plan_points(sizes, 125 * GiB, 80 * GiB)
    assert skipped == 0 and [p.n for p in fits] == list(sizes)
    assert [p.gemm for p in fits] == [True, True, True, True, False], "3 x 32 GiB does not fit in 72 GiB"
    fits, skipped = plan_points(sizes, 48 * GiB, 80 * GiB)
    assert [p.n for p in fits] == [8192, 16384, 32768] and skipped == 2
    fits, _ = plan_points([512], 1 * GiB, None, engine_bytes=lambda n: 0)
    assert fits == [Point(512, True, True)] and fits[0].methods == METHODS
    fits, _ = plan_points(sizes, 125 * GiB, 80 * GiB, engine_bytes=lambda n: 26 * GiB)
    assert [p.dgemm for p in fits] == [True, True, True, False, False], "48 GiB + 26 GiB do not fit in 72 GiB"
    assert fits[3].methods == ("outofcore", "gemm")


def test_monkeypatched_host_memory_leaves_points_out(monkeypatch):
    be = get_backend("numpy")
    monkeypatch.setattr(points, "host_available", lambda: int(3 * 512 * 512 * 8 / 0.9) + 1)
    assert points.fitting_points(be, (384, 512, 768)) == ([Point(384, True, True), Point(512, True, True)], 1)
    monkeypatch.setattr(points, "host_available", lambda: 1000)
    with pytest.raises(ValueError, match="no outofcore size fits"):
        points.fitting_points(be, (384,))


def test_cpu_plans_stream_several_blocks_and_panels():
    be = get_backend("numpy")
    for n, grid, panels in ((384, (2, 2), 1), (512, (2, 2), 2), (768, (3, 3), 3)):
        p = engine_plan(be, n, host_free=8 * GiB)
        assert (p.grid, len(p.panels()), p.c_buffers) == (grid, panels, 2)
        assert p.device_bytes <= points.CPU_DEVICE_MEMORY
    assert set(PLANS[("numpy", True)]) <= set(PLANS[("numpy", False)])


def test_custom_sizes_refuse_empty_and_bad_sizes():
    be = get_backend("numpy")
    assert points.custom_sizes(be, None) == PLANS[("numpy", False)]
    assert points.custom_sizes(be, [512, 384, 512]) == (384, 512)
    for sizes, message in (([], "--n is empty"), ([0], "N = 0")):
        with pytest.raises(ValueError, match=message):
            points.custom_sizes(be, sizes)


def test_a_wrong_engine_product_is_refused_before_timing(monkeypatch):
    be = get_backend("numpy")
    ops = bench.HostOperands.draw(be, 384)
    p = engine_plan(be, 384)
    point, resident = Point(384, True, True), bench.Resident.copy(ops)
    works, errors = bench.checked_works(ops, p, point, resident)
    assert list(works) == list(METHODS) and all(0 <= e < 1e-12 for e in errors.values())
    assert np.allclose(ops.C, ops.A @ ops.B)
    with monkeypatch.context() as m:
        m.setattr(bench.Resident, "gemm", lambda self, be: None)
        with pytest.raises(RuntimeError, match="dgemm at N = 384 computed a wrong product"):
            bench.checked_works(ops, p, point, resident)
    monkeypatch.setattr(bench, "run", lambda be, ops_, p, A, B, C: C.fill(1.0))
    with pytest.raises(RuntimeError, match="outofcore at N = 384 computed a wrong product"):
        bench.checked_works(ops, p, point, resident)
    monkeypatch.setattr(bench, "run", lambda be, ops_, p, A, B, C: None)
    with pytest.raises(RuntimeError, match="wrong product"):
        bench.checked_works(ops, p, Point(384, False), None)


def test_refused_product_stores_nothing(monkeypatch, db_path, capsys):
    from experiments.cli import main
    monkeypatch.setattr(bench, "run", lambda be, ops_, p, A, B, C: C.fill(0.0))
    assert main(["outofcore", "--backend", "numpy", "--n", "384", "--db", str(db_path)]) != 0
    assert "outofcore at N = 384 computed a wrong product" in capsys.readouterr().err
    with ResultsDB(db_path) as db:
        assert db.measurements("outofcore") == []


def test_command_stores_both_methods_resumes_and_prints_json(run_json, db_path):
    argv = ("outofcore", "--backend", "numpy", "--n", "384,512", "--db", str(db_path))
    out = run_json(*argv)
    assert set(out) == {"backend", "env_key", "summary", "verdict", "rows"} and out["backend"] == "numpy"
    assert out["summary"]["points measured"] == 2 and out["summary"]["points left out (memory)"] == 0
    assert [(r["n"], r["method"]) for r in out["rows"]] == [(n, m) for n in (384, 512) for m in METHODS]
    assert [c["met"] for c in out["verdict"]] == [None, None]
    for r in out["rows"]:
        assert r["tflops"] == pytest.approx(2 * r["n"] ** 3 / r["time_s"] / 1e12) and r["check_error"] < 1e-12
        assert (r["block"] is None) == (r["method"] != "outofcore")
        assert (r["as_called_s"] is None) == (r["method"] == "gemm"), "the engine's call and the baseline's as called"
    engine = next(r for r in out["rows"] if r["method"] == "outofcore")
    assert engine["call"] == "outofcore.matmul(A, B, out=C)" and engine["host_s"] > 0 and engine["ratio_as_called"] > 0
    with ResultsDB(db_path) as db:
        stored = db.measurements("outofcore")
    assert len(stored) == 6
    for m in stored:
        assert m.params == {"n": m.params["n"], "dtype": "float64", "regime": "sustained"} and len(m.samples) >= 10
        assert m.meta["vs_gemm"] == pytest.approx(m.meta["gemm_s"] / m.value)
        assert m.meta["vs_dgemm"] == pytest.approx(m.meta["dgemm_s"] / m.value)
        plan = m.meta["plan"]
        assert (plan is None) == (m.method != "outofcore")
        if m.method == "outofcore":
            assert m.meta["device_s"] == m.value and m.meta["reference_call"].startswith("numpy.matmul(A, B, out=C)")
            assert m.meta["ratio_as_called"] == pytest.approx(m.meta["reference_s"] / m.meta["as_called_s"])
        if plan:
            assert plan["flops"] == 2 * m.params["n"] ** 3 and plan["c_buffers"] == 2 and plan["block"] == [256, 256]
    again = run_json(*argv)
    assert (again["summary"]["points measured"], again["summary"]["points already stored"]) == (0, 2)
    assert [r["time_s"] for r in again["rows"]] == [r["time_s"] for r in out["rows"]]


def test_reproduce_and_the_figure_from_stored_rows(run_json, db_path, tmp_path, monkeypatch):
    monkeypatch.setitem(PLANS, ("numpy", True), (384,))
    load()
    out = run_json("reproduce", "--quick", "--backend", "numpy", "--only", "outofcore", "--db", str(db_path),
                   "--out", str(tmp_path))
    found = out["experiments"]["outofcore"]
    assert found["points measured"] == 1 and found["scope"].startswith("N = 384")
    assert (tmp_path / "outofcore-tflops.png").stat().st_size > 10_000
    with ResultsDB(db_path) as db:
        fig = figures.render_tflops(db)
        stored = {m.method: m.meta["tflops"] for m in db.measurements("outofcore")}
    lines = {ln.get_label(): ln for ln in fig.axes[0].get_lines() if not ln.get_label().startswith("_")}
    assert set(lines) == {"out-of-core engine", "in-core DGEMM, host to host", "in-core DGEMM, operands on the device"}
    assert lines["out-of-core engine"].get_ydata()[0] == pytest.approx(stored["outofcore"])
    assert fig.axes[0].get_xscale() == "log"


def test_figure_without_data_draws_nothing(db_path):
    with ResultsDB(db_path) as db:
        assert figures.render_tflops(db) is None


def test_registries_hold_the_experiment_and_the_figure():
    load()
    assert "outofcore" in EXPERIMENTS and FIGURES["outofcore-tflops"].experiments == ("outofcore", "segmented")


def row(method, n, tflops, vs_dgemm, error=1e-15):
    return OutofcoreRow(method, n, "float64", 1.0, tflops, None, True, error, "sustained", (256, 256), 256, vs_dgemm)


def test_the_verdict_judges_n_32768_and_65536():
    counts = {"points measured": 0, "points already stored": 0, "points left out (memory)": 0,
              "in-core GEMM left out (device memory)": 1, "sizes": "N = x"}
    summary = outofcore_summary(counts, [row("outofcore", 32768, 55.0, 0.95), row("dgemm", 32768, 58.0, 1.0),
                                         row("outofcore", 65536, 54.0, None)])
    assert [c.met for c in summary.checks] == [True, True]
    assert summary.table("speed over the in-core DGEMM, operands on the device").records() == [
        {"N": 32768, "outofcore": 0.95}, {"N": 65536, "outofcore": None}]
    slow = outofcore_summary(counts, [row("outofcore", 32768, 40.0, 0.7), row("outofcore", 65536, 54.0, None, 1.0)])
    assert [c.met for c in slow.checks] == [False, False]
    assert [c.met for c in outofcore_summary(counts, []).checks] == [None, None]


def test_calibrate_transfer_writes_the_rates_into_the_profile(run_json, tmp_path, monkeypatch):
    from gpu import profile as profiles
    from gpu.outofcore import rates

    monkeypatch.setenv(profiles.ENV_VAR, str(tmp_path))
    monkeypatch.setattr(rates, "COPY_BYTES", 2**20)
    monkeypatch.setattr(rates, "GEMM_SIDE", 128)
    out = run_json("calibrate", "--transfer", "--backend", "numpy")
    assert set(out["rates"]) == {*rates.RATES, "h2d_bytes_per_s", "d2h_bytes_per_s", "staging_bytes_per_s"}
    doc = profiles.load_profile(out["profile"])
    assert doc["transfer"]["link_bytes_per_s"] == out["rates"]["link_bytes_per_s"] > 0
    p = engine_plan(get_backend("numpy"), 768)
    assert p.device_bytes <= points.CPU_DEVICE_MEMORY
