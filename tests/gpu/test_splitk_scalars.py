"""Split-K's alpha and beta beyond the operands' precision: float32 operands with an alpha or beta that float32
cannot hold (1e39 overflows it, 1e-46 rounds to zero) gave infinity, NaN or zero where alpha A B + beta C fits
in float32; a float64 alpha applied to each chunk's sum overflowed where the chunks cancel. The scalars are
applied in float64, and the deterministic mode applies alpha once, to the reduced sum."""

import numpy as np
import pytest

from gpu.splitk import MIN_K, matmul

F32_MAX = float(np.finfo(np.float32).max)


def _host(be, x):
    return np.array(be.to_numpy(x))


def _expected(A, B, alpha, beta=0.0, C=None):
    """alpha A B + beta C in extended precision, and its magnitude |alpha| |A| |B| + |beta| |C|."""
    a, b = A.astype(np.longdouble), B.astype(np.longdouble)
    exact, size = alpha * (a @ b), abs(alpha) * (np.abs(a) @ np.abs(b))
    if C is not None and beta:
        exact, size = exact + beta * C.astype(np.longdouble), size + abs(beta) * np.abs(C.astype(np.longdouble))
    return exact, size


def _assert_close(got, A, B, alpha, beta=0.0, C=None):
    exact, size = _expected(A, B, alpha, beta, C)
    assert np.isfinite(got).all(), "non-finite entries where alpha A B + beta C fits"
    terms = A.shape[1] + 2
    u = 2.0**-24 if got.dtype == np.float32 else 2.0**-53
    err = np.abs(got.astype(np.longdouble) - exact)
    assert np.all(err <= terms * u / (1 - terms * u) * size + 2.0**-149), float((err / size).max())


def _operands(m, k, n, scale, seed, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return ((rng.uniform(0.5, 1, (m, k)) * scale).astype(dtype),
            (rng.uniform(-1, 1, (k, n)) * scale).astype(dtype))


@pytest.mark.parametrize("deterministic", [True, False])
@pytest.mark.parametrize("alpha,scale", [(1e39, 2.0**-60), (-3e45, 2.0**-20), (1e-46, 2.0**50), (2.5e-45, 2.0**50)])
def test_a_float32_alpha_beyond_float32_gives_the_product(backend, deterministic, alpha, scale):
    """1e39 and -3e45 overflow float32, 1e-46 rounds to zero in it, 2.5e-45 to the subnormal 2.8e-45: each gave
    infinity, NaN or zero (or lost digits) where alpha A B fits in float32 with room to spare. The products stay
    in float32's normal range: below it the GPU kernels flush them (see gpu.splitk.api)."""
    A, B = _operands(8, MIN_K, 6, scale, seed=1)
    exact, size = _expected(A, B, alpha)
    assert size.max() < F32_MAX / 4 and (np.abs(A.astype(float)) @ np.abs(B.astype(float))).max() < F32_MAX / 4
    C = matmul(backend.asarray(A), backend.asarray(B), alpha=alpha, chunks=8, deterministic=deterministic,
               backend=backend)
    _assert_close(_host(backend, C), A, B, alpha)


@pytest.mark.parametrize("deterministic", [True, False])
@pytest.mark.parametrize("beta,c_scale", [(1e39, 1e-30), (1e-50, 1e37)])
def test_a_float32_beta_beyond_float32_scales_c_right(backend, deterministic, beta, c_scale):
    """beta = 1e39 became infinity (and NaN on C's zeros); beta = 1e-50 became zero and dropped beta C,
    which is about 1e-13 here, as large as the product."""
    A, B = _operands(8, MIN_K, 6, 2.0**-30, seed=2)
    C0 = (np.random.default_rng(3).uniform(-1, 1, (8, 6)) * c_scale).astype(np.float32)
    C0[0, :] = 0.0
    out = backend.asarray(C0.copy())
    got = matmul(backend.asarray(A), backend.asarray(B), alpha=1.0, beta=beta, out=out, chunks=8,
                 deterministic=deterministic, backend=backend)
    assert got is out
    _assert_close(_host(backend, got), A, B, 1.0, beta, C0)


def test_alpha_applied_to_the_sum_not_to_each_chunk(backend):
    """Chunks that cancel: the two halves of k give +-2^962 each, alpha = 2^70 takes each beyond float64
    while alpha A B is 0 exactly; alpha applied to each chunk's sum gave inf - inf = NaN."""
    k = 2 * MIN_K
    A = np.full((2, k), 2.0**500)
    A[:, MIN_K:] = -(2.0**500)
    B = np.full((k, 3), 2.0**450)
    C = matmul(backend.asarray(A), backend.asarray(B), alpha=2.0**70, chunks=2, backend=backend)
    assert np.array_equal(_host(backend, C), np.zeros((2, 3)))


@pytest.mark.parametrize("deterministic", [True, False])
def test_alpha_zero_reads_neither_operand_as_the_blas_does(backend, deterministic):
    """BLAS (and cuBLAS) give beta C for alpha = 0 without reading A or B; split-K multiplied 0 by the
    product's NaN and infinities (check_finite=False), or by partials that overflow."""
    A, B = _operands(4, MIN_K, 5, 1.0, seed=6, dtype=np.float64)
    A[1, 7], B[9, 2], A[2, :] = np.inf, np.nan, 1e308
    C0 = np.random.default_rng(7).uniform(-1, 1, (4, 5))
    for beta, want in ((0.0, np.zeros((4, 5))), (-2.0, -2.0 * C0)):
        out = backend.asarray(C0.copy())
        got = matmul(backend.asarray(A), backend.asarray(B), alpha=0.0, beta=beta, out=out, check_finite=False,
                     deterministic=deterministic, backend=backend)
        assert np.array_equal(_host(backend, got), want)


@pytest.mark.parametrize("deterministic", [True, False])
def test_nonfinite_input_flows_through_without_warnings(deterministic, recwarn):
    """NaN and infinity (check_finite=False) flow through the chunk sums as through one library GEMM, which
    warns about nothing; NumPy's additions of the partials warned 'invalid value encountered in add'."""
    A, B = _operands(3, MIN_K, 2, 1.0, seed=8, dtype=np.float64)
    A[0, 5], A[1, 9], A[1, MIN_K - 1], B[7, 1] = np.nan, np.inf, -np.inf, np.inf
    C = matmul(A, B, alpha=2.0, chunks=4, deterministic=deterministic, check_finite=False, backend="numpy")
    assert np.isnan(C[0]).all() and np.isnan(C[1]).all() and np.isinf(C[2, 1]) and np.isfinite(C[2, 0])
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)], [str(w.message) for w in recwarn]
