"""What a device's measurements support (:mod:`modeling.evidence`), and the level tables of
``level="auto"`` built within it: never a level the sweep measured slower, never deeper than the
evidence beyond the measured sizes."""

import pytest

from gpu.strassen.auto import table_level
from modeling.evidence import RESOLUTION, Evidence, measured_best
from modeling.profile import build_profile, credible, evidence, predictor

SIZES = (256, 512, 1024, 2048, 4096, 8192)


def cheap_additions(sizes=SIZES):
    """A calibration whose additions cost next to nothing: the model splits from the smallest sizes on."""
    return [{"size": n, "gemm_s": 1e-12 * n**3, "geam_s": 1e-15 * n**2} for n in sizes]


def sweep_points(times):
    """{size: {level: time over GEMM}} as profile sweep points (size, level, over)."""
    return [(n, lv, t) for n, by in times.items() for lv, t in by.items() if lv]


def test_the_measured_best_needs_a_gain_beyond_the_resolution():
    assert measured_best({0: 1.0, 1: 0.995}) == 0
    assert measured_best({0: 1.0, 1: 0.95, 2: 0.945}) == 1
    assert measured_best({0: 1.0, 1: 1.3, 2: 0.9}) == 2
    assert RESOLUTION == 0.01


def test_support_at_between_below_and_beyond_the_swept_sizes():
    found = Evidence((128, 4096), {512: {0: 1, 1: 1.2}, 1024: {0: 1, 1: 0.9}, 2048: {0: 1, 1: 0.9, 2: 0.8},
                                   4000: {0: 1.0}})
    assert list(found.sweep) == [512, 1024, 2048]            # one level timed says nothing
    assert (found.support(1024, 4).lowest, found.support(1024, 4).deepest) == (1, 1)
    assert (found.support(1500, 4).lowest, found.support(1500, 4).deepest) == (1, 2)
    assert (found.support(300, 4).lowest, found.support(300, 4).deepest) == (0, 0)
    beyond = found.support(9000, 4)
    assert (beyond.lowest, beyond.deepest) == (2, 2) and "beyond the largest swept size 2048" in beyond.reason
    assert found.support(9000, 1).deepest == 1                # never past what the size allows


def test_calibration_alone_allows_calibrated_bottoms_and_no_deeper_than_its_top():
    found = Evidence((256, 8192))
    assert found.support(1024, 10).deepest == 2 and found.support(255, 10).deepest == 0
    model = predictor(build_profile("numpy", "cpu", calibration=cheap_additions()))
    assert model.level(65536, range(9)) == 8                  # the curves alone, extrapolated
    assert found.level(model, 65536, 8) == found.level(model, 8192, 8) == 5
    assert "beyond the largest calibrated size 8192" in found.reason(model, 65536, 8)
    assert Evidence().support(1024, 3).deepest == 3


def test_a_table_never_takes_a_level_the_sweep_measured_slower():
    """The curves say split from 512 on; the device measured level 1 and 2 slower up to 4096."""
    times = {n: {0: 1.0, 1: 1.25, 2: 1.6} for n in (512, 1024, 2048, 4096)}
    doc = build_profile("numpy", "cpu", calibration=cheap_additions(), level_sweep={"rum": sweep_points(times)})
    table = doc["levels"]["rum"]
    assert predictor(doc).level(2048, range(3)) == 2
    for n in (256, 300, 512, 700, 1024, 2048, 3000, 4096, 6000, 2**20):
        assert table_level(table, n) == 0, (n, table)
    assert doc["levels"]["rum+fused"] != [[0, 0]]             # no sweep of that configuration: the model's levels


def test_a_table_takes_the_measured_best_at_swept_sizes_and_bracketed_levels_between():
    times = {1024: {0: 1.0, 1: 1.1}, 2048: {0: 1.0, 1: 0.95, 2: 1.02}, 4096: {0: 1.0, 1: 0.9, 2: 0.85}}
    doc = build_profile("numpy", "cpu", calibration=cheap_additions(), level_sweep={"rum": sweep_points(times)})
    table, model = doc["levels"]["rum"], predictor(doc)
    assert [table_level(table, n) for n in (1024, 2048, 4096)] == [0, 1, 2]
    assert table_level(table, 1500) == model.level(1500, range(2)) == 1      # between 0 and 1: the model picks
    assert table_level(table, 3000) == model.level(3000, range(1, 3)) == 2   # between 1 and 2
    assert table_level(table, 800) == 0 and table_level(table, 10**5) == 2   # below, and beyond the top's best


def test_a_group_faster_than_its_operation_count_allows_is_not_evidence():
    """On the loaded CPU a 128 x 128 GEMM waited out a 20 ms time slice: level 1 read 19x faster."""
    assert not credible({0: 1.0, 1: 0.052}, "rum", False)
    assert credible({0: 1.0, 1: 0.88, 2: 0.77}, "rum", False)
    doc = {"calibration": {"size": [128, 2048]},
           "level_sweep": {"rum": {"size": [128, 256], "level": [1, 1], "over_gemm": [0.052, 1.5]}}}
    assert list(evidence(doc).sweep) == [256]
    assert evidence(doc, "rum", fused=True).sweep == {}


# The profile inputs `make run` wrote on a loaded 2-core CPU (the same as tests/modeling/test_bounds.py).
CPU_ROWS = [{"size": s, "gemm_s": g, "geam_s": a} for s, g, a in zip(
    (128, 256, 384, 512, 768, 1024, 1536, 2048), (0.0227, 0.0227, 0.0347, 0.0348, 0.0467, 0.0708, 0.1962, 0.4499),
    (4.3e-5, 6.4e-5, 7.3e-5, 1.21e-4, 3.44e-4, 6.23e-4, 1.38e-3, 3.19e-3))]
CPU_CONTEXT = [{"size": 128, "gemm_s": 0.02322, "geam_s": 1.4484e-4}, {"size": 256, "gemm_s": 0.02638,
                                                                        "geam_s": 2.5109e-4}]
CPU_LAUNCH = {"rum": 0.0658, "default": 5.6e-6}
# Its quick level sweep (time over the GEMM of each size's group): level 0 best, but at 128, where a
# disturbed GEMM read 19x level 1's time.
CPU_SWEEP = {128: {1: 0.052, 2: 0.729}, 192: {1: 7.38, 2: 1.22}, 256: {1: 5.12, 2: 3.66},
             320: {1: 4.92, 2: 1.05}, 384: {1: 2.10, 2: 7.07}, 512: {1: 3.50, 2: 26.7}}


@pytest.mark.parametrize("n", [256, 512, 1024, 2048, 4096])
def test_the_cpu_calibration_of_make_run_keeps_auto_at_the_library_gemm(n):
    """Level 1 measured 0.61x and level 2 0.41x at 2048-4096 there; the old table took level 1 from 1647,
    from in-context curves of two sizes extended to 4096."""
    doc = build_profile("numpy", "cpu", calibration=CPU_ROWS, context_calibration=CPU_CONTEXT, launch_ms=CPU_LAUNCH)
    assert table_level(doc["levels"]["rum"], n) == 0


@pytest.mark.parametrize("n", [128, 256, 512, 1024, 2048, 4096, 65536])
def test_the_cpu_sweep_of_make_run_keeps_auto_at_the_library_gemm(n):
    doc = build_profile("numpy", "cpu", calibration=CPU_ROWS, context_calibration=CPU_CONTEXT, launch_ms=CPU_LAUNCH,
                        level_sweep={"rum": sweep_points(CPU_SWEEP)})
    assert list(evidence(doc).sweep) == [192, 256, 320, 384, 512]
    assert table_level(doc["levels"]["rum"], n) == 0
