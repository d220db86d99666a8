"""What every product promises besides accuracy: its inputs unchanged (views, their margins included),
``out`` written and returned, the same bits from the same call where the docs say so, and bad input (an
overwrite right on a read-only operand) refused before any work with ``out`` untouched."""

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from gpu import ozaki2
from gpu import strassen as strassen_pkg
from tests.property.strategies import METHODS, as_view, operands, profiled

CASES = [(name, dtype) for name, method in METHODS.items() for dtype in method.dtypes]


def _call(method, A, B, options, out, C0):
    if C0 is not None:
        out[...] = C0
    return method.call(A, B, out=out, **options)


@pytest.mark.parametrize("name,dtype", CASES, ids=[f"{n}-{d}" for n, d in CASES])
@profiled()
@given(data=st.data())
def test_inputs_are_kept_out_is_honoured_and_repeats_give_the_same_bits(name, dtype, data):
    method = METHODS[name]
    shape = data.draw(method.shapes, label="shape")
    m, _, n = shape
    A, B = data.draw(operands(shape, dtype), label="operands")
    options = data.draw(method.options(shape, dtype), label="options")
    a0, b0 = A.base.copy(), B.base.copy()
    C0 = np.linspace(-1, 1, m * n).reshape(m, n).astype(dtype) if options.get("beta") else None
    first = _call(method, A.view, B.view, options, np.full((m, n), np.nan, dtype=dtype), C0)
    if first is None:                                 # a refusal the method documents (Ozaki II's "auto")
        return
    assert np.array_equal(A.base, a0, equal_nan=True) and np.array_equal(B.base, b0, equal_nan=True), \
        "an input (or the margin of its view) changed"
    layout = data.draw(st.sampled_from(["C", "slice"]) if name != "ozaki2" else st.just("C"), label="out layout")
    target = as_view(np.full((m, n), np.nan, dtype=dtype), layout)
    got = _call(method, A.view, B.view, options, target.view, C0)
    assert got is target.view, "the result is not the out it was given"
    size = np.abs(A.view.astype(np.float64)) @ np.abs(B.view.astype(np.float64))
    if C0 is not None:
        size = size + np.abs(C0)
    assert np.all(np.abs(got - first) <= 2.0**-10 * size), "out does not hold the product"
    if layout == "slice":
        margin = np.ones(target.base.shape, dtype=bool)
        margin[1:1 + m, 2:2 + n] = False
        assert np.isnan(target.base[margin]).all(), "out's margin (outside the view) was written"
    if method.deterministic and options.get("deterministic", True):
        again = as_view(np.full((m, n), np.nan, dtype=dtype), layout)       # one layout: the same BLAS calls
        assert np.array_equal(_call(method, A.view, B.view, options, again.view, C0), got), \
            "the same call gave other bits"


@profiled()
@given(which=st.sampled_from(["A", "B"]), method=st.sampled_from(["strassen", "ozaki2"]),
       mapped=st.booleans(), seed=st.integers(0, 2**16))
@example(which="A", method="strassen", mapped=True, seed=0)         # np.load(mmap_mode="r") with overwrite_a=True
def test_an_overwrite_right_on_a_read_only_operand_is_refused_before_any_work(tmp_path_factory, which, method,
                                                                             mapped, seed):
    """Strassen failed 14 frames deep on an internal operand after writing all of out."""
    rng = np.random.default_rng(seed)
    A, B = rng.uniform(-1, 1, (64, 64)), rng.uniform(-1, 1, (64, 64))
    X = A if which == "A" else B
    if mapped:
        path = tmp_path_factory.mktemp("ro") / "x.npy"
        np.save(path, X)
        X = np.load(path, mmap_mode="r")
    else:
        X = X.copy()
        X.flags.writeable = False
    A, B = (X, B) if which == "A" else (A, X)
    out = np.full((64, 64), np.nan)
    flag = {f"overwrite_{which.lower()}": True}
    call = (lambda: strassen_pkg.matmul(A, B, level=2, out=out, backend="numpy", **flag)) if method == "strassen" \
        else (lambda: ozaki2.matmul(A, B, moduli=12, out=out, backend="numpy", **flag))
    with pytest.raises(ValueError, match=rf"^{which} is read-only.*overwrite_{which.lower()}=False"):
        call()
    assert np.isnan(out).all(), "work started before the refusal"
