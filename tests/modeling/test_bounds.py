"""Honest predictions: no level faster than its operation count allows, curves extended past their
measured sizes without inventing a gain, and every figure that reads a curve outside its measured sizes
marked as extrapolated."""

import pytest

from modeling import crossover, hardware, transfer
from modeling.analytic import analytic_model
from modeling.crossover import speedup_bound
from modeling.fits import InContextCurve, MeasuredCurve, fit_calibration, measured_curves
from modeling.profile import build_profile, predictor
from modeling.recursive import RecursiveModel

# The profile `make run` (gemmlab reproduce --quick) wrote on a loaded 2-core CPU (AMD EPYC): Gemm near a
# 20 ms time slice up to 512, and an in-context calibration of two sizes only, whose segment (exponent
# 0.18), extended to 4096, made `gemmlab predict --size 8192` print a level-1 speed-up of 71.
CPU_SIZES = (128, 256, 384, 512, 768, 1024, 1536, 2048)
CPU_GEMM = (0.02272, 0.02270, 0.03474, 0.03479, 0.04670, 0.07076, 0.19621, 0.44995)
CPU_GEAM = (4.315e-05, 6.406e-05, 7.299e-05, 1.2074e-04, 3.4402e-04, 6.2321e-04, 1.3802e-03, 3.1947e-03)
CPU_CONTEXT = [{"size": 128, "gemm_s": 0.02322, "geam_s": 1.4484e-4},
               {"size": 256, "gemm_s": 0.02638, "geam_s": 2.5109e-4}]


def cpu_rows():
    return [{"size": n, "gemm_s": g, "geam_s": a} for n, g, a in zip(CPU_SIZES, CPU_GEMM, CPU_GEAM)]


@pytest.fixture(scope="module")
def cpu_profile():
    return build_profile("numpy", "CPU: AMD EPYC", calibration=cpu_rows(), context_calibration=CPU_CONTEXT,
                         launch_ms={"rum": 0.0658, "default": 5.6e-6}, asynchronous=False)


def test_the_bound_is_eight_sevenths_per_level_from_the_schedule_tables():
    for schedule in ("rum", "winograd", "lai"):
        for level in range(5):
            assert speedup_bound(schedule, level) == pytest.approx((8 / 7) ** level)
    assert speedup_bound("rum/rum/winograd", 3, True) == pytest.approx((8 / 7) ** 3)


def test_the_cpu_calibration_of_make_run_predicts_no_impossible_speedup(cpu_profile):
    model = predictor(cpu_profile)
    for n in (2048, 4096, 8192, 16384, 65536):
        for level in range(5):
            assert model.speedup(n, level) <= (8 / 7) ** level * (1 + 1e-12), (n, level)
    assert model.speedup(8192, 1) < 1.2                      # 71.6 before


def test_curves_that_claim_more_are_held_to_the_bound_and_say_so():
    """Gemm growing as x^4 (a rate that falls with size) makes every split look like a 2x gain per level."""
    model = RecursiveModel(lambda x: 1e-12 * x**4, lambda x: 1e-12 * x**2)
    for level in (1, 2, 3):
        assert model.speedup(4096, level) == pytest.approx((8 / 7) ** level)
        assert model.capped(4096, level)
    assert not model.capped(4096, 0)
    honest = RecursiveModel(lambda x: 1e-9 * x**3, lambda x: 1e-9 * x**2)
    assert not honest.capped(4096, 1) and honest.speedup(4096, 1) < 8 / 7


def test_the_thesis_rules_one_level_speedup_is_held_to_the_bound_too():
    rows = [{"size": n, "gemm_s": 1e-15 * n**4, "geam_s": 1e-12 * n**2} for n in range(500, 4001, 500)]
    model = fit_calibration(rows)
    assert crossover.speedup(model, 4000) == pytest.approx(8 / 7)


def test_past_the_largest_size_a_curve_keeps_that_sizes_rate():
    """A last segment of exponent 5 (noise) no longer grows as x^5 past the data: Gemm as x^3, Geam as x^2."""
    rows = [{"size": 1024, "gemm_s": 1.0, "geam_s": 1e-3}, {"size": 2048, "gemm_s": 32.0, "geam_s": 8e-3}]
    gemm, geam = measured_curves(rows)
    assert gemm(8192) / gemm(2048) == pytest.approx(64) and geam(8192) / geam(2048) == pytest.approx(16)
    assert gemm(1536.0) == pytest.approx(1e3 * 1.5**5)              # between the points: the data's own law
    assert gemm(512) == pytest.approx(1e3 / 8)                       # below: no steeper than the work (x^3)
    raw = MeasuredCurve((1024.0, 2048.0), (1.0, 32.0))
    assert raw(8192) / raw(2048) == pytest.approx(4**5)              # the old extension, kept where asked for


def test_in_context_calls_follow_the_plain_curve_past_their_sizes():
    plain = MeasuredCurve((128.0, 1024.0, 4096.0), (1.0, 400.0, 30000.0), 3.0)
    inner = MeasuredCurve((128.0, 256.0), (1.2, 1.3), 3.0)
    curve = InContextCurve(inner, plain)
    assert curve(256) == pytest.approx(1.3) and curve(200.0) == inner(200.0)
    assert curve(4096) == pytest.approx(30000.0 * 1.3 / plain(256))
    assert curve(64) == pytest.approx(plain(64) * 1.2 / 1.0)
    assert curve.size_range == (128.0, 4096.0)


def test_levels_reading_curves_outside_their_sizes_are_marked(cpu_profile):
    model = predictor(cpu_profile)
    assert model.extrapolated(1024, 0) is False and model.extrapolated(1024, 1) is False
    assert model.extrapolated(1024, 3) is False                       # bottom products of 128: measured
    assert model.extrapolated(1024, 4) is True                        # 64: below the calibration
    assert model.extrapolated(4096, 0) is True and model.extrapolated(8192, 2) is True
    assert model.extrapolated(2048, 2) is False


def test_models_of_no_measurement_are_neither_inside_nor_outside():
    h100 = hardware.lookup("H100")
    assert analytic_model(h100).extrapolated(8192, 2) is None
    learned = transfer.fit_transfer(transfer.published_devices(), target=h100)
    assert learned.central.model(h100).extrapolated(8192, 1) is None
