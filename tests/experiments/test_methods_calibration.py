"""``gemmlab calibrate --methods`` on NumPy: each front-door method timed as called beside the library GEMM,
stored per shape, resumed, and written as the device profile's methods section that the front door ranks by."""

import json
from pathlib import Path

import pytest

import experiments.frontdoor.calibrate as calibration
from experiments.cli import main
from experiments.core.ascalled import Call
from experiments.core.database import ResultsDB
from experiments.frontdoor.calibrate import EXPERIMENT, LIBRARY
from gpu.backend import get_backend
from gpu.frontdoor import rank
from gpu.frontdoor.complexmm import rank_complex
from gpu.frontdoor.contract import Accuracy
from gpu.profile import device_name, methods, save_profile

SHAPES = "48:48:48,8:4096:8"


def calibrate(capsys, db):
    code = main(["calibrate", "--methods", "--backend", "numpy", "--shapes", SHAPES, "--db", str(db), "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_the_methods_are_timed_stored_and_written_as_the_profiles_section(capsys, tmp_path):
    code, doc = calibrate(capsys, tmp_path / "m.sqlite")
    assert code == 0 and doc["shapes measured"] == 2 and doc["points in the section"] == 2
    section, where = methods(get_backend("numpy"))
    assert where == doc["profile"]
    assert "residue_min_k" not in section, "NumPy's INT8 GEMMs write no residues"
    by_shape = {tuple(p["shape"]): {(e["method"], json.dumps(e["config"], sort_keys=True)) for e in p["timed"]}
                for p in section["points"]}
    assert {m for m, _ in by_shape[(8, 4096, 8)]} == {"ozaki2", "ozaki", "splitk"}
    assert {m for m, _ in by_shape[(48, 48, 48)]} == {"ozaki2", "ozaki"}, "split-K refuses a square"
    for point in section["points"]:
        assert point["gemm_s"] > 0 and point["reference"] == "numpy.matmul(A, B)"
        for e in point["timed"]:
            assert e["ratio"] > 0 and e["seconds"] > 0 and e["source"].startswith("gemmlab calibrate --methods")
    splits = [e["split"] for p in section["points"] for e in p["timed"] if e["method"] == "splitk"]
    assert splits and all(w * c >= 4096 and c >= 1 for w, c in splits), "split-K's split recorded with its entry"
    assert not any("split" in e for p in section["points"] for e in p["timed"] if e["method"] != "splitk")
    ranking = rank(8, 4096, 8, "dgemm", methods=section)
    assert any(r.family == "splitk" and r.ratio is not None and r.basis.startswith("measured")
               for r in ranking.entries)
    with ResultsDB(tmp_path / "m.sqlite") as db:
        refused = [m.meta["refused"] for m in db.measurements(EXPERIMENT) if m.method == LIBRARY
                   and m.params["m"] == 48]
    assert refused and {name for name in refused[0] if "splitk" in name}, "split-K's refusal is kept with its reason"
    levels = {name: why for name, why in refused[0].items() if "level=" in name}
    assert set(refused[0]) - set(levels) == {name for name in refused[0] if "splitk" in name}
    assert len(levels) == 2 and all("would run the level's passes" in why for why in levels.values()), \
        "at 48 no level has its fused form: the front door would refuse it, so it is not timed"


def test_an_interrupted_or_repeated_calibration_measures_only_what_is_missing(capsys, tmp_path):
    code, first = calibrate(capsys, tmp_path / "m.sqlite")
    section = methods(get_backend("numpy"))[0]
    code, again = calibrate(capsys, tmp_path / "m.sqlite")
    assert code == 0 and again["shapes measured"] == 0 and again["shapes already stored"] == 2
    assert methods(get_backend("numpy"))[0] == section


def test_a_bad_shape_is_refused_before_any_work(capsys, tmp_path):
    with pytest.raises(SystemExit) as done:              # argparse refuses an argument by exiting with 2
        main(["calibrate", "--methods", "--backend", "numpy", "--shapes", "8:8", "--db", str(tmp_path / "m")])
    assert done.value.code == 2 and "a shape reads M:K:N" in capsys.readouterr().err
    assert not (tmp_path / "m").exists()


def test_a_device_with_only_a_bundled_profile_keeps_its_tables_beside_the_new_section(capsys, tmp_path,
                                                                                      monkeypatch):
    """No user profile yet: the calibration writes a copy of the bundled one with the methods section added, so
    that its level tables and configurations still decide, and the bundled document itself is left as read."""
    bundled = {"backend": "numpy", "device": "x", "levels": {"rum": [[0, 0]]},
               "regimes": {"sustained": {"levels": {"rum": [[0, 0]]}, "configurations": {"points": []}}}}
    monkeypatch.setattr("experiments.frontdoor.calibrate.bundled_profile", lambda be: bundled)
    code, doc = calibrate(capsys, tmp_path / "m.sqlite")
    written = json.loads(Path(doc["profile"]).read_text())
    sustained = written["regimes"]["sustained"]
    assert sustained["levels"] == {"rum": [[0, 0]]} and sustained["configurations"] == {"points": []}
    assert len(sustained["methods"]["points"]) == 2 and "methods" not in bundled["regimes"]["sustained"]
    assert methods(get_backend("numpy"))[1] == doc["profile"], "written as this device's own profile"


def test_by_default_complex_products_are_calibrated_too_and_rank_complex_candidates(capsys, tmp_path):
    code = main(["calibrate", "--methods", "--backend", "numpy", "--db", str(tmp_path / "c.sqlite"), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["points in the section"] == 3
    section, _ = methods(get_backend("numpy"))
    complex_points = [p for p in section["points"] if p.get("dtype") == "complex128"]
    assert [p["shape"] for p in complex_points] == [[64, 64, 64]]
    (point,) = complex_points
    assert sorted((e["method"], e["config"].get("scheme", "2m")) for e in point["timed"]) == [
        ("ozaki2c", "2m"), ("ozaki2c", "3m"), ("ozaki2c", "4m")] and point["gemm_s"] > 0
    assert all(p.get("dtype", "float64") == "float64" for p in section["points"] if p is not point)
    ranked = rank_complex(64, 64, 64, Accuracy("dgemm"), section)
    assert sum(r.family == "ozaki2c" and r.ratio is not None and r.basis.startswith("measured")
               for r in ranked.entries) == 3
    assert all(r.family != "ozaki2c" for r in rank(64, 64, 64, "dgemm", methods=section).entries)


def test_given_shapes_may_be_calibrated_as_complex_products_alone(capsys, tmp_path):
    code = main(["calibrate", "--methods", "--complex", "--shapes", "48:48:48", "--backend", "numpy", "--db",
                 str(tmp_path / "c.sqlite"), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["shapes measured"] == 1
    section, _ = methods(get_backend("numpy"))
    (point,) = [p for p in section["points"] if p["shape"] == [48, 48, 48]]
    assert point["dtype"] == "complex128" and {e["method"] for e in point["timed"]} == {"ozaki2c"}
    assert main(["calibrate", "--methods", "--complex", "--backend", "numpy", "--db", str(tmp_path / "c.sqlite")]) \
        != 0 and "give them with --shapes" in capsys.readouterr().err


def test_a_method_far_slower_than_the_library_gemm_is_recorded_from_one_call_and_not_interleaved(
        capsys, tmp_path, monkeypatch):
    monkeypatch.setattr("experiments.frontdoor.calibrate.SLOWEST", 1e9)       # every method "slower"
    code, doc = calibrate(capsys, tmp_path / "s.sqlite")
    section = methods(get_backend("numpy"))[0]
    entries = [e for p in section["points"] for e in p["timed"]]
    assert code == 0 and entries and all(e["screened"] and e["samples"] == 1 and e["ratio"] > 0 for e in entries)
    with ResultsDB(tmp_path / "s.sqlite") as db:
        library = [m.value for m in db.measurements(EXPERIMENT) if m.method == LIBRARY]
    assert len(library) == 2 and all(v > 0 for v in library), "the library GEMM's screening call is its row"
    monkeypatch.setattr("experiments.frontdoor.calibrate.SLOWEST", 0.0)       # none
    code, doc = calibrate(capsys, tmp_path / "t.sqlite")
    with ResultsDB(tmp_path / "t.sqlite") as db:
        assert not any(m.meta.get("screened") for m in db.measurements(EXPERIMENT))


def test_a_calibration_adds_to_the_profiles_methods_and_replaces_only_what_it_measured(capsys, tmp_path):
    first = {"points": [
        {"shape": [8, 8192, 8], "gemm_s": 1e-4, "timed": [
            {"method": "splitk", "config": {"deterministic": True}, "ratio": 1.2, "source": "earlier"}]},
        {"shape": [48, 48, 48], "gemm_s": 1e-5, "timed": [
            {"method": "ozaki2", "config": {"moduli": 14}, "ratio": 0.5, "source": "earlier"},
            {"method": "ozaki2", "config": {"moduli": "auto", "target": "dgemm"}, "ratio": 9.9, "source": "earlier"}]}]}
    be = get_backend("numpy")
    save_profile({"backend": "numpy", "device": device_name(be), "levels": {},
                  "regimes": {"sustained": {"levels": {}, "methods": first}}})
    code, doc = calibrate(capsys, tmp_path / "m.sqlite")
    section = methods(be)[0]
    by = {tuple(p["shape"]): {(e["method"], json.dumps(e["config"], sort_keys=True)): e for e in p["timed"]}
          for p in section["points"]}
    assert by[(8, 8192, 8)][("splitk", '{"deterministic": true}')]["source"] == "earlier", "never measured here"
    assert by[(48, 48, 48)][("ozaki2", '{"moduli": 14}')]["source"] == "earlier"
    auto = by[(48, 48, 48)][("ozaki2", '{"moduli": "auto", "target": "dgemm"}')]
    assert auto["source"].startswith("gemmlab calibrate --methods") and auto["ratio"] != 9.9
    assert [p["shape"] for p in section["points"]] == sorted(p["shape"] for p in section["points"])


def test_a_method_short_of_memory_beside_the_others_is_timed_alone(capsys, tmp_path, monkeypatch):
    """Each plan fits alone but the group's may not (Ozaki II tiled at N = 49152 on the H200): a method whose
    first call runs out of memory beside the others is timed in a group of its own, and its row says so."""
    real, crowded = calibration.method_group, []

    def group_of(be, A, B, chosen):
        group = real(be, A, B, chosen)
        for name in [n for n in group.public if group.families[n] == "ozaki" and len(group.public) > 1]:
            crowded.append(name)
            group.public[name] = Call(group.public[name].text, lambda: (_ for _ in ()).throw(MemoryError("full")))
        return group

    monkeypatch.setattr(calibration, "method_group", group_of)
    code, doc = calibrate(capsys, tmp_path / "m.sqlite")
    assert code == 0 and len(crowded) == 2, "one crowded Ozaki I call per shape"
    with ResultsDB(tmp_path / "m.sqlite") as db:
        rows = db.measurements(EXPERIMENT)
    ozaki = [m for m in rows if m.method == crowded[0]]
    assert len(ozaki) == 2 and all(m.meta.get("alone") for m in ozaki) and all(m.value > 0 for m in ozaki)
    assert not any(m.meta.get("alone") for m in rows if m.method not in (crowded[0], LIBRARY))
    assert all(crowded[0] not in m.meta["refused"] for m in rows if m.method == LIBRARY)
    section = methods(get_backend("numpy"))[0]
    assert all("ozaki" in {e["method"] for e in p["timed"]} for p in section["points"])


def test_a_method_short_of_memory_even_alone_stays_refused_with_why(capsys, tmp_path, monkeypatch):
    real = calibration.method_group

    def group_of(be, A, B, chosen):
        group = real(be, A, B, chosen)
        for name in [n for n in group.public if group.families[n] == "ozaki"]:
            group.public[name] = Call(group.public[name].text, lambda: (_ for _ in ()).throw(MemoryError("full")))
        return group

    monkeypatch.setattr(calibration, "method_group", group_of)
    code, doc = calibrate(capsys, tmp_path / "m.sqlite")
    with ResultsDB(tmp_path / "m.sqlite") as db:
        rows = db.measurements(EXPERIMENT)
    assert code == 0 and not [m for m in rows if m.method.startswith("ozaki(")]
    refused = [m.meta["refused"] for m in rows if m.method == LIBRARY]
    assert len(refused) == 2 and all(any("short of device memory" in why for why in r.values()) for r in refused)


def test_a_complex_entry_naming_no_scheme_is_replaced_by_a_new_3m_entry():
    """An Ozaki II complex entry timed when 3M was the default names no scheme; a calibration that times 3M by name
    replaces it (the front door reads both as 3M, and the newer timing must be the one it keeps)."""
    from experiments.frontdoor.calibrate import merged

    old = {"points": [{"shape": [64, 64, 64], "dtype": "complex128", "timed": [
        {"method": "ozaki2c", "config": {"moduli": "auto", "target": "dgemm"}, "ratio": 1.1, "source": "earlier"},
        {"method": "ozaki2c", "config": {"moduli": "auto", "scheme": "4m", "target": "dgemm"}, "ratio": 0.9}]}]}
    new = {"points": [{"shape": [64, 64, 64], "dtype": "complex128", "timed": [
        {"method": "ozaki2c", "config": {"moduli": "auto", "scheme": "3m", "target": "dgemm"}, "ratio": 1.3}]}]}
    (point,) = merged(old, new)["points"]
    assert [(e["config"].get("scheme"), e["ratio"]) for e in point["timed"]] == [("3m", 1.3), ("4m", 0.9)]
