"""The front door on complex operands: the complex library GEMM by default (its bits), Ozaki scheme II over both
parts where the profile measured it faster and the accuracy admits its rowcol bound (not ``"zgemm"``'s
componentwise one), each part within the promise against the exact complex reference, and clear refusals."""

import numpy as np
import pytest

import gpu
from accuracy.reference import exact_matmul
from gpu.backend import get_backend
from gpu.frontdoor.rank import rank
from gpu.profile import device_name, save_profile

M, K, N = 40, 64, 30


def operands(seed=0):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((M, K)) + 1j * rng.standard_normal((M, K))
    B = rng.standard_normal((K, N)) + 1j * rng.standard_normal((K, N))
    return A, B


@pytest.fixture
def measured():
    """A NumPy profile whose methods section measured Ozaki II over both parts at 1.9x the complex GEMM."""
    be = get_backend("numpy")
    save_profile({"backend": "numpy", "device": device_name(be), "levels": {}, "methods": {"points": [
        {"shape": [M, K, N], "dtype": "complex128", "gemm_s": 1e-4, "timed": [
            {"method": "ozaki2c", "config": {"moduli": "auto", "target": "dgemm"}, "ratio": 1.9, "waits": True}]}]}})


def test_by_default_the_complex_library_gemm_runs_with_its_bits():
    A, B = operands()
    assert np.array_equal(gpu.matmul(A, B, backend="numpy"), A @ B)
    text = gpu.plan(A, B, backend="numpy").explain()
    assert text.startswith(f"{M} x {K} x {N} complex128, accuracy 'dgemm'")
    assert "zgemm (the library complex GEMM)" in text and "ozaki2c(moduli='auto', target='dgemm')" in text


def test_measured_faster_ozaki2_over_both_parts_runs_at_dgemm_within_its_bound(measured):
    A, B = operands(1)
    plan = gpu.plan(A, B, backend="numpy")
    assert plan.chosen.family == "ozaki2c" and "1.900x the library GEMM" in plan.explain()
    out = np.empty((M, N), dtype=complex)
    C = gpu.matmul(A, B, out=out, backend="numpy")
    R = exact_matmul(A, B, backend="numpy")
    t = plan.chosen.guarantee.t
    scale = np.sqrt((np.abs(A) ** 2).sum(axis=1))[:, None] * np.sqrt((np.abs(B) ** 2).sum(axis=0))[None, :]
    assert C is out and t <= 2.0**-56 * np.sqrt(2 * K) * (1 + 1e-12)
    for got, want in ((C.real, R.real), (C.imag, R.imag)):
        assert np.all(np.abs(got - want) <= t * scale + 2.0**-53 * np.abs(got))


def test_an_entry_timed_before_2m_became_the_default_is_read_as_3m(measured):
    """The measured entry names no scheme: it was timed when Karatsuba's 3M was the default, and runs as 3M (bit
    for bit), not as today's default 2M."""
    from gpu.ozaki2 import complex as complex_ii

    A, B = operands(3)
    plan = gpu.plan(A, B, backend="numpy")
    assert plan.chosen.options == {"moduli": "auto", "scheme": "3m", "target": "dgemm"}
    assert "ozaki2c(moduli='auto', scheme='3m', target='dgemm')" in plan.explain()
    out = np.empty((M, N), dtype=complex)
    C = gpu.matmul(A, B, out=out, backend="numpy")
    assert np.array_equal(C, complex_ii.matmul(A, B, scheme="3m", backend="numpy"))


def test_a_profile_written_after_a_kept_plan_makes_the_next_call_rank_again():
    """The library GEMM's plan is kept for this signature; a calibration then writes a profile that measured Ozaki
    II faster, and the next call of the same signature runs it."""
    A, B = operands(4)
    assert np.array_equal(gpu.matmul(A, B, backend="numpy"), A @ B)
    assert np.array_equal(gpu.matmul(A, B, backend="numpy"), A @ B)
    be = get_backend("numpy")
    save_profile({"backend": "numpy", "device": device_name(be), "levels": {}, "methods": {"points": [
        {"shape": [M, K, N], "dtype": "complex128", "gemm_s": 1e-4, "timed": [
            {"method": "ozaki2c", "config": {"moduli": "auto", "scheme": "2m", "target": "dgemm"}, "ratio": 1.9,
             "waits": True}]}]}})
    from gpu.ozaki2 import complex as complex_ii
    assert np.array_equal(gpu.matmul(A, B, backend="numpy"), complex_ii.matmul(A, B, backend="numpy"))


def test_zgemm_is_componentwise_so_only_the_library_keeps_it(measured):
    A, B = operands(2)
    plan = gpu.plan(A, B, accuracy="zgemm", backend="numpy")
    assert plan.chosen.name == "zgemm (the library complex GEMM)"
    assert "coarser than the entry one asked for" in plan.explain()
    assert np.array_equal(gpu.matmul(A, B, accuracy="zgemm", backend="numpy"), A @ B)


def test_real_rankings_leave_complex_methods_out(measured):
    section = {"points": [{"shape": [M, K, N], "timed": [
        {"method": "ozaki2c", "config": {"moduli": "auto", "target": "dgemm"}, "ratio": 1.9}]}]}
    assert all(r.family != "ozaki2c" for r in rank(M, K, N, "dgemm", methods=section).entries)


def test_bad_requests_are_refused_before_any_work():
    A, B = operands(3)
    with pytest.raises(ValueError, match="complex operands take it; for real ones ask for 'dgemm'"):
        gpu.matmul(np.ascontiguousarray(A.real), np.ascontiguousarray(B.real), accuracy="zgemm", backend="numpy")
    with pytest.raises(ValueError, match="call accuracy.reference.exact_matmul"):
        gpu.matmul(A, B, accuracy="exact", backend="numpy")
    with pytest.raises(ValueError, match="dtype complex128"):
        gpu.matmul(A, B, out=np.empty((M, N)), backend="numpy")


def test_complex_points_price_complex_products_only(measured):
    A, B = operands(4)
    plan = gpu.plan(A, B, backend="numpy")
    assert plan.ranking.gemm_s == pytest.approx(1e-4) and "0.0526 ms" in plan.explain()
    real = gpu.plan(np.ascontiguousarray(A.real), np.ascontiguousarray(B.real), backend="numpy")
    assert real.ranking.gemm_s is None and real.chosen.family == "gemm"


def test_memory_is_refused_for_complex_operands_rather_than_ignored():
    A, B = operands(5)
    with pytest.raises(ValueError, match="complex products take no out-of-core route"):
        gpu.matmul(A, B, memory=2**20, backend="numpy")
