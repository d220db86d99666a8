"""``gemmlab calibrate --configurations`` (:mod:`experiments.levels.configurations`): the candidates timed at each
size, the H200 sweep's estimate, the stored rows and the profile's configurations section written from them;
``gemmlab profile``, which builds the profiles the package bundles from stored results."""

import json
from pathlib import Path

import pytest

from experiments.core.database import ResultsDB
from experiments.levels import configurations as cf
from experiments.levels.profile import configuration_of
from gpu.backend import get_backend
from gpu.profile import BUNDLED_DIR, device_name, load_profile, profile_path, regime_section
from gpu.strassen import Configuration, Plan
from gpu.strassen.choose import table

ROOT = Path(__file__).resolve().parents[2]


class H200:
    """The H200 as the planner sees it: a CuPy backend with graphs and 140 GB free."""

    name, supports_graphs = "cupy", True

    def memory_info(self):
        return 140e9, 150e9


def test_the_h200_sweep_covers_512_to_49152_in_under_eight_minutes():
    planned = cf.plan(H200(), None)
    assert min(planned) == 2048 and max(planned) == 49152
    assert all(1 <= len(c) <= cf.MOST for c in planned.values())
    est = cf.estimate(planned, 140e9)
    assert est.seconds <= 480, est.per_size
    assert "estimated time" in cf.describe(planned, est)
    assert cf.protocol(2 * 32768**3 / cf.RATE)["repeats"] == cf.FEW == 3
    assert cf.protocol(2 * 24576**3 / cf.RATE)["repeats"] == 10
    big = [c.name for c in planned[49152]]
    assert "L4:rum/rum/winograd+fused" in big and "L3:winograd+flat+graph" not in big, "flat L3 needs 122 GiB"
    assert "L3:winograd+flat+graph" in [c.name for c in planned[16384]]


def test_candidates_follow_the_bottom_size_the_memory_and_the_graphs():
    at = cf.candidates_at("cupy", 8192, 140e9, graphs=False)
    assert all(not c.graph for c in at) and Configuration(3, "winograd", flat=True) in at
    assert len(at) == len(set(at)), "a graph configuration timed eagerly is not timed twice"
    assert cf.candidates_at("cupy", 1024, 140e9, graphs=True) == [], "bottoms of 512: level 0 only"
    groups = cf.groups(24576, cf.plan(H200(), [24576])[24576], 140e9)
    flat = [i for i, g in enumerate(groups) for c in g if c.flat and c.level == 3]
    assert len(set(flat)) == 2, "two flat level-3 plans do not fit beside each other at 24576"
    with pytest.raises(ValueError, match="L<level>:<schedule>"):
        cf.plan(H200(), [4096], ["L2:rum++"])


def test_stored_rows_name_their_configuration():
    assert configuration_of("winograd+flat+graph", {"size": 8192, "level": 3, "schedule": "winograd",
                                                    "fused": False, "dtype": "float64"}) == \
        Configuration(3, "winograd", flat=True, graph=True)
    assert configuration_of("gemm", {"size": 8192, "level": 2, "schedule": "gemm", "dtype": "float64"}) is None
    assert configuration_of("rum2-parallel", {"level": 2, "schedule": "rum2", "parallel": True}) is None


def test_calibrate_configurations_stores_each_group_and_writes_the_profiles_section(run_json, db_path, monkeypatch):
    be = get_backend("numpy")
    monkeypatch.setattr(cf, "calls_for", lambda gemm_s: 2)     # a sample of 20 ms of calls would take seconds
    run_json("calibrate", "--backend", "numpy", "--sizes", "64,128,256", "--db", str(db_path))
    dry = run_json("calibrate", "--configurations", "--dry-run", "--backend", "numpy", "--sizes", "128,256",
                   "--db", str(db_path))
    assert set(dry["plan"]) == {"128", "256"} and dry["estimated_seconds"] > 0
    assert "L1:winograd+flat" in dry["plan"]["128"] and "L1:winograd+flat+graph" not in dry["plan"]["128"], \
        "no graphs on NumPy: graph configurations are timed eagerly"
    out = run_json("calibrate", "--configurations", "--backend", "numpy", "--sizes", "128,256", "--candidates",
                   "L1:winograd+flat,L2:rum+fused", "--db", str(db_path))
    assert [r["size"] for r in out["measured"]] == [128, 256]
    with ResultsDB(db_path) as db:
        rows = db.measurements(cf.EXPERIMENT)
    assert {r.method for r in rows} == {"L0", "L1:winograd+flat", "L2:rum+fused"}
    assert all(len(r.samples) >= 10 and r.meta["regime"] == "sustained" for r in rows)
    doc = load_profile(profile_path("numpy", device_name(be)))
    section = regime_section(doc, "sustained", "configurations")
    measured = table(section)
    assert set(measured) == {128, 256}
    assert set(measured[256]) == {Configuration(1, "winograd", flat=True), Configuration(2, "rum", fused=True)}
    again = run_json("calibrate", "--configurations", "--backend", "numpy", "--sizes", "128,256", "--candidates",
                     "L1:winograd+flat,L2:rum+fused", "--db", str(db_path))
    assert again["measured"] == [], "stored groups are not measured again"
    best = max(measured[256], key=measured[256].get)
    plan = Plan(be.random((256, 256), "float64"), be.random((256, 256), "float64"), backend=be)
    assert plan.configuration == (best if measured[256][best] >= 1.02 else Configuration()), plan.decision.reason


def test_the_bundled_h100_profile_is_built_from_the_published_measurements(run_json, db_path, tmp_path):
    """``gemmlab profile`` rebuilds gpu/profiles/cupy-nvidia-h100-80gb-hbm3.json from the committed H100 exports
    (the sustained calibration and level sweep, and the Strassen speed-ups of the same environment)."""
    for name in ("sustained/h100-levels-sustained.csv", "h100-strassen-speedup.csv"):
        run_json("results", "import", str(ROOT / "results" / "published" / name), "--db", str(db_path))
    out = run_json("profile", "--db", str(db_path), "--env", "ff9b113d5690480d", "--out", str(tmp_path))
    built = json.loads(Path(out["profile"]).read_text())
    bundled = json.loads(profile_path("cupy", "NVIDIA H100 80GB HBM3", BUNDLED_DIR).read_text())

    def content(doc):
        doc = {k: v for k, v in doc.items() if k not in ("written_at", "written_by")}
        doc["regimes"] = {r: {k: v for k, v in s.items() if k != "written_at"} for r, s in doc["regimes"].items()}
        return doc

    assert same(content(built), content(bundled))
    assert built["configurations"]["env_key"] == "ff9b113d5690480d"


def same(a, b, rel: float = 1e-9) -> bool:
    """Equal documents, floats to ``rel``: the profile's fits go through NumPy's sums and least squares, whose
    last bits move between NumPy builds (0.04776264122768703 against 0.0477626412276638 on NumPy 2.4.6)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k], rel) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y, rel) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, (int, float)) and isinstance(b, (int, float)) and a == pytest.approx(b, rel=rel)
    return a == b


def test_a_new_configuration_sweep_of_the_device_outranks_its_older_level_sweep(db_path, tmp_path):
    """The H200 run: the published calibration and level sweep (one environment) imported beside a new
    configuration sweep (another environment, same device): the profile takes the calibration from the first
    and the configurations from the second."""
    from experiments.levels.profile import write_profile

    h200 = ROOT / "results" / "published" / "h200" / "h200-levels-sustained.csv"
    with ResultsDB(db_path) as db:
        db.import_csv(h200)
        old = db.env_keys()[0]
        env = {**db.environment(old), "cupy": "99.0"}
        run = db.start_run("gemmlab calibrate --configurations", env, "new-stack")
        flat = Configuration(3, "winograd", flat=True, graph=True)
        for n, speedup in ((8192, 1.12), (16384, 1.30)):
            for c, s in ((Configuration(), 1.0), (flat, speedup)):
                db.add(run, cf.EXPERIMENT, c.name, cf.params(n, c, "sustained"), value=0.1 / s, unit="s",
                       samples=[0.1 / s] * 10, meta={"speedup": s, "gemm_s": 0.1})
        for asked in ("new-stack", old):                 # gemmlab calibrate's, and gemmlab profile --device's
            doc = json.loads(Path(write_profile(db, asked, "test", "sustained", tmp_path / asked)).read_text())
            assert doc["env_key"] == old and doc["configurations"]["env_key"] == "new-stack"
            assert table(doc["configurations"]) == {8192: {flat: 1.12}, 16384: {flat: 1.30}}
