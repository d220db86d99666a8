"""The complex benchmark's errors: every method's largest componentwise error per size and phi, ZGEMM's beside it.

Rows go to ``complex-error``, one per (method, n, phi, seed, rows): value ``max_comp``, the largest |c - c*| over
both parts of C, each part against its own componentwise scale (:func:`accuracy.metrics.error_report` of complex
operands: |Re A||Re B| + |Im A||Im B| for the real part, |Re A||Im B| + |Im A||Re B| for the imaginary part),
with the whole error report, the seconds taken and ZGEMM's ``max_comp`` on the same inputs in the meta. A product
with NaN or infinite entries is stored by their count (unit ``nonfinite entries``), never as a finite error.

Every method computes the whole product, and the error is taken on sampled rows above
:data:`~experiments.complex.bench.FULL_ROWS_MAX` (the same rows for every method, against the exact complex
product of those rows, :func:`accuracy.reference.exact_matmul`): Ozaki scheme II scales by whole rows and columns,
so its rows cannot be computed apart.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from functools import partial
from time import perf_counter
from typing import Any

from accuracy.methods import get_method
from accuracy.metrics import ErrorReport, error_report
from accuracy.reference import exact_matmul
from gpu.backend import Array, Backend

from ..core.database import Measurement, ResultsDB
from ..core.registry import Context
from ..core.sweep import Record, SweepOutcome
from ..ozaki.bench import sample_rows
from ..ozaki.errors import sweep_products
from .bench import ERROR, SEED, ZGEMM, Plan, point_inputs

#: The unit of a finite error row, and of a row counting non-finite entries.
COMP, NONFINITE = "comp", "nonfinite entries"


def error_params(n: int, phi: float, seed: int, rows: int) -> dict[str, Any]:
    """The stored parameters of one error point (``rows``: rows of A the error covers)."""
    return {"n": int(n), "phi": float(phi), "seed": int(seed), "rows": int(rows)}


def _timed(be: Backend, work: Any) -> tuple[Any, float]:
    start = perf_counter()
    out = work()
    be.synchronize()
    return out, perf_counter() - start


def _report(be: Backend, name: str, A: Array, B: Array, picked: Array | None, ref: Array) -> tuple[ErrorReport, float]:
    """The error report of method ``name`` on the picked rows, and its seconds (the whole product)."""
    C, seconds = _timed(be, partial(get_method(name).run, be, A, B))
    A_rows = A if picked is None else A[picked]
    return error_report(C if picked is None else C[picked], ref, A_rows, B), seconds


def to_record(report: ErrorReport, seconds: float, ref_seconds: float, zgemm: ErrorReport, inputs: str) -> Record:
    """The stored row of one method: ``max_comp`` (or the count of non-finite entries) and the whole report."""
    value, unit = (report.max_comp, COMP) if report.finite else (float(report.nonfinite), NONFINITE)
    return Record(value, unit, meta={**report.as_dict(), "seconds": seconds, "reference_seconds": ref_seconds,
                                     "zgemm_max_comp": zgemm.max_comp if zgemm.finite else None,
                                     "inputs": f"{inputs}, complex"})


def measure_errors(be: Backend, params: Mapping[str, Any], missing: Sequence[str]) -> dict[str, Record]:
    """Every missing method's error at one point, and ZGEMM's on the same inputs (one reference for all)."""
    n, rows, seed = params["n"], params["rows"], params["seed"]
    A, B, inputs = point_inputs(be, n, params["phi"], seed)
    picks = sample_rows(n, rows, seed)
    picked = None if picks is None else be.asarray(picks)
    ref, ref_seconds = _timed(be, partial(exact_matmul, A if picked is None else A[picked], B, backend=be))
    reports = {name: _report(be, name, A, B, picked, ref) for name in dict.fromkeys((ZGEMM, *missing))}
    zgemm = reports[ZGEMM][0]
    return {name: to_record(*reports[name], ref_seconds, zgemm, inputs) for name in missing}


def run_errors(ctx: Context, plan: Plan, seed: int = SEED) -> SweepOutcome:
    """Errors (or resume) of every method of the plan, size by size."""
    groups = [(f"complex errors N = {n}", [error_params(n, phi, seed, plan.rows_for(n)) for phi in plan.phis])
              for n in plan.sizes]
    return sweep_products(ctx, ERROR, groups, plan.methods, measure_errors)


@dataclass(frozen=True)
class ErrorRow:
    """One stored error point: ``max_comp`` None where the product had non-finite entries (``nonfinite``)."""

    method: str
    n: int
    phi: float
    seed: int
    rows: int
    max_comp: float | None
    zgemm_max_comp: float | None
    nonfinite: int

    @classmethod
    def read(cls, m: Measurement) -> ErrorRow:
        p, meta = m.params, m.meta
        return cls(m.method, p["n"], p["phi"], p["seed"], p["rows"], m.value if m.unit == COMP else None,
                   meta.get("zgemm_max_comp"), meta.get("nonfinite", 0) or 0)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def error_rows(db: ResultsDB, env_key: str) -> list[ErrorRow]:
    """Every stored error point of one environment."""
    return [ErrorRow.read(m) for m in db.measurements(ERROR, env_key=env_key)]
