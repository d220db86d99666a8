"""Input generators: reproducible by seed, any shape, the distributions they promise."""

import numpy as np
import pytest

from accuracy.generate import (
    cancellation_pair,
    integer_matrix,
    normal_matrix,
    phi_matrix,
    uniform_matrix,
    wide_exponent_matrix,
)
from accuracy.reference import exact_matmul

MATRICES = {
    "phi": lambda m, n, seed: phi_matrix(m, n, 1.0, seed),
    "normal": normal_matrix,
    "uniform": uniform_matrix,
    "integer": integer_matrix,
    "wide": wide_exponent_matrix,
}


@pytest.mark.parametrize("kind", list(MATRICES))
def test_seeded_reproducible_any_shape(kind):
    make = MATRICES[kind]
    a, b = make(7, 5, 3), make(7, 5, 3)
    assert a.shape == (7, 5) and a.dtype == np.float64 and np.array_equal(a, b)
    assert not np.array_equal(a, make(7, 5, 4))
    assert not np.array_equal(make(7, 5, (3, 0)), make(7, 5, (3, 1)))
    for shape in ((0, 4), (3, 0), (1, 1)):
        assert make(*shape, 1).shape == shape
    assert np.isfinite(make(50, 40, 9)).all()


def test_phi_matrix_is_the_papers_formula():
    rng = np.random.default_rng(5)
    ru, rn = rng.random((6, 4)), rng.standard_normal((6, 4))
    assert np.array_equal(phi_matrix(6, 4, 2.0, 5), (ru - 0.5) * np.exp(2.0 * rn))
    flat = phi_matrix(200, 200, 0.0, 1)
    assert flat.min() >= -0.5 and flat.max() < 0.5


def test_phi_widens_the_exponent_range():
    spread = [np.ptp(np.log2(np.abs(phi_matrix(300, 300, phi, 2)))) for phi in (0.1, 1.0, 2.0)]
    assert spread[0] < spread[1] < spread[2]
    assert spread[2] - spread[0] > 8


def test_integer_and_wide_matrices():
    ints = integer_matrix(40, 40, 1, bound=7)
    assert np.array_equal(ints, np.round(ints)) and ints.min() == -7 and ints.max() == 7
    wide = wide_exponent_matrix(60, 60, 1, emin=-1074, emax=1023)
    exps = np.frexp(np.abs(wide[wide != 0]))[1] - 1
    assert exps.min() < -1000 and exps.max() > 1000
    assert (np.abs(wide[wide != 0]) < 2.0**-1022).any()       # some subnormal entries


def test_cancellation_pair_has_exact_zeros_and_cancellation():
    A, B = cancellation_pair(6, 9, 7, seed=1)                   # odd k and n
    assert A.shape == (6, 9) and B.shape == (9, 7)
    C = exact_matmul(A, B, backend="numpy")
    assert (C[:, :4] == 0).all()
    terms = np.abs(A) @ np.abs(B)
    assert (np.abs(C[:, 4:]) < 2.0**-20 * terms[:, 4:]).all()   # all but ~30 leading bits cancel
    assert (C[:, 4:] != 0).all()


@pytest.mark.parametrize("call,match", [
    (lambda: phi_matrix(-1, 2, 1.0, 0), "m must be a non-negative integer"),
    (lambda: phi_matrix(2, 2.5, 1.0, 0), "n must be"),
    (lambda: phi_matrix(2, 2, -1.0, 0), "phi must be"),
    (lambda: uniform_matrix(2, 2, 0, low=1.0, high=1.0), "low < high"),
    (lambda: integer_matrix(2, 2, 0, bound=2**60), "bound must be"),
    (lambda: wide_exponent_matrix(2, 2, 0, emin=5, emax=2000), "emax"),
    (lambda: cancellation_pair(2, 2, 2, 0, perturbation=1.5), "perturbation"),
])
def test_bad_arguments(call, match):
    with pytest.raises(ValueError, match=match):
        call()
