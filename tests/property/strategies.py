"""Shared strategies and the registry of methods under test (see ``conftest.py`` for the profiles).

A **case** is what one example multiplies: operands drawn by :func:`operands` (the papers' phi generator,
rows of A and columns of B scaled by powers of two, odd shapes, views), the options of one call, and the
method. Each :class:`Method` says how to call it, which dtypes and shapes it takes, how its options are
drawn, and its documented error bound (``bounds.py``). Adding a method is a few lines, e.g. Ozaki
scheme I with a target (with the bound of the form its module documents; scheme II's is shown)::

    METHODS["ozaki"] = Method(
        "ozaki", lambda A, B, out=None, **o: ozaki.matmul(A, B, out=out, backend="numpy", **o), (F64,),
        small_shapes(48), lambda shape, dtype: st.fixed_dictionaries({"target": st.sampled_from(["dgemm"])}),
        bounds.ozaki2)
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from accuracy.generate import phi_matrix
from gpu import outofcore, ozaki, ozaki2, splitk
from gpu import strassen as strassen_pkg
from gpu.backend import get_backend
from gpu.strassen.api import deepest_level
from tests.property import bounds

_SLOW = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
#: Examples per test of each profile (see ``conftest.py``).
PROFILES = {"ci": 20, "long": 400}
for _name, _examples in PROFILES.items():
    settings.register_profile(f"gemmlab-{_name}", max_examples=_examples, deadline=None, suppress_health_check=_SLOW)


def profile_name() -> str:
    """The profile ``HYPOTHESIS_PROFILE`` names (``ci`` when unset); ValueError for any other name."""
    name = os.environ.get("HYPOTHESIS_PROFILE", "ci")
    if name not in PROFILES:
        raise ValueError(f"HYPOTHESIS_PROFILE must be one of {sorted(PROFILES)}, got {name!r}")
    return name


def profiled(share: float = 1.0) -> settings:
    """The settings of the chosen profile for one test, with ``share`` of its examples (at least one): the
    slow tests (the Dask product) take fewer."""
    base = settings.get_profile(f"gemmlab-{profile_name()}")
    return settings(base, max_examples=max(1, round(base.max_examples * share)))


F64, F32 = np.dtype(np.float64), np.dtype(np.float32)
HOST = get_backend("numpy")
#: Largest power of two a row of A or a column of B is scaled by (either way), per dtype: float64 takes
#: 2**+-300 (products up to 2**626 with phi = 4); float32's range is 2**+-126, so 2**+-20 there.
SCALE = {F64: 300, F32: 20}
#: Sides that catch fringes and odd blocks: 1, primes, powers of two and their neighbours.
ODD_SIDES = (1, 2, 3, 5, 7, 11, 13, 16, 17, 31, 32, 33)
LAYOUTS = ("C", "F", "T", "slice", "slice-T")


@dataclass(frozen=True)
class Operand:
    """A matrix as a method receives it (``view``) and the array that holds it (``base``: unchanged by the
    call, the margins of a slice included)."""

    view: np.ndarray
    base: np.ndarray


def as_view(X: np.ndarray, layout: str) -> Operand:
    """X (C order) as ``layout``: itself, F order, a transposed C array, a slice of a larger array (a
    leading dimension beyond the width), or a transposed slice; the margins hold NaN, which the method
    must not read."""
    m, n = X.shape
    if layout == "C":
        return Operand(X, X)
    if layout == "F":
        F = np.asfortranarray(X)
        return Operand(F, F)
    if layout == "T":
        T = np.ascontiguousarray(X.T)
        return Operand(T.T, T)
    if layout == "slice":
        big = np.full((m + 2, n + 3), np.nan, dtype=X.dtype)
        big[1:1 + m, 2:2 + n] = X
        return Operand(big[1:1 + m, 2:2 + n], big)
    big = np.full((n + 3, m + 2), np.nan, dtype=X.dtype)
    big[2:2 + n, 1:1 + m] = X.T
    return Operand(big[2:2 + n, 1:1 + m].T, big)


@st.composite
def matrix(draw, m: int, n: int, dtype: np.dtype, scale_rows: bool) -> np.ndarray:
    """phi_matrix (phi in 0..4) with its rows (``scale_rows``) or columns scaled by 2**e, |e| <= SCALE."""
    phi = draw(st.sampled_from([0.0, 0.5, 1.0, 2.0, 4.0]))
    X = phi_matrix(m, n, phi, draw(st.integers(0, 2**32 - 1)))
    top = SCALE[np.dtype(dtype)]
    wide = draw(st.booleans())
    exps = np.array(draw(st.lists(st.integers(-top, top) if wide else st.just(0), min_size=m if scale_rows else n,
                                  max_size=m if scale_rows else n)))
    X = np.ldexp(X, exps[:, None] if scale_rows else exps[None, :])
    return X.astype(dtype)


@st.composite
def operands(draw, shape: tuple[int, int, int], dtype: np.dtype) -> tuple[Operand, Operand]:
    """A (m x k) and B (k x n) of ``dtype`` in drawn layouts (see :func:`matrix` and :func:`as_view`)."""
    m, k, n = shape
    A = draw(matrix(m, k, dtype, True))
    B = draw(matrix(k, n, dtype, False))
    return as_view(A, draw(st.sampled_from(LAYOUTS))), as_view(B, draw(st.sampled_from(LAYOUTS)))


def small_shapes(top: int = 40) -> st.SearchStrategy[tuple[int, int, int]]:
    """(m, k, n): odd sides, or any side up to ``top``."""
    side = st.one_of(st.sampled_from(ODD_SIDES), st.integers(1, top))
    return st.tuples(side, side, side)


def strassen_shapes() -> st.SearchStrategy[tuple[int, int, int]]:
    """Shapes a level can run on (bottom products of 16 at least): 32..140, odd and rectangular."""
    side = st.one_of(st.sampled_from((32, 33, 47, 64, 65, 97, 128, 131)), st.integers(32, 140))
    return st.tuples(side, side, side)


def splitk_shapes() -> st.SearchStrategy[tuple[int, int, int]]:
    """Split-K's shapes: a tiny output, k from its least (4096) up, primes and odd sizes included."""
    tiny = st.one_of(st.sampled_from((1, 2, 3, 7, 16, 17)), st.integers(1, 24))
    k = st.one_of(st.sampled_from((splitk.MIN_K, splitk.MIN_K + 1, 4099, 6151, 8192)),
                  st.integers(splitk.MIN_K, 3 * splitk.MIN_K))
    return st.tuples(tiny, k, tiny)


@dataclass(frozen=True)
class Method:
    """One public call under test: ``run(A, B, out=None, **options)`` returns C; its dtypes, shapes
    (a strategy of (m, k, n)), options (a strategy of dicts, given the shape), its error bound
    (``bound(A, B, C, exact, options)``: the largest |C - AB| allowed per entry, float64), and whether its
    docs promise the same bits for the same call (``deterministic``)."""

    name: str
    run: Callable[..., np.ndarray]
    dtypes: tuple[np.dtype, ...]
    shapes: st.SearchStrategy[tuple[int, int, int]]
    options: Callable[[tuple[int, int, int], np.dtype], st.SearchStrategy[dict[str, Any]]]
    bound: Callable[..., np.ndarray]
    deterministic: bool = True
    refuses: str | None = None

    def call(self, A: np.ndarray, B: np.ndarray, **options: Any) -> np.ndarray | None:
        """``run``, or None where the method refuses these operands as its docs say it may (``refuses``: a
        pattern of its ValueError; Ozaki II's ``moduli="auto"`` when no count meets the target)."""
        try:
            return self.run(A, B, **options)
        except ValueError as exc:
            if self.refuses is not None and re.search(self.refuses, str(exc)):
                return None
            raise


def _gemm(A, B, out=None, **_):
    C = np.empty((A.shape[0], B.shape[1]), dtype=A.dtype) if out is None else out
    HOST.gemm(A, B, C)
    return C


def _no_options(shape, dtype):
    return st.just({})


def _strassen_options(shape, dtype):
    m, k, n = shape
    fringe = st.sampled_from(["peel", "pad"])
    return fringe.flatmap(lambda f: st.fixed_dictionaries({
        "fringe": st.just(f),
        "level": st.integers(1, max(1, deepest_level(m, k, n, f))),
        "schedule": st.sampled_from(["rum", "winograd", "lai", "otsuka", "rum2"]),
        "flat": st.booleans(),
        "check_finite": st.booleans(),
    })).map(_strassen_consistent)


def _strassen_consistent(options: dict[str, Any]) -> dict[str, Any]:
    """Flat needs a schedule of sums, products, outputs: winograd (or lai7)."""
    if options["flat"]:
        options = {**options, "schedule": "winograd"}
    return options


def _splitk_options(shape, dtype):
    m, k, n = shape
    return st.fixed_dictionaries({
        "deterministic": st.booleans(),
        "chunks": st.one_of(st.just("auto"), st.integers(1, 64)),
        "alpha": st.sampled_from([1.0, -1.0, 0.5, 3.0, -2.0**-40, 2.0**40]),
        "beta": st.sampled_from([0.0, 0.0, 1.0, -0.75]),
    })


def _ozaki2_options(shape, dtype):
    return st.one_of(
        st.fixed_dictionaries({"scaling": st.sampled_from(ozaki2.AUTO_SCALINGS), "verdict": st.just("host"),
                               "target": st.sampled_from(["dgemm", "sgemm", 1e-10])}),
        st.fixed_dictionaries({"scaling": st.sampled_from(ozaki2.SCALINGS), "moduli": st.integers(6, 20)}))


def _ozaki_options(shape, dtype):
    return st.fixed_dictionaries({"target": st.sampled_from(["dgemm", "sgemm", 1e-12]),
                                  "slice_format": st.sampled_from(["fp32", "int8", "bf16"])})


def _outofcore_options(shape, dtype):
    m, k, n = shape
    return st.fixed_dictionaries({
        "block": st.one_of(st.none(), st.integers(1, max(1, max(m, n))), st.tuples(st.integers(1, m),
                                                                                  st.integers(1, n))),
        "panel": st.one_of(st.none(), st.integers(1, max(1, k))),
        "buffers": st.sampled_from([2, 3]),
        "c_buffers": st.sampled_from([1, 2]),
    })


def _splitk_run(A, B, out=None, beta=0.0, **options):
    return splitk.matmul(A, B, out=out, beta=beta, backend="numpy", **options)


METHODS: dict[str, Method] = {
    "gemm": Method("gemm", _gemm, (F64, F32), small_shapes(), _no_options, bounds.gemm),
    "strassen": Method("strassen", lambda A, B, out=None, **o: strassen_pkg.matmul(A, B, out=out, backend="numpy",
                                                                                  **o),
                       (F64, F32), strassen_shapes(), _strassen_options, bounds.strassen),
    "splitk": Method("splitk", _splitk_run, (F64, F32), splitk_shapes(), _splitk_options, bounds.splitk),
    "ozaki2": Method("ozaki2", lambda A, B, out=None, **o: ozaki2.matmul(A, B, out=out, backend="numpy", **o),
                     (F64,), small_shapes(48), _ozaki2_options, bounds.ozaki2,
                     refuses=r"^no modulus count up to \d+ meets target .* pass moduli="),
    "ozaki": Method("ozaki", lambda A, B, out=None, **o: ozaki.matmul(A, B, out=out, backend="numpy", **o),
                    (F64,), small_shapes(48), _ozaki_options, bounds.ozaki,
                    refuses=r"^cannot meet target .* with at most \d+ slices"),
    "outofcore": Method("outofcore", lambda A, B, out=None, **o: outofcore.matmul(A, B, out=out, backend="numpy",
                                                                                 **o),
                        (F64, F32), small_shapes(), _outofcore_options, bounds.gemm),
}
