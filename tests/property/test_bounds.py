"""Every public product within its documented error bound of the exact product (``bounds.py``), on operands
drawn by ``strategies.py``: wide exponent ranges, phi up to 4, odd shapes, views, float32 where taken."""

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from accuracy.reference import exact_matmul
from gpu import splitk
from tests.property.bounds import splitk as splitk_bound
from tests.property.strategies import F32, F64, METHODS, as_view, operands, profiled

CASES = [(name, dtype) for name, method in METHODS.items() for dtype in method.dtypes]


def start(data, method, shape, dtype, options):
    """(C0, out): the C that beta scales (split-K) and the ``out`` the call gets (None where it gets none)."""
    m, _, n = shape
    if options.get("beta"):
        C0 = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1))).uniform(-1, 1, (m, n)).astype(dtype)
        return C0, C0.copy()
    return None, None


def within(C, want, allowed):
    """Which entries meet the bound (all of them where the exact result is beyond the range: ``allowed``
    infinite); NaN never does."""
    err = np.abs(C.astype(np.float64) - want)
    return (err <= allowed) | np.isinf(allowed)


@pytest.mark.parametrize("name,dtype", CASES, ids=[f"{n}-{d}" for n, d in CASES])
@profiled()
@given(data=st.data())
def test_every_method_meets_its_documented_bound(name, dtype, data):
    method = METHODS[name]
    shape = data.draw(method.shapes, label="shape")
    A, B = data.draw(operands(shape, dtype), label="operands")
    options = data.draw(method.options(shape, dtype), label="options")
    C0, out = start(data, method, shape, dtype, options)
    C = method.call(A.view, B.view, out=out, **options)
    if C is None:                                     # a refusal the method documents, before writing out
        assert out is None or np.array_equal(out, C0)
        return
    assert C.shape == (shape[0], shape[2]) and C.dtype == dtype
    exact = exact_matmul(A.view, B.view, backend="numpy")
    want, allowed = method.bound(A.view, B.view, C, exact, options, C0)
    ok = within(C, want, allowed)
    assert ok.all(), f"{(~ok).sum()} entries beyond the bound, worst {np.nanmax(np.abs(C - want) / allowed):.3g}x"


@profiled(2)
@given(dtype=st.sampled_from([F32, F64]), seed=st.integers(0, 2**32 - 1), m=st.integers(1, 9),
       n=st.integers(1, 9), alpha_exp=st.integers(-160, 160), beta_exp=st.one_of(st.none(), st.integers(-160, 160)),
       deterministic=st.booleans())
@example(dtype=F32, seed=1, m=8, n=6, alpha_exp=129, beta_exp=None, deterministic=True)      # alpha = 2**129 > FLT_MAX
@example(dtype=F32, seed=2, m=4, n=4, alpha_exp=-153, beta_exp=130, deterministic=False)    # alpha vanishes in float32
def test_splitk_takes_any_finite_alpha_and_beta_where_the_result_fits(dtype, seed, m, n, alpha_exp, beta_exp,
                                                                      deterministic):
    """alpha = 1e39 with float32 operands gave NaN and infinity where alpha A B fits in float32: the scalars
    are applied in float64. The operands are scaled so that |alpha||A||B| and |beta||C| are about 2**10 where
    their range allows."""
    rng = np.random.default_rng(seed)
    k = splitk.MIN_K + int(rng.integers(0, 300))
    top = 40 if dtype == F32 else 400
    a_exp, b_exp = np.clip(10 - alpha_exp, -top, top) // 2 - 6, np.clip(10 - alpha_exp, -top, top) // 2 - 6
    A = as_view(np.ldexp(rng.uniform(-1, 1, (m, k)), a_exp).astype(dtype), "C")
    B = as_view(np.ldexp(rng.uniform(-1, 1, (k, n)), b_exp).astype(dtype), "T")
    alpha, beta = 2.0**alpha_exp * 1.5, 0.0 if beta_exp is None else -(2.0**beta_exp)
    c_exp = int(np.clip(10 - (beta_exp or 0), -top, top))
    C0 = np.ldexp(rng.uniform(-1, 1, (m, n)), c_exp).astype(dtype) if beta else None
    options = {"alpha": alpha, "beta": beta, "deterministic": deterministic}
    C = splitk.matmul(A.view, B.view, out=None if C0 is None else C0.copy(), backend="numpy", **options)
    exact = exact_matmul(A.view, B.view, backend="numpy")
    want, allowed = splitk_bound(A.view, B.view, C, exact, options, C0)
    assert np.isfinite(C).all() or not np.isfinite(allowed).all()
    assert within(C, want, allowed).all()


def _ozaki_finding(case: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The operands of Ozaki scheme I's findings: a tiny entry of A meeting a huge one of B (the exact product 1,
    returned as 0 with 6 FP32 slices), 153 x 300 x 1 with entry exponents of +-300 (40 of 153 rows came out 0),
    and the papers' phi = 4 inputs (the target missed by 10^2-10^4)."""
    rng = np.random.default_rng(seed)
    if case == "tiny-meets-huge":
        return np.array([[1.0, 2.0**-200]]), np.array([[2.0**-200], [2.0**200]])
    if case == "exponents-300":
        return (np.ldexp(rng.uniform(-1, 1, (153, 300)), rng.integers(-300, 301, (153, 300))),
                np.ldexp(rng.uniform(-1, 1, (300, 1)), rng.integers(-300, 301, (300, 1))))
    from accuracy.generate import phi_matrix
    return phi_matrix(128, 128, 4.0, (seed, 0)), phi_matrix(128, 128, 4.0, (seed, 1))


@pytest.mark.parametrize("target", ["dgemm", "sgemm"])
@pytest.mark.parametrize("case", ["tiny-meets-huge", "exponents-300", "phi-4"])
@profiled(0.25)
@given(seed=st.integers(0, 2**16))
@example(seed=0)
def test_ozaki_findings_meet_the_target_or_are_refused(case, target, seed):
    """Ozaki scheme I on the inputs where its default call returned wrong values with no error: each result
    meets t |A||B| + 2**-53 |C|, or the call refuses before any work as its docs say it may."""
    A, B = _ozaki_finding(case, seed)
    method, options = METHODS["ozaki"], {"target": target}
    C = method.call(A, B, **options)
    if C is None:
        return
    want, allowed = method.bound(A, B, C, exact_matmul(A, B, backend="numpy"), options)
    assert within(C, want, allowed).all()
