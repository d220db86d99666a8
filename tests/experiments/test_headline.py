"""The headline tables' renderer (experiments.papers.headline and results/published/scripts/as_called_tables.py):
records of the documented shape as Markdown, the H100's record from the committed exports, clear errors."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from experiments.papers.as_called_formats import ADAPTERS, FIRST_CALLS, written
from experiments.papers.headline import h100_documents, load, markdown, record, telemetry_summary

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent / "data"
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
    assert "| strassen | `strassen.matmul(A, B)` | N = 4096 | 0.37 | not measured | 0.05 | not measured |" in text
    assert text.count("#### ") == 3, "one table head per family, and one for the file's first-call records"


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


def test_a_whole_commit_hash_heads_a_table_as_seven_digits_and_any_other_value_as_written(tmp_path):
    def head(commit: str) -> str:
        path = tmp_path / "as-called.json"
        path.write_text(json.dumps({"script": "x.py", "environment": {**ENV, "git_commit": commit},
                                    "regime": "sustained", "records": [SPLITK]}))
        return markdown([load(path)]).splitlines()[0]

    assert head("684584fb9edaeec7d7625bf17e43afefb3723cd8").endswith("gemmlab 684584f; regime sustained")
    assert head("5256730cf").endswith("gemmlab 5256730cf; regime sustained")
    assert head("0e760f1, 152d3c6").endswith("gemmlab 0e760f1, 152d3c6; regime sustained")


def test_the_published_readme_holds_the_h100_tables_as_the_renderer_prints_them(monkeypatch):
    monkeypatch.chdir(ROOT)
    readme = (ROOT / "results/published/README.md").read_text()
    assert markdown(h100_documents()).replace("#### ", "### H100, ") in readme
    files = sorted(Path("results/published/h200").glob("h200-*-as-called.json")) + \
        [Path("results/published/h200/h200-first-call.json")]
    h200 = markdown([load(path) for path in files]).replace("#### ", "#### H200, ")
    assert all(block.strip() in readme for block in h200.split("\n\n#### ")[1:]), "the H200 tables as rendered"


# --------------------------------------------------------------------------- records and the scripts' formats

def test_record_computes_both_ratios_and_keeps_null_as_not_measured():
    r = record("splitk", "splitk.matmul(A, B)", m=16, n=16, k=2**20, as_called_s=8e-5, host_s=3e-5, device_s=None,
               reference_s=1e-4, reference_device_s=9e-5, config={"chunks": 264}, calls=40)
    assert r["ratio_as_called"] == pytest.approx(1.25) and r["ratio_device"] is None and r["calls"] == 40
    assert record("strassen", "s", size=4096, as_called_s=2e-3, host_s=None, device_s=1e-3, reference_s=None,
                  reference_device_s=1.5e-3)["ratio_device"] == pytest.approx(1.5)
    with pytest.raises(ValueError, match="either size .* or all of m, n and k"):
        record("splitk", "s", size=4, m=1, n=1, k=1, as_called_s=1, host_s=1, device_s=1, reference_s=1)
    with pytest.raises(ValueError, match="ratio_device is computed by record"):
        record("splitk", "s", size=4, as_called_s=1, host_s=1, device_s=1, reference_s=1, ratio_device=2.0)
    with pytest.raises(ValueError, match="as_called_s must be a non-negative number"):
        record("splitk", "s", size=4, as_called_s=-1.0, host_s=1, device_s=1, reference_s=1)


def test_telemetry_summary_reads_masks_and_names_alike():
    got = telemetry_summary([{"sm_mhz": 1980, "power_w": 120.0, "reasons": []}, None,
                             {"sm_mhz": 1500, "power_w": 700.0, "reasons": ["sw_power_cap"]},
                             {"sm_clock_mhz": 1600, "power_w": 690.0, "throttle_reasons": 0x20}])
    assert got == {"sm_clock_mhz": 1600, "power_w": 690.0, "throttle_reasons": 0x24, "readings": 3}


def test_a_splitk_file_of_a_real_run_without_records_renders_through_its_adapter():
    doc = load(DATA / "splitk-as-called.json")
    default, atomic = doc.records
    assert default["call"] == "splitk.matmul(A, B)" and (default["m"], default["k"]) == (16, 2**20)
    assert default["as_called_s"] == pytest.approx(8.035036e-5) and default["device_s"] == pytest.approx(8.06012e-5)
    assert default["ratio_as_called"] == pytest.approx(9.236824e-5 / 8.035036e-5)
    assert atomic["device_s"] is None and atomic["config"] == {"deterministic": False}
    assert doc.environment["git_commit"] == "53815d7ab20a" and doc.regime == "sustained"
    text = markdown([doc])
    assert "| `splitk.matmul(A, B)` | m = n = 16, k = 2^20 | 0.08035 | 1.150x | 0.0806 | 1.143x | 0.09237 | " \
           "32.9 | 20.1 | 1980 | 127 | none |" in text
    assert "| `splitk.matmul(A, B, deterministic=False)` | m = n = 16, k = 2^20 | 0.07377 | 1.252x | not measured" \
        in text


def _reading(mhz=1700, w=650.0, mask=4):
    return {"sm_mhz": mhz, "power_w": w, "reasons": mask}


OZAKI1 = {"script": "results/published/scripts/ozaki1_as_called.py", "device": {"device": "NVIDIA H200"},
          "numpy": "2.5.2", "rounds": 10, "points": [
              {"n": 4096, "slice_format": "fp32", "slices": 7, "bound": 1.0, "calls_per_loop": 5,
               "median_ms": {"as_called": 20.0, "fixed": 16.0, "dgemm": 2.5},
               "samples_ms": {"as_called": [20.0] * 10, "fixed": [16.0] * 10, "dgemm": [2.5] * 10},
               "telemetry": {"before": _reading(), "after": _reading(1600)}}]}
OZAKI2 = {"environment": ENV, "kernel_cache_files_at_start": 0, "points": [
    {"n": 4096, "first_call_s": 1.7, "loop": 40, "default_count": 15,
     "runs": {"default": {"ms_per_call": 5.0, "host_ms": 0.04, "telemetry": [_reading()] * 10},
              "fast-14": {"ms_per_call": 4.0, "telemetry": [_reading()] * 10},
              "dgemm": {"ms_per_call": 2.5, "host_ms": 0.02, "telemetry": [_reading()] * 10}},
     "errors": {"default": {"max_rel": 1e-16}, "fast-14": {"max_rel": 3e-16}, "dgemm": {"max_rel": 2e-16}}}]}
STRASSEN_DOC = {"script": "results/published/scripts/strassen_as_called.py", "environment": ENV,
                "regime": "sustained: sizes back to back, one warm-up round each", "points": [
                    {"size": 8192, "calls_per_sample": 1, "samples": 10, "device_time": "stream hold, CUDA events",
                     "chosen": {"strassen": {"configuration": "flat-1"}, "strassen_out": {"configuration": "flat-1"}},
                     "median_s": {"dgemm": {"wall": 0.022, "event": 0.021, "device": 0.021},
                                  "strassen_out": {"wall": 0.020, "event": 0.019, "device": 0.0175},
                                  "strassen": {"wall": 0.025, "event": 0.024, "device": 0.018}},
                     "host_s": {"dgemm": 2e-5, "strassen_out": 3e-5, "strassen": 4e-5},
                     "telemetry": {"start": _reading(), "end": _reading()}}]}
FIRST_DOC = {"script": "results/published/scripts/first_call.py", "device": {"device": "NVIDIA H200"},
             "methods": {"strassen": {"cold": {"first_s": 0.37, "repeat_s": 0.004}, "warm": {"first_s": 0.05,
                                                                                              "repeat_s": 0.0025}},
                         "splitk": {"cold": {"error": "boom", "process_s": 1.0}, "warm": {"first_s": 0.02}}}}


def test_each_scripts_format_converts_to_records_nothing_filled_in(tmp_path):
    (o1,) = load(_json(tmp_path, OZAKI1, "a.json")).records
    assert o1["call"] == "ozaki.matmul(A, B)" and o1["reference_s"] is None and o1["ratio_as_called"] is None
    assert o1["device_s"] == 0.016 and o1["ratio_device"] == pytest.approx(2.5 / 16.0) and o1["host_s"] is None
    assert o1["telemetry"]["sm_clock_mhz"] == 1650 and o1["config"]["slices"] == 7
    with_dgemm = dict(OZAKI1, points=[dict(OZAKI1["points"][0], median_ms={**OZAKI1["points"][0]["median_ms"],
                                                                           "dgemm_as_called": 3.0})])
    assert load(_json(tmp_path, with_dgemm, "b.json")).records[0]["ratio_as_called"] == pytest.approx(0.15)
    default, fast, first = load(_json(tmp_path, OZAKI2, "ozaki2-as-called.json")).records
    assert default["call"] == "ozaki2.matmul(A, B)" and default["config"]["count_chosen"] == 15
    assert default["host_s"] == pytest.approx(4e-5) and default["reference_host_s"] == pytest.approx(2e-5)
    assert fast["call"] == "ozaki2.matmul(A, B, moduli=14, scaling='fast')"
    assert fast["ratio_as_called"] == pytest.approx(2.5 / 4.0) and fast["device_s"] is None
    assert first["cold_s"] == 1.7 and first["warm_s"] is None
    runs = {"default": {"ms_per_call": 800.0}, "dgemm beside default": {"ms_per_call": 1350.0},
            "default-w1": {"ms_per_call": 750.0}, "dgemm beside default-w1": {"ms_per_call": 1340.0}}
    separate = {"script": "results/published/scripts/ozaki2_as_called.py", "environment": ENV,
                "points": [{"n": 32768, "loop": 1, "runs": runs}]}
    plain, leveled = load(_json(tmp_path, separate, "ozaki2-as-called-w1.json")).records
    assert plain["call"] == "ozaki2.matmul(A, B)" and plain["ratio_as_called"] == pytest.approx(1350 / 800)
    assert leveled["call"] == "ozaki2.matmul(A, B, level=1)" and leveled["config"]["level"] == 1
    assert leveled["ratio_as_called"] == pytest.approx(1340 / 750) and leveled["reference_s"] == pytest.approx(1.34)
    fixed = {"script": "results/published/scripts/ozaki2_as_called.py", "environment": ENV, "points": [
        {"n": 16384, "loop": 3, "first_call_s": 2.0, "first_call_of": "fast-15-w1",
         "runs": {"fast-15-w1": {"ms_per_call": 110.0}, "dgemm": {"ms_per_call": 167.0}}}]}
    (fixed_level,) = load(_json(tmp_path, fixed, "ozaki2-as-called-fixed.json")).records   # no first-call record
    assert fixed_level["call"] == "ozaki2.matmul(A, B, moduli=15, scaling='fast', level=1)"
    fixed["points"][0]["runs"] = {"fast-15-w2-ws80": {"ms_per_call": 100.0}, "dgemm": {"ms_per_call": 167.0}}
    (capped,) = load(_json(tmp_path, fixed, "ozaki2-as-called-capped.json")).records
    assert capped["call"] == f"ozaki2.matmul(A, B, moduli=15, scaling='fast', level=2, workspace={80 << 30})"
    assert capped["config"]["level"] == 2 and capped["config"]["workspace"] == 80 << 30
    fixed["points"][0]["runs"] = {"fast-15-w2-span1024": {"ms_per_call": 100.0}, "dgemm": {"ms_per_call": 167.0}}
    (spans,) = load(_json(tmp_path, fixed, "ozaki2-as-called-spans.json")).records
    assert spans["call"] == "ozaki2.matmul(A, B, moduli=15, scaling='fast', level=2)"
    assert spans["config"]["max_span"] == 1024
    out, new = load(_json(tmp_path, STRASSEN_DOC, "c.json")).records
    assert out["call"] == "strassen.matmul(A, B, out=C)" and out["ratio_device"] == pytest.approx(0.021 / 0.0175)
    assert new["ratio_as_called"] == pytest.approx(0.022 / 0.025) and new["config"] == {"configuration": "flat-1"}
    assert (new["host_s"], new["reference_host_s"], out["host_s"]) == (4e-5, 2e-5, 3e-5)
    text = markdown([load(_json(tmp_path, FIRST_DOC, "d.json"))])
    assert "#### first call: NVIDIA H200; versions not recorded" in text
    assert "| method | call | size | cold first call (s) | cold repeat (s) | warm first call (s) | warm repeat (s) |" \
        in text
    assert "| strassen | `strassen.matmul(A, B)` | N = 4096 | 0.37 | 0.004 | 0.05 | 0.0025 |" in text
    assert "| splitk | `splitk.matmul(A, B)` | m = n = 16, k = 2^20 | not measured | not measured | 0.02 | " \
           "not measured |" in text
    large = dict(FIRST_DOC, n=32768, methods={"frontdoor": {"cold": {"first_s": 9.0}, "warm": {"first_s": 2.0}},
                                               "exact": {"warm": {"first_s": 0.05}}})
    door, exact = load(_json(tmp_path, large, "f.json")).records
    assert (door["call"], door["size"], door["cold_s"], exact["size"]) == ("gpu.matmul(A, B)", 32768, 9.0, 1024)


def test_a_file_claiming_a_scripts_format_it_does_not_have_is_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match="not the format strassen_as_called.py writes"):
        load(_json(tmp_path, {"script": "results/published/scripts/strassen_as_called.py", "points": [{}]}, "e.json"))
    with pytest.raises(ValueError, match="expected an object with a list 'records'"):
        load(_json(tmp_path, {"points": []}, "unknown.json"))
    point = STRASSEN_DOC["points"][0]
    nan = dict(STRASSEN_DOC, points=[dict(point, median_s={**point["median_s"], "strassen": {
        "wall": float("nan"), "event": 0.024, "device": 0.018}})])
    added = written(nan, "strassen_as_called.py")
    assert "records" not in added and "as_called_s must be a non-negative number" in added["records_error"]
    assert len(written(STRASSEN_DOC, "strassen_as_called.py")["records"]) == 2


def test_the_scripts_write_records_through_the_adapters_and_first_call_knows_every_method():
    for name in ADAPTERS:
        text = (ROOT / "results/published/scripts" / name).read_text()
        assert 'written(' in text and f'"{name}"' in text, name
    spec = importlib.util.spec_from_file_location("first_call", ROOT / "results/published/scripts/first_call.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert set(script.KNOWN) == set(FIRST_CALLS) and set(script.METHODS) <= set(script.KNOWN)


def _json(tmp_path: Path, doc: dict, name: str) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path
