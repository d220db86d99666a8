"""Strassen benchmarks: planning, input refill, and both experiments end to end on NumPy."""

import numpy as np
import pytest

from experiments.cli import main
from experiments.core.database import ResultsDB
from experiments.core.lab import Operands, product_error
from experiments.strassen import bench as sb
from experiments.strassen import called, figures, memory
from experiments.strassen.bench import CONFIGS, Plan
from experiments.strassen.rows import DEFAULTS
from gpu.backend import get_backend
from gpu.strassen import Config, top_support

GiB = 2**30


def test_config_names_are_the_stored_methods():
    assert [c.name for c in CONFIGS] == ["rum", "rum+fused", "rum2-parallel", "rum2-parallel+fused",
                                         "lai", "otsuka", "winograd+fused", "winograd+flat", "mix+fused"]
    assert Config("winograd", flat=True, graph=True).name == "winograd+flat+graph"


def test_a_levels_configurations_are_cut_into_groups_that_fit_together():
    """At N = 16384, level 3, on 80 GiB: the fused Winograd graph (12 GiB) and a flat one (30.5 GiB) fit beside
    A, B and C (6 GiB), a second flat one does not; every group keeps its own GEMM."""
    configs = [Config("winograd", fused=True, graph=True), Config("winograd", flat=True, graph=True),
               Config("winograd", flat=True), Config("rum")]
    budget = 0.9 * 80 * GiB
    groups = sb.groups_within(configs, 16384, 3, budget, 8)
    assert [[c.name for c in g] for g in groups] == [["winograd+fused+graph", "winograd+flat+graph"],
                                                     ["winograd+flat", "rum"]]
    for group in groups:
        extra = sum(sb.config_bytes(c, 16384, 3, 8) - 3 * 16384**2 * 8 for c in group)
        assert 3 * 16384**2 * 8 + extra <= budget
    assert sb.groups_within(configs, 16384, 2, budget, 8) == [configs]
    assert sb.groups_within(configs, 1024, 3, float("inf"), 8) == [configs]


def test_the_mix_is_each_points_plan_under_its_own_name_where_memory_binds():
    """At N = 49152 on 80 GiB, 18 GiB are left beside A, B and C: Winograd's temporaries fit at the
    bottom level only; at N = 16384 Winograd fits throughout and no mix is timed."""
    plan = sb.PLANS[("cupy", False)]
    _, points, _ = sb.plan_points(plan, free=80 * GiB, itemsize=8)
    mixed = {(p.size, p.level): p.config.name for p in points if "/" in p.config.schedule}
    assert mixed[(49152, 3)] == "rum/rum/winograd+fused"     # 18 GiB left: Winograd fits at the bottom only
    assert all(n >= 32768 for n, _ in mixed)
    assert all(sb.config_bytes(p.config, p.size, p.level, 8) <= 0.9 * 80 * GiB for p in points)
    assert sb.mix_config(Config(sb.MIX, fused=True), 16384, 2, 0.9 * 80 * GiB, 8) is None
    assert sb.method_order(["rum/winograd+fused", "winograd+fused+graph", "rum"]) == [
        "rum", "winograd+fused+graph", "rum/winograd+fused"]


def test_full_gpu_plan_bounds_levels_lai_otsuka_and_memory():
    plan = sb.PLANS[("cupy", False)]
    sizes, points, skipped = sb.plan_points(plan, free=80 * GiB, itemsize=8)
    assert sizes == [n for n in plan.sizes if 3 * n * n * 8 <= 0.9 * 80 * GiB]
    assert all(p.size // 2**p.level >= 256 for p in points)
    assert {p.level for p in points if p.size == 4096} == {1, 2, 3, 4}
    others = [p for p in points if p.config.schedule in ("lai", "otsuka")]
    assert others and all(p.size in (16384, 32768) and p.level <= 3 for p in others)
    assert all(sb.config_bytes(p.config, p.size, p.level, 8) <= 0.9 * 80 * GiB for p in points)
    assert sb.config_bytes(Config("otsuka"), 49152, 3, 8) > 0.9 * 80 * GiB, \
        "Otsuka's temporaries cannot fit beside 49152^2 operands in 80 GiB"
    # RUM with aliased support needs nothing beyond A, B and C: wherever they fit, it runs.
    rum = {(p.size, p.level) for p in points if p.config == Config("rum")}
    assert {n for n, _ in rum} == set(sizes)


def test_cpu_plans_keep_every_level_and_all_schedules():
    sizes, points, skipped = sb.plan_points(sb.PLANS[("numpy", True)], free=64 * GiB, itemsize=8)
    assert sizes == [256, 512] and skipped == 0
    assert len(points) == (len(CONFIGS) - 1) * 2 * 2      # the mix is Winograd throughout on a host this size


def test_rum_support_aliases_input_quadrants():
    be = get_backend("numpy")
    A, B = be.random((8, 8), seed=1), be.random((8, 8), seed=2)
    support = top_support(be, "rum", 2, A, B, overwrite_a=True, overwrite_b=True)
    assert set(support) == {"S11", "S12", "S21", "S22"}
    assert all(np.shares_memory(support[s], M) for s, M in (("S11", A), ("S12", A), ("S21", B), ("S22", B)))
    assert np.shares_memory(support["S12"], A[4:, :4])
    assert top_support(be, "lai", 2, A, B, overwrite_a=True, overwrite_b=True) is None


def test_refill_restores_overwritten_inputs_in_place_before_each_sample():
    be = get_backend("numpy")
    ops = Operands.uniform(be, 64)
    A, B = ops.A, ops.B
    work = sb.strassen_work(Config("rum"), 2, ops)
    for _ in range(3):
        work()
    assert not np.all((A >= 0) & (A < 1)), "RUM writes its scratch values into A11 and A21"
    ops.refill_and_wait()
    assert ops.A is A and ops.B is B
    assert np.all((A >= 0) & (A < 1)) and np.all((B >= 0) & (B < 1))


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.name)
def test_every_timed_configuration_computes_the_product(config):
    be = get_backend("numpy")
    ops = Operands.uniform(be, 64)
    if config.schedule == sb.MIX:       # the mix a tight budget makes: RUM above Winograd
        config = sb.mix_config(config, 64, 2, 3 * 64 * 64 * 8 + 18 * 16 * 16 * 8, 8)
        assert config.schedule == "rum/winograd"
    assert product_error(ops, sb.strassen_work(config, 2, ops)) < 1e-12


def test_a_wrong_product_is_refused_before_anything_is_timed(monkeypatch):
    ops = Operands.uniform(get_backend("numpy"), 32)
    monkeypatch.setattr(sb, "strassen_work", lambda config, level, ops: lambda: ops.C.fill(1.0))
    with pytest.raises(RuntimeError, match="rum at level 1 on N = 32 computed a wrong product"):
        sb.checked_works(ops, {"rum": (Config("rum"), 1)})


def test_both_experiments_store_resume_and_draw(run_json, db_path, tmp_path, monkeypatch):
    monkeypatch.setitem(sb.PLANS, ("numpy", True), Plan((64, 128), (1, 2)))
    monkeypatch.setitem(memory.SIZES, ("numpy", True), 64)
    monkeypatch.setattr(memory, "LEVELS", (1, 2))
    argv = ("reproduce", "--quick", "--backend", "numpy", "--only", "strassen-speedup", "strassen-memory",
            "--db", str(db_path))
    out = run_json(*argv, "--out", str(tmp_path / "figs"))

    speed = out["experiments"]["strassen-speedup"]
    single = [c for c in CONFIGS if c.schedule != sb.MIX]     # memory does not bind: no mix is timed
    assert speed["points measured"] == len(single) * 2 * 2
    assert {r["N"] for r in speed["best speed-up per size"]} == {64, 128}
    with ResultsDB(db_path) as db:
        rows = db.measurements("strassen-speedup")
        peaks = db.measurements("strassen-memory")
    gemm = [r for r in rows if r.method == "gemm"]
    assert sorted((r.params["size"], r.params["level"]) for r in gemm) == [(64, 1), (64, 2), (128, 1), (128, 2)]
    assert all(r.value > 0 for r in gemm)
    strassen = [r for r in rows if r.method not in ("gemm", DEFAULTS)]
    assert {r.method for r in strassen} == {c.name for c in single}
    for r in strassen:
        assert set(r.params) == {"size", "level", "schedule", "parallel", "fused", "dtype", "regime"}
        assert r.params["regime"] == "sustained" and r.meta["regime"] == "sustained"
        assert r.meta["speedup"] > 0 and r.meta["gemm_s"] > 0 and r.unit == "s"
        assert r.meta["speedup"] == pytest.approx(r.meta["gemm_s"] / r.value)
        assert len(r.samples) >= 10 and "stable" in r.meta
        assert r.meta["call"].startswith(f"strassen.matmul(A, B, out=C, level={r.params['level']}, schedule=")
        assert r.meta["call"].endswith("overwrite_a=True, overwrite_b=True)") and r.meta["device_s"] == r.value
        assert r.meta["as_called_s"] > 0 and r.meta["host_s"] > 0 and r.meta["as_called_calls"] <= called.MAX_CALLS
    defaults = [r for r in rows if r.method == DEFAULTS]
    assert [r.params for r in defaults] == [called.defaults_params(n, "float64", "sustained") for n in (64, 128)]
    for r in defaults:      # timed in the first group of its size, its time and speed-up as called
        assert r.meta["call"] == "strassen.matmul(A, B, out=C)" and r.value == r.meta["as_called_s"]
        assert r.meta["speedup"] == r.meta["ratio_as_called"] and r.meta["device_s"] is None
        assert r.meta["check_error"] < 1e-12
    assert all(r.meta["call"] == "numpy.matmul(A, B, out=C)" for r in gemm)

    assert len(peaks) == 5 * 2
    for r in peaks:
        assert r.unit == "B" and r.value >= 0 and r.meta["exact"] is False
        model = memory.memory_model(r.method, 64, r.params["level"], 8)
        assert r.meta["model_bytes"] == model
        if r.method in ("rum", "rum2"):
            assert model == 4 * 32 * 32 * 8, "RUM with inputs kept allocates its four support quadrants"
            assert r.value >= model

    for name in ("strassen-speedup", "strassen-level", "strassen-memory"):
        assert sorted(p.rsplit(".", 1)[1] for p in out["figures"][name]) == ["pdf", "png"]
        assert (tmp_path / "figs" / f"{name}.png").stat().st_size > 10_000

    again = run_json(*argv, "--out", str(tmp_path / "again"))
    assert again["experiments"]["strassen-speedup"]["points measured"] == 0
    assert again["experiments"]["strassen-memory"]["points measured"] == 0
    assert again["experiments"]["strassen-speedup"]["points already stored"] == speed["points measured"]


def test_figures_without_data_draw_nothing(tmp_path, db_path):
    with ResultsDB(db_path) as db:
        assert figures.render_speedup(db) is None
        assert figures.render_level(db) is None
        assert figures.render_memory(db) is None


def test_chosen_configurations_only_and_graph_ones_need_graphs(run_json, capsys, db_path):
    out = run_json("strassen", "--backend", "numpy", "--sizes", "64", "--levels", "1", "--configs",
                   "rum+fused,winograd+fused", "--db", str(db_path))
    assert {r["method"] for r in out["rows"]} == {"rum+fused", "winograd+fused", DEFAULTS}
    assert all(r["as_called_s"] > 0 and r["ratio_as_called"] > 0 for r in out["rows"])
    assert all(r["regime"] == "sustained" for r in out["rows"])
    assert main(["strassen", "--backend", "numpy", "--sizes", "64", "--levels", "1", "--configs", "rum+fused+graph",
                 "--db", str(db_path)]) == 2
    assert "unknown configurations ['rum+fused+graph'] on the numpy backend" in capsys.readouterr().err
    assert sb.configs_of(get_backend("numpy")) == CONFIGS


def test_named_configurations_run_only_where_named():
    """winograd2 (its additions on a second stream) is timed where asked for, never in the default sweep."""
    be = get_backend("numpy")
    assert "winograd2-parallel+fused" not in {c.name for c in sb.configs_of(be)}
    (config,) = sb.configs_of(be, ["winograd2-parallel+fused"])
    assert (config.schedule, config.parallel, config.fused, config.graph) == ("winograd2", True, True, False)
    with pytest.raises(ValueError, match="winograd2-parallel\\+fused\\+graph"):
        sb.configs_of(be, ["winograd2-parallel+fused+graph"])
    assert sb.method_order(["mix+fused", "winograd2-parallel+fused", "rum"]) == [
        "rum", "mix+fused", "winograd2-parallel+fused"]
