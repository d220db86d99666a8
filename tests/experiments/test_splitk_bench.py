"""The split-K benchmark: planning, operands, checked works, stored rows, resuming,
arguments, the summary and the figures, all on NumPy."""

from functools import partial

import numpy as np
import pytest

from experiments.cli import main
from experiments.core.database import ResultsDB
from experiments.core.registry import FIGURES, load
from experiments.splitk import bench, figures, points
from experiments.splitk.points import ODD_K, PLANS, Plan, b_offset, mode_splits, plan_points, point_bytes
from experiments.splitk.report import splitk_summary
from experiments.splitk.rows import DEFAULTS, METHODS, SPLITK_METHODS, STORED, SplitkRow
from gpu.backend import get_backend
from gpu.splitk import Kernel, SMLimits

GiB = 2**30
#: An H100's per-SM limits and a chunk kernel of 256 threads: 6 blocks per SM, 792 per wave.
H100 = SMLimits(threads=2048, shared_bytes=233472, registers=65536, blocks=32, sm_count=132)
KERNEL = Kernel(threads=256, shared_bytes=4352, registers_per_thread=40, tile=16)


def same_kernel(m, n):
    return KERNEL


# --------------------------------------------------------------------------- planning

def test_gpu_plan_is_the_full_grid_with_shapes_that_are_not_tile_multiples():
    shapes = set(PLANS[("cupy", False)].shapes())
    assert {(m, 2**e) for m in (8, 16, 32, 64, 128) for e in range(14, 25)} <= shapes
    odd = {(m, k) for m, k in shapes if m % 16 or k % 1024}
    assert {17, 50} <= {m for m, _ in odd} and {m for m, k in odd if k == ODD_K} >= {8, 17, 50, 128}
    assert ODD_K % 16 and ODD_K % 1024, "10^6 + 3 is no multiple of the tile or of the paper's chunk width"
    quick = PLANS[("numpy", True)].shapes()
    assert quick and max(m for m, _ in quick) <= 17 and max(k for _, k in quick) <= 2**14


def test_b_is_aligned_and_a_point_counts_both_buffers_c_and_the_largest_workspace():
    start = b_offset(17, ODD_K, 8)
    assert start * 8 % 256 == 0 and 17 * ODD_K <= start < 17 * ODD_K + 32
    assert b_offset(16, 2**20, 8) == 16 * 2**20
    splits = mode_splits(H100, same_kernel, 128, 2**24)
    assert splits["splitk-det-w1024"].chunks == 2**14 and splits["splitk-atomic"].workspace_elements() == 0
    workspace = max(s.chunks for name, s in splits.items() if "det" in name) * 128 * 128
    assert point_bytes(128, 2**24, 8, splits) == 8 * (2 * 2 * 128 * 2**24 + 128 * 128 + workspace)


def test_points_that_do_not_fit_are_left_out_and_counted():
    plan = PLANS[("cupy", False)]
    fits, skipped = plan_points(plan, 80 * GiB, 8, H100, same_kernel)
    assert skipped == 0 and fits == plan.shapes(), "66 GiB at m = 128, k = 2^24 fits in 90% of 80 GiB"
    fits, skipped = plan_points(plan, 40 * GiB, 8, H100, same_kernel)
    left_out = set(plan.shapes()) - set(fits)
    assert (128, 2**24) in left_out and (64, 2**24) in fits and skipped == len(left_out) > 0
    for m, k in plan.shapes():
        need = point_bytes(m, k, 8, mode_splits(H100, same_kernel, m, k))
        assert ((m, k) in fits) == (need <= 0.9 * 40 * GiB)


def test_custom_plans_refuse_empty_lists_small_k_and_large_outputs():
    be = get_backend("numpy")
    assert points.custom_plan(be, None, None) == PLANS[("numpy", False)]
    assert points.custom_plan(be, [17, 8, 17], [4099]) == Plan((8, 17), (4099,))
    for sizes, ks, message in (([], None, "--m is empty"), (None, [], "--k is empty"),
                               ([8], [4095], "below split-K's MIN_K = 4096"), ([0], None, "m = n = 0"),
                               ([1024], None, "m = n = 1024")):
        with pytest.raises(ValueError, match=message):
            points.custom_plan(be, sizes, ks)


# --------------------------------------------------------------------------- operands and works

def test_operands_share_one_aligned_buffer_and_flush_before_every_sample(monkeypatch):
    be = get_backend("numpy")
    ops = bench.SplitOperands.draw(be, 17, 4099)
    assert ops.A.shape == (17, 4099) and ops.B.shape == (4099, 17) and ops.C.shape == (17, 17)
    assert np.shares_memory(ops.A, ops.shared) and np.shares_memory(ops.B, ops.shared)
    assert (ops.B.ctypes.data - ops.shared.ctypes.data) % 256 == 0
    assert np.all((ops.A >= 0) & (ops.A < 1)) and ops.B.min() >= 0 and ops.B.max() < 1
    ops.copy()
    assert np.array_equal(ops.dst, ops.shared) and not np.shares_memory(ops.dst, ops.shared)
    assert ops.needs_flush(), "2 x 1.1 MB of buffers fit in any last-level cache"
    monkeypatch.setattr(be, "cache_bytes", lambda: 2**19)
    assert ops.needs_flush(), "the copy's written lines would fall on the next method"


def test_every_method_is_checked_and_a_wrong_product_or_copy_is_refused(monkeypatch):
    be = get_backend("numpy")
    ops = bench.SplitOperands.draw(be, 17, 4099)
    splits = mode_splits(be.ops("splitk").limits(), partial(be.ops("splitk").kernel, "float64"), 17, 4099)
    works, errors = bench.checked_works(ops, splits, "here")
    assert list(works) == list(METHODS) and set(errors) == set(METHODS)
    assert all(0 <= e < 1e-13 for e in errors.values())
    broken = dict(works, **{"splitk-atomic": lambda: ops.C.fill(1.0)})
    monkeypatch.setattr(bench, "method_works", lambda ops, splits: broken)
    with pytest.raises(RuntimeError, match="splitk-atomic at here computed a wrong product"):
        bench.checked_works(ops, splits, "here")
    monkeypatch.setattr(bench, "method_works", lambda ops, splits: works)
    monkeypatch.setattr(bench.SplitOperands, "copy", lambda self: None)
    with pytest.raises(RuntimeError, match="copy at here did not copy its buffer"):
        bench.checked_works(ops, splits, "here")


def test_group_meta_measures_against_the_copy_and_the_gemm_of_its_group():
    least = 8 * 32 * 2**20
    seconds = {"gemm": 4e-3, "splitk-det": 2e-3, "copy": 1e-3}
    meta = bench.group_meta(16, 2**20, 8, 4 * least, seconds)
    assert meta["copy"]["roofline"] == 1.0 and meta["copy"]["bytes"] == 4 * least
    det = meta["splitk-det"]
    assert det["roofline"] == pytest.approx(0.125) and det["speedup"] == 2.0 and det["bytes"] == least
    assert det["gbs"] == pytest.approx(least / 2e-3 / 1e9) and det["copy_gbs"] == pytest.approx(4 * least / 1e-3 / 1e9)
    assert det["floor_fraction_spec"] == pytest.approx(least / 2e-3 / 3.35e12)
    assert meta["gemm"]["speedup"] == 1.0


# --------------------------------------------------------------------------- end to end

def stored_rows(db_path):
    with ResultsDB(db_path) as db:
        return db.measurements("splitk"), db.measurements("splitk", latest=False), db.runs()


def test_command_stores_every_method_resumes_and_forces(run_json, db_path):
    argv = ("splitk", "--backend", "numpy", "--m", "8,17", "--k", "4099", "--db", str(db_path))
    out = run_json(*argv)
    assert out["summary"]["points measured"] == 2 and out["summary"]["points already stored"] == 0
    assert [(r["m"], r["method"]) for r in out["rows"]] == [(m, name) for m in (8, 17) for name in STORED]
    assert [c["met"] for c in out["verdict"]] == [None] * 4, "no k >= 2^20 measured"
    rows, _, _ = stored_rows(db_path)
    assert len(rows) == 14
    for r in rows:
        assert r.params == {"m": r.params["m"], "n": r.params["m"], "k": 4099, "dtype": "float64",
                            "regime": "sustained"}
        meta = r.meta
        assert r.unit == "s" and r.value > 0 and len(r.samples) >= 10 and meta["regime"] == "sustained"
        assert meta["speedup"] == pytest.approx(meta["gemm_s"] / r.value)
        assert meta["roofline"] == pytest.approx(meta["gbs"] / meta["copy_gbs"])
        assert meta["floor_fraction_spec"] == pytest.approx(meta["gbs"] * 1e9 / 3.35e12)
        assert meta["check_error"] < 1e-13 and meta["flush"] is True
        if r.method != "copy":
            assert meta["as_called_s"] > 0 and meta["host_s"] > 0 and len(meta["as_called_samples"]) >= 10
            assert meta["ratio_as_called"] == pytest.approx(meta["reference_s"] / meta["as_called_s"])
            assert meta["call"].startswith("numpy.matmul(A, B" if r.method == "gemm" else "splitk.matmul(A, B, out=C")
        if r.method in SPLITK_METHODS:
            assert meta["device_s"] == r.value and meta["ratio_device"] == pytest.approx(meta["speedup"])
            plan = meta["plan"]
            assert plan["deterministic"] == ("det" in r.method) and plan["k"] == 4099
            assert {"chunks", "width", "waves", "group"} <= set(plan)
            if r.method.endswith("w1024"):
                assert plan["chunks"] == 5 and plan["width"] <= 1024
        else:
            assert meta["plan"] is None
    for r in (r for r in rows if r.method == DEFAULTS):
        assert r.meta["call"] == "splitk.matmul(A, B, out=C)" and r.value == r.meta["as_called_s"]
        assert r.meta["device_s"] is None and r.meta["speedup"] == r.meta["ratio_as_called"]
    shown = {(r["m"], r["method"]): r for r in out["rows"]}
    assert shown[(8, DEFAULTS)]["device_s"] is None and shown[(8, "copy")]["as_called_s"] is None
    assert shown[(8, "splitk-atomic")]["call"] == "splitk.matmul(A, B, out=C, deterministic=False)"
    for r in (r for r in rows if r.method == "copy"):
        m = r.params["m"]
        assert r.meta["roofline"] == 1.0 and r.meta["bytes"] == 2 * 8 * (b_offset(m, 4099, 8) + 4099 * m)

    again = run_json(*argv)
    assert (again["summary"]["points measured"], again["summary"]["points already stored"]) == (0, 2)
    assert [r["time_s"] for r in again["rows"]] == [r["time_s"] for r in out["rows"]]
    forced = run_json("splitk", "--backend", "numpy", "--m", "8", "--k", "4099", "--db", str(db_path), "--force")
    assert (forced["summary"]["points measured"], forced["summary"]["points already stored"]) == (1, 0)
    current, every, runs = stored_rows(db_path)
    assert len(current) == 14 and len(every) == 21 and [r["status"] for r in runs] == ["finished"] * 3
    newest = {r.method: r.value for r in current if r.params["m"] == 8}
    assert newest == {r["method"]: r["time_s"] for r in forced["rows"]}


def test_bad_arguments_are_clear_errors_and_leave_no_run(capsys, db_path):
    base = ["splitk", "--backend", "numpy", "--db", str(db_path)]
    for extra, message in ((["--m", ""], "--m is empty"), (["--k", ""], "--k is empty"),
                           (["--k", "100"], "k = 100 is below split-K's MIN_K = 4096"),
                           (["--m", "-3"], "m = n = -3")):
        assert main([*base, *extra]) == 2
        assert message in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([*base, "--k", "4096,abc"])
    assert "inner dimensions k must be integers" in capsys.readouterr().err
    assert stored_rows(db_path)[2] == [], "argument errors must not leave failed runs behind"


def test_experiment_summary_and_figures_from_the_stored_rows(run_json, db_path, tmp_path, monkeypatch):
    monkeypatch.setitem(PLANS, ("numpy", True), Plan((8,), (4096,), ((17, 4099),)))
    load()
    out = run_json("reproduce", "--quick", "--backend", "numpy", "--only", "splitk", "--db", str(db_path),
                   "--out", str(tmp_path))
    found = out["experiments"]["splitk"]
    assert found["points measured"] == 2 and found["scope"].startswith("m = n = 8, 17; k = 4096, 4099")
    times = found["time (ms)"]
    assert [(r["m"], r["k"]) for r in times] == [(8, 4096), (17, 4099)]
    assert all(r[name] > 0 for r in times for name in METHODS)
    assert set(found["% of the copy's bandwidth"][0]) == {"m", "k", "gemm", *SPLITK_METHODS}
    assert set(found["speed-up over the library GEMM"][0]) == {"m", "k", *SPLITK_METHODS}
    assert "### splitk: m = n = 8, 17" in (tmp_path / "SUMMARY.md").read_text()
    for name in ("splitk-roofline", "splitk-speedup"):
        assert (tmp_path / f"{name}.png").stat().st_size > 10_000 and FIGURES[name].experiments == ("splitk",)
    with ResultsDB(db_path) as db:
        roof, speed = figures.render_roofline(db), figures.render_speedup(db)
    for fig, methods in ((roof, ("gemm", *SPLITK_METHODS)), (speed, SPLITK_METHODS)):
        assert [ax.get_title() for ax in fig.axes] == ["m = n = 8", "m = n = 17"]
        for ax in fig.axes:
            lines = {ln.get_label(): ln for ln in ax.get_lines() if not ln.get_label().startswith("_")}
            assert set(lines) - {"copy (same group)", "gemm"} == set(SPLITK_METHODS) and set(methods) <= set(lines)
            colours = {str(lines[m].get_color()) for m in methods}
            assert len(colours) == len(methods) and ax.get_xscale() == "log"
    speeds = {ln.get_label(): ln.get_ydata()[0] for ln in speed.axes[0].get_lines()}
    with ResultsDB(db_path) as db:
        stored = {r.method: r.meta["speedup"] for r in db.measurements("splitk") if r.params["m"] == 8}
    assert all(speeds[m] == pytest.approx(stored[m]) for m in SPLITK_METHODS)


def test_figures_without_data_draw_nothing(db_path):
    with ResultsDB(db_path) as db:
        assert figures.render_roofline(db) is None and figures.render_speedup(db) is None


# --------------------------------------------------------------------------- the verdict

def row(method, m, k, roofline, speedup, as_called=None):
    return SplitkRow(method, m, m, k, "float64", 1e-3, 100.0, roofline, speedup, True, "sustained",
                     ratio_as_called=as_called, as_called_s=None if as_called is None else 1e-3 / as_called)


def verdict(rows):
    counts = {"points measured": 0, "points already stored": 0, "points left out (memory)": 0, "shapes": "x"}
    return splitk_summary(counts, rows)


def test_the_verdict_takes_each_points_best_mode_and_judges_speed_as_called():
    rows = [row("gemm", 16, 2**20, 0.5, 1.0, 1.0), row("splitk-det", 16, 2**20, 0.8, 1.2, 1.1),
            row("splitk-atomic", 16, 2**20, 0.95, 1.4, 1.3), row("splitk-atomic", 64, 2**24, 0.93, 1.3, 1.26),
            row(DEFAULTS, 16, 2**20, 0.9, 1.25, 1.25), row(DEFAULTS, 64, 2**24, 0.9, 1.01, 1.01),
            row("splitk-det", 8, 2**20, 0.2, 0.5, 0.5), row(DEFAULTS, 32, 2**18, 0.3, 0.7, 0.7)]
    summary = verdict(rows)
    assert [c.met for c in summary.checks] == [True] * 4, "m = 8 and k = 2^18 are outside the targets"
    assert "lowest 93.0% (splitk-atomic at m = n = 64, k = 2^24) over 2 points" == summary.checks[0].measured
    assert summary.checks[1].measured == "lowest 1.010x (m = n = 64, k = 2^24)"
    assert summary.checks[2].measured == "1.250x" and summary.checks[3].measured == "1.260x (splitk-atomic)"
    assert summary.facts["best split-K speed-up over the library GEMM"].startswith("1.400x (splitk-atomic")
    assert summary.table("speed-up over the library GEMM").records()[1] == {
        "m": 16, "k": 2**20, "splitk-det": 1.2, "splitk-atomic": 1.4}
    assert summary.table("as called: speed-up over the library GEMM as called").records()[1] == {
        "m": 16, "k": 2**20, "splitk-det": 1.1, "splitk-atomic": 1.3, DEFAULTS: 1.25}
    slow = verdict([*rows, row(DEFAULTS, 32, 2**22, 0.85, 1.05, 0.95)])
    assert [c.met for c in slow.checks] == [True, False, True, True], "fast by the device's clock, slow as called"
    assert "0.950x (m = n = 32, k = 2^22)" in slow.checks[1].measured
    device_only = verdict([row("splitk-det", 64, 2**24, 0.95, 1.3), row(DEFAULTS, 16, 2**20, 0.9, 1.3)])
    assert [c.met for c in device_only.checks] == [True, None, None, None], "rows stored before as-called times"
    assert device_only.checks[3].measured == "not measured as called"
    empty = verdict([row("splitk-det", 8, 2**16, 0.5, 2.0)])
    assert [c.met for c in empty.checks] == [None] * 4
    assert empty.table("time (ms)").records() == [{"m": 8, "k": 2**16, "splitk-det": 1.0}]


def test_rows_stored_before_the_as_called_times_read_as_not_measured(db_path):
    with ResultsDB(db_path) as db:
        run = db.start_run("old", {"backend": "numpy", "device": "CPU"}, "old")
        params = {"m": 16, "n": 16, "k": 2**20, "dtype": "float64", "regime": "sustained"}
        db.add(run, "splitk", "splitk-atomic", params, value=1e-4, unit="s", samples=[1e-4] * 10,
               meta={"gbs": 1.0, "roofline": 0.9, "speedup": 1.2})
        (old,) = [SplitkRow.read(m) for m in db.measurements("splitk")]
    assert (old.call, old.as_called_s, old.host_s, old.ratio_as_called) == (None, None, None, None)
    assert old.device_s == 1e-4 and old.as_dict()["as_called_s"] is None
