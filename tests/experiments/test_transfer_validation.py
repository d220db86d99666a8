"""Leave-one-device-out validation of the transfer model: the sweeps it finds, that the
held-out device never trains its own prediction, the stored rows, the summary and the figure, on NumPy."""

import pytest

from experiments.core.database import ResultsDB
from experiments.core.registry import EXPERIMENTS, FIGURES, load
from experiments.levels import predict, transfer_validation
from experiments.levels.transfer_validation import EXPERIMENT, all_sweeps, bundled_sweeps
from modeling import transfer

H100_ENV = {"backend": "cupy", "device": "NVIDIA H100 80GB HBM3", "cublas": "13.1.0"}
CPU_ENV = {"backend": "numpy", "device": "CPU: Test EPYC", "cpu": "Test EPYC"}


def test_both_bundled_h100_sweeps_are_read():
    sweeps = {s.label: s for s in bundled_sweeps()}
    assert set(sweeps) == {"rum, regime not recorded", "rum+fused, sustained"}
    assert {s.device for s in sweeps.values()} == {"H100"}
    assert len(sweeps["rum, regime not recorded"].times) == 24 and not sweeps["rum, regime not recorded"].fused
    assert len(sweeps["rum+fused, sustained"].times) == 17 and sweeps["rum+fused, sustained"].fused
    assert all(0 in t and len(t) > 1 for s in sweeps.values() for t in s.times.values())


def add_sweep(db, env, key, method="rum", fused=False):
    run = db.start_run("synthetic", env, key)
    for n in (4096, 8192, 16384):
        for lv in (0, 1, 2):
            db.add(run, "level-validation", method, {"size": n, "level": lv, "schedule": "rum", "parallel": False,
                                                     "fused": fused, "dtype": "float64", "regime": "sustained"},
                   value=1.0 + abs(lv - n // 8192), unit="s")


def test_a_stored_sweep_replaces_the_bundled_one_and_a_cpu_sweep_is_left_out(db_path):
    with ResultsDB(db_path) as db:
        add_sweep(db, CPU_ENV, "cpu")
        assert {(s.device, s.source.split("/")[0]) for s in all_sweeps(db)} == {("H100", "results")}
        add_sweep(db, H100_ENV, "h100")
        found = all_sweeps(db)
    assert [(s.device, s.label, s.source) for s in found] == [("H100", "rum, sustained", "env h100")]
    assert found[0].times[16384] == {0: 3.0, 1: 2.0, 2: 1.0}


def test_the_held_out_device_never_trains_its_prediction(run_json, db_path, tmp_path, monkeypatch):
    """Its entry in the training set is poisoned (reading its curves fails) and every call is checked."""
    load()
    devices = predict.training_devices(db_path)
    assert "H100" in devices and len(devices) >= 2

    def poisoned(x):
        raise AssertionError("the held-out H100's own curves were read")

    devices["H100"] = transfer.Device("H100", devices["H100"].gpu, poisoned, poisoned, (1024.0, 32768.0), 0.5,
                                      inner_gemm=poisoned, inner_geam=poisoned, inner_sizes=(1024.0, 16384.0))
    monkeypatch.setattr(predict, "training_devices", lambda path: dict(devices))
    calls, real = [], transfer.leave_one_out

    def spy(train, held_out, gpu, **kw):
        assert held_out not in train and gpu.name == held_out
        calls.append((held_out, sorted(train)))
        return real(train, held_out, gpu, **kw)

    monkeypatch.setattr(transfer, "leave_one_out", spy)
    out = run_json("reproduce", "--quick", "--backend", "numpy", "--only", EXPERIMENT, "--db", db_path,
                   "--out", tmp_path, "--no-progress")
    assert calls == [("H100", ["P100"])] * 2
    assert [r["trained on"] for r in out["experiments"][EXPERIMENT]["H100 held out"]] == ["P100"] * 2


def test_reproduce_stores_a_row_per_size_and_judges_the_target(run_json, db_path, tmp_path):
    load()
    assert EXPERIMENT in EXPERIMENTS and FIGURES[EXPERIMENT].experiments == (EXPERIMENT,)
    out = run_json("reproduce", "--quick", "--backend", "numpy", "--only", EXPERIMENT, "--db", db_path,
                   "--out", tmp_path, "--no-progress")
    found = out["experiments"][EXPERIMENT]
    table = {r["sweep"]: r for r in found["H100 held out"]}
    assert set(table) == {"rum, regime not recorded", "rum+fused, sustained"}
    assert len(found["verdict"]) == 2 and all("<= 1%" in c["target"] for c in found["verdict"])
    assert (tmp_path / f"{EXPERIMENT}.png").stat().st_size > 10_000
    with ResultsDB(db_path) as db:
        rows = db.measurements(EXPERIMENT)
        by_sweep = {s.label: s for s in bundled_sweeps()}
        assert len(rows) == sum(len(s.times) for s in by_sweep.values())
        for m in rows:
            times = by_sweep[m.params["sweep"]].times[m.params["size"]]
            assert m.method == m.params["device"] == "H100" and m.unit == "fraction"
            assert m.value == pytest.approx(times[m.meta["predicted_level"]] / times[m.meta["best_level"]] - 1)
            assert m.meta["best_level"] == min(times, key=times.get)
            lo, hi = m.meta["level_range"]
            assert lo <= m.meta["predicted_level"] <= hi and m.meta["trained_on"] == ["P100"]
            assert len(m.meta["boundary_error_pct"]) == len(m.meta["measured_boundaries"])
            p_lo, p_hi = m.meta["predicted_P_range"]
            assert p_lo <= m.meta["predicted_boundaries"][0] <= p_hi
        for label, r in table.items():
            mine = [m for m in rows if m.params["sweep"] == label]
            assert r["sizes mispredicted"] == sum(m.meta["predicted_level"] != m.meta["best_level"] for m in mine)
            assert r["time lost over the sweep %"] == pytest.approx(100 * mine[0].meta["time_lost_sweep"])
            p_range = mine[0].meta["predicted_P_range"]
            assert r["predicted P over the ensemble (N)"] == ", ".join(f"{p:.0f}" for p in p_range)
        fig = FIGURES[EXPERIMENT].draw(db)
    assert len(fig.axes) == 4
    titles = [ax.get_title() for ax in fig.axes]
    assert sum(t.startswith("H100 held out: ") for t in titles) == 2
    assert sum(t.startswith("time lost over the sweep: ") for t in titles) == 2
    assert all(ax.get_xscale() == "log" for ax in fig.axes)


def test_training_devices_carry_their_in_context_curves(published_db):
    """The bundled H100 and a stored calibration both bring their in-context calibration (the calls inside
    a level), which the transfer model learns the crossover from; the published P100 has none."""
    bundled = predict.bundled_device()
    assert bundled is not None and bundled.inner_sizes == (1024.0, 16384.0)
    assert bundled.inner_gemm(4096) != bundled.gemm(4096)
    stored = predict.training_devices(published_db)
    assert stored["H100"].source.startswith("calibration of env") and stored["H100"].inner_sizes is not None
    assert stored["P100"].inner_gemm is None


def test_no_sweep_anywhere_is_an_error(db_path, monkeypatch):
    load()
    monkeypatch.setattr(transfer_validation, "bundled_sweeps", lambda: [])
    with ResultsDB(db_path) as db:
        assert all_sweeps(db) == [] and FIGURES[EXPERIMENT].draw(db) is None
