"""Extra memory of Strassen schedules: the experiment ``strassen-memory``, allocator peak against the model.

It measures the peak bytes that :func:`gpu.strassen.matmul` allocates beyond A,
B and C (inputs preserved, raw allocations, so RUM pays for its four support
quadrants) and stores them beside the memory model of
:func:`gpu.strassen.costs.strassen_memory`, so the model can be checked
against the allocator.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from gpu.backend import Backend
from gpu.strassen import forget, matmul, strassen_memory
from gpu.strassen.api import deepest_level

from ..core.database import Measurement, ResultsDB
from ..core.lab import HEADROOM, free_memory
from ..core.registry import Context, experiment
from ..core.summary import Check, Summary, Table, spread
from ..core.sweep import Record, SweepOutcome, sweep
from .bench import DTYPE

EXPERIMENT = "strassen-memory"
SCHEDULES = ("rum", "rum2", "lai", "otsuka", "winograd")
LEVELS = (1, 2, 3, 4)
SIZES: dict[tuple[str, bool], int] = {
    ("cupy", False): 8192, ("cupy", True): 4096, ("numpy", False): 256, ("numpy", True): 256,
}


def memory_model(schedule: str, n: int, level: int, itemsize: int) -> int:
    """Model bytes beyond A, B and C with inputs preserved (what ``matmul`` does by default)."""
    return strassen_memory(schedule, n, level, itemsize, overwrite_a=False, overwrite_b=False).extra


def measure_memory(backend: Backend, params: Mapping[str, Any], methods: Sequence[str]) -> dict[str, Record]:
    """Peak bytes allocated by ``matmul`` (inputs preserved) per schedule, raw allocations: a new plan's first
    execution, which allocates the workspace the plan then keeps."""
    n, level, dtype = params["size"], params["level"], np.dtype(params["dtype"])
    A, B = backend.random((n, n), dtype, seed=1), backend.random((n, n), dtype, seed=2)
    C = backend.xp.zeros((n, n), dtype)
    records = {}
    with backend.allocation_policy("raw"):
        for schedule in methods:
            product = partial(matmul, A, B, out=C, level=level, schedule=schedule, overwrite_a=False,
                              overwrite_b=False, backend=backend)
            product()  # warm-up: one-time caches (schedule analyses, kernels) stay out of the peak
            backend.synchronize()
            forget()   # the kept plan holds its workspace: a new plan's first execution allocates it again
            with backend.track_allocations() as report:
                product()
                backend.synchronize()
            model = strassen_memory(schedule, n, level, dtype.itemsize, overwrite_a=False, overwrite_b=False)
            records[schedule] = Record(float(report.peak_bytes), "B", meta={
                "model_bytes": model.extra, "model": model.as_dict(), "exact": report.exact,
                "allocations": report.count, "allocation_policy": "raw",
                "device_free": report.device_free, "device_total": report.device_total})
    return records


def memory_schedules(n: int, level: int, free: int, itemsize: int) -> list[str]:
    """Schedules whose product (inputs preserved) fits in free memory at this level."""
    return [s for s in SCHEDULES
            if strassen_memory(s, n, level, itemsize, overwrite_a=False, overwrite_b=False).total <= HEADROOM * free]


@dataclass(frozen=True)
class MemoryRow:
    """One stored peak: measured and modelled bytes beyond A, B and C."""

    schedule: str
    size: int
    level: int
    dtype: str
    measured: float
    model: float
    exact: bool

    @classmethod
    def read(cls, m: Measurement) -> MemoryRow:
        p = m.params
        return cls(m.method, p["size"], p["level"], p["dtype"], m.value, m.meta["model_bytes"],
                   bool(m.meta.get("exact", False)))


def memory_table(db: ResultsDB, env_key: str) -> list[MemoryRow]:
    rows = [MemoryRow.read(m) for m in db.measurements(EXPERIMENT, env_key=env_key)]
    return sorted(rows, key=lambda r: (r.size, r.schedule, r.level))


def byte_unit(largest: float) -> tuple[float, str]:
    """A scale and unit name that keeps ``largest`` readable (GiB for GPU-sized products)."""
    for scale, unit in ((2**30, "GiB"), (2**20, "MiB")):
        if largest >= scale / 10:
            return scale, unit
    return 2**10, "KiB"


@experiment(EXPERIMENT, "Extra memory of Strassen schedules: allocator peak against the model")
def run_memory(ctx: Context) -> Summary:
    be, itemsize = ctx.backend, np.dtype(DTYPE).itemsize
    n, free = SIZES[(be.name, ctx.quick)], free_memory(be)
    outcome = SweepOutcome()
    for level in (lv for lv in LEVELS if lv <= deepest_level(n, n, n)):
        schedules = memory_schedules(n, level, free, itemsize)
        if schedules:
            done = sweep(ctx, EXPERIMENT, [{"size": n, "level": level, "dtype": DTYPE}], schedules,
                         partial(measure_memory, be), desc=f"{EXPERIMENT} L={level}")
            outcome.measured += done.measured
            outcome.skipped += done.skipped
    rows = [r for r in memory_table(ctx.db, ctx.env_key) if r.size == n and r.dtype == DTYPE]
    return memory_summary(outcome, n, rows)


def memory_summary(outcome: SweepOutcome, n: int, rows: Sequence[MemoryRow]) -> Summary:
    """Measured against modelled extra memory at the deepest level, and the verdict where the
    allocator counts exactly: the peak equals the model."""
    top = max((r.level for r in rows), default=0)
    scale, unit = byte_unit(max((max(r.measured, r.model) for r in rows), default=0))
    exact = bool(rows) and all(r.exact for r in rows)
    equal = sum(r.measured == r.model for r in rows)
    check = Check("allocator peak equals the model (exact allocator count)", f"{equal} of {len(rows)} points",
                  equal == len(rows)) if exact else \
        Check("allocator peak equals the model", "not comparable: the tracker's peak includes interpreter "
              "and library allocations (no exact count on this backend)", None)
    return Summary(
        scope=f"N = {n}; levels {spread(sorted({r.level for r in rows}), 'levels')}; "
              f"{len({r.schedule for r in rows})} schedules; {DTYPE}",
        facts={"points measured": outcome.measured, "points already stored": outcome.skipped, "size": n,
               "peak counted by": "the allocator (exact)" if exact else "a tracker (includes overheads)"},
        tables=[Table(f"measured / model extra memory at level {top}",
                      ("schedule", f"measured ({unit})", f"model ({unit})", "measured / model"),
                      [(r.schedule, r.measured / scale, r.model / scale, r.measured / r.model if r.model else None)
                       for r in rows if r.level == top],
                      formats={f"measured ({unit})": ".3f", f"model ({unit})": ".3f", "measured / model": ".3f"})],
        checks=[check])
