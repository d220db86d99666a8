"""Calibration: the library's Gemm(x) and Geam(x) times over a size sweep.

These two curves are what the modeling package fits (a cubic and a quadratic)
to predict Strassen's crossover size and optimal level, and what the
achieved-rate figure shows (TFLOP/s for GEMM, GB/s for GEAM).
"""

from __future__ import annotations

import math
from collections import defaultdict
from functools import partial
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from gpu.backend import Backend
from gpu.executor import quadrants
from modeling.counts import level_counts
from modeling.work import geam_bytes, gemm_flops

from .database import ResultsDB
from .plotting import device_label, new_figure, plot_marked, save_figure
from .registry import Context, experiment, figure
from .sweep import Record, SweepOutcome, sweep
from .timing import measure

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
#: Share of free memory that A, B and C may take (the rest: cuBLAS workspace, flush buffer).
HEADROOM = 0.9


def operand_bytes(n: int, dtype: np.dtype | str = "float64") -> int:
    """Memory of A, B and C for an n x n calibration point."""
    return 3 * n * n * np.dtype(dtype).itemsize


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
        timing = measure(works[method], backend, flush=flush)
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
        repeats = _sustaining_repeats(backend, works[method])
        timing = measure(lambda w=works[method]: [w() for _ in range(repeats)], backend, flush=flush)
        k = calls[method] * repeats
        per_call = timing.median / k
        records[method] = Record(per_call, "s", [t / k for t in timing.samples],
                                 {**timing.meta(), "flush": flush, "calls_per_sample": k,
                                  **_rate(method, n, dtype, per_call)})
    return records


def _sustaining_repeats(backend: Backend, work) -> int:
    """How many times to repeat a level's calls so that one sample lasts SUSTAIN_S: a
    product keeps the device busy that long, and a GPU's clock settles lower under
    sustained load than in a short burst."""
    work()
    with backend.timer() as t:
        work()
    return max(1, math.ceil(SUSTAIN_S / max(t.seconds, 1e-9)))


def _rate(method: str, n: int, dtype: np.dtype, seconds: float) -> dict[str, float]:
    if method == "gemm":
        return {"tflops": gemm_flops(n, n, n) / seconds / 1e12}
    return {"gbs": geam_bytes(n, n, dtype.itemsize) / seconds / 1e9}


def calibrate(ctx: Context, sizes: Sequence[int] | None = None,
              dtype: str = "float64") -> tuple[list[dict[str, Any]], SweepOutcome]:
    """Measure (or resume) the sweep and return its table with what the sweep did."""
    sizes = plan_sizes(ctx.backend, sizes, ctx.quick, dtype)
    points = [{"size": int(n), "dtype": dtype} for n in sizes]
    outcome = sweep(ctx, EXPERIMENT, points, METHODS, partial(measure_point, ctx.backend),
                    desc=f"calibrate ({ctx.backend.name})")
    return table(ctx.db, ctx.env_key, sizes, dtype), outcome


def calibrate_context(ctx: Context, sizes: Sequence[int] | None = None,
                      dtype: str = "float64") -> tuple[list[dict[str, Any]], SweepOutcome]:
    """Measure (or resume) the in-context curves (:func:`measure_context_point`) at
    sub-product sizes n, whose 2n x 2n operands must fit."""
    if sizes is None:
        budget = HEADROOM * ctx.backend.memory_info()[0]
        sizes = [n for n in default_sizes(ctx.backend, ctx.quick, dtype) if operand_bytes(2 * n, dtype) <= budget]
    sizes = plan_sizes(ctx.backend, [2 * n for n in sizes], ctx.quick, dtype)
    points = [{"size": int(n // 2), "dtype": dtype} for n in sizes]
    outcome = sweep(ctx, CONTEXT_EXPERIMENT, points, METHODS, partial(measure_context_point, ctx.backend),
                    desc=f"calibrate in context ({ctx.backend.name})")
    return table(ctx.db, ctx.env_key, [p["size"] for p in points], dtype, CONTEXT_EXPERIMENT), outcome


def table(db: ResultsDB, env_key: str, sizes: Sequence[int] | None = None,
          dtype: str | None = None, experiment: str = EXPERIMENT) -> list[dict[str, Any]]:
    """Stored calibration points of one environment, one row per size, smallest first
    (``experiment``: the plain calibration, or ``CONTEXT_EXPERIMENT``)."""
    rows: dict[tuple[int, str], dict[str, Any]] = {}
    for m in db.measurements(experiment, env_key=env_key):
        n, dt = m["params"]["size"], m["params"]["dtype"]
        if (sizes is not None and n not in sizes) or (dtype is not None and dt != dtype):
            continue
        row = rows.setdefault((n, dt), {"size": n, "dtype": dt, "samples": 0})
        row[f"{m['method']}_s"] = m["value"]
        row[f"{m['method']}_stable"] = bool(m["meta"].get("stable", True))
        row.update({k: m["meta"][k] for k in ("tflops", "gbs") if k in m["meta"]})
        row["samples"] = max(row["samples"], len(m["samples"]))
    complete = [rows[k] for k in sorted(rows, key=lambda k: (k[1], k[0]))
                if all(f"{m}_s" in rows[k] for m in METHODS)]
    for row in complete:
        row["stable"] = all(row[f"{m}_stable"] for m in METHODS)
    return complete


@experiment(EXPERIMENT, "Gemm(x) and Geam(x) medians over a size sweep")
def run(ctx: Context) -> dict[str, Any]:
    rows, outcome = calibrate(ctx)
    best_gemm = max(rows, key=lambda r: r["tflops"])
    best_geam = max(rows, key=lambda r: r["gbs"])
    return {
        "points measured": outcome.measured,
        "points already stored": outcome.skipped,
        "sizes": f"{rows[0]['size']} to {rows[-1]['size']} ({len(rows)} sizes)",
        "best GEMM rate": f"{best_gemm['tflops']:.3g} TFLOP/s at N = {best_gemm['size']}",
        "best GEAM rate": f"{best_geam['gbs']:.4g} GB/s at N = {best_geam['size']}",
    }


@figure(EXPERIMENT, "Gemm/Geam time and achieved TFLOP/s and GB/s against size")
def render(db: ResultsDB, out_dir: Path) -> list[Path]:
    curves = defaultdict(list)
    for key in db.env_keys():
        for row in table(db, key):
            curves[(device_label(db, key), row["dtype"])].append(row)
    curves = {k: v for k, v in curves.items() if v}
    if not curves:
        return []
    fig, (ax_t, ax_f, ax_b) = new_figure(1, 3, width=15, height=4.2)
    for (label, dtype), rows in sorted(curves.items()):
        name, n = f"{label} {dtype}", [r["size"] for r in rows]
        gemm_ok, geam_ok = [r["gemm_stable"] for r in rows], [r["geam_stable"] for r in rows]
        color = plot_marked(ax_t, n, [1e3 * r["gemm_s"] for r in rows], gemm_ok, "o-",
                            label=f"Gemm, {name}").get_color()
        plot_marked(ax_t, n, [1e3 * r["geam_s"] for r in rows], geam_ok, "s--", color=color, label=f"Geam, {name}")
        plot_marked(ax_f, n, [r["tflops"] for r in rows], gemm_ok, "o-", color=color, label=name)
        plot_marked(ax_b, n, [r["gbs"] for r in rows], geam_ok, "s-", color=color, label=name)
    ax_t.set(xscale="log", yscale="log")
    for ax in (ax_f, ax_b):
        ax.set_xscale("log")
    fig.suptitle("hollow markers: no batch within 95-105% of its mean after retries", fontsize=8)
    ax_t.set(xlabel="N", ylabel="time (ms)", title="Gemm(N) and Geam(N)")
    ax_f.set(xlabel="N", ylabel="TFLOP/s", title="GEMM achieved rate (2N³ / t)")
    ax_b.set(xlabel="N", ylabel="GB/s", title="GEAM achieved bandwidth (3·N²·size / t)")
    for ax in (ax_t, ax_f, ax_b):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    return save_figure(fig, out_dir, "calibration")
