"""The out-of-core engine's NaN check beside the products (``gpu.outofcore.api.finite_gate``): the check runs
while the first loads and products do, nothing is written into C before it has passed, a refused product
leaves ``out`` as it was, and ``before_write`` is called once before the first write; on NumPy."""

import contextlib
import threading

import numpy as np
import pytest

from gpu.outofcore import api as outofcore_api
from gpu.outofcore import matmul, page_locked


@pytest.fixture
def overlapped(monkeypatch):
    """Every operand checked beside the products, however small."""
    monkeypatch.setattr(outofcore_api, "OVERLAP_FINITE_BYTES", 0)


@pytest.mark.parametrize("locked", [True, False])
@pytest.mark.parametrize("threshold", [0, 2**40])
@pytest.mark.parametrize("block", [(3, 4), (40, 40)])
@pytest.mark.parametrize("where", ["A", "B"])
def test_non_finite_input_leaves_out_unwritten(monkeypatch, operands, threshold, block, where, locked):
    monkeypatch.setattr(outofcore_api, "OVERLAP_FINITE_BYTES", threshold)
    A, B = operands(13, 9, 11, seed=3)
    (A if where == "A" else B)[5, 2] = np.inf
    out = np.full((13, 11), 7.0)
    with (page_locked(A, B, out, backend="numpy") if locked else contextlib.nullcontext()), \
            pytest.raises(ValueError, match=f"{where} contains NaN or infinity"):
        matmul(A, B, out=out, block=block, panel=2, backend="numpy", check_finite=True)
    assert (out == 7.0).all(), "C was written before the check refused the input"


@pytest.mark.parametrize("locked", [True, False])
@pytest.mark.parametrize("check_finite", [True, False])
def test_before_write_runs_once_before_the_first_write(overlapped, operands, assert_product, check_finite, locked):
    """Locked, the engine writes C at its first store (unlocked, through staging, a store later)."""
    A, B = operands(13, 9, 11, seed=4)
    out = np.full((13, 11), 7.0)
    seen = []
    with page_locked(A, B, out, backend="numpy") if locked else contextlib.nullcontext():
        matmul(A, B, out=out, block=(3, 4), panel=2, backend="numpy", check_finite=check_finite,
               before_write=lambda: seen.append(bool((out == 7.0).all())))
    assert seen == [True], "one call, with C still unwritten"
    assert_product(out, A, B)


def test_what_before_write_raises_stops_the_product_with_out_unwritten(overlapped, operands):
    A, B = operands(13, 9, 11, seed=5)
    out = np.full((13, 11), 7.0)

    def refuse():
        raise ValueError("stopped by the caller")

    with pytest.raises(ValueError, match="stopped by the caller"):
        matmul(A, B, out=out, block=(3, 4), panel=2, backend="numpy", before_write=refuse)
    assert (out == 7.0).all()


def test_an_empty_inner_dimension_passes_the_gate_before_its_zeros(overlapped):
    out = np.full((4, 3), 7.0)
    seen = []
    matmul(np.ones((4, 0)), np.ones((0, 3)), out=out, backend="numpy",
           before_write=lambda: seen.append(bool((out == 7.0).all())))
    assert seen == [True] and (out == 0).all()


def test_an_empty_product_still_refuses_non_finite_input(overlapped):
    A = np.ones((4, 5))
    A[1, 1] = np.nan
    with pytest.raises(ValueError, match="A contains NaN or infinity"):
        matmul(A, np.ones((5, 0)), backend="numpy", check_finite=True)


def test_the_check_runs_beside_the_first_products(overlapped, held_checks, operands, assert_product):
    """The check (held until a product has run) runs on another thread while the engine multiplies."""
    seen = held_checks(outofcore_api)
    A, B = operands(13, 9, 11, seed=6)
    C = matmul(A, B, block=(3, 4), panel=2, backend="numpy", check_finite=True)
    assert seen == [(seen[0][0], True)] and seen[0][0] is not threading.current_thread()
    assert_product(C, A, B)


def test_small_operands_are_checked_before_any_work(monkeypatch, operands):
    A, B = operands(5, 4, 3, seed=7)
    order = []
    check = outofcore_api.require_finite
    monkeypatch.setattr(outofcore_api, "require_finite", lambda *a: (order.append("check"), check(*a))[1])
    monkeypatch.setattr(outofcore_api, "run", lambda *a: order.append("run"))
    matmul(A, B, backend="numpy")
    assert order == ["check", "run"]


@pytest.mark.gpu
@pytest.mark.parametrize("locked", [True, False])
def test_the_gpu_engine_writes_nothing_before_the_check_passes(cupy_backend, overlapped, operands, assert_product,
                                                               locked):
    A, B = operands(300, 200, 250, seed=8)
    out = np.full((300, 250), 7.0)
    seen = []
    with page_locked(A, B, out, backend=cupy_backend) if locked else contextlib.nullcontext():
        matmul(A, B, out=out, block=(64, 96), panel=64, backend=cupy_backend,
               before_write=lambda: seen.append(bool((out == 7.0).all())))
        assert seen == [True]
        assert_product(out, A, B)
        B[150, 3] = np.nan
        out[:] = 7.0
        with pytest.raises(ValueError, match="B contains NaN or infinity"):
            matmul(A, B, out=out, block=(64, 96), panel=64, backend=cupy_backend, check_finite=True)
        assert (out == 7.0).all()
