"""The headline tables' renderer (experiments.papers.headline and results/published/scripts/as_called_tables.py):
records of the documented shape as Markdown, the H100's record from the committed exports, clear errors."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from experiments.papers.headline import h100_documents, load, markdown

ROOT = Path(__file__).resolve().parents[2]
ENV = {"device": "NVIDIA H200", "power_limit_w": 700.0, "driver": "580.159.04", "cuda_runtime": "13.2",
       "cublas": "13.1.0", "cupy": "14.2.0", "numpy": "2.5.2", "git_commit": "abc1234"}
SPLITK = {"family": "splitk", "call": "splitk.matmul(A, B, out=C)", "m": 16, "n": 16, "k": 2**20,
          "as_called_s": 1.18e-3, "host_s": 1.1e-3, "device_s": 7.5e-5, "reference_s": 9.6e-5,
          "ratio_as_called": 0.0814, "ratio_device": 1.28, "reference_host_s": 3.1e-5,
          "reference_call": "cupy.matmul(A, B, out=C)", "config": {"deterministic": True},
          "telemetry": {"sm_clock_mhz": 1980.0, "power_w": 515.2, "throttle_reasons": 4}}
STRASSEN = {"family": "strassen", "call": "strassen.matmul(A, B, out=C)", "size": 4096, "as_called_s": 2.79e-3,
            "host_s": 1.4e-3, "device_s": None, "reference_s": 2.49e-3, "ratio_as_called": 0.892,
            "ratio_device": None, "config": {}, "telemetry": {}}
FIRST = {"family": "strassen", "call": "strassen.matmul(A, B)", "size": 4096, "cold_s": 0.37, "warm_s": 0.05}


def write(tmp_path: Path, records: list, name: str = "as-called.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"script": "x.py", "environment": ENV, "regime": "sustained", "records": records}))
    return path


def test_records_render_with_both_columns_and_nothing_filled_in(tmp_path):
    text = markdown([load(write(tmp_path, [SPLITK, STRASSEN, FIRST]))])
    assert "#### splitk: NVIDIA H200 (700 W); driver 580.159.04, CUDA 13.2, cuBLAS 13.1.0, CuPy 14.2.0, " \
           "NumPy 2.5.2, gemmlab abc1234; regime sustained" in text
    assert "Reference (x ref.): `cupy.matmul(A, B, out=C)`." in text
    assert ("| `splitk.matmul(A, B, out=C)` | m = n = 16, k = 2^20 | 1.18 | 0.081x | 0.075 | 1.280x | 0.096 | "
            "1100.0 | 31.0 | 1980 | 515 | sw_power_cap |") in text
    assert ("| `strassen.matmul(A, B, out=C)` | N = 4096 | 2.79 | 0.892x | not measured | not measured | 2.49 | "
            "1400.0 | not measured | - | - | - |") in text
    assert "| `strassen.matmul(A, B)` | N = 4096 | 0.37 | 0.05 | not measured |" in text
    assert text.count("#### ") == 2, "one table head per family, first-call records under their family"


def test_a_record_without_a_documented_key_or_with_a_bad_time_is_refused_by_name(tmp_path):
    broken = {k: v for k, v in SPLITK.items() if k != "device_s"}
    with pytest.raises(ValueError, match=r"record 1 lacks device_s \(use null"):
        load(write(tmp_path, [SPLITK, broken]))
    with pytest.raises(ValueError, match="record 0: as_called_s must be a non-negative number or null"):
        load(write(tmp_path, [dict(SPLITK, as_called_s="fast")]))
    with pytest.raises(ValueError, match="neither size nor m, n and k"):
        load(write(tmp_path, [{k: v for k, v in STRASSEN.items() if k != "size"}]))
    (tmp_path / "bad.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="expected an object with a list 'records'"):
        load(tmp_path / "bad.json")


def test_the_h100_record_is_device_time_only_from_the_exports():
    splitk, strassen, ozaki2 = h100_documents()
    assert [(r["m"], r["k"]) for r in splitk.records] == [(m, 2**e) for m in (16, 32, 64) for e in (20, 22, 24)]
    every = splitk.records + strassen.records + ozaki2.records
    assert all(r["as_called_s"] is None and r["host_s"] is None and r["ratio_as_called"] is None for r in every)
    assert all(r["device_s"] > 0 and r["ratio_device"] == pytest.approx(r["reference_s"] / r["device_s"])
               for r in every)
    top = {r["size"]: r for r in strassen.records}
    assert top[49152]["ratio_device"] == pytest.approx(1.493, abs=5e-4) and top[49152]["call"].startswith("executor")
    assert [r["size"] for r in ozaki2.records] == [4096, 8192, 16384]
    assert "H100 80GB HBM3 (700 W)" in markdown([splitk]) and "not measured | not measured" in markdown([splitk])


def test_the_script_prints_the_tables_and_names_a_bad_file(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("as_called_tables",
                                                  ROOT / "results/published/scripts/as_called_tables.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert '"ratio_as_called": 0.80' in script.__doc__, "the documented shape is in the script's docstring"
    assert script.main([str(write(tmp_path, [SPLITK]))]) == 0
    assert "| `splitk.matmul(A, B, out=C)` |" in capsys.readouterr().out
    assert script.main([str(tmp_path / "missing.json")]) == 2
    assert "missing.json: cannot read it as JSON" in capsys.readouterr().err


def test_the_published_readme_holds_the_h100_tables_as_the_renderer_prints_them():
    readme = (ROOT / "results/published/README.md").read_text()
    assert markdown(h100_documents()).replace("#### ", "### H100, ") in readme
    assert "### H200\n\nNot measured yet." in readme
