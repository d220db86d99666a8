"""The front door's accuracy contract: the scales' order, each level's requirement, and which methods' proven
bounds keep it, checked against the numbers the bounds give by hand."""

import math

import numpy as np
import pytest

from gpu.frontdoor import contract
from gpu.frontdoor.contract import Accuracy, Guarantee, as_accuracy, gamma, keeps

U = 2.0**-53


def test_the_scales_nest_on_random_operands():
    """(|A||B|)_ij <= ||a_i|| ||b_j|| <= k max|A| max|B|: the order that lets a finer guarantee stand for a
    coarser one."""
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((7, 30)) * np.exp2(rng.integers(-8, 8, (7, 1))), rng.standard_normal((30, 5))
    entry = np.abs(A) @ np.abs(B)
    rowcol = np.linalg.norm(A, axis=1)[:, None] * np.linalg.norm(B, axis=0)[None, :]
    matrix = 30 * np.abs(A).max() * np.abs(B).max()
    assert (entry <= rowcol * (1 + 1e-12)).all() and (rowcol <= matrix).all()
    assert Guarantee("entry", 1e-12).meets(Guarantee("matrix", 1e-12))
    assert not Guarantee("matrix", 1e-16).meets(Guarantee("entry", 1e-12))
    assert not Guarantee("entry", 2e-12).meets(Guarantee("entry", 1e-12))


def test_levels_require_what_the_module_states():
    k = 4096
    assert Accuracy().required(k) == Guarantee("rowcol", gamma(k), Accuracy().required(k).source)
    assert Accuracy("dgemm", scale="entry").required(k).scale == "entry"
    n_u = (k + 2) * 2.0**-24
    assert Accuracy("sgemm").required(k).t == pytest.approx(n_u / (1 - n_u), rel=1e-12)
    assert Accuracy(1e-10).required(k).scale == "matrix" and Accuracy(1e-10).required(k).t == 1e-10
    assert Accuracy("exact").required(k) is None
    assert gamma(2**53) == math.inf and gamma(3) == pytest.approx(3 * U, rel=1e-15)


@pytest.mark.parametrize("bad", ["fp64", 0, 1, 1.5, -1e-3, True, None, [1e-10]])
def test_a_bad_level_is_refused_naming_the_choices(bad):
    with pytest.raises(ValueError, match="accuracy must be one of 'dgemm', 'sgemm', 'zgemm', 'exact' or a number in"):
        Accuracy(bad)


def test_a_bad_scale_is_refused():
    with pytest.raises(ValueError, match="scale must be one of entry, rowcol, matrix"):
        Accuracy("dgemm", scale="row")
    with pytest.raises(ValueError, match="'exact' has no scale"):
        Accuracy("exact", scale="entry")


@pytest.mark.parametrize("k", [2, 64, 4096, 2**20, 2**24])
def test_dgemm_is_kept_by_the_library_splitk_ozaki_and_not_by_strassen(k):
    assert keeps(contract.library(k), "dgemm", k)[0]
    if k >= 4096:                                        # split-K's smallest k (gpu.splitk.plan.MIN_K)
        assert keeps(contract.splitk(-(-k // 64), 64), "dgemm", k)[0]
    assert keeps(contract.ozaki1("dgemm"), "dgemm", k)[0]
    assert keeps(contract.ozaki2("dgemm", k), "dgemm", k)[0]
    assert not keeps(contract.ozaki2("dgemm", k), Accuracy("dgemm", scale="entry"), k)[0]
    assert keeps(contract.ozaki2("dgemm", k, bound="componentwise"), Accuracy("dgemm", scale="entry"), k)[0]
    for level in (1, 2, 3):
        side = max(k, 16 * 2**level)
        ok, why = keeps(contract.strassen(level, side, side), "dgemm", side)
        lhs, rhs = contract.strassen_against_library(level, side, side)
        assert not ok and "coarser" in why and lhs > rhs


def test_strassens_bound_against_a_number_matches_the_table_by_hand():
    """c_S u / k for square N: L2 at 16384 is (18^2 (4096^2 + 6 4096) + 2 16384^2) 2^-53 / 16384 = 4.05e-11;
    under 1e-10 levels 1-2 qualify at 16384 and 32768, level 1 only at 49152."""
    assert contract.strassen(2, 16384, 16384).t == pytest.approx(4.0547e-11, rel=1e-3)
    qualify = {n: [level for level in (1, 2, 3, 4) if keeps(contract.strassen(level, n, n), 1e-10, n)[0]]
               for n in (16384, 32768, 49152)}
    assert qualify == {16384: [1, 2], 32768: [1, 2], 49152: [1]}
    assert all(keeps(contract.strassen(level, 16384, 16384), "sgemm", 16384)[0] for level in (1, 2, 3, 4))
    assert contract.strassen(0, 512, 512) == contract.library(512)


def test_the_library_gemm_is_not_proven_within_1e10_from_k_2_20():
    assert keeps(contract.library(2**19), 1e-10, 2**19)[0]
    ok, why = keeps(contract.library(2**20), 1e-10, 2**20)
    assert not ok and "exceeds" in why


def test_only_the_correctly_rounded_product_keeps_exact():
    assert keeps(contract.exact(), "exact", 100, correctly_rounded=True)[0]
    assert not keeps(contract.library(100), "exact", 100)[0]
    assert keeps(contract.exact(), "dgemm", 100)[0]


def test_a_level_is_read_once_and_bad_levels_are_refused_every_time():
    first = as_accuracy(1e-10)
    assert as_accuracy(1e-10) is first and as_accuracy("dgemm") is as_accuracy("dgemm")
    for bad in (2.0, "fp64", [1e-10], float("nan"), True):
        for _ in range(2):
            with pytest.raises(ValueError, match="accuracy must be"):
                as_accuracy(bad)
