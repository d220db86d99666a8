"""NaN and infinity: ``check_finite=True`` (the default) refuses them before any work; with
``check_finite=False`` every product gives what the library GEMM gives where that is non-finite, and never a
non-finite entry where the library GEMM's is finite; the other entries keep the method's bound."""

from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from accuracy.reference import exact_matmul
from tests.property.strategies import F32, F64, HOST, METHODS, operands, profiled

#: The methods with a ``check_finite`` option (``gemm`` is the library GEMM itself).
CHECKED = [name for name in METHODS if name != "gemm"]
BAD = (np.nan, np.inf, -np.inf)


@dataclass(frozen=True)
class Case:
    """One poisoned product: ``spots`` are (operand, row, column, value) set into A or B, ``zeros`` entries of
    B set to 0 (inf * 0 = NaN)."""

    method: str
    A: np.ndarray
    B: np.ndarray
    options: dict[str, Any]
    spots: tuple[tuple[str, int, int, float], ...]
    zeros: tuple[tuple[int, int], ...] = ()


@st.composite
def cases(draw) -> Case:
    name = draw(st.sampled_from(CHECKED))
    method = METHODS[name]
    dtype = draw(st.sampled_from(method.dtypes))
    shape = draw(method.shapes)
    A, B = draw(operands(shape, dtype))
    options = {key: v for key, v in draw(method.options(shape, dtype)).items() if key not in ("beta", "check_finite")}
    m, k, n = shape
    spot = st.tuples(st.sampled_from("AB"), st.integers(0, 10**6), st.integers(0, 10**6), st.sampled_from(BAD))
    spots = tuple((w, r % (m if w == "A" else k), c % (k if w == "A" else n), v)
                  for w, r, c, v in draw(st.lists(spot, min_size=1, max_size=3)))
    zeros = tuple((r % k, c % n) for r, c in draw(st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 10**6)),
                                                           max_size=2)))
    return Case(name, A.view.copy(), B.view.copy(), options, spots, zeros)


def poisoned(case: Case) -> tuple[np.ndarray, np.ndarray]:
    A, B = case.A.copy(), case.B.copy()
    for r, c in case.zeros:
        B[r, c] = 0.0
    for which, r, c, value in case.spots:
        (A if which == "A" else B)[r, c] = value
    return A, B


def library(A: np.ndarray, B: np.ndarray, alpha: float = 1.0) -> np.ndarray:
    """alpha A B by the library GEMM (split-K takes alpha; the others multiply with 1)."""
    C = np.empty((A.shape[0], B.shape[1]), dtype=A.dtype)
    with np.errstate(all="ignore"):
        HOST.gemm(A, B, C, alpha)
    return C


def _strassen_case(seed: int) -> Case:
    rng = np.random.default_rng(seed)
    return Case("strassen", rng.uniform(-1, 1, (128, 128)), rng.uniform(-1, 1, (128, 128)),
                {"level": 2, "schedule": "rum"}, (("A", 3, 4, np.nan),))


@profiled(3)
@given(case=cases())
@example(case=_strassen_case(1))    # one NaN gave 512 NaN entries at level 2, where A @ B has 128
@example(case=Case("strassen", np.ones((64, 64)), np.ones((64, 64)), {"level": 1, "schedule": "winograd"},
                   (("A", 0, 0, np.inf), ("A", 0, 40, -np.inf))))                     # inf - inf: A @ B's NaN row
def test_nonfinite_input_gives_the_library_gemms_entries(case):
    A, B = poisoned(case)
    method = METHODS[case.method]
    with pytest.raises(ValueError, match="NaN or infinity"):
        method.run(A, B, check_finite=True, **case.options)           # refused where the caller asks
    C = method.call(A, B, **case.options)                              # the default: the library GEMM's entries
    if C is None:                                     # a refusal the method documents (Ozaki II's "auto")
        return
    R = library(A, B, case.options.get("alpha", 1.0))
    assert np.array_equal(np.isnan(C), np.isnan(R)), f"NaN at {np.isnan(C).sum()} entries, A @ B at {np.isnan(R).sum()}"
    assert np.array_equal(C[np.isinf(R)], R[np.isinf(R)]) and np.isfinite(C[np.isfinite(R)]).all()
    rows = sorted({r for w, r, _, _ in case.spots if w == "A"})
    cols = sorted({c for w, _, c, _ in case.spots if w == "B"})
    clean_a, clean_b = np.where(np.isfinite(A), A, 0), np.where(np.isfinite(B), B, 0)
    exact = exact_matmul(clean_a, clean_b, backend="numpy")
    want, allowed = method.bound(clean_a, clean_b, C, exact, case.options, None)
    keep = np.ones(C.shape, dtype=bool)
    keep[rows] = False
    keep[:, cols] = False
    err = np.abs(C.astype(np.float64) - want)
    assert ((err <= allowed) | np.isinf(allowed))[keep].all(), "an entry outside the non-finite lines is off"


def test_the_cases_cover_both_dtypes_and_every_checked_method():
    """The strategy can reach every method and dtype (a registry change must not drop one silently)."""
    assert set(CHECKED) >= {"strassen", "splitk", "ozaki2", "outofcore"}
    assert {d for name in CHECKED for d in METHODS[name].dtypes} == {F64, F32}
