"""Split-K against the library GEMM and a device copy: the experiment ``splitk``.

The problem is memory-bound (Hattori & Fujimoto, "Implementing GEMM on GPUs when the output is much
smaller than the input", IPSJ SIG-HPC 2016): any method must read A and B,
``itemsize (m + n) k`` bytes (:func:`modeling.splitk.minimum_bytes`), so the question is how
close each method gets to the device's bandwidth. Per (m, k) point (:mod:`experiments.splitk.points`)
one interleaved group times, on the same operands in the same run:

* ``gemm``: the library GEMM (cuBLAS on a GPU), the baseline of every speed-up;
* the four split-K modes of :data:`~experiments.splitk.points.MODES`, each by the executor
  :func:`gpu.splitk.run` on a plan made beforehand, so the timed region holds the method only
  (as ``matmul`` runs it: the deterministic mode's workspace comes from the memory pool);
* ``copy``: a device-to-device copy of the buffer that holds A and B, one launch, which measures
  the bandwidth this device achieves now. A copy reads and writes every byte, so its bandwidth
  is ``2 x bytes / time``; a method's ``roofline`` is its bandwidth (minimum bytes over its
  time) as a fraction of that, and ``floor_fraction_spec`` the fraction of
  :data:`SPEC_BANDWIDTH`, the H100 SXM's nominal figure.

Beside them, in the same rounds, each mode's public call is timed as a user makes it
(:mod:`experiments.core.ascalled`: ``splitk.matmul(A, B, out=C, ...)`` with the mode's options, calls back to
back, one synchronise, by the host's clock), with ``splitk.matmul(A, B, out=C)`` at its defaults
(:data:`~experiments.splitk.rows.DEFAULTS`, stored as its own row) and ``cupy.matmul(A, B, out=C)``, the
reference of the as-called speed-ups; each row keeps ``as_called_s``, ``host_s`` (one call's host time) and
``device_s`` (the executor's).

A and B are views of one buffer (B aligned to 256 bytes), so that the copy is one launch of
exactly their bytes. No method writes A or B, so inputs are drawn once per point and never
re-drawn; the cache is flushed before every sample (:meth:`SplitOperands.needs_flush` says
why). Each method's product is checked once
against ``A (B x)`` (the copy: element by element) before anything is timed, so a wrong
product is never stored. A point is stored as a whole group: where any of its methods is
missing (or with ``--force``), all of them are timed again, so the ratios of a stored row
always come from its own group.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from gpu import splitk
from gpu.backend import Array, Backend
from gpu.splitk import SplitPlan, run
from modeling.splitk import minimum_bytes

from ..core.ascalled import AS_CALLED, Call, Called, call_text, time_called
from ..core.lab import REFILL_CHUNK_BYTES, Operands, check_product
from ..core.registry import Context, experiment
from ..core.summary import Summary, spread
from ..core.sweep import group_sweep, store_comparison
from .points import DTYPE, MODES, PLANS, b_offset, fitting_points, mode_splits, point_params
from .report import splitk_summary
from .rows import COPY, DEFAULTS, EXPERIMENT, GEMM, STORED, SplitkRow, splitk_rows

#: Nominal device-memory bandwidth of the H100 SXM (HBM3), bytes/s: ``floor_fraction_spec``'s unit.
SPEC_BANDWIDTH = 3.35e12
INPUTS = "uniform [0, 1), drawn once per point (no method writes A or B)"


@dataclass
class SplitOperands(Operands):
    """A (m x k) and B (k x m) as views of one buffer ``shared``, C, and the copy's destination
    ``dst`` of the same size as ``shared`` (see the module notes)."""

    shared: Array = None
    dst: Array = None

    @classmethod
    def draw(cls, backend: Backend, m: int, k: int, dtype: str = DTYPE, seed: int = 7) -> SplitOperands:
        """Uniform [0, 1) A and B drawn on the device into one zeroed buffer (the alignment gap stays 0)."""
        xp, start = backend.xp, b_offset(m, k, np.dtype(dtype).itemsize)
        shared = xp.zeros(start + k * m, dtype)
        ops = cls(backend, shared[:m * k].reshape(m, k), shared[start:].reshape(k, m), xp.zeros((m, m), dtype),
                  xp.random.default_rng(seed), shared=shared, dst=xp.empty_like(shared))
        ops.refill()
        return ops

    def copy(self) -> None:
        """The reference transfer: every byte of A and B copied on the device, one launch."""
        self.dst[...] = self.shared

    def needs_flush(self) -> bool:
        """Always: where the group's buffers fit in twice the cache, so that no method reads what another
        left there, and elsewhere because the copy leaves the cache full of its written lines, whose
        write-back would fall on the next method timed (7-8 us on the H100 at k = 2^20-2^24, 8% of a
        k = 2^20 sample of m = n = 8). The flush only reads, so every sample starts owing no write-back."""
        return True


def check_copy(ops: SplitOperands, where: str) -> float:
    """The copy checked once, block by block (no full-size temporary): RuntimeError where any
    element differs; 0.0, its error, otherwise."""
    xp = ops.backend.xp
    ops.dst.fill(np.nan)
    ops.copy()
    ops.backend.synchronize()
    step = max(1, REFILL_CHUNK_BYTES // ops.shared.itemsize)
    for i in range(0, ops.shared.size, step):
        if not bool(xp.array_equal(ops.dst[i:i + step], ops.shared[i:i + step])):
            raise RuntimeError(f"{COPY} at {where} did not copy its buffer; nothing was stored for it")
    return 0.0


def method_works(ops: SplitOperands, splits: Mapping[str, SplitPlan]) -> dict[str, Callable[[], Any]]:
    """The timed work of every method of a group, in :data:`~experiments.splitk.rows.METHODS` order."""
    be = ops.backend
    ops_splitk = be.ops("splitk")
    works: dict[str, Callable[[], Any]] = {GEMM: partial(be.gemm, ops.A, ops.B, ops.C)}
    works.update({name: partial(run, be, ops_splitk, split, ops.A, ops.B, ops.C, 1.0, 0.0)
                  for name, split in splits.items()})
    works[COPY] = ops.copy
    return works


def checked_works(ops: SplitOperands, splits: Mapping[str, SplitPlan], where: str
                  ) -> tuple[dict[str, Callable[[], Any]], dict[str, float]]:
    """:func:`method_works`, each checked once (a wrong product raises RuntimeError before anything
    is timed), and the relative errors of the checks."""
    works = method_works(ops, splits)
    errors = {name: check_product(ops, works[name], f"{name} at {where}") for name in (GEMM, *splits)}
    errors[COPY] = check_copy(ops, where)
    return works, errors


def group_meta(m: int, k: int, itemsize: int, moved: int, seconds: Mapping[str, float]) -> dict[str, dict]:
    """Per method of a timed group: bytes, GB/s, fraction of the copy's bandwidth (``roofline``) and
    of :data:`SPEC_BANDWIDTH`, and speed-up over the group's GEMM. ``moved``: bytes the copy reads
    and writes; every other method reads :func:`~modeling.splitk.minimum_bytes`."""
    least = minimum_bytes(m, m, k, itemsize)
    copy_bw = moved / seconds[COPY]
    out = {}
    for name, t in seconds.items():
        nbytes = moved if name == COPY else least
        out[name] = {"bytes": nbytes, "gbs": nbytes / t / 1e9, "roofline": nbytes / t / copy_bw,
                     "floor_fraction_spec": nbytes / t / SPEC_BANDWIDTH, "speedup": seconds[GEMM] / t,
                     "gemm_s": seconds[GEMM], "copy_s": seconds[COPY], "copy_gbs": copy_bw / 1e9}
    return out


def public_calls(ops: SplitOperands) -> tuple[dict[str, Call], Call]:
    """Each mode's public call with its options, the defaults' call (:data:`DEFAULTS`), and the library GEMM as
    a user calls it (the reference), on the group's operands."""
    be = ops.backend
    calls = {name: Call(call_text("splitk.matmul", options),
                        partial(splitk.matmul, ops.A, ops.B, out=ops.C, backend=be, **options))
             for name, options in {**MODES, DEFAULTS: {}}.items()}
    return calls, Call(f"{be.xp.__name__}.matmul(A, B, out=C)", partial(be.xp.matmul, ops.A, ops.B, out=ops.C))


def store_group(ctx: Context, ops: SplitOperands, m: int, k: int, splits: Mapping[str, SplitPlan],
                called: Called, errors: Mapping[str, float]) -> int:
    """Every method of a timed group as a row, with its ratios within the group and its as-called record, and
    the defaults' row (its time and ratios as called); how many."""
    result = called.device
    seconds = {name: t.median for name, t in result.timings.items()}
    defaults = called.meta(DEFAULTS)
    derived = group_meta(m, k, ops.A.itemsize, 2 * ops.shared.nbytes, {**seconds, DEFAULTS: defaults["as_called_s"]})
    derived[DEFAULTS].update(speedup=defaults["ratio_as_called"], gemm_s=defaults["reference_s"])
    params, flush = point_params(m, k, DTYPE, ctx.regime), ops.needs_flush()
    rows = store_comparison(ctx, EXPERIMENT, params, result, lambda name: {
        **derived[name], "spec_bandwidth": SPEC_BANDWIDTH, "check_error": errors[name],
        "plan": splits[name].as_dict() if name in splits else None, "flush": flush, "inputs": INPUTS,
        **called.meta(name)})
    timed = called.result.timings[AS_CALLED + DEFAULTS]
    ctx.db.add(ctx.run_id, EXPERIMENT, DEFAULTS, params, value=timed.median, unit="s", samples=timed.samples,
               meta={**timed.meta(), **derived[DEFAULTS], "spec_bandwidth": SPEC_BANDWIDTH, "flush": flush,
                     "inputs": INPUTS, "check_error": errors[DEFAULTS], "plan": None, **defaults})
    return rows + 1


def measure_point(ctx: Context, m: int, k: int, splits: Mapping[str, SplitPlan]) -> int:
    """Draw the operands of (m, k), check every method, time them interleaved with the public calls as called
    (baseline: the library GEMM) and store the group; rows stored."""
    ops, where = SplitOperands.draw(ctx.backend, m, k, DTYPE), f"m = n = {m}, k = {k}"
    works, errors = checked_works(ops, splits, where)
    public, reference = public_calls(ops)
    errors[DEFAULTS] = check_product(ops, public[DEFAULTS].fn, f"{public[DEFAULTS].text} at {where}")
    called = time_called(ops, works, GEMM, public, reference, refill=False,
                         regime=ctx.regime, hide_launch=True)
    return store_group(ctx, ops, m, k, splits, called, errors)


def stored(ctx: Context, m: int, k: int) -> bool:
    """Whether every row of the point is stored in this environment and regime."""
    params = point_params(m, k, DTYPE, ctx.regime)
    return all(ctx.db.has(EXPERIMENT, name, params, ctx.env_key) for name in STORED)


def run_points(ctx: Context, points: Sequence[tuple[int, int]], skipped: int
               ) -> tuple[dict[str, Any], list[SplitkRow]]:
    """Measure (or resume) the points, one group each, stored as soon as measured; the counts and
    the stored rows of those points. ``skipped``: points left out for memory, for the counts."""
    be, ops_splitk = ctx.backend, ctx.backend.ops("splitk")
    limits, kernel_of = ops_splitk.limits(), partial(ops_splitk.kernel, DTYPE)
    with be.allocation_policy("pooled"):
        outcome = group_sweep(ctx, EXPERIMENT, points, lambda p: stored(ctx, *p),
                              lambda p: measure_point(ctx, *p, mode_splits(limits, kernel_of, *p)),
                              lambda p: f"m={p[0]}, k={p[1]}")
    wanted = set(points)
    rows = [r for r in splitk_rows(ctx.db, ctx.env_key, DTYPE, ctx.regime) if (r.m, r.k) in wanted]
    return {"points measured": outcome.measured, "points already stored": outcome.skipped,
            "points left out (memory)": skipped,
            "shapes": f"m = n = {spread([m for m, _ in points])}; k = {spread([k for _, k in points], 'values')}"
            }, rows


@experiment(EXPERIMENT, "Split-K (deterministic and atomic; auto and 1024-wide chunks) against the library GEMM "
                        "and a device copy, by output size m = n and inner dimension k")
def run_splitk(ctx: Context) -> Summary:
    points, skipped = fitting_points(ctx.backend, PLANS[(ctx.backend.name, ctx.quick)])
    counts, rows = run_points(ctx, points, skipped)
    return splitk_summary(counts, rows)
