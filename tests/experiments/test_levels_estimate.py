"""Tests for experiments.levels.estimate: the price of a level sweep before it runs, against the
protocol's arithmetic and against the published H100 sweep's own timestamps."""
from __future__ import annotations

import csv
import json
from datetime import datetime
from pathlib import Path

import pytest

from experiments.core.database import ResultsDB
from experiments.core.regime import COLD, SUSTAINED
from experiments.levels import estimate, models, validation
from gpu.strassen import Config
from modeling.fits import measured_curves
from modeling.recursive import RecursiveModel

PUBLISHED = Path(__file__).resolve().parents[2] / "results" / "published" / "sustained"
PUBLISHED_ENV = "ff9b113d5690480d"


class H100:
    """What pricing asks of a GPU backend: its name, free memory, a clock to settle, the device."""

    name = "cupy"

    def telemetry(self):
        return object()

    def memory_info(self):
        return 80 * 2**30, 80 * 2**30

    def device_info(self):
        return {"device": "NVIDIA H100 80GB HBM3"}

    def cache_bytes(self):
        return 50 * 2**20


def test_a_sustained_group_costs_its_settling_single_runs_and_batches():
    one, most = estimate.group_seconds([0.1, 0.2], SUSTAINED, settles=True)
    fixed, batch = SUSTAINED.settle_min_s + 2 * 0.3, 10 * 0.3
    assert one == pytest.approx(fixed + batch)
    assert most == pytest.approx(fixed + 3 * batch)       # a 3 s batch fits the budget three times
    assert estimate.group_seconds([0.1, 0.2], SUSTAINED, settles=False)[0] == pytest.approx(2 * 0.3 + batch)


def test_cold_pays_its_gap_before_every_sample_and_refills_count_per_sample():
    one, _ = estimate.group_seconds([0.1, 0.2], COLD, settles=True, refill=0.01)
    assert one == pytest.approx(2 * 0.3 + 10 * 0.3 + 20 * (COLD.gap_s + 0.01))


@pytest.mark.parametrize("seconds, attempts", [(3.9, 3), (4.1, 2), (6.1, 1)])
def test_retries_are_priced_as_the_protocols_time_budget_allows_them(seconds, attempts):
    one, most = estimate.group_seconds([seconds], SUSTAINED, settles=False, single_runs=0)
    assert most == pytest.approx(attempts * one)


def test_calls_per_sample_multiply_the_batch_not_the_single_runs():
    one, _ = estimate.group_seconds([0.01], SUSTAINED, settles=False, calls=50, single_runs=2)
    assert one == pytest.approx(10 * 50 * 0.01 + 2 * 0.01)


@pytest.fixture(scope="module")
def published_sweep(tmp_path_factory):
    """The published sustained H100 levels (calibration, launch overhead, levels 0-4) in a database,
    and the published ``level="auto"`` rows of its last call (N = 1024-14336, one command) in time order."""
    path = tmp_path_factory.mktemp("estimate") / "levels.sqlite"
    with ResultsDB(path) as db:
        db.import_csv(PUBLISHED / "h100-levels-sustained.csv")
    with open(PUBLISHED / "h100-level-auto.csv", newline="") as f:
        rows = sorted(csv.DictReader(f), key=lambda r: r["created_at"])
    return path, [r for r in rows if json.loads(r["params"])["size"] <= 14336]


def test_the_published_auto_sweep_is_priced_around_the_time_it_took(published_sweep):
    """The published ``gemmlab levels --auto`` call stored one row per size, 1024 to 14336: its rows'
    timestamps say how long each size's group took after the one before (about 310 s over the 16 sizes
    from 1280, 120 samples a method at the 12 of level 0). Levels and calibration were stored, so only
    the ``auto`` groups are priced; the old estimate (the level groups, no settling) said a third of such
    a sweep's time. Batches of 120 rounds were mostly measured again (2-3 batches at 11 of the 16 sizes),
    so the time lies between the one-batch price and the price of every retry the budget allows."""
    path, rows = published_sweep
    took = (datetime.fromisoformat(rows[-1]["created_at"]) - datetime.fromisoformat(rows[0]["created_at"]))
    sizes = [json.loads(r["params"])["size"] for r in rows[1:]]
    config = Config("rum", fused=True)
    plan = validation.custom_plan(H100(), False, sizes, None, config, None, auto=True)
    with ResultsDB(path, readonly=True) as db:
        model, _ = models.stored_predictor(db, PUBLISHED_ENV, config)
        parts = estimate.price(db, PUBLISHED_ENV, plan, model, H100(), "sustained")
    assert set(parts) == {"auto"} and len(parts["auto"]) == len(sizes) == 16
    one, most = (sum(c[i] for c in parts["auto"]) for i in (0, 1))
    assert 0.5 * took.total_seconds() < one < took.total_seconds() < most < 2 * took.total_seconds()


def test_nothing_is_priced_where_everything_is_stored_unless_forced(published_sweep):
    path, _ = published_sweep
    config = Config("rum", fused=True)
    plan = validation.custom_plan(H100(), False, [8192, 16384], None, config, None)
    with ResultsDB(path, readonly=True) as db:
        model, _ = models.stored_predictor(db, PUBLISHED_ENV, config)
        assert estimate.price(db, PUBLISHED_ENV, plan, model, H100(), "sustained") == {}
        forced = estimate.price(db, PUBLISHED_ENV, plan, model, H100(), "sustained", force=True)
        elsewhere = estimate.price(db, "another-env", plan, model, H100(), "sustained")
    assert len(forced["levels"]) == 2 and forced.keys() == elsewhere.keys() >= {"calibration", "levels"}


def test_default_gpu_sweep_fits_one_device_call_when_its_batches_are_stable(h100_db):
    # The levels of the default plan on the H100 calibration: about six minutes with one batch each.
    with ResultsDB(h100_db) as db:
        key = db.env_keys()[0]
        model = RecursiveModel(*measured_curves(models.calibration_rows(db, key)), launch_ms=0.05)
        parts = estimate.price(db, key, validation.PLANS[("cupy", False)], model, H100(), "sustained")
    one = sum(c[0] for c in parts["levels"])
    assert 250 < one < 540


def test_the_dry_run_prices_what_a_sweep_still_has_to_measure(run_json, tmp_path):
    db = str(tmp_path / "l.sqlite")
    args = ("levels", "--backend", "numpy", "--sizes", "128,192", "--max-level", "1", "--min-bottom", "32",
            "--db", db, "--no-progress")
    assert run_json(*args, "--dry-run")["estimated_seconds"] is None      # no calibration, no hardware row
    run_json(*args)
    again = run_json(*args, "--dry-run")
    assert again["groups"] == 0 and again["estimated_seconds"] == 0 and again["estimated_parts_s"] == {}
    forced = run_json(*args, "--dry-run", "--force")
    assert forced["groups"] > 2 and 0 < forced["estimated_seconds"] <= forced["estimated_most_seconds"]
    assert {"calibration", "levels"} <= set(forced["estimated_parts_s"])
