"""The Strassen speed-up targets judged on stored rows: `experiments.strassen.targets`, `gemmlab strassen --stored`."""

from __future__ import annotations

from dataclasses import replace

import pytest

from experiments.cli import main
from experiments.core.database import ResultsDB
from experiments.strassen import targets
from experiments.strassen.rows import DEFAULTS, SpeedupRow, best_by_size


def row(size: int, level: int, schedule: str, speedup: float, regime: str = "sustained", graph: bool = False):
    method = schedule + "+fused" + ("+graph" if graph else "")
    return SpeedupRow(method, size, level, schedule, True, "float64", 1.0 / speedup, speedup, 1.0, True, regime,
                      1700.0, 698.0)


def test_zero_memory_reads_the_memory_model():
    assert targets.zero_memory(row(49152, 3, "rum", 1.4))
    assert not targets.zero_memory(row(49152, 3, "winograd", 1.4))
    assert not targets.zero_memory(row(49152, 4, "rum/rum/winograd", 1.5))    # Winograd's bottom temporaries


def test_each_regime_gets_its_best_and_its_best_zero_memory_configuration():
    rows = [row(16384, 2, "rum", 1.12), row(16384, 2, "winograd", 1.17), row(16384, 3, "winograd", 1.15),
            row(16384, 2, "winograd", 1.19, "cold")]
    found = targets.judge(rows)
    sustained, cold = found.tables
    assert sustained.title.endswith("sustained") and cold.title.endswith("cold")
    assert sustained.rows == [(16384, 1.17, "winograd+fused", 2, 1700.0, 698.0, 1.12, "rum+fused, level 2")]
    assert cold.rows == [(16384, 1.19, "winograd+fused", 2, 1700.0, 698.0, None, None)]


def test_targets_are_met_missed_or_not_judged_never_met_without_a_row():
    rows = [row(49152, 4, "rum/rum/winograd", 1.48), row(32768, 3, "rum", 1.29), row(16384, 2, "winograd", 1.26)]
    verdict = {c.target: c.met for c in targets.judge(rows).checks}
    assert verdict["best configuration >= 1.45x DGEMM at N = 49152, sustained"] is True
    assert verdict["best configuration >= 1.30x DGEMM at N = 32768, sustained"] is False
    assert verdict["best configuration >= 1.25x DGEMM at N = 16384, sustained"] is True
    assert verdict["best configuration >= 1.35x DGEMM at N = 49152, cold"] is None
    assert verdict["the smallest N where the best configuration beats DGEMM is <= 6144, sustained"] is None


@pytest.mark.parametrize(("points", "met"), [
    ({4096: 0.95, 6144: 1.01, 8192: 1.03}, True),
    ({4096: 0.95, 6144: 0.99, 8192: 1.03}, False),     # 6144 stored and lost: the crossover lies above it
    ({8192: 1.03, 16384: 1.1}, None),                   # nothing stored at or below 6144
    ({6144: 0.9, 8192: 0.97}, False),
])
def test_the_crossover_is_judged_on_stored_sizes_only(points, met):
    best = best_by_size(row(n, 1, "winograd", s) for n, s in points.items())
    assert targets.crossover_check("sustained", best).met is met


def called(r: SpeedupRow, ratio: float) -> SpeedupRow:
    return replace(r, as_called_s=r.gemm_s / ratio, ratio_as_called=ratio, host_s=1e-4)


def defaults(size: int, ratio: float) -> SpeedupRow:
    return called(SpeedupRow(DEFAULTS, size, 0, "defaults", False, "float64", 1.0 / ratio, ratio, 1.0, True,
                             "sustained"), ratio)


def test_the_defaults_are_judged_as_called_against_the_best_configuration_as_called():
    rows = [called(row(8192, 2, "winograd", 1.10), 1.08), called(row(16384, 3, "winograd", 1.30, graph=True), 1.29),
            called(row(49152, 4, "rum/rum/winograd", 1.50), 1.49), row(4096, 1, "rum", 1.0)]
    good = [defaults(4096, 0.995), defaults(8192, 1.06), defaults(16384, 1.28), defaults(49152, 1.46)]
    checks = targets.defaults_checks(good, rows)
    assert [c.met for c in checks] == [True] * 4
    assert checks[0].measured == "lowest 0.995x at N = 4096 over 4 sizes"
    assert checks[3].measured == "lowest 0.980 of the best (rum/rum/winograd+fused, level 4) at N = 49152"
    slow = [defaults(4096, 0.98), defaults(8192, 1.03), defaults(16384, 1.28), defaults(49152, 1.46)]
    assert [c.met for c in targets.defaults_checks(slow, rows)] == [False, True, True, False]
    device_only = [replace(d, ratio_as_called=None, as_called_s=None) for d in good]
    assert [c.met for c in targets.defaults_checks(device_only, rows)] == [None] * 4
    table = targets.judge(rows, good).table("strassen.matmul(A, B) at its defaults, as called")
    assert table.rows[2] == (16384, "sustained", 1.28, 100.0, 1.29, "winograd+fused+graph, level 3")


def test_stored_judges_the_published_h100_rows(run_json, published_db):
    out = run_json("strassen", "--stored", "--device", "H100", "--db", published_db)
    checks = {c["target"]: c for c in out["verdict"]}
    assert len(checks) == len(targets.TARGETS) + 2 + 2 + len(targets.DEFAULTS_TARGETS)
    assert [c["met"] for c in out["verdict"][-2 - len(targets.DEFAULTS_TARGETS):]] == [None] * 4, \
        "the H100's defaults were never timed as called: not judged"
    assert out["best configuration per size, cold"][-1]["N"] == 49152 and out["env_key"]
    assert checks["best configuration >= 1.25x DGEMM at N = 16384, sustained"]["met"] is True
    assert "winograd+flat+graph, level 3" in checks["best configuration >= 1.25x DGEMM at N = 16384, sustained"][
        "measured"]
    assert checks["best configuration >= 1.35x DGEMM at N = 49152, cold"]["met"] is True
    assert all("MHz" in c["measured"] for c in out["verdict"][:len(targets.TARGETS)])


def test_stored_without_rows_says_what_is_stored_and_what_to_do(capsys, tmp_path):
    path = tmp_path / "empty.sqlite"
    with ResultsDB(path):
        pass
    assert main(["strassen", "--stored", "--device", "H100", "--db", str(path)]) == 2
    err = capsys.readouterr().err
    assert "no strassen-speedup rows stored for a device matching 'H100'" in err
    assert "stored: none" in err and "--env" in err
