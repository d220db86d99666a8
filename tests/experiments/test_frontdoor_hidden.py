"""``gemmlab frontdoor`` on NumPy: the front door's choice with this device's profile hidden (the transfer model
from the other GPU), and where it is timed beside the front door."""

from typing import Any

import pytest

import gpu
from experiments.core.database import ResultsDB
from experiments.frontdoor import bench, errors, groups
from experiments.frontdoor.rows import FRONTDOOR, LIBRARY
from gpu.backend import get_backend


def test_the_hidden_choice_on_an_h200_comes_from_the_h100_alone_and_is_added_to_the_timed_calls(monkeypatch):
    from experiments.frontdoor import hidden
    be = get_backend("numpy")
    assert hidden.hidden_section(be) == (None, None)
    monkeypatch.setattr(hidden, "device_name", lambda b: "NVIDIA H200")
    monkeypatch.setattr(type(be), "name", "cupy", raising=False)
    section, model = hidden.hidden_section(be)
    assert model == "H100" and section["points"] and "from H100)" in section["points"][0]["basis"]
    big = hidden.hidden_choice(be, 16384, 16384, 16384, "dgemm")
    assert big is not None and big.family in ("ozaki2", "gemm")
    assert hidden.hidden_choice(be, 512, 512, 512, "dgemm").family == "gemm"
    monkeypatch.setattr(hidden, "split_of", lambda b, m, k, n, deterministic: (4096, 4096))   # the device's split
    tight = hidden.hidden_choice(be, 16, 2**24, 16, 1e-10)
    assert tight.family == "splitk" and tight.keeps, "split-K's own split proves 1e-10: not Ozaki II at 0.002x"
    assert hidden.hidden_choice(be, 16, 2**20, 16, "dgemm").family == "splitk", "the H100's split-K carries (sm_90)"
    assert hidden.hidden_choice(be, 16, 2**16, 16, "dgemm").family == "gemm", "a call the host times: not carried"


def hidden_point(run_json, db_path, monkeypatch, n: int) -> tuple[Any, dict, dict]:
    """The front door's dgemm point at N = n with its hidden choice a candidate other than the library GEMM: that
    candidate, the run's JSON and its rows by method."""
    be = get_backend("numpy")
    A, B, _ = errors.phi_inputs(be, (n, n, n), errors.TIME_PHI)
    other = next(r for r in gpu.plan(A, B, backend=be).ranking.entries if r.eligible and r.family != "gemm")
    monkeypatch.setattr(groups, "hidden_choice", lambda be, m, k, n, level: other)
    out = run_json("frontdoor", "--backend", "numpy", "--shape", f"{n}:{n}:{n}", "--accuracy", "dgemm", "--db",
                   str(db_path))
    return other, out, {r["method"]: r for r in out["rows"]}


def test_the_hidden_choice_is_timed_beside_the_front_door_and_its_loss_stored(run_json, db_path, monkeypatch):
    monkeypatch.setattr(groups, "OTHERS", 0)
    other, out, mine = hidden_point(run_json, db_path, monkeypatch, 16)
    door = mine[FRONTDOOR]
    assert set(mine) == {LIBRARY, FRONTDOOR, other.name} and door["timed"] == [other.name]
    assert door["hidden"] == other.name
    assert door["hidden_lost"] == pytest.approx(mine[other.name]["as_called_s"] / door["as_called_s"] - 1)
    assert out["verdict"][3]["met"] is (door["hidden_lost"] <= 0.03)


def test_a_shape_large_beside_the_device_does_not_time_the_hidden_choice_beside_the_front_door(run_json, db_path,
                                                                                               monkeypatch):
    """The choice with the profile hidden is a candidate like the others: where the operands take more than BESIDE
    of the device its plan would hold the workspace the front door's call needs (at N = 32768 on the H200 the front
    door then rebuilt its plan at every call), so it is named as not timed and its loss is not judged."""
    monkeypatch.setattr(groups, "BESIDE", 0.0)
    other, _, mine = hidden_point(run_json, db_path, monkeypatch, 48)
    assert set(mine) == {LIBRARY, FRONTDOOR}
    assert (mine[FRONTDOOR]["hidden"], mine[FRONTDOOR]["hidden_lost"]) == (other.name, None)
    refused = ResultsDB(db_path).measurements(bench.EXPERIMENT, method=FRONTDOOR)[-1].meta["refused"]
    assert refused[other.name].startswith("not timed: beside the front door's plan")
