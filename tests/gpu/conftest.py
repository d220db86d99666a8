"""Helpers of the Strassen tests, as fixtures: test modules are imported in importlib mode, so
they share helpers through fixtures rather than imports."""

import numpy as np
import pytest

EPS = {np.dtype(np.float64): 2.0**-52, np.dtype(np.float32): 2.0**-23}


def _operand(backend, shape, seed, dtype=np.float64):
    """Uniform values in [-1, 1) on the backend's device."""
    return backend.random(shape, dtype, seed=seed) * 2 - 1


def _host(backend, x):
    return np.array(backend.to_numpy(x))


def bound(A, B, side, level):
    """Error bound of an L-level Strassen-Winograd product of size ``side``:

        max|C - AB| <= eps * side * 12**L * max|A| * max|B| * 4,

    eps the machine epsilon of the dtype (2**-52 for float64, 2**-23 for float32). The
    classical product's error grows like eps * n * max|A| * max|B|; each Strassen level
    multiplies the constant by about 12 (Higham, Accuracy and Stability of Numerical
    Algorithms, ch. 23, gives 12 per level for Strassen's form and up to 18 for Winograd's
    as a worst case); 4 is slack. On these random operands the largest error seen is about
    1.6% of the bound; a wrong quadrant, a missed wait or a clobbered operand gives errors
    of order 1.
    """
    return EPS[A.dtype] * side * 12**level * np.abs(A).max() * np.abs(B).max() * 4


def _check(backend, C, A, B, level, side=None):
    """``C`` (device) is A @ B (host copies) within :func:`bound`."""
    side = side or max(*A.shape, B.shape[1])
    side = -(-side // 2**level) * 2**level
    got = _host(backend, C)
    assert got.shape == (A.shape[0], B.shape[1]) and got.dtype == A.dtype
    expect = A.astype(np.float64) @ B.astype(np.float64)
    err = np.abs(got.astype(np.float64) - expect).max() if got.size else 0.0
    assert err <= bound(A, B, side, level), f"error {err:.3e} > bound {bound(A, B, side, level):.3e}"
    return got


@pytest.fixture
def operand():
    """``operand(backend, shape, seed, dtype=float64)``: uniform values in [-1, 1) on the device."""
    return _operand


@pytest.fixture
def host():
    """``host(backend, x)``: a NumPy copy of ``x``, safe from later writes to ``x``."""
    return _host


@pytest.fixture
def check():
    """``check(backend, C, A, B, level)``: C is A @ B within the Strassen error bound (see :func:`bound`)."""
    return _check
