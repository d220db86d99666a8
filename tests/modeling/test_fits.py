"""Fits of Gemm (cubic) and Geam (quadratic): recovery of known polynomials, goodness of fit, files."""

import numpy as np
import pytest

from modeling.fits import (
    MeasuredCurve,
    fit_calibration,
    fit_polynomial,
    from_coefficients,
    measured_curves,
)

SIZES = np.array([256, 512, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768], float)
GEMM = (4.0e-11, 2.0e-8, 5.0e-5, 0.01)      # ms, highest power first
GEAM = (8.0e-9, 3.0e-6, 0.004)


def test_exact_cubic_is_recovered_with_zero_residual():
    fit = fit_polynomial(SIZES, np.polyval(GEMM, SIZES), 3)
    assert fit.coef == pytest.approx(GEMM, rel=1e-6)
    assert fit.r2 == pytest.approx(1.0, abs=1e-12)
    assert fit.sse == pytest.approx(0.0, abs=1e-12 * (np.polyval(GEMM, SIZES) ** 2).sum())
    assert fit(4096.0) == pytest.approx(np.polyval(GEMM, 4096.0))


@pytest.mark.parametrize("weighting", ["absolute", "relative"])
def test_noisy_polynomials_are_recovered(weighting):
    rng = np.random.default_rng(3)
    for coef, degree in ((GEMM, 3), (GEAM, 2)):
        clean = np.polyval(coef, SIZES)
        noisy = clean * (1 + 0.002 * rng.standard_normal(SIZES.size))
        fit = fit_polynomial(SIZES, noisy, degree, weighting)
        # The leading coefficient decides the large sizes; the curve itself stays within the noise.
        assert fit.coef[0] == pytest.approx(coef[0], rel=0.02)
        assert np.max(np.abs(fit(SIZES[-4:]) / clean[-4:] - 1)) < 0.01
        assert 0.999 < fit.r2 <= 1.0
        assert fit.weighting == weighting and fit.sizes == tuple(int(n) for n in SIZES)


def test_relative_weighting_keeps_small_sizes_accurate():
    rng = np.random.default_rng(5)
    clean = np.polyval(GEMM, SIZES)
    noisy = clean * (1 + 0.01 * rng.standard_normal(SIZES.size))
    absolute = fit_polynomial(SIZES, noisy, 3, "absolute")
    relative = fit_polynomial(SIZES, noisy, 3, "relative")
    small = SIZES <= 2048
    err = lambda f: np.max(np.abs(f(SIZES[small]) / clean[small] - 1))
    assert err(relative) < 0.05 < err(absolute)
    assert relative.rel_rms < absolute.rel_rms
    assert absolute.sse < relative.sse  # ordinary least squares minimises exactly the SSE


def test_sse_and_r2_match_a_hand_computation():
    x, y = [1.0, 2.0, 3.0, 4.0], [1.0, 3.0, 2.0, 4.0]
    fit = fit_polynomial(x, y, 1)              # line through (1,1) (2,3) (3,2) (4,4): y = 0.8 x + 0.5
    assert fit.coef == pytest.approx((0.8, 0.5))
    assert fit.sse == pytest.approx(1.8)       # residuals -0.3, 0.9, -0.9, 0.3
    assert fit.r2 == pytest.approx(1 - 1.8 / 5.0)


def test_bad_fits_are_refused_before_fitting():
    with pytest.raises(ValueError, match="at least 4 distinct sizes"):
        fit_polynomial([1, 2, 3, 3], [1, 2, 3, 3], 3)
    with pytest.raises(ValueError, match="positive"):
        fit_polynomial([1, 2, 3, 4], [1, 0, 3, 4], 2)
    with pytest.raises(ValueError, match="weighting"):
        fit_polynomial([1, 2, 3, 4], [1, 2, 3, 4], 2, "huber")


def test_calibration_rows_give_both_fits_in_ms():
    rows = [{"size": int(n), "gemm_s": np.polyval(GEMM, n) / 1e3, "geam_s": np.polyval(GEAM, n) / 1e3}
            for n in SIZES]
    model = fit_calibration(rows, "relative", source="test")
    assert model.gemm.coef == pytest.approx(GEMM, rel=1e-6)
    assert model.geam.coef == pytest.approx(GEAM, rel=1e-6)
    assert model.size_range == (256, 32768)
    with pytest.raises(ValueError, match="calibrate"):
        fit_calibration([])


def test_coefficients_file_converts_units_and_checks_lengths():
    model = from_coefficients({"gemm": [1, 2, 3, 4], "geam": [5, 6, 7], "units": "s"})
    assert model.gemm.coef == (1e3, 2e3, 3e3, 4e3) and model.geam.coef == (5e3, 6e3, 7e3)
    assert model.size_range is None and model.gemm.r2 is None
    assert from_coefficients({"gemm": [0, 0, 0, 1], "geam": [0, 0, 1]}).gemm(10.0) == 1.0  # ms by default
    with pytest.raises(ValueError, match='"geam" must list 3'):
        from_coefficients({"gemm": [1, 2, 3, 4], "geam": [1, 2]})
    with pytest.raises(ValueError, match="units"):
        from_coefficients({"gemm": [1, 2, 3, 4], "geam": [1, 2, 3], "units": "min"})


def test_measured_curve_passes_through_points_and_extends_power_laws():
    curve = MeasuredCurve((1000.0, 2000.0, 4000.0), (1.0, 8.0, 64.0))  # t = (x/1000)^3
    assert curve(2000.0) == pytest.approx(8.0)
    assert curve(1414.2135623730951) == pytest.approx(2 ** 1.5)      # power law between points
    assert curve(500.0) == pytest.approx(0.125)                      # extended below ...
    assert curve(8000.0) == pytest.approx(512.0)                     # ... and above
    gemm, geam = measured_curves([{"size": 2000, "gemm_s": 8e-3, "geam_s": 2e-3},
                                  {"size": 1000, "gemm_s": 1e-3, "geam_s": 1e-3}])
    assert gemm(1000.0) == pytest.approx(1.0) and geam(2000.0) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="increasing"):
        MeasuredCurve((2.0, 1.0), (1.0, 1.0))


def test_measured_curve_scalar_path_is_the_array_path():
    """Plain numbers take a path without arrays (the predictors call curves thousands of times):
    the same curve, below, between, on and above the measured points."""
    sizes, ms = (256.0, 1000.0, 1500.0, 4096.0, 30000.0), (0.01, 0.2, 0.5, 9.0, 3000.0)
    curve = MeasuredCurve(sizes, ms)
    xs = [16, 100.5, 256, 257, 999.9, 1000, 1234, 1500, 4095.5, 4096, 20000, 30000, 30001, 2**20]
    array = curve(np.array(xs, dtype=float))
    assert isinstance(array, np.ndarray) and array.shape == (len(xs),)
    for x, want in zip(xs, array):
        for value in (x, float(x), np.float64(x)):
            got = curve(value)
            assert isinstance(got, float) and got == pytest.approx(want, rel=1e-13), (value, got, want)
    assert [curve(n) for n in sizes] == pytest.approx(list(ms), rel=1e-13)
