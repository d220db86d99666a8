"""Calibration: the library's Gemm(x) and Geam(x) times over a size sweep.

These two curves are what the modeling package fits (a cubic and a quadratic)
to predict Strassen's crossover size and optimal level, what the device
profile hands to ``level="auto"`` (:mod:`experiments.levels.profile`), and what
the achieved-rate figure shows (TFLOP/s for GEMM, GB/s for GEAM).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any

import numpy as np

from gpu.backend import Backend
from gpu.strassen import level_counts, quadrants
from modeling.work import geam_bytes, gemm_flops

from ..core.database import ResultsDB
from ..core.lab import HEADROOM, operand_bytes
from ..core.regime import of_regime
from ..core.registry import Context
from ..core.sweep import Record, SweepOutcome, sweep
from ..core.timing import measure, repeats_lasting

EXPERIMENT = "calibration"
#: The same calls timed as a Strassen level issues them: see :func:`measure_context_point`.
CONTEXT_EXPERIMENT = "calibration-context"
METHODS = ("gemm", "geam")
SIZES = {
    ("cupy", False): (256, 512, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 10240, 12288, 16384,
                      20480, 24576, 32768, 40960, 49152, 57344, 65536),
    ("cupy", True): (512, 1024, 2048, 4096, 8192),
    ("numpy", False): (128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 2560, 3072, 3584),
    ("numpy", True): (128, 256, 384, 512, 768, 1024, 1536, 2048),
}
#: Least duration of one in-context sample (seconds): long enough for sustained clocks.
SUSTAIN_S = 0.1


def default_sizes(backend: Backend, quick: bool = False, dtype: str = "float64") -> list[int]:
    """The sweep for this backend: on a GPU up to the largest size whose operands fit
    in free memory; on the CPU a sweep that ends in about a minute (seconds if quick)."""
    free = backend.memory_info()[0]
    return [n for n in SIZES[(backend.name, quick)] if operand_bytes(n, dtype) <= HEADROOM * free]


def plan_sizes(backend: Backend, sizes: Sequence[int] | None, quick: bool = False,
               dtype: str = "float64") -> list[int]:
    """The sizes to measure, ascending and without repeats: given ones after checks,
    else the backend's default sweep. Raises ValueError before anything is measured."""
    if sizes is not None and not sizes:
        raise ValueError("--sizes is empty; give sizes such as 1024,2048 or leave it out for the default sweep")
    chosen = sorted(set(int(n) for n in sizes)) if sizes else default_sizes(backend, quick, dtype)
    if not chosen:
        free = backend.memory_info()[0]
        raise ValueError(f"no default size fits in the {free / 2**30:.1f} GiB free on the "
                         f"{backend.name} device; give smaller --sizes")
    check_sizes(backend, chosen, dtype)
    return chosen


def check_sizes(backend: Backend, sizes: Sequence[int], dtype: str = "float64") -> None:
    """Reject sizes that are not positive or whose operands would not fit in memory."""
    free = backend.memory_info()[0]
    for n in sizes:
        if n <= 0:
            raise ValueError(f"sizes must be positive, got {n}")
        need = operand_bytes(n, dtype)
        if need > HEADROOM * free:
            raise ValueError(
                f"size {n} needs {need / 2**30:.1f} GiB for A, B and C but the {backend.name} "
                f"device has {free / 2**30:.1f} GiB free; choose smaller --sizes"
            )


def measure_point(backend: Backend, params: Mapping[str, Any], methods: Sequence[str]) -> dict[str, Record]:
    """Time GEMM (C = A B) and GEAM (C = A - B) on random n x n operands.

    Operands that would fit in the last-level cache are timed with the cache
    flushed before every sample, so the curve shows memory-resident speed.
    """
    n, dtype = params["size"], np.dtype(params["dtype"])
    A = backend.random((n, n), dtype, seed=1)
    B = backend.random((n, n), dtype, seed=2)
    C = backend.xp.zeros((n, n), dtype)
    flush = operand_bytes(n, dtype) < 2 * backend.cache_bytes()
    works = {"gemm": lambda: backend.gemm(A, B, C), "geam": lambda: backend.geam(1.0, A, -1.0, B, C)}
    records = {}
    for method in methods:
        timing = measure(works[method], backend, flush=flush, regime=params.get("regime", "sustained"))
        records[method] = Record.from_timing(timing, flush=flush, **_rate(method, n, dtype, timing.median))
    return records


def measure_context_point(backend: Backend, params: Mapping[str, Any],
                          methods: Sequence[str]) -> dict[str, Record]:
    """Gemm(n) and Geam(n) as they run inside one RUM level of a 2n x 2n product.

    The level's products and additions (counts read from the RUM table) are
    issued back to back on n x n quadrant views of 2n x 2n operands, with
    nothing between them, and the batch time is divided by the number of
    calls. This is the cost the recursive predictor needs for the calls
    inside a product; isolated calls after a cache flush (the plain
    calibration) run at a higher clock and on contiguous operands. The level's
    calls are repeated until one sample lasts :data:`SUSTAIN_S`, the time scale
    of the products being predicted.
    """
    n, dtype = params["size"], np.dtype(params["dtype"])
    A = backend.random((2 * n, 2 * n), dtype, seed=1)
    B = backend.random((2 * n, 2 * n), dtype, seed=2)
    C = backend.xp.zeros((2 * n, 2 * n), dtype)
    qa, qb, qc = (list(quadrants(M, p).values()) for M, p in ((A, "A"), (B, "B"), (C, "C")))
    counts = level_counts("rum", 1)
    calls = {"gemm": counts.products, "geam": round(counts.geams)}
    works = {
        "gemm": lambda: [backend.gemm(qa[i % 4], qb[(i + 1) % 4], qc[(i + 2) % 4]) for i in range(calls["gemm"])],
        "geam": lambda: [backend.geam(1.0, qa[i % 4], -1.0, qb[(i + 3) % 4], qc[i % 4])
                         for i in range(calls["geam"])],
    }
    flush = operand_bytes(2 * n, dtype) < 2 * backend.cache_bytes()
    records = {}
    for method in methods:
        repeats = repeats_lasting(backend, works[method], SUSTAIN_S)
        timing = measure(lambda w=works[method], r=repeats: [w() for _ in range(r)], backend, flush=flush,
                         regime=params.get("regime", "sustained"))
        k = calls[method] * repeats
        per_call = timing.median / k
        records[method] = Record(per_call, "s", [t / k for t in timing.samples],
                                 {**timing.meta(), "flush": flush, "calls_per_sample": k,
                                  **_rate(method, n, dtype, per_call)})
    return records


def _rate(method: str, n: int, dtype: np.dtype, seconds: float) -> dict[str, float]:
    if method == "gemm":
        return {"tflops": gemm_flops(n, n, n) / seconds / 1e12}
    return {"gbs": geam_bytes(n, n, dtype.itemsize) / seconds / 1e9}


def point(n: int, regime: str, dtype: str = "float64") -> dict[str, Any]:
    """The stored parameters of a calibration point (plain or in context) at size ``n``."""
    return {"size": int(n), "dtype": dtype, "regime": regime}


def calibrate(ctx: Context, sizes: Sequence[int] | None = None,
              dtype: str = "float64") -> tuple[list[dict[str, Any]], SweepOutcome]:
    """Measure (or resume) the sweep and return its table with what the sweep did."""
    sizes = plan_sizes(ctx.backend, sizes, ctx.quick, dtype)
    points = [point(n, ctx.regime, dtype) for n in sizes]
    outcome = sweep(ctx, EXPERIMENT, points, METHODS, partial(measure_point, ctx.backend),
                    desc=f"calibrate ({ctx.backend.name})")
    return table(ctx.db, ctx.env_key, sizes, dtype, regime=ctx.regime), outcome


def calibrate_context(ctx: Context, sizes: Sequence[int] | None = None,
                      dtype: str = "float64") -> tuple[list[dict[str, Any]], SweepOutcome]:
    """Measure (or resume) the in-context curves (:func:`measure_context_point`) at
    sub-product sizes n, whose 2n x 2n operands must fit."""
    if sizes is None:
        budget = HEADROOM * ctx.backend.memory_info()[0]
        sizes = [n for n in default_sizes(ctx.backend, ctx.quick, dtype) if operand_bytes(2 * n, dtype) <= budget]
    sizes = plan_sizes(ctx.backend, [2 * n for n in sizes], ctx.quick, dtype)
    points = [point(n // 2, ctx.regime, dtype) for n in sizes]
    outcome = sweep(ctx, CONTEXT_EXPERIMENT, points, METHODS, partial(measure_context_point, ctx.backend),
                    desc=f"calibrate in context ({ctx.backend.name})")
    return table(ctx.db, ctx.env_key, [p["size"] for p in points], dtype, CONTEXT_EXPERIMENT, ctx.regime), outcome


@dataclass(frozen=True)
class CalibrationRow:
    """Gemm(size) and Geam(size) stored for one size, with their achieved rates."""

    size: int
    dtype: str
    gemm_s: float
    geam_s: float
    tflops: float | None
    gbs: float | None
    samples: int
    gemm_stable: bool
    geam_stable: bool

    @property
    def stable(self) -> bool:
        return self.gemm_stable and self.geam_stable

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "stable": self.stable}


def table(db: ResultsDB, env_key: str, sizes: Sequence[int] | None = None, dtype: str | None = None,
          experiment: str = EXPERIMENT, regime: str = "sustained") -> list[CalibrationRow]:
    """Stored calibration points of one environment in one power regime (or, where none were
    measured in it, those stored before regimes were recorded), one row per size with both
    methods, smallest first (``experiment``: the plain calibration, or ``CONTEXT_EXPERIMENT``)."""
    found: dict[tuple[str, int], dict[str, Any]] = defaultdict(dict)
    for m in of_regime(db.measurements(experiment, env_key=env_key), regime):
        n, dt = m.params["size"], m.params["dtype"]
        if (sizes is None or n in sizes) and (dtype is None or dt == dtype):
            found[(dt, n)][m.method] = m
    rows = []
    for (dt, n), by in sorted(found.items()):
        if all(k in by for k in METHODS):
            g, a = by["gemm"], by["geam"]
            rows.append(CalibrationRow(n, dt, g.value, a.value, g.meta.get("tflops"), a.meta.get("gbs"),
                                       max(len(g.samples), len(a.samples)), bool(g.meta.get("stable", True)),
                                       bool(a.meta.get("stable", True))))
    return rows
