"""``error_report``: each measure on products whose errors are known; exact-zero reference
entries counted apart; NaN and infinity flagged, never hidden behind a finite number."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accuracy.generate import cancellation_pair, phi_matrix
from accuracy.metrics import array_module, error_report, ulp
from accuracy.reference import exact_matmul


def product(seed=1, n=12):
    A, B = phi_matrix(n, n, 1.0, (seed, 0)), phi_matrix(n, n, 1.0, (seed, 1))
    return A, B, exact_matmul(A, B, backend="numpy")


def test_the_reference_against_itself_is_exact(backend):
    A, B, R = product()
    rep = error_report(backend.asarray(R), backend.asarray(R), backend.asarray(A), backend.asarray(B))
    assert rep.max_rel == rep.median_rel == rep.nrm == rep.max_comp == rep.max_ulps == rep.bits == 0.0
    assert rep.correctly_rounded == 1.0 and rep.zeros == 0 and rep.finite


def test_one_entry_one_ulp_off():
    A, B, R = product()
    C = R.copy()
    C[2, 3] = np.nextafter(R[2, 3], np.inf)
    rep = error_report(C, R, A, B)
    assert rep.max_ulps == 1.0 and rep.bits == 1.0 and rep.median_ulps == 0.0
    assert rep.max_rel == pytest.approx(abs(C[2, 3] - R[2, 3]) / abs(R[2, 3]), rel=0)
    assert rep.correctly_rounded == pytest.approx(1 - 1 / R.size)
    assert rep.nrm == pytest.approx(abs(C[2, 3] - R[2, 3]) / np.linalg.norm(R))


def test_known_relative_errors_and_median():
    R = np.array([[1.0, 2.0, 4.0, -8.0]])
    C = np.array([[1.5, 2.0, 3.0, -8.0]])                   # relative errors 0.5, 0, 0.25, 0
    rep = error_report(C, R)
    assert rep.max_rel == 0.5 and rep.median_rel == 0.125
    assert rep.max_comp is None                              # no factors given
    assert rep.max_ulps == 0.5 / 2.0**-52 and rep.bits == pytest.approx(math.log2(1 + 2.0**51))


def test_exact_zero_references_are_counted_apart(backend):
    A, B = cancellation_pair(4, 10, 6, seed=2)
    R = exact_matmul(A, B, backend="numpy")
    C = A @ B                                                # leaves rounding noise where R is 0
    zeros = int((R == 0).sum())
    rep = error_report(backend.asarray(C), backend.asarray(R), backend.asarray(A), backend.asarray(B))
    assert rep.zeros == zeros == 12
    assert rep.zeros_exact == int((C[R == 0] == 0).sum())
    assert rep.zero_max_abs == np.abs(C[R == 0]).max()
    nonzero = R != 0
    assert rep.max_rel == np.max(np.abs(C - R)[nonzero] / np.abs(R[nonzero]))   # no division by zero
    assert math.isfinite(rep.max_rel)


def test_all_zero_reference_has_no_relative_error():
    R, C = np.zeros((2, 2)), np.array([[0.0, 1e-30], [0.0, 0.0]])
    rep = error_report(C, R)
    assert rep.max_rel is None and rep.median_rel is None and rep.nrm is None and rep.bits is None
    assert (rep.zeros, rep.zeros_exact, rep.zero_max_abs) == (4, 3, 1e-30)
    assert rep.correctly_rounded == 0.75


def test_componentwise_error():
    A, B = np.array([[1.0, 1.0]]), np.array([[1.0], [-1.0]])
    rep = error_report(np.array([[1e-16]]), np.array([[0.0]]), A, B)
    assert rep.max_comp == pytest.approx(1e-16 / 2)
    rep = error_report(np.array([[1e-16]]), np.array([[0.0]]), np.zeros((1, 2)), B)
    assert rep.max_comp == math.inf                         # nonzero where |A||B| is zero


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_results_are_flagged(bad):
    A, B, R = product()
    C = R.copy()
    C[1, 1] = bad
    rep = error_report(C, R, A, B)
    assert not rep.finite and rep.nonfinite == 1
    for key in ("max_rel", "median_rel", "nrm", "max_comp", "max_ulps", "bits"):
        assert rep[key] == math.inf


def test_overflowed_reference_entries_are_left_out():
    R = np.array([[np.inf, 2.0, -np.inf]])
    rep = error_report(np.array([[np.inf, 2.0, 1e308]]), R)
    assert (rep.ref_infinite, rep.ref_infinite_matched) == (2, 1)
    assert rep.max_rel == 0.0 and rep.finite


def test_bad_arguments():
    R = np.ones((2, 2))
    with pytest.raises(TypeError, match="C is a masked array"):
        error_report(np.ma.masked_array(R, mask=[[0, 1], [0, 0]]), R)
    with pytest.raises(ValueError, match="shape"):
        error_report(np.ones((2, 3)), R)
    with pytest.raises(ValueError, match="both A and B"):
        error_report(R, R, A=R)
    with pytest.raises(ValueError, match="not the factors"):
        error_report(R, R, np.ones((2, 3)), np.ones((2, 2)))
    with pytest.raises(TypeError, match="real arrays"):
        error_report(R.astype(complex), R)


def test_nan_and_infinite_references_are_counted_apart():
    """exact_matmul(check_finite=False) gives NaN and infinite references: they are left out of the
    errors and counted, with how many C reproduced (NaN matching NaN)."""
    R = np.array([[1.0, np.nan, np.inf], [2.0, np.nan, -np.inf]])
    C = np.array([[1.0, np.nan, np.inf], [2.0 * (1 + 2**-50), 3.0, np.nan]])
    rep = error_report(C, R)
    assert (rep.ref_nan, rep.ref_nan_matched, rep.ref_infinite, rep.ref_infinite_matched) == (2, 1, 2, 1)
    assert rep.finite and rep.max_rel == pytest.approx(2**-50)
    assert rep.correctly_rounded == pytest.approx(3 / 6)


def test_report_reads_as_a_mapping():
    A, B, R = product()
    rep = error_report(R * (1 + 1e-12), R, A, B)
    d = dict(rep)
    assert d == rep.as_dict() and d["max_rel"] == rep["max_rel"] == rep.max_rel
    assert set(d) >= {"max_rel", "median_rel", "nrm", "max_comp", "max_ulps", "bits", "correctly_rounded",
                      "zeros", "zeros_exact", "nonfinite"}
    with pytest.raises(KeyError):
        rep["nope"]


def test_inputs_are_not_modified():
    A, B, R = product()
    C = R * (1 + 1e-10)
    copies = [x.copy() for x in (C, R, A, B)]
    error_report(C, R, A, B)
    assert all(np.array_equal(x, y) for x, y in zip((C, R, A, B), copies))


def test_array_module_follows_the_array(backend):
    assert array_module(backend.asarray(np.ones(2))) is backend.xp
    assert array_module(np.ones(2)) is np and array_module([1.0]) is np and array_module(2.0) is np


def test_ulp_matches_numpy_spacing_off_powers_of_two():
    x = np.array([1.5, 3.0, 1e300, 2.0**-1074, 3 * 2.0**-1074, 1e-310, 0.7])
    assert np.array_equal(ulp(np, x), np.spacing(x))
    assert ulp(np, np.array([1.0]))[0] == 2.0**-52 and ulp(np, np.array([-4.0]))[0] == 2.0**-50


@settings(max_examples=40, deadline=None)
@given(st.integers(-900, 900), st.integers(1, 20))
def test_relative_measures_do_not_depend_on_scale(shift, seed):
    """Scaling C and C* by a power of two changes no relative measure, ulps or share."""
    A, B, R = product(seed, n=6)
    C = A.astype(np.float32).astype(np.float64) @ B
    R, C = R / np.abs(R).max(), C / np.abs(R).max()
    base, scaled = error_report(C, R), error_report(np.ldexp(C, shift), np.ldexp(R, shift))
    for key in ("max_rel", "median_rel", "nrm", "max_ulps", "correctly_rounded"):
        assert scaled[key] == base[key], key
