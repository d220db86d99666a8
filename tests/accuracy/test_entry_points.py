"""Robustness of every public entry point, by property (hypothesis), on NumPy and, marked ``gpu``, CuPy.

Operands are drawn as users pass them: dtypes, shapes with 0 and 1, C and F order, transposes,
strided views and blocks of larger arrays, lists, ``np.matrix``, masked arrays, one NaN or
infinity; with ``out`` fresh, read-only, of the wrong shape or aliasing A, and overwrite flags.
Every call must either equal the exact reference within the method's documented bound, or raise
one of the exceptions its documentation names (TypeError, ValueError) before any work, and the
inputs must be unchanged (but for an input the caller let the method overwrite, when it ran).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from accuracy.metrics import error_report
from accuracy.reference import exact_matmul, mpfr_matmul
from gpu import ozaki
from gpu.strassen import matmul as strassen
from gpu.strassen.api import deepest_level

CONTAINERS = ("array", "array", "array", "matrix", "list", "masked")
LAYOUTS = ("C", "F", "T", "strided", "block")
NONFINITE = (None, None, None, np.nan, np.inf, -np.inf)
SIZES = st.one_of(st.sampled_from([0, 1, 2, 16, 17, 32, 33]), st.integers(0, 70))
#: Dtypes whose values float64 holds exactly (what exact_matmul takes).
EXACT = {"float16", "float32", "float64", "int8", "int16", "int32", "uint8", "uint16", "uint32"}
SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@st.composite
def operand(draw, rows: int, cols: int, dtypes: tuple[str, ...]) -> dict:
    values = np.random.default_rng(draw(st.integers(0, 2**16))).uniform(-1, 1, (rows, cols))
    bad = draw(st.sampled_from(NONFINITE)) if rows and cols else None
    if bad is not None:
        values[draw(st.integers(0, rows - 1)), draw(st.integers(0, cols - 1))] = bad
    return {"values": values, "dtype": draw(st.sampled_from(dtypes)), "layout": draw(st.sampled_from(LAYOUTS)),
            "container": draw(st.sampled_from(CONTAINERS))}


@st.composite
def product(draw, dtypes: tuple[str, ...]) -> tuple[dict, dict]:
    m, k, n = draw(SIZES), draw(SIZES), draw(SIZES)
    return draw(operand(m, k, dtypes)), draw(operand(k, n, dtypes))


def cast(op: dict) -> np.ndarray:
    """The values in the operand's dtype (NaN and infinity cast to an integer dtype as NumPy casts them, quietly:
    those operands are refused for their dtype)."""
    with np.errstate(invalid="ignore"):
        return op["values"].astype(op["dtype"])


def build(backend, op: dict):
    """The operand as the caller passes it."""
    v = cast(op)
    if op["container"] == "list":
        return v.tolist()
    if op["container"] == "matrix":
        return np.asmatrix(v)
    if op["container"] == "masked":
        return np.ma.masked_array(v, mask=np.zeros(v.shape, bool))
    xp = backend.xp
    layout = op["layout"]
    if layout == "F":
        return xp.asfortranarray(xp.asarray(v))
    if layout == "T":
        return xp.ascontiguousarray(xp.asarray(v.T)).T
    if layout in ("strided", "block"):
        big = xp.zeros((2 * v.shape[0] + 3, 3 * v.shape[1] + 5), dtype=v.dtype)
        r, c = v.shape
        view = big[1:1 + 2 * r:2, 2:2 + 3 * c:3] if layout == "strided" else big[1:1 + r, 2:2 + c]
        view[...] = xp.asarray(v)
        return view
    return xp.asarray(v)


def host(x) -> np.ndarray:
    if isinstance(x, np.ma.MaskedArray):
        return np.array(x.data)
    return x.get() if hasattr(x, "get") and not isinstance(x, np.ndarray) else np.array(x)


def dtype_of(op: dict) -> np.dtype:
    """The dtype the method sees (a list converts as NumPy converts it: Python floats and ints)."""
    if op["container"] == "list":
        return np.array(cast(op).tolist() or [[0.0]]).dtype
    return np.dtype(op["dtype"])


def seen(op: dict) -> np.ndarray:
    """The values the method sees, in float64 (rounded to the drawn dtype first)."""
    with np.errstate(invalid="ignore"):
        return op["values"].astype(op["dtype"]).astype(np.float64)


def finite(op: dict) -> bool:
    """Whether every value the method sees is finite (a NaN drawn into an int32 operand is not NaN)."""
    return bool(np.isfinite(seen(op)).all())


def flat_list(op: dict) -> bool:
    """A list of no rows is ``[]``, which NumPy reads as 1-D: the methods refuse it (not 2-D)."""
    return op["container"] == "list" and op["values"].shape[0] == 0


def common_problems(a: dict, b: dict) -> set[type]:
    """What every entry point refuses: masked arrays (TypeError) and lists that are not 2-D (ValueError)."""
    out = {TypeError} if "masked" in (a["container"], b["container"]) else set()
    return out | ({ValueError} if flat_list(a) or flat_list(b) else set())


def outcome(call, problems: set[type], inputs: dict[str, tuple[object, bool]]):
    """Run ``call``; it must raise one of ``problems`` (if any) and leave the inputs alone.

    ``inputs``: name -> (object, may change if the call succeeds). Returns the result, or None
    after the expected refusal."""
    before = {name: host(x) for name, (x, _) in inputs.items()}
    try:
        result = call()
    except (TypeError, ValueError) as exc:
        assert problems, f"refused a valid call: {type(exc).__name__}: {exc}"
        assert type(exc) in problems or any(isinstance(exc, p) for p in problems), f"{type(exc)} not in {problems}"
        result = None
    else:
        assert not problems, f"accepted a call it must refuse ({problems})"
    for name, (x, may_change) in inputs.items():
        if result is None or not may_change:
            assert np.array_equal(host(x), before[name], equal_nan=True), f"{name} was changed"
    return result


def make_out(backend, kind: str, shape: tuple[int, int], dtype, A):
    """``out`` of a kind: None, fresh, read-only, the wrong shape, F order, or memory of A."""
    xp = backend.xp
    if kind == "none":
        return None, set()
    if kind == "alias" and held_array(A, backend) and A.shape[0] >= shape[0] and A.shape[1] >= shape[1] \
            and A.dtype == dtype and shape[0] * shape[1]:
        return A[:shape[0], :shape[1]], {ValueError}
    out = xp.zeros(shape, dtype=dtype)
    if kind == "readonly" and out.size and isinstance(out, np.ndarray):
        out.flags.writeable = False
        return out, {ValueError}
    if kind == "wrong":
        return xp.zeros((shape[0] + 1, shape[1]), dtype=dtype), {ValueError}
    if kind == "F" and shape[0] > 1 and shape[1] > 1:
        return xp.asfortranarray(out), {ValueError}
    return out, set()


def held_array(A, backend) -> bool:
    return type(A) is backend.xp.ndarray


def within(got: np.ndarray, want: np.ndarray, bound) -> None:
    err = np.abs(got.astype(np.float64) - want)
    assert np.all(err <= bound), f"error {err.max():.3e} above the bound"


STRASSEN = dict(level=st.integers(0, 3), schedule=st.sampled_from(["rum", "lai", "otsuka", "winograd"]),
                fringe=st.sampled_from(["peel", "pad"]), check_finite=st.booleans(), overwrite=st.booleans(),
                out=st.sampled_from(["none", "none", "fresh", "readonly", "wrong", "alias"]))


@pytest.mark.filterwarnings("ignore:invalid value encountered in matmul:RuntimeWarning")
@settings(max_examples=300, **SETTINGS)
@given(ab=product(("float64", "float64", "float32", "int32")), **STRASSEN)
def test_strassen_matmul(backend, ab, level, schedule, fringe, check_finite, overwrite, out):
    a, b = ab
    A, B = build(backend, a), build(backend, b)
    (m, k), n = a["values"].shape, b["values"].shape[1]
    problems = common_problems(a, b)
    if dtype_of(a) != dtype_of(b) or dtype_of(a).kind != "f" or dtype_of(a).itemsize < 4:
        problems.add(TypeError)
    if any(held_array(X, backend) and op["layout"] == "strided" and min(op["values"].shape) >= 2
           for X, op in ((A, a), (B, b))):
        problems.add(ValueError)          # BLAS needs unit stride along one axis (a single line has one)
    if check_finite and not (finite(a) and finite(b)):
        problems.add(ValueError)
    if level > deepest_level(m, k, n, fringe) and min(m, k, n) > 0:
        problems.add(ValueError)
    o, o_problems = make_out(backend, out, (m, n), dtype_of(a), A)
    problems |= o_problems
    C = outcome(lambda: strassen(A, B, level=level, schedule=schedule, fringe=fringe, check_finite=check_finite,
                                 overwrite_a=overwrite, overwrite_b=overwrite, out=o, backend=backend),
                problems, {"A": (A, overwrite), "B": (B, overwrite)})
    if C is None:
        return
    assert o is None or C is o
    got = host(C)
    assert got.shape == (m, n) and got.dtype == dtype_of(a)
    if finite(a) and finite(b):
        want = exact_matmul(seen(a), seen(b), backend="numpy")
        side = -(-max(m, k, n, 1) // 2**level) * 2**level
        within(got, want, np.finfo(dtype_of(a)).eps * side * 12**level * 4 + 0.0)


OZAKI = dict(fmt=st.sampled_from(["fp32", "int8", "fp16"]), check_finite=st.booleans(), overwrite=st.booleans(),
             out=st.sampled_from(["none", "none", "fresh", "readonly", "wrong", "alias", "F"]))


@settings(max_examples=200, **SETTINGS)
@given(ab=product(("float64", "float64", "float64", "float32")), **OZAKI)
def test_ozaki_matmul(backend, ab, fmt, check_finite, overwrite, out):
    a, b = ab
    A, B = build(backend, a), build(backend, b)
    m, n = a["values"].shape[0], b["values"].shape[1]
    problems = common_problems(a, b)
    if dtype_of(a) != np.float64 or dtype_of(b) != np.float64:
        problems.add(TypeError)
    o, o_problems = make_out(backend, out, (m, n), np.float64, A)
    problems |= {ValueError} if o_problems else set()        # an F-order out: Ozaki writes whole rows
    if check_finite and not (finite(a) and finite(b)) and m and n:
        problems.add(ValueError)
    C = outcome(lambda: ozaki.matmul(A, B, target="dgemm", slice_format=fmt, check_finite=check_finite,
                                     overwrite_a=overwrite, overwrite_b=overwrite, out=o, backend=backend),
                problems, {"A": (A, overwrite), "B": (B, overwrite)})
    if C is None:
        return
    got = host(C)
    va, vb = seen(a), seen(b)
    bad_rows, bad_cols = ~np.isfinite(va).all(axis=1), ~np.isfinite(vb).all(axis=0)
    with np.errstate(invalid="ignore", over="ignore"):
        ieee = va @ vb
    assert np.array_equal(got[bad_rows], ieee[bad_rows], equal_nan=True)    # non-finite lines: the GEMM's values
    assert np.array_equal(got[:, bad_cols], ieee[:, bad_cols], equal_nan=True)
    keep = np.ix_(~bad_rows, ~bad_cols)
    finite_a, finite_b = va[~bad_rows], vb[:, ~bad_cols]
    want = exact_matmul(finite_a, finite_b, backend="numpy")
    slices = ozaki.configure(finite_a, finite_b, target="dgemm", slice_format=fmt, backend="numpy").slices \
        if want.size and finite_a.shape[1] else 1
    within(got[keep], want, (slices + 4) * 2.0**-53 * (np.abs(finite_a) @ np.abs(finite_b)))


@settings(max_examples=150, **SETTINGS)
@given(ab=product(("float64", "float32", "int32")), check_finite=st.booleans())
def test_exact_matmul(backend, ab, check_finite):
    """Real operands against the gmpy2 oracle (complex ones: tests/accuracy/test_complex_reference.py)."""
    a, b = ab
    assume(a["values"].size * b["values"].shape[1] <= 40_000)     # the gmpy2 oracle loops in Python
    A, B = build(backend, a), build(backend, b)
    problems = common_problems(a, b)
    if {dtype_of(a).name, dtype_of(b).name} - EXACT:
        problems.add(TypeError)                    # int64 (lists of ints): float64 may not hold them
    if check_finite and not (finite(a) and finite(b)):
        problems.add(ValueError)
    C = outcome(lambda: exact_matmul(A, B, check_finite=check_finite, backend=backend), problems,
                {"A": (A, False), "B": (B, False)})
    if C is not None:
        want = mpfr_matmul(seen(a), seen(b), check_finite=False)
        got = host(C)
        assert np.array_equal(got, want, equal_nan=True)
        number = ~np.isnan(want)
        assert np.array_equal(np.signbit(got[number]), np.signbit(want[number])), "the sign of a zero differs"


@settings(max_examples=100, **SETTINGS)
@given(ab=product(("float64", "float32")), scale=st.floats(-1e-10, 1e-10))
def test_error_report(backend, ab, scale):
    a, _ = ab
    R = a["values"][np.isfinite(a["values"]).all(axis=1)]
    C = R * (1 + scale)
    wrapped = {"array": lambda x: backend.xp.asarray(x), "matrix": np.asmatrix, "list": lambda x: x.tolist(),
               "masked": lambda x: np.ma.masked_array(x)}[a["container"]]
    problems = {TypeError} if a["container"] == "masked" else set()
    if a["container"] == "list" and R.shape[0] == 0:
        problems.add(ValueError)                                    # [] is 1-D: not the reference's shape
    report = outcome(lambda: error_report(wrapped(C), backend.xp.asarray(R)), problems, {})
    if report is not None and R.size and np.all(R != 0):
        assert report.max_rel <= abs(scale) * (1 + 1e-6) + 2.0**-52
        assert report.nonfinite == 0 and report.entries == R.size
