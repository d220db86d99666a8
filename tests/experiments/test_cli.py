"""The gemmlab command line: --json output parsed back, resume, export/import, reproduce."""

import csv
import json
import subprocess
import sys

import pytest

from experiments.cli import main
from experiments.core import regime
from experiments.core.database import ResultsDB
from experiments.levels import calibration
from experiments.strassen.bench import CONFIGS, MIX
from gpu.backend import get_backend, gpu_available
from gpu.profile import backend_profile, load_profile
from gpu.strassen import auto_level

SIZES = "32,48,64"




def calibrate(run_json, db_path, sizes=SIZES, *extra):
    return run_json("calibrate", "--backend", "numpy", "--sizes", sizes, "--db", str(db_path), *extra)


def test_calibrate_json_has_every_point(run_json, db_path):
    out = calibrate(run_json, db_path)
    assert out["backend"] == "numpy" and out["measured"] == 6 and out["skipped"] == 0
    assert [p["size"] for p in out["points"]] == [32, 48, 64]
    for p in out["points"]:
        assert p["gemm_s"] > 0 and p["geam_s"] > 0 and p["samples"] >= 10
        assert p["tflops"] == pytest.approx(2 * p["size"] ** 3 / p["gemm_s"] / 1e12)


def test_second_calibrate_resumes_and_force_remeasures(run_json, db_path):
    first = calibrate(run_json, db_path, "32,48")
    again = calibrate(run_json, db_path, "32,48,64")
    assert (again["measured"], again["skipped"]) == (2, 4)
    assert again["points"][0]["gemm_s"] == first["points"][0]["gemm_s"]
    forced = calibrate(run_json, db_path, "32", "--force")
    assert (forced["measured"], forced["skipped"]) == (2, 0)
    with ResultsDB(db_path) as db:
        rows = db.measurements("calibration", latest=False)
        newest = max((r for r in rows if r.method == "gemm" and r.params["size"] == 32), key=lambda r: r.id)
    assert len(rows) == 8
    assert forced["points"][0]["gemm_s"] == newest.value


def test_interrupted_sweep_resumes_without_losing_points(run_json, capsys, db_path, monkeypatch):
    real = calibration.measure_point
    seen = []

    def interrupt_at_third(backend, params, methods):
        seen.append(params["size"])
        if len(seen) == 3:
            raise KeyboardInterrupt
        return real(backend, params, methods)

    monkeypatch.setattr(calibration, "measure_point", interrupt_at_third)
    assert main(["calibrate", "--backend", "numpy", "--sizes", SIZES, "--db", str(db_path)]) == 130
    assert "resume" in capsys.readouterr().err
    monkeypatch.setattr(calibration, "measure_point", real)
    with ResultsDB(db_path) as db:
        assert db.runs()[0]["status"] == "interrupted"
        assert len(db.measurements("calibration")) == 4
    resumed = calibrate(run_json, db_path)
    assert (resumed["measured"], resumed["skipped"]) == (2, 4)


def test_results_list_export_and_import_round_trip(run_json, db_path, tmp_path):
    calibrate(run_json, db_path, "32,48")
    runs = run_json("results", "list", "--db", str(db_path))["runs"]
    assert len(runs) == 1 and runs[0]["status"] == "finished" and runs[0]["measurements"] == 4
    csv_path = tmp_path / "calibration.csv"
    exported = run_json("results", "export", "-o", str(csv_path), "--db", str(db_path))
    assert exported["rows"] == 4
    with open(csv_path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert {r["method"] for r in rows} == {"gemm", "geam"}
    other = tmp_path / "other.sqlite"
    assert run_json("results", "import", str(csv_path), "--db", str(other))["rows"] == 4
    with ResultsDB(db_path) as a, ResultsDB(other) as b:
        key = a.env_keys()[0]
        assert calibration.table(a, key) == calibration.table(b, key)


def test_export_to_stdout_is_csv(run_json, capsys, db_path):
    calibrate(run_json, db_path, "32")
    assert main(["results", "export", "--db", str(db_path)]) == 0
    header = capsys.readouterr().out.splitlines()[0]
    assert header.startswith("experiment,method,params")


def test_info_json(run_json):
    out = run_json("info", "--backend", "numpy")
    assert out["backend"] == "numpy" and len(out["env_key"]) == 16
    assert out["environment"]["numpy"]


def test_bad_sizes_are_clear_errors(capsys, db_path):
    assert main(["calibrate", "--backend", "numpy", "--sizes", "0", "--db", str(db_path)]) == 2
    assert "positive" in capsys.readouterr().err
    assert main(["calibrate", "--backend", "numpy", "--sizes", "10000000", "--db", str(db_path)]) == 2
    assert "smaller --sizes" in capsys.readouterr().err
    assert main(["calibrate", "--backend", "numpy", "--sizes", "", "--db", str(db_path)]) == 2
    assert "--sizes is empty" in capsys.readouterr().err
    assert main(["reproduce", "--backend", "numpy", "--only", "nope", "--db", str(db_path)]) == 2
    assert "unknown experiments" in capsys.readouterr().err
    with ResultsDB(db_path) as db:
        assert db.runs() == [], "argument errors must not leave failed runs behind"
    with pytest.raises(SystemExit):
        main(["calibrate", "--sizes", "12,abc"])


def test_repeated_sizes_are_measured_once(run_json, db_path):
    out = calibrate(run_json, db_path, "48,32,48")
    assert out["measured"] == 4 and [p["size"] for p in out["points"]] == [32, 48]


@pytest.mark.skipif(gpu_available(), reason="a GPU is usable here")
def test_cupy_without_gpu_exits_with_a_message(capsys, db_path):
    assert main(["calibrate", "--backend", "cupy", "--db", str(db_path)]) == 2
    assert "--backend numpy" in capsys.readouterr().err


def test_reproduce_quick_writes_figures_summary_and_json(run_json, db_path, tmp_path, monkeypatch):
    monkeypatch.setitem(calibration.SIZES, ("numpy", True), (32, 64, 96))
    out_dir = tmp_path / "figs"
    out = run_json("reproduce", "--quick", "--backend", "numpy", "--only", "calibration",
                   "--db", str(db_path), "--out", str(out_dir))
    assert out["experiments"]["calibration"]["points measured"] == 6
    pngs = [p for p in out["figures"]["calibration"] if p.endswith(".png")]
    assert pngs and all((out_dir / name).stat().st_size > 10_000 for name in ("calibration.png", "calibration.pdf"))
    summary = (out_dir / "SUMMARY.md").read_text()
    assert "calibration" in summary and "best GEMM rate" in summary
    redraw = run_json("figures", "--db", str(db_path), "--out", str(tmp_path / "again"))
    assert set(redraw["figures"]) == {"calibration"}


def test_figures_from_an_empty_database_draw_nothing(run_json, db_path, tmp_path):
    assert run_json("figures", "--db", str(db_path), "--out", str(tmp_path))["figures"] == {}


def test_python_dash_m_entry_point(db_path):
    done = subprocess.run([sys.executable, "-m", "experiments", "results", "list", "--json", "--db", str(db_path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["runs"] == []


def test_strassen_command_measures_chosen_points_then_resumes(run_json, capsys, db_path):
    argv = ("strassen", "--backend", "numpy", "--sizes", "64", "--levels", "1", "--db", str(db_path))
    first = run_json(*argv)
    single = [c for c in CONFIGS if c.schedule != MIX]     # where memory is plentiful the mix is one schedule
    assert first["summary"]["points measured"] == len(single)
    configs = [r for r in first["rows"] if r["method"] != "strassen-defaults"]
    assert {r["method"] for r in configs} == {c.name for c in single}
    assert all(r["size"] == 64 and r["level"] == 1 and r["speedup"] > 0 for r in configs)
    (defaults,) = [r for r in first["rows"] if r["method"] == "strassen-defaults"]    # timed as called, level 0
    assert defaults["level"] == 0 and defaults["as_called_s"] == defaults["time_s"] > 0
    again = run_json(*argv)
    assert again["summary"]["points measured"] == 0 and again["summary"]["points already stored"] == len(single)
    assert main(["strassen", "--backend", "numpy", "--levels", "0", "--db", str(db_path)]) == 2
    assert "levels must lie" in capsys.readouterr().err


def test_calibrate_writes_the_device_profile_that_level_auto_reads(run_json, db_path):
    out = calibrate(run_json, db_path, "32,64,128,256")
    be = get_backend("numpy")
    profile = backend_profile(be)
    assert load_profile(out["profile"]) == profile
    assert profile["backend"] == "numpy" and profile["calibration"]["size"] == [32, 64, 128, 256]
    assert profile["written_by"].startswith("gemmlab calibrate")
    table = profile["levels"]["rum"]
    assert table[0] == [0, 0] and all(a[0] < b[0] for a, b in zip(table, table[1:]))
    # the library follows the profile, not the fixed rule (which needs bottoms of 1024 on a CPU)
    assert [auto_level(n, be) for n in (64, 4096)] == [table_level_of(table, 64), table_level_of(table, 4096)]
    one = calibrate(run_json, db_path, "32")
    assert one["profile"] == out["profile"], "a later calibration rewrites the same device's profile"


def table_level_of(table, n):
    """The level of the last row starting at or below n (rows ascend by size)."""
    return [level for start, level in table if start <= n][-1]


def test_a_cold_calibration_adds_its_tables_beside_the_sustained_ones(run_json, db_path, monkeypatch):
    monkeypatch.setitem(regime.REGIMES, "cold", regime.Regime("cold", gap_s=0.0))     # no idle second per sample
    calibrate(run_json, db_path, "32,64,128,256")
    cold = run_json("calibrate", "--backend", "numpy", "--sizes", "32,64,128,256", "--regime", "cold",
                    "--db", str(db_path), "--no-progress")
    profile = backend_profile(get_backend("numpy"))
    assert load_profile(cold["profile"]) == profile and profile["regime"] == "cold"
    assert set(profile["regimes"]) == {"sustained", "cold"}
    assert all(profile["regimes"][r]["levels"]["rum"][0] == [0, 0] for r in ("sustained", "cold"))
