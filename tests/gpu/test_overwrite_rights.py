"""``overwrite_a`` / ``overwrite_b`` on arrays that cannot be written (a read-only view, a file mapped with
``np.load(path, mmap_mode="r")``): refused before any work, naming the caller's operand and the way out.
Strassen failed 14 frames deep with "C is read-only" (an internal operand) after writing all of ``out``."""

import numpy as np
import pytest

from gpu import ozaki2
from gpu.strassen import forget
from gpu.strassen import matmul as strassen
from gpu.strassen import plan as strassen_plan


def _read_only(x):
    x = x.copy()
    x.flags.writeable = False
    return x


def _pair(n=64, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (n, n)), rng.uniform(-1, 1, (n, n))


def _no_work(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("work started before the refusal")
    monkeypatch.setattr(strassen_plan.Plan, "_execute", refuse)


@pytest.mark.parametrize("which", ["A", "B"])
@pytest.mark.parametrize("schedule", ["rum", "otsuka", "lai"])
def test_strassen_refuses_overwrite_of_a_read_only_operand_before_any_work(monkeypatch, which, schedule):
    A, B = _pair()
    A, B = (_read_only(A), B) if which == "A" else (A, _read_only(B))
    out = np.full((64, 64), np.nan)
    _no_work(monkeypatch)
    flag = {"overwrite_a": True} if which == "A" else {"overwrite_b": True}
    with pytest.raises(ValueError, match=rf"^{which} is read-only.*overwrite_{which.lower()}=False.*writeable"):
        strassen(A, B, level=1, schedule=schedule, out=out, backend="numpy", **flag)
    assert np.isnan(out).all()


def test_strassen_refuses_overwrite_of_a_read_only_mapped_file(tmp_path):
    A, B = _pair(seed=1)
    np.save(tmp_path / "a.npy", A)
    mapped = np.load(tmp_path / "a.npy", mmap_mode="r")
    out = np.full((64, 64), np.nan)
    with pytest.raises(ValueError, match=r"^A is read-only"):
        strassen(mapped, B, level=2, overwrite_a=True, out=out, backend="numpy")
    assert np.isnan(out).all()
    C = strassen(mapped, B, level=2, out=out, backend="numpy")       # without the opt-in: a normal product
    assert np.abs(C - A @ B).max() < 1e-12


def test_a_kept_plan_is_not_reused_for_a_read_only_operand_or_out(monkeypatch):
    """The kept plans (gpu.strassen.PLANS) must not let a read-only A through a plan that was
    checked on a writeable A of the same shape and strides, nor a read-only out."""
    forget()
    A, B = _pair(seed=2)
    out = np.empty((64, 64))
    strassen(A.copy(), B, level=1, overwrite_a=True, out=out, backend="numpy")      # kept
    with pytest.raises(ValueError, match=r"^A is read-only"):
        strassen(_read_only(A), B, level=1, overwrite_a=True, out=out, backend="numpy")
    frozen = np.full((64, 64), np.nan)
    frozen.flags.writeable = False
    strassen(A.copy(), B, level=1, out=np.empty((64, 64)), backend="numpy")
    with pytest.raises(ValueError, match=r"^out is read-only"):
        strassen(A.copy(), B, level=1, out=frozen, backend="numpy")


def test_ozaki2_refuses_overwrite_of_a_read_only_operand():
    """Scheme II only reads its inputs, but accepts the flags for symmetry with scheme I: the same rule."""
    A, B = _pair(n=16, seed=3)
    with pytest.raises(ValueError, match=r"^B is read-only.*overwrite_b=False"):
        ozaki2.matmul(A, _read_only(B), moduli=8, overwrite_b=True, backend="numpy")


def test_read_only_operands_without_the_opt_in_are_fine():
    A, B = _pair(seed=4)
    ra, rb = _read_only(A), _read_only(B)
    assert np.abs(strassen(ra, rb, level=2, backend="numpy") - A @ B).max() < 1e-12
    assert np.abs(ozaki2.matmul(ra, rb, moduli=14, backend="numpy") - A @ B).max() < 1e-12
