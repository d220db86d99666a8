"""One audit point: the papers' inputs, their exact product, and every method's error report.

An audit point is (n, phi, seed): A and B are n x n :func:`phi_matrix` inputs
drawn from the seeds (seed, 0) and (seed, 1), generated on the host so that
every backend audits the same numbers. The reference is computed once per
point with :func:`exact_matmul` and shared by the methods.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from time import perf_counter
from typing import Any

import numpy as np

from gpu.backend import Backend

from .generate import phi_matrix
from .methods import Method
from .metrics import ErrorReport, error_report
from .reference import exact_matmul


def audit_inputs(n: int, phi: float, seed: int, shape: tuple[int, int, int] | None = None, complex: bool = False
                 ) -> tuple[np.ndarray, np.ndarray]:
    """A and B of an audit point, on the host: n x n each, or m x k and k x n for ``shape`` (m, k, n); with
    ``complex``, complex128 whose real parts are the real point's and whose imaginary parts are drawn likewise
    from the seeds (seed, 2) and (seed, 3)."""
    m, k, n = shape or (n, n, n)
    A, B = phi_matrix(m, k, phi, (seed, 0)), phi_matrix(k, n, phi, (seed, 1))
    if complex:
        A, B = A + 1j * phi_matrix(m, k, phi, (seed, 2)), B + 1j * phi_matrix(k, n, phi, (seed, 3))
    return A, B


@dataclass(frozen=True)
class Audited:
    """A method's report at one point, with the seconds it and the reference took (not benchmarks)."""

    report: ErrorReport
    seconds: float
    reference_seconds: float


def _timed(be: Backend, fn: Callable[[], Any]) -> tuple[Any, float]:
    start = perf_counter()
    out = fn()
    be.synchronize()
    return out, perf_counter() - start


def complex_inputs(methods: Sequence[Method]) -> bool:
    """Whether ``methods`` take complex inputs; ValueError where real and complex ones are mixed (they take
    different inputs)."""
    kinds = {m.complex for m in methods}
    if len(kinds) > 1:
        raise ValueError("complex methods (" + ", ".join(m.name for m in methods if m.complex) + ") and real ones "
                         "take different inputs; audit them in separate runs")
    return kinds == {True}


def audit_point(be: Backend, methods: Sequence[Method], n: int, phi: float, seed: int,
                shape: tuple[int, int, int] | None = None) -> dict[str, Audited]:
    """Every method's error at (n, phi, seed) against the correctly rounded product; ``shape``
    (m, k, n): a rectangular product instead of n x n x n (split-K's tiny outputs). Complex methods take
    complex inputs (each part's error in the report, :func:`accuracy.metrics.as_real`); one point audits real
    or complex methods, not both (ValueError before any work)."""
    a, b = audit_inputs(n, phi, seed, shape, complex=complex_inputs(methods))
    for m in methods:
        m.check_shape(a.shape[0], a.shape[1], b.shape[1])
    A, B = be.asarray(a), be.asarray(b)
    C_ref, ref_seconds = _timed(be, partial(exact_matmul, A, B, backend=be))
    out = {}
    for m in methods:
        C, seconds = _timed(be, partial(m.run, be, A, B))
        out[m.name] = Audited(error_report(C, C_ref, A, B), seconds, ref_seconds)
    return out
