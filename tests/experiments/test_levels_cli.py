"""gemmlab fit, predict and levels: JSON output, sources of the model, errors, resume."""

import json
import weakref
from pathlib import Path

import numpy as np
import pytest

from experiments.cli import main
from experiments.core import lab, reproduce
from experiments.core.database import ResultsDB
from experiments.levels import calibration
from modeling.crossover import thesis_level

PUBLISHED = Path(__file__).resolve().parents[2] / "results" / "published"




def run_error(capsys, *argv):
    assert main(list(argv)) == 2
    return capsys.readouterr().err


def test_fit_reports_both_weightings_of_the_h100_calibration(run_json, h100_db):
    out = run_json("fit", "--db", str(h100_db), "--device", "H100")
    assert out["device"] == "NVIDIA H100 80GB HBM3" and out["units"] == "ms"
    rel, ls = out["fits"]["relative"], out["fits"]["absolute"]
    assert len(rel["gemm"]["coefficients"]) == 4 and len(rel["geam"]["coefficients"]) == 3
    assert ls["gemm"]["r2"] > rel["gemm"]["r2"] > 0.99      # least squares maximises R^2 ...
    assert rel["gemm"]["rel_rms"] < ls["gemm"]["rel_rms"]   # ... and misses the small sizes
    assert rel["P"] == pytest.approx(9294, rel=1e-3) and ls["P"] == pytest.approx(24150, rel=1e-3)


def test_predict_from_the_stored_calibration(run_json, h100_db):
    out = run_json("predict", "--db", str(h100_db), "--device", "H100", "--size", "20000")
    assert set(out) >= {"P", "boundaries", "level", "level_recursive", "P_recursive", "boundaries_recursive"}
    assert out["boundaries"] == pytest.approx([2 * out["P"], 4 * out["P"], 8 * out["P"]])
    assert out["level"] == thesis_level(20000, out["P"], 4) == 2
    assert out["level_recursive"] == 2 and out["P_recursive"] < out["P"]
    assert "fitted to" in out["launch_overhead_source"] and 30 < out["launch_overhead_us"] < 80
    given = run_json("predict", "--db", str(h100_db), "--device", "H100", "--size", "20000", "--launch-us", "0")
    assert given["launch_overhead_us"] == 0 and given["launch_overhead_source"] == "given"


def test_predict_from_a_coefficients_file(run_json, tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"gemm": [1e-12, 0, 0, 0], "geam": [1e-9, 0, 0], "units": "ms"}))
    out = run_json("predict", "--coefficients", str(path), "--size", "70000")
    assert out["P"] == pytest.approx(30000, rel=1e-6)                  # 30 q1 / p1
    assert out["boundaries"] == pytest.approx([60000, 120000, 240000], rel=1e-6)
    assert (out["level"], out["level_recursive"]) == (2, 2)
    assert out["P_recursive"] == pytest.approx(30000, rel=1e-6)


def test_predict_for_a_gpu_from_the_hardware_table(run_json):
    out = run_json("predict", "--gpu", "H100", "--size", "30000")
    assert out["gpu"]["fp64_tensor_tflops"] == 67 and out["source"] == "analytic model of H100"
    assert 6000 < out["P"] < 8000 and out["P_recursive"] == pytest.approx(out["P"], rel=1e-6)
    assert out["level"] == thesis_level(30000, out["P"], 4)
    assert out["speedups"]["0"] == 1.0 and out["speedups"]["3"] > out["speedups"]["1"] > 1


def test_predict_with_a_workspace_prices_each_levels_plan(run_json, capsys):
    """20 GiB beside a 49152 product: Winograd fits at the bottom levels only; without --fused every
    schedule makes the same additions and the plan stays RUM."""
    out = run_json("predict", "--gpu", "H100", "--size", "49152", "--fused", "--workspace", "20G")
    plans = out["workspace"]
    assert plans["bytes"] == 20 * 2**30
    rum_floor = 49152 * 49152 * 8              # RUM's support matrix when the inputs are kept
    for lv, row in plans["levels"].items():
        assert row["extra_bytes"] - (rum_floor if lv != "0" else 0) <= 20 * 2**30
        assert len(row["schedules"]) == int(lv)
    assert plans["levels"]["3"]["schedules"] == ["rum", "rum", "winograd"]
    assert plans["levels"]["3"]["speedup"] > out["speedups"]["3"]      # the mix beats RUM throughout
    assert str(plans["level"]) == max(plans["levels"], key=lambda lv: plans["levels"][lv]["speedup"])
    plain = run_json("predict", "--gpu", "H100", "--size", "49152", "--workspace", "20G")["workspace"]
    assert {row["plan"] for row in plain["levels"].values()} == {"rum"}
    assert main(["predict", "--gpu", "H100", "--size", "49152", "--fused", "--workspace", "20G"]) == 0
    assert "within 20.00 GiB beyond RUM" in capsys.readouterr().out


def test_predict_errors_say_what_to_do(capsys, h100_db):
    assert "no hardware row for 'RTX 9999'" in run_error(capsys, "predict", "--gpu", "RTX 9999", "--size", "100")
    err = run_error(capsys, "predict", "--db", str(h100_db), "--device", "A100", "--size", "100")
    assert "stored: NVIDIA H100 80GB HBM3 [cupy] (--env" in err
    # no crossover in the range is an answer, level 0 (test_cli_arguments.py), not an error


def test_levels_judges_the_published_speedup_points(run_json, h100_db):
    out = run_json("levels", "--db", str(h100_db), "--device", "H100", "--stored", "speedup", "--fused")
    assert out["summary"]["configuration"] == "rum+fused"
    rec, thesis = out["summary"]["recursive"], out["summary"]["thesis rule (relative)"]
    assert rec["sizes mispredicted"] < thesis["sizes mispredicted"]
    assert rec["time lost over the sweep %"] < thesis["time lost over the sweep %"]
    assert [r["best"] for r in out["rows"]] == [0, 0, 1, 1, 2, 3, 4]


def test_context_calibration_times_one_level_of_calls(run_json, tmp_path, monkeypatch):
    monkeypatch.setattr(calibration, "SUSTAIN_S", 0.005)
    db = str(tmp_path / "c.sqlite")
    out = run_json("calibrate", "--backend", "numpy", "--context", "--sizes", "64,128", "--db", db,
                   "--no-progress")
    assert out["context"] and [p["size"] for p in out["points"]] == [64, 128]
    with ResultsDB(db) as store:
        rows = store.measurements(calibration.CONTEXT_EXPERIMENT)
        key = store.env_keys()[0]
    assert all(r.meta["calls_per_sample"] % 7 == 0 for r in rows if r.method == "gemm")
    assert all(r.meta["calls_per_sample"] % 15 == 0 for r in rows if r.method == "geam")
    assert all(r.value == pytest.approx(np.median(r.samples)) for r in rows)   # per call
    with ResultsDB(db) as store:
        assert calibration.table(store, key) == []              # the plain calibration is separate
    assert main(["calibrate", "--backend", "numpy", "--context", "--sizes", "0", "--db", db]) == 2


def test_levels_quick_sweep_on_the_cpu_resumes(run_json, tmp_path):
    db = str(tmp_path / "l.sqlite")
    plan = run_json("levels", "--backend", "numpy", "--quick", "--dry-run", "--db", db)
    assert plan["plan"]["128"] == [0, 1, 2]
    args = ("levels", "--backend", "numpy", "--sizes", "128,192,256", "--max-level", "2", "--min-bottom", "32",
            "--db", db, "--no-progress")
    first = run_json(*args)
    judged = [r["size"] for r in first["rows"]]
    left_out = [n for n in (128, 192, 256) if n not in judged]      # a group a loaded machine disturbed
    assert judged == [n for n in (128, 192, 256) if n not in left_out] and len(judged) >= 1
    assert not left_out or first["summary"]["sizes left out"].startswith(", ".join(map(str, left_out)))
    assert all(set(r["times_ms"]) == {"0", "1", "2"} for r in first["rows"])
    assert "measured (launch-overhead)" in first["summary"]["recursive"]["launch overhead"]
    again = run_json(*args)
    assert again["summary"]["points measured"] == 0 and again["summary"]["points already stored"] > 0
    assert reproduce.select(["level-validation"])[0].name == "level-validation"


def test_a_sizes_operands_are_gone_before_the_next_size_is_drawn(run_json, tmp_path, monkeypatch):
    """The sweep once kept one size's operands alive (through its timed works) while it drew the
    next size's: at N = 49152 on the H100 that ran out of memory. Each size must start with the
    previous one's arrays released."""
    drawn, alive_at_draw = [], []
    original = lab.Operands.uniform.__func__

    def watched(cls, backend, n, *args, **kwargs):
        alive_at_draw.append([r() is not None for r in drawn])
        ops = original(cls, backend, n, *args, **kwargs)
        drawn.extend(weakref.ref(x) for x in (ops.A, ops.B, ops.C))
        return ops

    monkeypatch.setattr(lab.Operands, "uniform", classmethod(watched))
    run_json("levels", "--backend", "numpy", "--sizes", "128,192", "--max-level", "1", "--min-bottom", "32",
             "--db", str(tmp_path / "l.sqlite"), "--no-progress")
    assert len(alive_at_draw) >= 2 and not any(any(a) for a in alive_at_draw[1:]), alive_at_draw
