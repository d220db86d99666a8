"""The complex benchmark's errors: every method's largest componentwise error per size and phi, ZGEMM's beside it.

Rows go to ``complex-error``, one per (method, n, phi, seed, rows): value ``max_comp``, the largest |c - c*| over
both parts of C, each part against its own componentwise scale (:func:`accuracy.metrics.error_report` of complex
operands: |Re A||Re B| + |Im A||Im B| for the real part, |Re A||Im B| + |Im A||Re B| for the imaginary part),
with the whole error report, the seconds taken and ZGEMM's ``max_comp`` on the same inputs in the meta. A product
with NaN or infinite entries is stored by their count (unit ``nonfinite entries``), never as a finite error.

The meta also holds ``err_3m_scale``, the largest |c - c*| over both parts in 3M's scale k a b (a = max|Re A| +
max|Im A|, b likewise: :func:`gpu.zgemm.bound_3m`), and for 3M over Strassen (``zgemm-3m-strassen-*``) the
documented bound in that scale (``bound_3m``, from the Strassen level the real products ran at: the name's, or
the plan's at the defaults) with that level and core side.

Every method computes the whole product, and the error is taken on sampled rows above
:data:`~experiments.complex.bench.FULL_ROWS_MAX` (the same rows for every method, against the exact complex
product of those rows, :func:`accuracy.reference.exact_matmul`): Ozaki scheme II scales by whole rows and columns,
so its rows cannot be computed apart.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from functools import partial
from time import perf_counter
from typing import Any

from accuracy.methods import get_method
from accuracy.metrics import ErrorReport, error_report
from accuracy.reference import exact_matmul
from gpu.backend import Array, Backend
from gpu.frontdoor import contract
from gpu.strassen import Plan as StrassenPlan
from gpu.zgemm import bound_3m

from ..core.database import Measurement, ResultsDB
from ..core.registry import Context
from ..core.sweep import Record, SweepOutcome
from ..ozaki.bench import sample_rows
from ..ozaki.errors import sweep_products
from .bench import ERROR, SEED, ZGEMM, Plan, point_inputs, real_of

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


def _report(be: Backend, name: str, A: Array, B: Array, picked: Array | None, ref: Array,
            scale: float) -> tuple[ErrorReport, float, dict[str, Any]]:
    """The error report of method ``name`` on the picked rows, its seconds (the whole product) and its error in
    3M's scale ``scale`` (with 3M over Strassen's documented bound)."""
    C, seconds = _timed(be, partial(get_method(name).run, be, A, B))
    rows = C if picked is None else C[picked]
    A_rows = A if picked is None else A[picked]
    return error_report(rows, ref, A_rows, B), seconds, {"err_3m_scale": scale_error(be, rows, ref, scale),
                                                         **strassen_bound(be, name, A.shape[0], A.shape[1],
                                                                          B.shape[1])}


def scale_3m(be: Backend, A: Array, B: Array) -> float:
    """3M's scale k a b of a point's operands (see the module), once for all its methods."""
    xp = be.xp
    a, b = (float(xp.abs(X.real).max()) + float(xp.abs(X.imag).max()) if X.size else 0.0 for X in (A, B))
    return A.shape[1] * a * b


def scale_error(be: Backend, C: Array, ref: Array, scale: float) -> float | None:
    """max |C - ref| over both parts, over 3M's scale; None where it is not finite."""
    xp = be.xp
    diff = C - ref
    worst = max(float(xp.abs(diff.real).max()), float(xp.abs(diff.imag).max())) if diff.size else 0.0
    return worst / scale if scale and math.isfinite(worst) else (0.0 if worst == 0 else None)


def strassen_bound(be: Backend, name: str, m: int, k: int, n: int) -> dict[str, Any]:
    """3M over Strassen's documented bound in 3M's scale, with the level and core side it rests on ({} for any
    other method): the level the name gives, or at the defaults the one Strassen's plan takes for an m x k by
    k x n float64 product on this device."""
    real = real_of(name) if name.startswith("zgemm-3m-") else None
    if not real or not real.startswith("strassen-"):
        return {}
    named = re.fullmatch(r"strassen-.+-L(\d+)", real)
    xp = be.xp
    level = int(named[1]) if named else StrassenPlan(xp.empty((m, k)), xp.empty((k, n)), backend=be).configuration.level
    side = min(m, k, n)
    core = side // 2**level * 2**level
    return {"bound_3m": bound_3m(contract.strassen(level, core, k).t), "strassen_level": level, "strassen_core": core}


def to_record(report: ErrorReport, seconds: float, scaled: dict[str, Any], ref_seconds: float, zgemm: ErrorReport,
              inputs: str) -> Record:
    """The stored row of one method: ``max_comp`` (or the count of non-finite entries) and the whole report."""
    value, unit = (report.max_comp, COMP) if report.finite else (float(report.nonfinite), NONFINITE)
    return Record(value, unit, meta={**report.as_dict(), **scaled, "seconds": seconds,
                                     "reference_seconds": ref_seconds,
                                     "zgemm_max_comp": zgemm.max_comp if zgemm.finite else None,
                                     "inputs": f"{inputs}, complex"})


def measure_errors(be: Backend, params: Mapping[str, Any], missing: Sequence[str]) -> dict[str, Record]:
    """Every missing method's error at one point, and ZGEMM's on the same inputs (one reference for all)."""
    n, rows, seed = params["n"], params["rows"], params["seed"]
    A, B, inputs = point_inputs(be, n, params["phi"], seed)
    picks = sample_rows(n, rows, seed)
    picked = None if picks is None else be.asarray(picks)
    ref, ref_seconds = _timed(be, partial(exact_matmul, A if picked is None else A[picked], B, backend=be))
    scale = scale_3m(be, A, B)
    reports = {name: _report(be, name, A, B, picked, ref, scale) for name in dict.fromkeys((ZGEMM, *missing))}
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
    err_3m_scale: float | None = None
    bound_3m: float | None = None

    @classmethod
    def read(cls, m: Measurement) -> ErrorRow:
        p, meta = m.params, m.meta
        return cls(m.method, p["n"], p["phi"], p["seed"], p["rows"], m.value if m.unit == COMP else None,
                   meta.get("zgemm_max_comp"), meta.get("nonfinite", 0) or 0, meta.get("err_3m_scale"),
                   meta.get("bound_3m"))

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def error_rows(db: ResultsDB, env_key: str) -> list[ErrorRow]:
    """Every stored error point of one environment."""
    return [ErrorRow.read(m) for m in db.measurements(ERROR, env_key=env_key)]
