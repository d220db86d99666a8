"""Models from stored results: environment choice, fits, launch overhead, the level-validation judge,
the predictors on the published H100 measurements, ``level="auto"`` and the figures."""

from pathlib import Path

import numpy as np
import pytest

from experiments.core.database import ResultsDB
from experiments.core.registry import FIGURES
from experiments.levels import models
from experiments.levels import validation as levels
from experiments.levels.experiments import validation_summary
from experiments.levels.profile import write_profile
from experiments.strassen.bench import point_params
from gpu.backend import get_backend
from gpu.profile import backend_profile
from gpu.strassen import Config, auto_level, rule_level
from gpu.strassen.auto import MAX_LEVEL
from modeling.fits import measured_curves
from modeling.recursive import RecursiveModel

PUBLISHED = Path(__file__).resolve().parents[2] / "results" / "published"
GEMM, GEAM = (4.0e-11, 2.0e-8, 5.0e-5, 0.01), (8.0e-9, 3.0e-6, 0.004)   # ms
SIZES = (256, 512, 1024, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768)
GPU_ENV = {"device": "Synthetic GPU 80GB", "backend": "cupy"}


def store_calibration(db, key="gpu-key", env=GPU_ENV, gemm=GEMM, geam=GEAM, sizes=SIZES):
    run = db.start_run("synthetic calibration", env, key)
    for n in sizes:
        for method, coef in (("gemm", gemm), ("geam", geam)):
            t = float(np.polyval(coef, n)) / 1e3
            db.add(run, "calibration", method, {"size": n, "dtype": "float64"}, value=t, unit="s",
                   samples=[t] * 10, meta={"stable": True})
    db.finish_run(run)
    return run


def store_timings(db, run, experiment, model, points, config=levels.RUM):
    for n, level in points:
        t, g = model.time(n, level) / 1e3, model.time(n, 0) / 1e3
        db.add(run, experiment, config.name, point_params(n, level, config),
               value=t, unit="s", meta={"speedup": g / t, "gemm_s": g})


@pytest.fixture
def db(tmp_path):
    with ResultsDB(tmp_path / "m.sqlite") as d:
        yield d


def true_model(db, key="gpu-key", launch_ms=0.0):
    gemm, geam = measured_curves(models.calibration_rows(db, key))
    return RecursiveModel(gemm, geam, launch_ms=launch_ms)


# --- environment and fits -------------------------------------------------------------------------

def test_select_env_by_key_device_or_current(db):
    store_calibration(db)
    store_calibration(db, "cpu-key", {"device": "CPU: Test", "backend": "numpy"})
    assert models.select_env(db, env="gpu-key") == "gpu-key"
    assert models.select_env(db, device="synthetic") == "gpu-key"
    assert models.select_env(db, current={"device": "CPU: Test", "backend": "numpy"}) == "cpu-key"
    with pytest.raises(ValueError, match=r"no float64 calibration stored for this device \(Other"):
        models.select_env(db, current={"device": "Other", "backend": "cupy"})
    with pytest.raises(ValueError, match="--env gpu-key"):
        models.select_env(db, env="missing")


def test_time_model_fits_the_stored_calibration(db):
    store_calibration(db)
    model = models.time_model(db, "gpu-key", "relative")
    assert model.gemm.coef == pytest.approx(GEMM, rel=1e-6) and model.geam.coef == pytest.approx(GEAM, rel=1e-6)
    assert models.time_model(db, "gpu-key", "absolute", (1000, 40000)).size_range == (1024, 32768)


def test_launch_overhead_is_recovered_from_stored_timings(db):
    run = store_calibration(db)
    h = 0.04
    points = [(n, lv) for n in (1024, 2048, 4096, 8192) for lv in (1, 2, 3)]
    store_timings(db, run, "strassen-speedup", true_model(db, launch_ms=h), points)
    fitted, source = models.stored_predictor(db, "gpu-key", Config("rum"))
    assert fitted.launch_ms == pytest.approx(h, rel=0.02) and "fitted to 12" in source
    db.add(run, models.OVERHEAD_EXPERIMENT, "rum", {"size": 256, "level": 3, "dtype": "float64"},
           value=55e-6, unit="s")
    measured, source = models.stored_predictor(db, "gpu-key", Config("rum"))
    assert (measured.launch_ms, source) == (pytest.approx(0.055), "measured (launch-overhead)")
    fused, source = models.stored_predictor(db, "gpu-key", Config("rum", fused=True))
    assert fused.launch_ms == pytest.approx(h, rel=0.02) and "fitted" in source, "no measurement of rum+fused"


# --- judging a sweep -------------------------------------------------------------------------------

def test_measured_boundary_interpolates_the_last_upward_crossing():
    times = {1000: {0: 1.0, 1: 1.2}, 2000: {0: 1.0, 1: 0.9}, 3000: {0: 1.0, 1: 0.8}}
    g0, g1 = np.log(1 / 1.2), np.log(1 / 0.9)
    assert levels.measured_boundaries(times, 1) == [pytest.approx(1000 - 1000 * g0 / (g1 - g0))]
    assert levels.measured_boundaries({1000: {0: 1.0, 1: 0.5}}, 1) == [None]   # below the sweep


def test_verdict_time_lost_by_hand():
    times = {1000: {0: 1.0, 1: 2.0}, 2000: {0: 2.0, 1: 1.0}}
    v = levels.verdict("always GEMM", lambda n, lv: 0, [None], times, [1500.0])
    assert v.time_lost_pct == pytest.approx(50.0)            # (1 + 2) / (1 + 1) - 1
    assert (v.worst_loss_pct, v.worst_size, v.mispredicted) == (pytest.approx(100.0), 2000, 1)
    right = levels.verdict("right", lambda n, lv: 0 if n < 1500 else 1, [1400.0], times, [1500.0])
    assert right.time_lost_pct == 0 and right.worst_size is None
    assert right.errors_pct == [pytest.approx(100 * (1400 - 1500) / 1500)]


def test_a_sweep_that_crosses_no_level_boundary_is_not_judged():
    """The quick CPU sweep (128-384, best level 0 throughout) said "met" for every predictor."""
    flat = {n: {0: 1.0, 1: 1.2} for n in (128, 192, 256, 320, 384)}
    verdicts = [levels.verdict("recursive", lambda n, lv: 0, [None], flat, [None]),
                levels.verdict("always level 1", lambda n, lv: 1, [None], flat, [None])]
    report = levels.Report(Config("rum"), flat, levels.measured_boundaries(flat, 1), verdicts)
    summary = validation_summary({"points measured": 0, "points already stored": 0}, report, "profile")
    recursive, always = summary.checks
    assert recursive.met is None and "not judged: the sweep crosses no level boundary" in recursive.measured
    assert always.met is False                                     # losing time is a failure all the same
    assert "| not judged |" in "\n".join(summary.markdown())
    crossing = {1000: {0: 1.0, 1: 1.2}, 2000: {0: 1.0, 1: 0.9}}
    right = levels.verdict("recursive", lambda n, lv: int(n > 1500), [1500.0], crossing, [1500.0])
    judged = validation_summary({"points measured": 0, "points already stored": 0},
                                levels.Report(Config("rum"), crossing, levels.measured_boundaries(crossing, 1),
                                              [right]), "profile")
    assert judged.checks[0].met is True


def test_a_disturbed_group_is_left_out_of_the_judgement(db):
    """On the loaded CPU the GEMM of the 128 group waited out a time slice: level 1 read 7x faster than it,
    beyond the operation count's 8/7, and every predictor 'lost' 6.5% there."""
    run = store_calibration(db)
    sweep = {2048: {0: 1.0, 1: 0.15}, 4096: {0: 1.0, 1: 1.2}, 8192: {0: 1.0, 1: 1.1}}
    for n, by_level in sweep.items():
        for lv, t in by_level.items():
            db.add(run, levels.EXPERIMENT, "rum", point_params(n, lv, levels.RUM), value=t, unit="s",
                   meta={"speedup": 1 / t, "gemm_s": 1.0})
    report = levels.judge(db, "gpu-key", levels.RUM)
    assert list(report.times) == [4096, 8192] and report.left_out == [2048]
    assert report.summary()["sizes left out"].startswith("2048: a level there ran faster than its operation count")
    assert all(v.time_lost_pct == 0 for v in report.verdicts[:2])
    assert levels.credible_sweep({1: {0: 1.0, 1: 0.88, 2: 0.77}}, levels.RUM) == ({1: {0: 1.0, 1: 0.88, 2: 0.77}}, [])


def test_judge_on_a_sweep_the_recursive_model_explains(db):
    run = store_calibration(db)
    model = true_model(db, launch_ms=0.05)
    plan = levels.LevelPlan(tuple(range(2048, 32769, 2048)), 3, 512)
    store_timings(db, run, levels.EXPERIMENT, model, [(n, lv) for n in plan.sizes for lv in plan.levels(n)])
    db.add(run, models.OVERHEAD_EXPERIMENT, "rum", {"size": 256, "level": 3, "dtype": "float64"}, value=5e-5, unit="s")
    report = levels.judge(db, "gpu-key", Config("rum"))
    recursive = report.verdicts[-1]
    assert recursive.name == "recursive" and recursive.time_lost_pct == 0 and recursive.mispredicted == 0
    for m, b in zip(report.measured, recursive.boundaries):
        assert m is None or b == pytest.approx(m, rel=0.01)   # interpolation between sizes 2048 apart
    summary = report.summary()
    assert summary["sizes"] == "2048 to 32768 (16 sizes)"
    assert set(summary) >= {"thesis rule (relative)", "thesis rule (absolute)", "recursive", "measured boundaries"}
    assert [r["size"] for r in report.rows()] == list(plan.sizes)


def test_levels_of_a_plan_respect_the_bottom_size():
    plan = levels.LevelPlan((4096, 8192, 6000), 4, 2048)
    assert plan.levels(4096) == [0, 1] and plan.levels(8192) == [0, 1, 2] and plan.levels(6000) == [0, 1]


# --- the published H100 measurements --------------------------------------------------------------

@pytest.mark.parametrize("fused", [False, True])
def test_recursive_predictor_beats_the_thesis_rule_on_h100_data(h100_db, fused):
    config = Config("rum", fused=fused)
    with ResultsDB(h100_db) as db:
        key = models.select_env(db, device="H100")
        report = levels.judge_times(db, key, config, levels.speedup_sweep(db, key, config), unit="gemm")
    thesis_rel, thesis_ls, recursive = report.verdicts
    assert levels.best_levels(report.times) == {5120: 0, 6144: 0, 7168: int(fused), 8192: int(fused), 16384: 2,
                                                32768: 3, 49152: 3 + int(fused)}
    for thesis in (thesis_rel, thesis_ls):
        assert recursive.time_lost_pct <= thesis.time_lost_pct
        assert recursive.mispredicted <= thesis.mispredicted
        assert all(abs(r) < abs(t) for r, t in zip(recursive.errors_pct, thesis.errors_pct) if r is not None)
    assert thesis_ls.time_lost_pct > 1                     # ordinary least squares: P ~ 24000 on this sweep
    if fused:
        assert recursive.mispredicted < thesis_rel.mispredicted


# --- level="auto" ----------------------------------------------------------------------------------

def test_auto_level_follows_the_profile_written_from_the_stored_calibration(tmp_path):
    backend = get_backend("numpy")
    assert backend_profile(backend) is None
    assert auto_level(4096, backend) == rule_level(4096, "numpy")
    with ResultsDB(tmp_path / "cal.sqlite") as db:
        # Additions almost free: Strassen wins from small sizes, so the model splits deeper than the rule.
        store_calibration(db, "cpu", {**backend.device_info(), "backend": "numpy"}, gemm=(1e-9, 0, 0, 0),
                          geam=(1e-15, 0, 0))
        path = write_profile(db, "cpu", "test")
        model, _ = models.stored_predictor(db, "cpu", Config("rum"))
    assert backend_profile(backend)["env_key"] == "cpu" and path.is_file()
    # Never deeper than bottom products of the smallest calibrated size (256): level 4 at 4096.
    assert auto_level(4096, backend) == model.level(4096, range(5)) == 4 > rule_level(4096, "numpy")
    assert model.level(4096, range(MAX_LEVEL + 1)) > 4
    with pytest.raises(ValueError, match="positive"):
        auto_level(0, backend)


# --- figures -----------------------------------------------------------------------------------------

def test_figures_render_from_stored_results(db, tmp_path):
    run = store_calibration(db)
    model = true_model(db)
    plan = levels.LevelPlan(tuple(range(4096, 32769, 4096)), 3, 1024)
    store_timings(db, run, levels.EXPERIMENT, model, [(n, lv) for n in plan.sizes for lv in plan.levels(n)])
    for name in ("speedup-model", "level-validation"):
        assert [p.name for p in FIGURES[name].render(db, tmp_path)] == [f"{name}.png", f"{name}.pdf"]
