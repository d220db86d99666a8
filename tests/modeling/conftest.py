"""Shared data of the modeling tests: the bundled published CSVs read as calibration rows, per-level
times and launch overheads (:func:`read_csv`), devices built from them (:func:`device_of`), and the
modern training set (the P100 fit, the sustained H100 and the H200, with in-context curves)."""

import csv
import json
from pathlib import Path

import pytest

from modeling import hardware, transfer

PUBLISHED = Path(__file__).resolve().parents[2] / "results" / "published"


def read_csv(name, experiment="calibration"):
    """Calibration rows (of ``experiment``: the plain or the in-context calibration), per-level times
    {size: {level: s}} and the launch overhead (ms) of a bundled CSV."""
    cal, times, launch = {}, {}, None
    with (PUBLISHED / name).open(newline="") as f:
        for r in csv.DictReader(f):
            p, v = json.loads(r["params"]), float(r["value"])
            if r["experiment"] == experiment:
                cal.setdefault(p["size"], {"size": p["size"]})[f"{r['method']}_s"] = v
            elif r["experiment"] == "level-validation":
                times.setdefault(p["size"], {})[p["level"]] = v
            elif r["experiment"] == "launch-overhead":
                launch = 1e3 * v
    return [cal[n] for n in sorted(cal)], times, launch


def device_of(name, gpu, launch_from=None):
    """A calibrated device, with its in-context curves, from one bundled CSV (and the launch overhead of
    ``launch_from``)."""
    rows, _, launch = read_csv(name)
    context, _, _ = read_csv(name, "calibration-context")
    if launch_from:
        _, _, launch = read_csv(launch_from)
    return transfer.calibrated_device(hardware.lookup(gpu), rows, launch, context=context)


@pytest.fixture(scope="session")
def published_csv():
    """:func:`read_csv`, for tests that read a bundled sweep."""
    return read_csv


@pytest.fixture(scope="session")
def published_device():
    """:func:`device_of`, for tests that build a device from a bundled CSV."""
    return device_of


@pytest.fixture(scope="session")
def modern():
    """The P100 fit and the two power-capped GH100 devices, each with its in-context calibration: the
    H100 of the sustained sweep and the H200."""
    return {**transfer.published_devices(), "H100": device_of("sustained/h100-levels-sustained.csv", "H100"),
            "H200": device_of("h200/h200-levels-sustained.csv", "H200")}
