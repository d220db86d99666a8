"""Ozaki experiments: audit methods, plans, the benchmark CLI (resume, JSON), experiments and figures on NumPy."""


import numpy as np
import pytest

from accuracy.audit import audit_inputs
from accuracy.methods import get_method, method_names, parse_methods, parse_ozaki_method
from experiments.audit.bench import AuditPlan, AuditRow
from experiments.cli import main
from experiments.core.database import ResultsDB
from experiments.core.registry import EXPERIMENTS, FIGURES, load, recorded_run
from experiments.ozaki import bench as ob
from experiments.ozaki import experiments as oe
from experiments.ozaki import figures as of
from experiments.ozaki import table as ot
from experiments.ozaki import timing as otm
from gpu import ozaki
from gpu.backend import get_backend


def test_methods_join_the_audit_registry():
    m = get_method("ozaki-int8-8")
    A, B = np.random.default_rng(0).random((2, 20, 20))
    np.testing.assert_array_equal(m.run(get_backend("numpy"), A, B),
                                  ozaki.matmul(A, B, slices=8, slice_format="int8", backend="numpy"))
    assert "paper's rounded tails" in get_method("ozaki-fp32r-3").description
    assert "ozaki-fp16-4" in method_names() and "ozaki-bf16r-2" in method_names()
    for bad, match in (("ozaki-fp8-3", "unknown slice format"), ("ozaki-int8r-3", "unknown slice format"),
                       ("ozaki-fp32-0", "slices must lie")):
        with pytest.raises(ValueError, match=match):
            parse_methods(bad)
    assert parse_ozaki_method("ozaki-fp32r-12") == ("fp32r", 12) and parse_ozaki_method("fp64") is None


def test_bench_plan_checks_and_rows():
    plan = ob.BenchPlan((64, 8192), ("fp32r", "int8"), (2, 3))
    assert plan.configs() == ["ozaki-fp32r-2", "ozaki-fp32r-3", "ozaki-int8-2", "ozaki-int8-3"]
    assert plan.configs("int8") == ["ozaki-int8-2", "ozaki-int8-3"]
    assert plan.rows_for(64) == 64 and plan.rows_for(8192) == ob.SAMPLED_ROWS
    for kw, match in (({"sizes": ()}, "sizes"), ({"formats": ("fp9",)}, "unknown slice format"),
                      ({"slices": (0,)}, "slice counts"), ({"phis": (30.0,)}, "phi"), ({"rows": 0}, "rows"),
                      ({"slow_factor": 0}, "slow_factor")):
        with pytest.raises(ValueError, match=match):
            ob.BenchPlan(**{"sizes": (64,), "formats": ("fp32",), "slices": (2,), **kw})
    with pytest.raises(ValueError, match="choose smaller --sizes"):
        ob.check_sizes(get_backend("numpy"), ob.BenchPlan((10**6,), ("fp32",), (2,)))


def test_pareto_front_verdict_and_digits():
    assert of.pareto_front([(1, 5), (2, 3), (3, 4), (4, 1), (0.5, 9)]) == [(0.5, 9), (1, 5), (2, 3), (4, 1)]
    rows = [ot.BenchRow(8, "fp64", time_s=1.0, speedup_vs_dgemm=1.0, max_rel={1.0: 1e-12}),
            ot.BenchRow(8, "ozaki-int8-9", time_s=0.8, speedup_vs_dgemm=1.25, max_rel={1.0: 5e-13}),
            ot.BenchRow(8, "ozaki-int8-7", time_s=0.5, speedup_vs_dgemm=2.0, max_rel={1.0: 1e-9})]
    v = ot.verdict(rows)
    assert v["as_accurate_as_dgemm"] == ["ozaki-int8-9"] and v["target_met"] and v["its_speedup_vs_dgemm"] == 1.25
    audit = [AuditRow(m, 4, 1.0, 1, max_rel=e) for m, e in (("fp32", 1e-3), ("ozaki-fp32r-2", 1e-5), ("fp64", 1e-12))]
    assert oe.digits_gained(audit)[(4, 1.0)] == {"ozaki-fp32r-2": pytest.approx(2.0), "fp64": pytest.approx(9.0)}


def test_bench_cli_measures_stores_and_resumes(run_json, capsys, db_path):
    argv = ("ozaki", "--backend", "numpy", "--sizes", "48", "--formats", "fp32r,int8", "--slices", "2-3",
            "--phi", "0.1,1", "--max-ratio", "0", "--db", str(db_path))   # every configuration run: none predicted
    out = run_json(*argv)
    rows = {r["method"]: r for r in out["rows"]}
    assert list(rows) == ["fp64", "fp32", "ozaki-fp32r-2", "ozaki-fp32r-3", "ozaki-int8-2", "ozaki-int8-3",
                          otm.DEFAULTS]
    assert all(r["time_s"] > 0 and r["max_rel_phi0.1"] is not None and r["max_rel_phi1"] is not None
               for r in rows.values() if r["method"] != otm.DEFAULTS)
    defaults = rows[otm.DEFAULTS]
    assert defaults["call"] == "ozaki.matmul(A, B, out=C)" and defaults["time_s"] == defaults["as_called_s"] > 0
    assert defaults["host_s"] > 0 and defaults["speedup_vs_dgemm"] == defaults["ratio_as_called"]
    for r in (r for r in rows.values() if r["method"].startswith("ozaki-") and r["method"] != otm.DEFAULTS):
        assert (r["as_called_s"] is not None) == (r["protocol"] == "interleaved"), "timed by one run: not as called"
    assert rows["fp64"]["speedup_vs_dgemm"] == 1.0 and rows["ozaki-int8-3"]["max_rel_phi0.1"] < \
        rows["ozaki-int8-2"]["max_rel_phi0.1"]
    assert out["summary"]["error points measured"] == 12 and out["summary"]["timed configurations"] == 4
    again = run_json(*argv)
    assert again["summary"]["error points measured"] == 0 and again["summary"]["timed configurations"] == 0
    assert again["rows"] == out["rows"]
    with ResultsDB(db_path) as db:
        times = db.measurements(ob.TIME)
    meta = next(m.meta for m in times if m.method == "ozaki-int8-3")
    assert meta["plan"]["pairs"] == 6 and meta["protocol"] in ("interleaved", "single run")
    dgemm = next(m for m in times if m.method == "fp64" and m.params["format"] == "int8")
    assert dgemm.meta["call"] == "numpy.matmul(A, B, out=C)" and dgemm.meta["as_called_s"] > 0
    assert [m.params for m in times if m.method == otm.DEFAULTS] == [{"n": 48, "format": "defaults", "slices": 0}]
    assert main(["ozaki", "--backend", "numpy", "--sizes", "48", "--formats", "int8r", "--db", str(db_path)]) == 2
    assert "unknown slice format" in capsys.readouterr().err
    text = main(["ozaki", "--backend", "numpy", "--sizes", "48", "--formats", "fp32r,int8", "--slices", "2-3",
                 "--phi", "0.1,1", "--db", str(db_path)])
    assert text == 0 and "speed-up vs DGEMM" in capsys.readouterr().out


def test_configurations_far_slower_than_dgemm_are_predicted_not_run(db_path):
    be = get_backend("numpy")
    plan = ob.BenchPlan((40,), ("int8",), (2, 3, 4), errors=False, max_ratio=1e-9)
    with ResultsDB(db_path) as db, recorded_run(be, db, "test", progress=False) as ctx:
        ot.run_bench(ctx, plan)
        rows = {r.method: r for r in otm.time_rows(db, ctx.env_key)}
    assert rows["ozaki-int8-2"].protocol in ("interleaved", "single run")
    assert rows["ozaki-int8-3"].protocol == rows["ozaki-int8-4"].protocol == "predicted"
    ratio = rows["ozaki-int8-4"].time_s / rows["ozaki-int8-3"].time_s
    assert ratio == pytest.approx(10 / 6), "extrapolated by the number of slice pairs"


def test_audit_cli_runs_ozaki_methods(run_json, db_path):
    out = run_json("audit", "--backend", "numpy", "--methods", "ozaki-fp32r-3,ozaki-int8-4", "--n", "32",
                   "--phi", "1", "--seeds", "1", "--db", str(db_path))
    assert {s["method"] for s in out["summary"]} == {"ozaki-fp32r-3", "ozaki-int8-4"}


SMALL = {"ACCURACY_PLANS": AuditPlan((32,), seeds=(1,)),
         "TIME_PLANS": ob.BenchPlan((32,), ("fp32r",), (2,), errors=False),
         "PARETO_PLANS": ob.BenchPlan((32,), ("fp32r", "fp32"), (2, 3), phis=(1.0,)),
         "BREAKDOWN_PLANS": ((32,), (("fp32r", 2), ("int8", 3)))}


def test_experiments_and_figures_end_to_end(run_json, monkeypatch, db_path, tmp_path):
    for name, plan in SMALL.items():
        monkeypatch.setitem(getattr(ob, name), ("numpy", True), plan)
    load()
    assert {"ozaki-accuracy", "ozaki-time", "ozaki-breakdown", "ozaki-pareto"} <= set(EXPERIMENTS)
    out = run_json("reproduce", "--quick", "--backend", "numpy", "--only", "ozaki-accuracy", "ozaki-time",
                   "ozaki-breakdown", "ozaki-pareto", "--db", str(db_path), "--out", str(tmp_path))
    exps = out["experiments"]
    assert exps["ozaki-accuracy"]["points measured"] == 3 * len(oe.paper_methods())
    gained = {r["method"]: r["phi=1"] for r in exps["ozaki-accuracy"]["digits gained over SGEMM at N=32"]}
    assert gained["ozaki-fp32r-6"] > gained["ozaki-fp32r-2"]
    assert {(r["configuration"], r["N"]) for r in exps["ozaki-breakdown"]["share of time (split / GEMM / sum)"]} \
        == {("ozaki-fp32r-2", 32), ("ozaki-int8-3", 32)}
    assert (exps["ozaki-pareto"]["timed configurations"], exps["ozaki-pareto"]["configurations already timed"]) \
        == (3, 1), "ozaki-fp32r-2 at N=32 was timed by ozaki-time"
    for name in ("ozaki-accuracy", "ozaki-time", "ozaki-breakdown", "ozaki-pareto"):
        assert name in FIGURES and (tmp_path / f"{name}.png").is_file(), name


def test_inputs_above_full_rows_are_drawn_by_the_backend_and_errors_sampled(monkeypatch, db_path):
    """Where inputs come from depends on N only (not on the backend): the audit's host phi_matrix up to
    FULL_ROWS_MAX, the backend's own generator above it, and errors on SAMPLED_ROWS rows there."""
    monkeypatch.setattr(ob, "FULL_ROWS_MAX", 32)
    monkeypatch.setattr(ob, "SAMPLED_ROWS", 16)
    be = get_backend("numpy")
    A, B, source = ob.bench_inputs(be, 32, 1.0, 1)
    assert source == ob.HOST_INPUTS and np.array_equal(A, audit_inputs(32, 1.0, 1)[0])
    A, B, source = ob.bench_inputs(be, 48, 1.0, 1)
    assert source == ob.DEVICE_INPUTS and A.shape == B.shape == (48, 48) and not np.array_equal(A, B)
    plan = ob.BenchPlan((48,), ("fp32r",), (3,), phis=(1.0,), timing=False)
    with ResultsDB(db_path) as db, recorded_run(be, db, "test", progress=False) as ctx:
        ot.run_bench(ctx, plan)
        stored = db.measurements(ob.ERROR)
    assert {(m.method, m.params["rows"], m.meta["inputs"]) for m in stored} == {
        (name, 16, ob.DEVICE_INPUTS) for name in ("fp64", "fp32", "ozaki-fp32r-3")}
    assert all(m.unit == "rel" and 0 < m.value < 1e-3 for m in stored)
