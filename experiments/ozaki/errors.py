"""The Ozaki benchmark's errors: max relative error of DGEMM, SGEMM and every configuration, per phi.

Rows go to the experiment ``ozaki-error``, one per (method, n, phi, seed,
rows), stored as the audit stores them (:func:`experiments.audit.bench.record`)
with the ``inputs`` they were drawn as (:func:`experiments.ozaki.bench.bench_inputs`).
Errors at N above :data:`~experiments.ozaki.bench.FULL_ROWS_MAX` are measured
on a sample of rows (the same rows for every method; the Ozaki scheme's rows
do not depend on the other rows of A, DGEMM and SGEMM run on the whole
product), against ``exact_matmul`` of those rows.
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

from ..audit.bench import record
from ..core.database import Measurement, ResultsDB
from ..core.lab import free_memory
from ..core.registry import Context
from ..core.sweep import Record, SweepOutcome, sweep
from .bench import DGEMM, ERROR, SEED, SGEMM, BenchPlan, bench_inputs, sample_rows


def error_params(n: int, phi: float, seed: int, rows: int) -> dict[str, Any]:
    """The stored parameters of one error point (``rows``: rows of A the error covers)."""
    return {"n": int(n), "phi": float(phi), "seed": int(seed), "rows": int(rows)}


def measure_errors(be: Backend, params: Mapping[str, Any], missing: Sequence[str]) -> dict[str, Record]:
    """Every missing method's error at one point: full products for DGEMM and SGEMM, the Ozaki
    scheme on the sampled rows only, all against the exact product of those rows."""
    n, rows = params["n"], params["rows"]
    A, B, source = bench_inputs(be, n, params["phi"], params["seed"])
    picks = sample_rows(n, rows, params["seed"])
    A_rows = A if picks is None else A[be.asarray(picks)]
    start = perf_counter()
    ref = exact_matmul(A_rows, B, backend=be)
    be.synchronize()
    ref_seconds = perf_counter() - start
    out = {}
    for name in missing:
        start = perf_counter()
        if name in (DGEMM, SGEMM):
            C = get_method(name).run(be, A, B)
            C = C if picks is None else C[be.asarray(picks)]
        else:
            C = get_method(name).run(be, A_rows, B)
        be.synchronize()
        seconds = perf_counter() - start
        rec = record(Audited(error_report(C, ref, A_rows, B), seconds, ref_seconds))
        out[name] = replace(rec, meta={**rec.meta, "inputs": source})
        del C
    return out


def sweep_products(ctx: Context, experiment: str, groups: Sequence[tuple[str, list[dict[str, Any]]]],
                   methods: Sequence[str], measure: Any) -> SweepOutcome:
    """Sweep (or resume) ``methods`` over each group of points, one product's phi values per group (with
    its progress label), device memory handed back between products; ``measure(backend, params, missing)``."""
    outcome = SweepOutcome()
    for desc, points in groups:
        done = sweep(ctx, experiment, points, list(methods), partial(measure, ctx.backend), desc=desc)
        outcome.measured += done.measured
        outcome.skipped += done.skipped
        free_memory(ctx.backend)
    return outcome


def run_errors(ctx: Context, plan: BenchPlan, seed: int = SEED) -> SweepOutcome:
    """Errors (or resume) of DGEMM, SGEMM and every configuration of the plan, size by size."""
    groups = [(f"errors N={n}", [error_params(n, phi, seed, plan.rows_for(n)) for phi in plan.phis])
              for n in plan.sizes]
    return sweep_products(ctx, ERROR, groups, [DGEMM, SGEMM, *plan.configs()], measure_errors)


@dataclass(frozen=True)
class ErrorRow:
    """One stored error point: ``max_rel`` is None where the product was not finite
    (``nonfinite`` entries) or the reference was all zero."""

    method: str
    n: int
    phi: float
    seed: int
    rows: int
    max_rel: float | None
    max_comp: float | None
    nonfinite: int

    @classmethod
    def read(cls, m: Measurement) -> ErrorRow:
        p = m.params
        return cls(m.method, p["n"], p["phi"], p["seed"], p["rows"], m.value if m.unit == "rel" else None,
                   m.meta.get("max_comp"), m.meta.get("nonfinite", 0))

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def error_rows(db: ResultsDB, env_key: str) -> list[ErrorRow]:
    """Every stored error point of one environment."""
    return [ErrorRow.read(m) for m in db.measurements(ERROR, env_key=env_key)]
