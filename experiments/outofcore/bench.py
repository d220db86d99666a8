"""The out-of-core engine against the in-core DGEMM: the experiment ``outofcore``.

A, B and C are host arrays (NumPy), as the engine takes them; per size N
(:mod:`experiments.outofcore.points`) one interleaved group times, on the same operands in the
same run:

* ``outofcore``: the engine's executor :func:`gpu.outofcore.run` through pinned staging buffers (the route of
  ``staging="pinned"``, for operands read again) on the plan that route makes
  (:func:`~experiments.outofcore.points.engine_plan`, two C buffers), made beforehand so that the timed region
  holds the product only (no operand checks, no NaN scan, no page-locking);
* ``gemm``: the in-core DGEMM where A, B and C fit on the device: A and B copied to the device,
  the library GEMM, C copied back, timed as a whole, so that both methods go from host memory to
  host memory. On NumPy it is ``A @ B`` into C;
* ``dgemm``: the in-core DGEMM on A, B and C kept on the device (copied there before anything is
  timed), where they fit beside the engine's buffers: the device's DGEMM rate, the bar the engine's
  speed target is set against (:mod:`experiments.outofcore.report`). On NumPy it is ``A @ B`` into C too.

In the same rounds ``outofcore.matmul(A, B, out=C)`` at its defaults is timed as a user calls it
(:mod:`experiments.core.ascalled`: a loop of calls, then one synchronise, by the host's clock; since 21d63ff its
default ``staging="auto"`` locks the operands' pieces ahead of the copies, or streams them through a small pinned
ring, every call: a route of its own, not the engine row's), against the group's baseline called the same way:
``cupy.matmul`` on the resident operands, or the in-core GEMM host to host (none where neither fits: its ratio
is then None); the engine's row keeps ``call``, ``as_called_s``, ``host_s`` and ``device_s`` (the executor's
time).

TFLOP/s is 2 N^3 over the median time; ``vs_gemm`` and ``vs_dgemm`` the time of the GEMM (host to
host) and of the DGEMM on resident operands over the method's (None where that one did not run).
Each method's product is checked once before anything is timed, on a sample of rows against the
correctly rounded product of those rows (:data:`experiments.core.lab.CHECK_ROWS` of them:
:func:`accuracy.reference.exact_matmul` on the device), so a wrong product is never stored. A and B
are drawn once per point: no method writes them. A point is stored as a whole group; where any of
its methods is missing (or with ``--force``) all of them are timed again.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from accuracy.reference import exact_matmul
from gpu import outofcore
from gpu.backend import Backend
from gpu.outofcore import OutOfCorePlan, run

from ..core.ascalled import Call, Called, call_text, time_called
from ..core.lab import REFILL_CHUNK_BYTES, Operands, require_correct, row_error, sample_rows
from ..core.registry import Context, experiment
from ..core.summary import Summary, spread
from ..core.sweep import group_sweep, store_comparison
from .points import DTYPE, PLANS, Point, engine_plan, fitting_points, host_available, point_params
from .report import outofcore_summary
from .rows import ENGINE, EXPERIMENT, GEMM, RESIDENT, OutofcoreRow, outofcore_rows

INPUTS = "uniform [0, 1), drawn once per point on the host (no method writes A or B)"
#: What the sampled rows are checked against (rows stored before 2026-11-24 03:00 UTC, without this key,
#: were checked against cuBLAS's product of the same rows).
REFERENCE = "exact_matmul"
#: Bytes of B per band of the exact reference (see :func:`reference_rows`).
REFERENCE_BAND_BYTES = 2**30
#: Threads that draw the operands.
DRAW_THREADS = max(1, min(16, os.cpu_count() or 1))


@dataclass
class HostOperands(Operands):
    """A, B and C of one N x N x N product in host memory; ``backend`` is where the methods run."""

    @classmethod
    def draw(cls, backend: Backend, n: int, dtype: str = DTYPE, seed: int = 7) -> HostOperands:
        """Uniform [0, 1) A and B drawn on the host in row blocks (no full-size temporary), each
        block from its own stream of ``seed`` and by :data:`DRAW_THREADS` threads at once (NumPy's
        generators let go of the GIL): A and B of N = 65536 are 69 GB."""
        A, B, C = (np.empty((n, n), dtype) for _ in range(3))
        rows = max(1, REFILL_CHUNK_BYTES // (n * np.dtype(dtype).itemsize))
        blocks = [M[i:i + rows] for M in (A, B) for i in range(0, n, rows)]
        streams = np.random.SeedSequence(seed).spawn(len(blocks))

        def fill(block: np.ndarray, stream: np.random.SeedSequence) -> None:
            np.random.default_rng(stream).random(block.shape, dtype=dtype, out=block)

        with ThreadPoolExecutor(DRAW_THREADS) as pool:
            list(pool.map(fill, blocks, streams))
            list(pool.map(lambda i: C[i:i + rows].fill(np.nan), range(0, n, rows)))   # C's pages in use now
        return cls(backend, A, B, C)


def in_core(be: Backend, A: np.ndarray, B: np.ndarray, C: np.ndarray) -> None:
    """C = A B through the device: A and B copied there, the library GEMM, C copied back; on NumPy
    ``A @ B`` into C."""
    if be.xp is np:
        np.matmul(A, B, out=C)
        return
    dA, dB = be.asarray(A), be.asarray(B)
    dC = be.xp.empty(C.shape, C.dtype, order="F" if C.flags.f_contiguous and not C.flags.c_contiguous else "C")
    be.gemm(dA, dB, dC)
    dC.get(out=C)
    be.synchronize()


@dataclass
class Resident:
    """A, B and C of the point on the device, for the DGEMM on resident operands (the host arrays
    themselves on NumPy)."""

    A: Any
    B: Any
    C: Any

    @classmethod
    def copy(cls, ops: HostOperands) -> Resident:
        be = ops.backend
        if be.xp is np:
            return cls(ops.A, ops.B, ops.C)
        return cls(be.asarray(ops.A), be.asarray(ops.B), be.xp.empty(ops.C.shape, ops.C.dtype))

    def gemm(self, be: Backend) -> None:
        be.gemm(self.A, self.B, self.C)
        be.synchronize()

    def rows(self, be: Backend, rows: np.ndarray) -> np.ndarray:
        return np.asarray(be.to_numpy(self.C[rows]))


def method_works(ops: HostOperands, p: OutOfCorePlan, point: Point, resident: Resident | None = None
                 ) -> dict[str, Callable[[], Any]]:
    """The timed work of every method of a group: the engine on plan ``p``, the in-core GEMM where
    ``point.gemm``, and the GEMM on ``resident`` operands where ``point.dgemm``."""
    be = ops.backend
    works: dict[str, Callable[[], Any]] = {ENGINE: partial(run, be, be.ops("outofcore"), p, ops.A, ops.B, ops.C)}
    if point.gemm:
        works[GEMM] = partial(in_core, be, ops.A, ops.B, ops.C)
    if point.dgemm and resident is not None:
        works[RESIDENT] = partial(resident.gemm, be)
    return works


def reference_rows(ops: HostOperands, rows: np.ndarray) -> np.ndarray:
    """The correctly rounded product of A's sampled rows and B (:func:`accuracy.reference.exact_matmul` on
    the backend), in bands of B's columns of about :data:`REFERENCE_BAND_BYTES` each: the exact product
    holds several slices of its operands, and all of B is 34 GB at N = 65536."""
    be, k, n = ops.backend, ops.B.shape[0], ops.B.shape[1]
    a = be.asarray(np.ascontiguousarray(ops.A[rows]))
    width = max(1, min(n, REFERENCE_BAND_BYTES // max(1, k * ops.B.itemsize)))
    bands = [np.asarray(be.to_numpy(exact_matmul(a, be.asarray(np.ascontiguousarray(ops.B[:, j:j + width])),
                                                 backend=be))) for j in range(0, n, width)]
    return np.concatenate(bands, axis=1)


def product_error(ops: HostOperands, work: Callable[[], Any], rows: np.ndarray, expected: np.ndarray,
                  result: Callable[[np.ndarray], np.ndarray] | None = None) -> float:
    """Largest relative error of C's sampled rows (``result(rows)`` where C is elsewhere) after one
    run of ``work`` on a C full of NaN."""
    ops.C.fill(np.nan)
    work()
    ops.backend.synchronize()
    return row_error(ops.C[rows] if result is None else result(rows), expected)


def checked_works(ops: HostOperands, p: OutOfCorePlan, point: Point, resident: Resident | None = None
                  ) -> tuple[dict[str, Callable[[], Any]], dict[str, float]]:
    """:func:`method_works`, each checked once on sampled rows (a wrong product raises RuntimeError
    before anything is timed), and the errors of the checks."""
    works = method_works(ops, p, point, resident)
    rows = sample_rows(ops.size)
    expected = reference_rows(ops, rows)
    errors, where = {}, f"N = {point.n}"
    for name, work in works.items():
        result = partial(resident.rows, ops.backend) if name == RESIDENT and resident is not None else None
        if result is not None and resident.C is not ops.C:
            resident.C.fill(np.nan)
        errors[name] = require_correct(product_error(ops, work, rows, expected, result), f"{name} at {where}",
                                       np.finfo(ops.A.dtype).eps ** 0.5, f"on {len(rows)} sampled rows, largest "
                                       "relative error")
    return works, errors


def group_meta(n: int, seconds: Mapping[str, float]) -> dict[str, dict]:
    """Per method of a timed group: flops, TFLOP/s, and the time of the GEMM (host to host) and of
    the DGEMM on resident operands over the method's (None where that one is not in the group)."""
    work = 2 * n**3
    gemm_s, dgemm_s = seconds.get(GEMM), seconds.get(RESIDENT)
    return {name: {"flops": work, "tflops": work / t / 1e12, "vs_gemm": gemm_s / t if gemm_s else None,
                   "gemm_s": gemm_s, "vs_dgemm": dgemm_s / t if dgemm_s else None, "dgemm_s": dgemm_s}
            for name, t in seconds.items()}


def public_calls(ops: HostOperands, baseline: str, resident: Resident | None) -> tuple[dict[str, Call], Call | None]:
    """The engine's public call at its defaults, and the group's baseline as a user calls it (None where the
    engine is the only method)."""
    be = ops.backend
    engine = Call(call_text("outofcore.matmul", {}), partial(outofcore.matmul, ops.A, ops.B, out=ops.C, backend=be))
    if baseline == RESIDENT and resident is not None:
        xp = be.xp
        return {ENGINE: engine}, Call(f"{xp.__name__}.matmul(A, B, out=C) on device-resident A, B and C",
                                      partial(xp.matmul, resident.A, resident.B, out=resident.C))
    if baseline == GEMM:
        return {ENGINE: engine}, Call("in-core GEMM, host to host (A and B copied in, C copied back)",
                                      partial(in_core, be, ops.A, ops.B, ops.C))
    return {ENGINE: engine}, None


def store_group(ctx: Context, ops: HostOperands, p: OutOfCorePlan, timed: Called,
                errors: Mapping[str, float]) -> int:
    """Every method of a timed group as a row, with its ratios within the group and the as-called records;
    how many."""
    n, result = ops.size, timed.device
    seconds = {name: t.median for name, t in result.timings.items()}
    derived, params = group_meta(n, seconds), point_params(n, DTYPE, ctx.regime)
    return store_comparison(ctx, EXPERIMENT, params, result, lambda name: {
        **derived[name], "check_error": errors[name], "check_rows": len(sample_rows(n)), "check_reference": REFERENCE,
        "plan": p.as_dict() if name == ENGINE else None, "inputs": INPUTS, **timed.meta(name)})


def measure_point(ctx: Context, point: Point) -> int:
    """Draw the operands of N, plan the engine, check every method, time them interleaved
    (baseline: the DGEMM on resident operands, else the GEMM, where they run) and store the group;
    rows stored."""
    ops = HostOperands.draw(ctx.backend, point.n)
    p = engine_plan(ctx.backend, point.n, ops.A.itemsize, host_available())
    resident = Resident.copy(ops) if point.dgemm else None
    works, errors = checked_works(ops, p, point, resident)
    baseline = next(m for m in (RESIDENT, GEMM, ENGINE) if m in works)
    public, reference = public_calls(ops, baseline, resident)
    timed = time_called(ops, works, baseline, public, reference, refill=False, regime=ctx.regime)
    return store_group(ctx, ops, p, timed, errors)


def stored(ctx: Context, point: Point) -> bool:
    """Whether every method of the point is stored in this environment and regime."""
    params = point_params(point.n, DTYPE, ctx.regime)
    return all(ctx.db.has(EXPERIMENT, name, params, ctx.env_key) for name in point.methods)


def run_points(ctx: Context, points: Sequence[Point], skipped: int) -> tuple[dict[str, Any], list[OutofcoreRow]]:
    """Measure (or resume) the points, one group each, stored as soon as measured; the counts and
    the stored rows of those points. ``skipped``: sizes left out for memory, for the counts."""
    outcome = group_sweep(ctx, EXPERIMENT, points, partial(stored, ctx), partial(measure_point, ctx),
                          lambda point: f"N={point.n}")
    wanted = {p.n for p in points}
    rows = [r for r in outofcore_rows(ctx.db, ctx.env_key, DTYPE, ctx.regime) if r.n in wanted]
    return {"points measured": outcome.measured, "points already stored": outcome.skipped,
            "points left out (memory)": skipped,
            "in-core GEMM left out (device memory)": sum(not p.gemm for p in points),
            "resident DGEMM left out (device memory)": sum(not p.dgemm for p in points),
            "sizes": f"N = {spread([p.n for p in points])}"}, rows


@experiment(EXPERIMENT, "The out-of-core engine (host operands streamed through resident C blocks) against the "
                        "in-core DGEMM where it fits, host memory to host memory, by size N")
def run_outofcore(ctx: Context) -> Summary:
    points, skipped = fitting_points(ctx.backend, PLANS[(ctx.backend.name, ctx.quick)])
    counts, rows = run_points(ctx, points, skipped)
    return outofcore_summary(counts, rows)
