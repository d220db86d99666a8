"""Device profiles from measurements (:mod:`modeling.profile`): the published H100 calibration made
into a profile, the predictor read back from it, and level tables that give exactly the predictor's
best level at any size; ``level="auto"`` (:mod:`gpu.strassen.auto`) reading the result."""

import csv
import json
import math
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from gpu.backend import get_backend
from gpu.profile import load_profile, save_profile
from gpu.strassen import SCHEDULES, check_schedule
from gpu.strassen.auto import MAX_LEVEL, auto_level, profile_key, table_level
from modeling.fits import InContextCurve, measured_curves
from modeling.profile import (
    TABLE_RANGE,
    build_profile,
    columns,
    complete_profile,
    deepest_level,
    level_table,
    level_tables,
    predictor,
)
from modeling.recursive import RecursiveModel

PUBLISHED = Path(__file__).resolve().parents[2] / "results" / "published"
DEVICE = "NVIDIA H100 80GB HBM3"
LAUNCH = {"default": 0.012, "rum+fused": 0.02}
CONFIGS = [("rum", False), ("rum", True), ("lai", False), ("otsuka", True), ("winograd", True), ("otsuka-low", False)]


def published_rows(name):
    """float64 (size, gemm_s, geam_s) rows of a published calibration CSV."""
    by_size = defaultdict(dict)
    with open(PUBLISHED / name, newline="") as fh:
        for row in csv.DictReader(fh):
            params = json.loads(row["params"])
            if params.get("dtype") == "float64":
                by_size[params["size"]][row["method"] + "_s"] = float(row["value"])
    return [{"size": n, **t} for n, t in by_size.items() if set(t) == {"gemm_s", "geam_s"}]


@pytest.fixture(scope="module")
def h100():
    """The H100 calibration (plain and in-context) as rows, and the profile built from them."""
    cal, ctx = published_rows("h100-calibration.csv"), published_rows("h100-calibration-context.csv")
    assert len(cal) >= 10 and len(ctx) >= 10
    doc = build_profile("cupy", DEVICE, calibration=cal[::-1], context_calibration=ctx, launch_ms=LAUNCH,
                        launch_source={"default": "fitted"}, asynchronous=True, run_command="test")
    return cal, ctx, doc


def sizes_to_check(table, seed):
    """Random sizes over the table's range, and each boundary with its neighbours."""
    rng = np.random.default_rng(seed)
    sizes = np.exp(rng.uniform(math.log(TABLE_RANGE[0]), math.log(TABLE_RANGE[1]), 150)).astype(int)
    edges = [n + d for n, _ in table[1:] for d in (-1, 0, 1)]
    return sorted({int(n) for n in [*sizes, *edges] if TABLE_RANGE[0] <= n <= TABLE_RANGE[1]})


def test_profile_holds_the_measurements_as_sorted_columns(h100):
    cal, ctx, doc = h100
    assert doc["backend"] == "cupy" and doc["device"] == DEVICE and doc["asynchronous"] is True
    assert doc["run_command"] == "test" and doc["launch_ms"] == LAUNCH and doc["launch_source"] == {"default": "fitted"}
    assert doc["calibration"] == columns(cal) and doc["context_calibration"] == columns(ctx)
    sizes = doc["calibration"]["size"]
    assert sizes == sorted(sizes) and len(sizes) == len(cal)
    i = sizes.index(1024)
    assert doc["calibration"]["gemm_s"][i] == next(r["gemm_s"] for r in cal if r["size"] == 1024)
    assert set(doc["levels"]) == {profile_key(s, f) for s in SCHEDULES for f in (False, True)}
    assert json.loads(json.dumps(doc)) == doc                      # plain data: JSON as it is


def test_predictor_is_the_recursive_model_of_the_measurements(h100):
    cal, ctx, doc = h100
    gemm, geam = measured_curves(cal)
    inner_gemm, inner_geam = measured_curves(ctx)
    for schedule, fused in CONFIGS:
        launch = LAUNCH["rum+fused"] if (schedule, fused) == ("rum", True) else LAUNCH["default"]
        by_hand = RecursiveModel(gemm, geam, schedule, fused, launch, overlap=True,
                                 inner_gemm=InContextCurve(inner_gemm, gemm),
                                 inner_geam=InContextCurve(inner_geam, geam))
        model = predictor(doc, schedule, fused)
        assert (model.schedule, model.fused, model.launch_ms, model.overlap) == (schedule, fused, launch, True)
        for n in (300, 4096, 9000, 20000, 70000):
            for level in range(min(deepest_level(schedule), 5) + 1):
                assert model.time(n, level) == by_hand.time(n, level)
    plain = predictor({**doc, "context_calibration": None, "asynchronous": False}, "rum")
    assert plain.inner_gemm is None and plain.overlap is False
    assert plain.time(4096, 1) == replace(predictor(doc, "rum"), inner_gemm=None, inner_geam=None,
                                          overlap=False).time(4096, 1)


@pytest.mark.parametrize("schedule,fused", CONFIGS)
def test_level_table_is_the_predictors_argmin_within_the_calibration_at_any_size(h100, schedule, fused):
    """Inside the calibrated sizes (bottom products too) the table is the predictor's argmin; beyond the
    largest calibrated size, no deeper than the argmin there; with bottoms below the smallest, shallower."""
    cal, _, doc = h100
    model, table = predictor(doc, schedule, fused), doc["levels"][profile_key(schedule, fused)]
    deepest = deepest_level(schedule)
    lo, hi = min(r["size"] for r in cal), max(r["size"] for r in cal)
    be = get_backend("numpy")
    capped = 0
    for n in sizes_to_check(table, seed=len(table) + fused):
        top = min(deepest, int(math.log2(n)))
        best = model.level(n, range(top + 1))
        bottoms = max(0, min(top, int(math.log2(n / lo)))) if n >= lo else 0
        within = model.level(n, range(bottoms + 1))
        if n > hi:
            within = min(within, model.level(hi, range(min(deepest, int(math.log2(hi))) + 1)))
        capped += within != best
        assert table_level(table, n) == within, (n, table)
        assert auto_level(n, be, schedule=schedule, fused=fused, profile=doc) == within, n
    assert capped < len(sizes_to_check(table, seed=len(table) + fused)) / 2


@pytest.mark.parametrize("schedule,fused", CONFIGS)
def test_tables_start_at_zero_and_increase(h100, schedule, fused):
    *_, doc = h100
    table = doc["levels"][profile_key(schedule, fused)]
    assert table[0] == [0, 0] and len(table) >= 2
    starts, levels = [row[0] for row in table], [row[1] for row in table]
    assert all(a < b for a, b in zip(starts, starts[1:])), table
    assert all(a < b for a, b in zip(levels, levels[1:])), table
    assert all(isinstance(x, int) for row in table for x in row)
    assert levels[-1] <= deepest_level(schedule) and starts[-1] <= TABLE_RANGE[1]


def test_tables_of_every_configuration(h100):
    *_, doc = h100
    for key, table in doc["levels"].items():
        assert table[0] == [0, 0] and [r[0] for r in table] == sorted({r[0] for r in table}), key
    assert doc["levels"]["otsuka-low"][-1][1] == 1                  # cannot recurse: one level at most
    assert doc["levels"]["rum+fused"][1][0] < doc["levels"]["rum"][1][0]   # fused additions split sooner


def test_deepest_level_matches_check_schedule():
    for schedule in SCHEDULES:
        deepest = deepest_level(schedule)
        for level in range(deepest + 1):
            check_schedule(schedule, level)
        if deepest < MAX_LEVEL:
            with pytest.raises(ValueError, match="cannot recurse"):
                check_schedule(schedule, deepest + 1)
    assert deepest_level("rum") == MAX_LEVEL
    assert deepest_level("otsuka-low") == deepest_level("otsuka2-low") == 1


def power_law_rows(sizes, c=1e-12, d=1e-9):
    """Calibration rows of Gemm = c x^3 and Geam = d x^2 (ms): P = 30 d / c = 30000."""
    return [{"size": n, "gemm_s": c * n**3 / 1e3, "geam_s": d * n**2 / 1e3} for n in sizes]


def test_pure_power_laws_give_the_thesis_boundaries():
    """Gemm = c x^3 and Geam = d x^2 with no launch cost: level L starts at 2^(L-1) P, P = 30 d / c."""
    table = build_profile("numpy", "cpu", calibration=power_law_rows((1000, 10**4, 10**5, 10**6)))["levels"]["rum"]
    P = 30000
    assert [row[1] for row in table[:4]] == [0, 1, 2, 3]
    for level in (1, 2, 3):
        assert table[level][0] == pytest.approx(2 ** (level - 1) * P, rel=1e-6, abs=2)


def test_a_table_goes_no_deeper_than_the_level_at_the_largest_calibrated_size():
    """Calibrated to 10^5 (levels 1-3 start at 30000, 60000, 120000): past 10^5 nothing is measured,
    so the table stays at level 2, where the old table went on to 3, 4, ... by extrapolation."""
    table = build_profile("numpy", "cpu", calibration=power_law_rows((1000, 10**4, 10**5)))["levels"]["rum"]
    assert [row[1] for row in table] == [0, 1, 2]
    assert table_level(table, 2**20) == 2


def test_level_table_by_hand_and_its_limits():
    flat = RecursiveModel(lambda x: x**3, lambda x: 1e9 * x**2)         # additions never pay off
    assert level_table(flat, MAX_LEVEL) == [[0, 0]]
    cheap = RecursiveModel(lambda x: x**3, lambda x: 0.0)                # every halving pays off
    table = level_table(cheap, 3, lo=16, hi=4096)
    assert table == [[0, 0], [16, 3]]                                   # at 16, three levels already fit
    assert level_table(cheap, 0) == [[0, 0]]


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="needs a calibration of at least two sizes"):
        build_profile("cupy", DEVICE, calibration=[{"size": 1024, "gemm_s": 1e-4, "geam_s": 1e-5}])
    assert columns([]) is None
    with pytest.raises(ValueError, match="run gemmlab calibrate"):
        predictor({"levels": {}}, "rum")


def test_complete_profile_recomputes_the_tables_of_given_inputs(h100):
    *_, doc = h100
    inputs = {k: v for k, v in doc.items() if k != "levels"}
    assert complete_profile(inputs) == doc
    assert complete_profile({**doc, "levels": {"rum": [[0, 5]]}}) == doc      # stale tables are replaced
    slower = {**inputs, "launch_ms": {"default": 5.0}}
    assert complete_profile(slower)["levels"]["rum"][1][0] > doc["levels"]["rum"][1][0]
    with pytest.raises(ValueError, match=f"a profile of {DEVICE} \\[cupy\\] needs a calibration"):
        complete_profile({**inputs, "calibration": None})


def test_saved_profile_reads_back_and_gives_the_same_tables(h100, tmp_path):
    *_, doc = h100
    path = save_profile(doc, tmp_path)
    loaded = load_profile(path)
    assert {k: v for k, v in loaded.items() if k not in ("format", "version")} == doc
    assert level_tables(loaded) == doc["levels"]
