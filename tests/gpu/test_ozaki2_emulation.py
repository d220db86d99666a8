"""cuBLAS's FP64 emulation as scheme II's peer (CuPy with nvmath-python): the strategy left to cuBLAS is
native DGEMM on Hopper, a fixed mantissa emulates (different bits, accuracy that grows with the bits),
views go to cuBLAS as they are, and bad arguments are refused before any work."""

import numpy as np
import pytest

from accuracy.generate import phi_matrix
from accuracy.reference import exact_matmul
from gpu.backend import BackendUnavailable, get_backend
from gpu.ozaki2 import emulation


def test_bad_bits_are_refused_before_the_backend_is_touched():
    for bad in (0, -3, 128, 2.5, True, "55"):
        with pytest.raises(ValueError, match="mantissa_bits"):
            emulation.matmul(np.ones((2, 2)), np.ones((2, 2)), mantissa_bits=bad, backend="numpy")


def test_numpy_backend_says_where_the_emulation_runs():
    with pytest.raises(BackendUnavailable, match="CuPy backend only"):
        emulation.matmul(np.ones((2, 2)), np.ones((2, 2)), backend=get_backend("numpy"))


@pytest.fixture
def emulating(cupy_backend):
    try:
        emulation.require(cupy_backend)
    except BackendUnavailable as exc:
        pytest.skip(str(exc))
    return cupy_backend


@pytest.mark.gpu
def test_default_strategy_is_native_dgemm_and_eager_emulates(emulating):
    be = emulating
    A, B = (be.asarray(phi_matrix(512, 512, 1.0, s)) for s in (1, 2))
    native = be.xp.empty((512, 512))
    be.gemm(A, B, native)
    auto = emulation.matmul(A, B, backend=be)
    assert be.xp.array_equal(auto, native)
    exact = exact_matmul(A, B, backend=be)
    errors = {}
    for bits in (31, 55):
        C = emulation.matmul(A, B, mantissa_bits=bits, backend=be)
        errors[bits] = float(be.xp.max(be.xp.abs(C - exact) / be.xp.abs(exact)))
    assert errors[55] < 1e-6 < errors[31]       # element-wise: 31 bits left 0.1 on the H100, 55 bits 1e-7


@pytest.mark.gpu
def test_views_and_out(emulating):
    be = emulating
    big = be.asarray(phi_matrix(300, 320, 1.0, 3))
    A, B = big[5:285, 7:307], be.asarray(np.asfortranarray(phi_matrix(300, 200, 1.0, 4)))
    out = be.xp.full((280, 200), np.nan)
    got = emulation.matmul(A, B, mantissa_bits=47, out=out, backend=be)
    assert got is out
    want = emulation.matmul(be.xp.ascontiguousarray(A), be.xp.ascontiguousarray(B), mantissa_bits=47, backend=be)
    assert be.xp.array_equal(got, want)
