"""The Ozaki benchmark's times: every configuration of a format interleaved with DGEMM and SGEMM.

One group per (size, format) is timed on the same operands (the lab's
:class:`~experiments.core.lab.Operands`: phi = 1 inputs, their float32 copies
for SGEMM, and an output of the Ozaki scheme's own) and stored in
``ozaki-time`` with both ratios; the group's DGEMM and SGEMM are stored with
slices 0.

In the same rounds each configuration's public call (``ozaki.matmul(A, B, out=C, slices=..., ...)``) is
timed as a user calls it (:mod:`experiments.core.ascalled`: a loop of calls, then one synchronise, by the
host's clock) against the library GEMM as called, and so is ``ozaki.matmul(A, B, out=C)`` at its defaults in
the first group of each size (:data:`DEFAULTS`, stored with slices 0 and format ``defaults``); each row keeps
``call``, ``as_called_s``, ``host_s`` and ``device_s`` (its time by CUDA events, one call per sample).

Configurations whose warm-up run takes more than ``slow_factor`` times DGEMM's
cannot beat it and would make the interleaved batches take minutes; they are
stored from one run (``protocol: "single run"``, ``stable: false``): a second
run, or the warm-up itself when it took over :data:`SINGLE_RUN_SECONDS`.
Configurations whose time, extrapolated from the previous slice count by the
number of slice pairs, exceeds ``max_ratio`` (25) DGEMMs are not run
(``protocol: "predicted"``, drawn hollow).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from accuracy.methods import ozaki_method_name
from gpu import ozaki
from gpu.backend import Array

from ..core.ascalled import AS_CALLED, Call, Called, as_called_fields, call_text, time_called
from ..core.database import Measurement, ResultsDB
from ..core.lab import Operands, free_memory
from ..core.registry import Context
from ..core.sweep import SweepOutcome
from ..core.timing import Timing, single_run
from .bench import DGEMM, SEED, SGEMM, TIME, TIME_PHI, BenchPlan, bench_inputs

#: A slow configuration whose warm-up took less than this is timed by one more run.
SINGLE_RUN_SECONDS = 1.0
#: ``ozaki.matmul(A, B, out=C)`` with every option at its default, timed as called only (format ``defaults``).
DEFAULTS = "ozaki-defaults"


def time_params(n: int, fmt: str, slices: int) -> dict[str, Any]:
    """An Ozaki configuration, or (slices 0) the DGEMM / SGEMM of the group of format ``fmt``."""
    return {"n": int(n), "format": fmt, "slices": int(slices)}


def timing_operands(ctx: Context, n: int) -> tuple[Operands, Array]:
    """The operands of every group at size ``n``, all allocated before any plan is made (plans
    size their workspace to free memory): A, B and DGEMM's C, SGEMM's float32 copies with their
    C, and the Ozaki scheme's output."""
    A, B, _ = bench_inputs(ctx.backend, n, TIME_PHI, SEED)
    ops = Operands.given(ctx.backend, A, B)
    ops.astype(np.float32)
    return ops, ctx.backend.xp.empty_like(ops.C)


#: Warm-up is done before the batches; re-measurement is bounded by the protocol's time budget.
PROTOCOL = {"warmup": 0}


def time_calls(ctx: Context, ops: Operands, out: Array, works: dict[str, Callable[[], Any]],
               options: dict[str, dict[str, Any]], defaults: bool) -> Called:
    """``works`` by CUDA events and, in the same rounds, each configuration of ``options`` (those among the works)
    through its public call as called, with the defaults' call where ``defaults``, against the library GEMM as
    called."""
    be = ctx.backend
    public = {name: Call(call_text("ozaki.matmul", opts), works[name]) for name, opts in options.items()
              if name in works}
    if defaults:
        public[DEFAULTS] = Call(call_text("ozaki.matmul", {}), partial(ozaki.matmul, ops.A, ops.B, out=out, backend=be))
    reference = Call(f"{be.xp.__name__}.matmul(A, B, out=C)", partial(be.xp.matmul, ops.A, ops.B, out=ops.C))
    return time_called(ops, works, DGEMM, public, reference, refill=False, regime=ctx.regime, **PROTOCOL)


def store_defaults(ctx: Context, n: int, called: Called, flush: bool) -> None:
    """The defaults' row: its time and speed-up as called."""
    t, meta = called.result.timings[AS_CALLED + DEFAULTS], called.meta(DEFAULTS)
    ctx.db.add(ctx.run_id, TIME, DEFAULTS, time_params(n, "defaults", 0), value=t.median, unit="s", samples=t.samples,
               meta={**t.meta(), "protocol": "as called", "dgemm_s": meta["reference_s"],
                     "speedup_vs_dgemm": meta["ratio_as_called"], "flush": flush, **meta})


def measure_group(ctx: Context, ops: Operands, out: Array, fmt: str, slices: Sequence[int], plan: BenchPlan,
                  defaults: bool = False) -> int:
    """DGEMM, SGEMM and the Ozaki configurations of one format (writing into ``out``), interleaved;
    stored with ratios.

    Every method runs once first (warm-up), by increasing slice count, and twice where that is short (a first
    call builds its plan and kernels, which the extrapolation below must not count). A
    configuration slower than ``plan.slow_factor`` DGEMMs keeps a single run;
    one whose time, extrapolated from the previous slice count by the number
    of slice pairs, exceeds ``plan.max_ratio`` DGEMMs is not run at all and is
    stored as predicted (``protocol: "predicted"``). With ``defaults`` the defaults' call is timed as called too.
    """
    be, n, single = ctx.backend, ops.size, ops.astype(np.float32)
    options: dict[str, dict[str, Any]] = {}
    works: dict[str, Callable[[], Any]] = {
        DGEMM: lambda: be.gemm(ops.A, ops.B, ops.C), SGEMM: lambda: be.gemm(single.A, single.B, single.C)}
    plans = {}
    base, remainder = ozaki.parse_variant(fmt)
    for s in sorted(slices):
        name = ozaki_method_name(fmt, s)
        options[name] = {"slices": s, "slice_format": base.name, "remainder": remainder}
        plans[name] = ozaki.configure(ops.A, ops.B, backend=be, **options[name])
        works[name] = partial(ozaki.matmul, ops.A, ops.B, out=out, backend=be, **options[name])
    first: dict[str, float] = {}
    predicted: dict[str, float] = {}
    previous: str | None = None
    for name, work in works.items():
        if name in plans and previous is not None and plan.max_ratio is not None:
            guess = first[previous] * plans[name].pairs / plans[previous].pairs
            if guess > plan.max_ratio * first[DGEMM]:
                predicted[name] = guess
                continue
        first[name] = single_run(be, work)
        if first[name] < SINGLE_RUN_SECONDS:     # a first call builds its plan (and kernels): time it warm too
            first[name] = min(first[name], single_run(be, work))
        previous = name if name in plans else previous
    slow = {name for name in plans if name in first and first[name] > plan.slow_factor * first[DGEMM]}
    for name in slow:      # a warm-up run of seconds is its own sample: first-use costs are negligible there
        if first[name] < SINGLE_RUN_SECONDS:
            first[name] = single_run(be, works[name])
    flush = ops.needs_flush()
    called = time_calls(ctx, ops, out, {k: w for k, w in works.items() if k not in slow and k not in predicted},
                        options, defaults)
    timings = dict(called.device.timings)
    for name in slow:
        timings[name] = Timing(samples=[first[name]], stable=False)
    d, s_ = timings[DGEMM], timings[SGEMM]
    for name in (DGEMM, SGEMM):
        t = timings[name]
        ctx.db.add(ctx.run_id, TIME, name, time_params(n, fmt, 0), value=t.median, unit="s", samples=t.samples,
                   meta={**t.meta(), "group": fmt, "flush": flush, **called.meta(name)})
    for name, p in plans.items():
        if name in predicted:
            seconds, samples = predicted[name], []
            meta = {"protocol": "predicted", "stable": False, "max_ratio": plan.max_ratio}
        else:
            t = timings[name]
            seconds, samples = t.median, t.samples
            meta = {**t.meta(), "protocol": "single run" if name in slow else "interleaved"}
        ctx.db.add(ctx.run_id, TIME, name, time_params(n, fmt, p.slices), value=seconds, unit="s", samples=samples,
                   meta={**meta, "dgemm_s": d.median, "sgemm_s": s_.median, "speedup_vs_dgemm": d.median / seconds,
                         "slowdown_vs_sgemm": seconds / s_.median, "plan": p.as_dict(), "flush": flush,
                         **called.meta(name)})
    if defaults:
        store_defaults(ctx, n, called, flush)
    return len(plans)


def run_timing(ctx: Context, plan: BenchPlan) -> SweepOutcome:
    """Time (or resume) every format group at every size of the plan."""
    be, outcome = ctx.backend, SweepOutcome()
    groups = [(n, f) for n in plan.sizes for f in plan.formats]
    ops, out, called = None, None, set()
    try:
        for n, fmt in tqdm(groups, desc="ozaki timing", unit="group", disable=not ctx.progress, file=sys.stderr,
                           leave=False):
            missing = [s for s in plan.slices if ctx.force or not ctx.db.has(
                TIME, ozaki_method_name(fmt, s), time_params(n, fmt, s), ctx.env_key)]
            outcome.skipped += len(plan.slices) - len(missing)
            if not missing:
                continue
            if ops is None or ops.size != n:
                ops = out = None
                free_memory(be)
                ops, out = timing_operands(ctx, n)
            outcome.measured += measure_group(ctx, ops, out, fmt, missing, plan, defaults=n not in called)
            called.add(n)
    finally:
        ops = out = None
        free_memory(be)
    return outcome


@dataclass(frozen=True)
class TimeRow:
    """One stored Ozaki configuration's time, with the DGEMM and SGEMM of its group and the ratios."""

    method: str
    n: int
    format: str
    slices: int
    time_s: float
    dgemm_s: float
    sgemm_s: float
    speedup_vs_dgemm: float
    slowdown_vs_sgemm: float
    stable: bool
    protocol: str
    call: str | None = None                  # the public call timed as called (None: not timed so)
    as_called_s: float | None = None         # its time per call in a loop of calls, host time included
    host_s: float | None = None              # host time of one such call
    ratio_as_called: float | None = None     # the library GEMM as called over it, in the same rounds

    @classmethod
    def read(cls, m: Measurement) -> TimeRow:
        p, meta = m.params, m.meta
        return cls(m.method, p["n"], p["format"], p["slices"], m.value, meta["dgemm_s"], meta["sgemm_s"],
                   meta["speedup_vs_dgemm"], meta["slowdown_vs_sgemm"], bool(meta.get("stable", True)),
                   meta.get("protocol", "interleaved"), **as_called_fields(meta))

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def time_rows(db: ResultsDB, env_key: str) -> list[TimeRow]:
    """Every stored Ozaki configuration's time of one environment (the groups' DGEMM and SGEMM
    rows left out), by size, format and slices."""
    rows = [TimeRow.read(m) for m in db.measurements(TIME, env_key=env_key) if m.params["slices"] != 0]
    return sorted(rows, key=lambda r: (r.n, r.format, r.slices))
