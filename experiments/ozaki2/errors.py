"""Scheme II's benchmark errors: max relative error of every method per product and phi.

Rows go to ``ozaki2-error``, one per (method, m, k, n, phi, seed, rows), stored as the audit stores
them (:func:`experiments.audit.bench.record`: value ``max_rel``, the whole error report in the meta)
with the ``inputs`` they were drawn as. Every method computes the whole product, and the error is
taken on sampled rows where m is above :data:`experiments.ozaki.bench.FULL_ROWS_MAX` (the same rows
for every method, against ``exact_matmul`` of those rows): unlike scheme I, scheme II's accurate
scaling bounds each column of B by every row of A, so its rows cannot be computed apart, and
cuBLAS's emulation may scale by the whole operands too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from functools import partial
from time import perf_counter
from typing import Any

from accuracy.audit import Audited
from accuracy.methods import get_method
from accuracy.metrics import error_report
from accuracy.reference import exact_matmul
from gpu.backend import Backend

from ..audit.bench import Shape, record
from ..core.database import Measurement, ResultsDB
from ..core.registry import Context
from ..core.sweep import Record, SweepOutcome
from ..ozaki.bench import sample_rows
from ..ozaki.errors import sweep_products
from .bench import ERROR, SEED, Plan, params_shape, shape_inputs, shape_params, shape_text


def error_params(shape: Shape, phi: float, seed: int, rows: int) -> dict[str, Any]:
    """The stored parameters of one error point (``rows``: rows of A the error covers)."""
    return shape_params(shape, phi=float(phi), seed=int(seed), rows=int(rows))


def _timed(be: Backend, work: Any) -> tuple[Any, float]:
    start = perf_counter()
    out = work()
    be.synchronize()
    return out, perf_counter() - start


def measure_errors(be: Backend, params: Mapping[str, Any], missing: Sequence[str]) -> dict[str, Record]:
    """Every missing method's error at one point: the whole product, compared on the sampled rows
    against their exact product (one reference for all methods)."""
    shape, rows, seed = params_shape(dict(params)), params["rows"], params["seed"]
    A, B, source = shape_inputs(be, shape, params["phi"], seed)
    picks = sample_rows(shape[0], rows, seed)
    picked = None if picks is None else be.asarray(picks)
    A_rows = A if picked is None else A[picked]
    ref, ref_seconds = _timed(be, partial(exact_matmul, A_rows, B, backend=be))
    out = {}
    for name in missing:
        C, seconds = _timed(be, partial(get_method(name).run, be, A, B))
        C = C if picked is None else C[picked]
        rec = record(Audited(error_report(C, ref, A_rows, B), seconds, ref_seconds))
        out[name] = replace(rec, meta={**rec.meta, "inputs": source})
        del C
    return out


def run_errors(ctx: Context, plan: Plan, seed: int = SEED) -> SweepOutcome:
    """Errors (or resume) of every method of the plan, product by product."""
    groups = [(f"ozaki2 errors {shape_text(shape)}",
               [error_params(shape, phi, seed, plan.rows_for(shape)) for phi in plan.phis]) for shape in plan.shapes]
    return sweep_products(ctx, ERROR, groups, plan.methods, measure_errors)


@dataclass(frozen=True)
class ErrorRow:
    """One stored error point: ``max_rel`` is None where the product was not finite (``nonfinite``
    entries) or the reference was all zero."""

    method: str
    m: int
    k: int
    n: int
    phi: float
    seed: int
    rows: int
    max_rel: float | None
    nonfinite: int

    @property
    def shape(self) -> Shape:
        return self.m, self.k, self.n

    @classmethod
    def read(cls, m: Measurement) -> ErrorRow:
        p = m.params
        return cls(m.method, p["m"], p["k"], p["n"], p["phi"], p["seed"], p["rows"],
                   m.value if m.unit == "rel" else None, m.meta.get("nonfinite", 0) or 0)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def error_rows(db: ResultsDB, env_key: str) -> list[ErrorRow]:
    """Every stored error point of one environment."""
    return [ErrorRow.read(m) for m in db.measurements(ERROR, env_key=env_key)]
