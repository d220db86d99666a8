"""The methods section of a device profile from as-called result files (``gemmlab profile --methods``)."""

import json

import pytest

from experiments.frontdoor.methods import add_methods, section
from gpu.profile import load_profile, profile_path, save_profile

ENV = {"backend": "cupy", "device": "NVIDIA H200", "git_commit": "abc1234"}


def record(call, ratio, **shape):
    return {"call": call, "ratio_as_called": ratio, "reference_s": 0.01, "as_called_s": 0.01 / ratio,
            "reference_call": "cupy.matmul(A, B)", "samples": 10, **shape}


DOC = {"environment": ENV, "records": [
    record("ozaki2.matmul(A, B)", 1.48, size=16384),
    record("ozaki2.matmul(A, B, moduli=14, scaling='fast')", 1.59, size=16384),
    record("splitk.matmul(A, B)", 1.17, m=16, n=16, k=2**20),
    record("splitk.matmul(A, B, deterministic=False)", 1.29, m=16, n=16, k=2**20)]}


def test_the_section_keeps_the_candidates_calls_only_with_their_source():
    out = section([("h200-x.json", DOC)])
    timed = {tuple(p["shape"]): [(t["method"], t["config"], t["ratio"]) for t in p["timed"]] for p in out["points"]}
    assert timed == {(16, 2**20, 16): [("splitk", {"deterministic": True}, 1.17),
                                      ("splitk", {"deterministic": False}, 1.29)],
                     (16384, 16384, 16384): [("ozaki2", {"moduli": "auto", "target": "dgemm"}, 1.48)]}
    assert out["points"][1]["timed"][0]["source"] == "h200-x.json (abc1234)"
    assert out["points"][1]["timed"][0]["waits"] is True


def test_a_call_timed_by_several_runs_is_one_entry_at_their_median():
    """Three runs of split-K at one shape: one entry per mode, the median ratio and time, every source named; the
    order of the files does not matter."""
    runs = [(f"run{i}.json", {"environment": {**ENV, "git_commit": f"c{i}"}, "records": [
        record("splitk.matmul(A, B)", ratio, m=16, n=16, k=2**24),
        record("splitk.matmul(A, B, deterministic=False)", ratio + 0.01, m=16, n=16, k=2**24)]})
        for i, ratio in enumerate((1.009, 1.075, 1.020))]
    for order in (runs, runs[::-1]):
        (point,) = section(order)["points"]
        det, atomic = point["timed"]
        assert (det["config"], det["ratio"], det["runs"], det["samples"]) == ({"deterministic": True}, 1.02, 3, 30)
        assert atomic["ratio"] == 1.03 and det["seconds"] == pytest.approx(0.01 / 1.02)
        assert sorted(det["source"].split("; ")) == ["run0.json (c0)", "run1.json (c1)", "run2.json (c2)"]
    assert "runs" not in section([runs[0]])["points"][0]["timed"][0], "one run: the entry as it was"


def test_add_methods_writes_into_the_devices_profile_and_refuses_what_it_cannot(tmp_path):
    files = tmp_path / "a.json"
    files.write_text(json.dumps(DOC))
    with pytest.raises(ValueError, match="no profile of NVIDIA H200"):
        add_methods([files], directory=tmp_path)
    save_profile({"backend": "cupy", "device": "NVIDIA H200", "levels": {"x": 1}}, tmp_path)
    path = add_methods([files], directory=tmp_path)
    doc = load_profile(path)
    assert path == profile_path("cupy", "NVIDIA H200", tmp_path) and doc["levels"] == {"x": 1}
    assert len(doc["regimes"]["sustained"]["methods"]["points"]) == 2
    other = tmp_path / "b.json"
    other.write_text(json.dumps({**DOC, "environment": {**ENV, "device": "NVIDIA H100"}}))
    with pytest.raises(ValueError, match="one device"):
        add_methods([files, other], directory=tmp_path)


def test_add_methods_lays_the_files_entries_over_a_section_the_profile_holds(tmp_path):
    """A calibrated entry no file times stays; the files' call at a shape the section holds takes the place of
    the same call's entry there; a shape of the files alone is added."""
    files = tmp_path / "a.json"
    files.write_text(json.dumps(DOC))
    calibrated = {"method": "ozaki", "config": {"slice_format": "int8", "target": "dgemm"}, "ratio": 0.003,
                  "source": "gemmlab calibrate --methods (run 1)"}
    stale = {"method": "splitk", "config": {"deterministic": True}, "ratio": 0.9, "source": "old.json (0000000)",
             "split": [8000, 132]}
    methods = {"regime": "sustained", "written_by": "gemmlab calibrate --methods", "sm_count": 132,
               "points": [{"shape": [16, 2**20, 16], "gemm_s": 0.02, "timed": [calibrated, stale]},
                          {"shape": [16384] * 3, "dtype": "complex128", "timed": [calibrated]}]}
    save_profile({"backend": "cupy", "device": "NVIDIA H200", "levels": {},
                  "regimes": {"sustained": {"levels": {}, "methods": methods}}}, tmp_path)
    doc = load_profile(add_methods([files], directory=tmp_path))
    out = doc["regimes"]["sustained"]["methods"]
    assert out["sm_count"] == 132 and out["written_by"].startswith("gemmlab calibrate --methods; then gemmlab "
                                                                   "profile --methods a.json")
    first, complex_point, second = out["points"]
    assert complex_point["dtype"] == "complex128" and complex_point["timed"] == [calibrated]
    assert [(t["method"], t["config"], t["ratio"]) for t in first["timed"]] == [
        ("ozaki", calibrated["config"], 0.003), ("splitk", {"deterministic": True}, 1.17),
        ("splitk", {"deterministic": False}, 1.29)]
    assert first["gemm_s"] == 0.01 and second["shape"] == [16384] * 3
    assert first["timed"][1]["split"] == [8000, 132], "a call whose records state no split keeps the one known"
    assert "split" not in first["timed"][2]


def test_a_record_that_states_its_split_gives_it_to_its_entry():
    """split-K's default call records its plan: the entry keeps its chunk width and chunks, which its proven bound
    rests on away from the device."""
    doc = {"environment": ENV, "records": [{**record("splitk.matmul(A, B)", 1.2, m=16, n=16, k=2**20),
                                            "config": {"chunks": 132, "width": 8000, "deterministic": True}}]}
    (point,) = section([("a.json", doc)])["points"]
    assert point["timed"][0]["split"] == [8000, 132]


def test_each_level_call_is_its_own_candidate_beside_the_default_and_a_fixed_count_is_none():
    doc = {"environment": ENV, "records": [record("ozaki2.matmul(A, B)", 1.68, size=32768),
                                           record("ozaki2.matmul(A, B, level=1)", 1.78, size=32768),
                                           record("ozaki2.matmul(A, B, level=2)", 2.01, size=32768),
                                           record("ozaki2.matmul(A, B, moduli=15, scaling='fast', level=2)", 2.02,
                                                  size=32768)]}
    (point,) = section([("h200-w1.json", doc)])["points"]
    auto = {"moduli": "auto", "target": "dgemm"}
    assert [(t["config"], t["ratio"]) for t in point["timed"]] == [
        (auto, 1.68), ({**auto, "level": 1}, 1.78), ({**auto, "level": 2}, 2.01)]
