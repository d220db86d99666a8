"""Scheme II's benchmark times: the methods of the plan interleaved with DGEMM, in groups per product.

A product's methods are timed in as few groups as its plans allow (:func:`timing_groups`): each holds at most
:data:`GROUP_PLANS` scheme II configurations, whose plans' workspaces in their fastest layouts fit beside the
operands (the first group's beside the defaults', which it alone times), so that no call in a group finds its plan
evicted (the cache keeps :data:`gpu.ozaki2.api.MAX_PLANS`, least recently used first out: timed round by round, more
configurations than that rebuilt their plans at every call) or freed for another's room; the kept plans are freed
between groups.

A group is timed on phi = 1 operands (:func:`experiments.ozaki2.bench.shape_inputs`) by the lab's protocol
(:func:`experiments.core.lab.time_group`, in the run's power regime, baseline DGEMM) and stored in ``ozaki2-time``,
one row per (method, m, k, n, regime) with the speed-up over the DGEMM of its own group. Each method runs the
computation of its audit method, writing into an output made once: DGEMM and SGEMM as library GEMMs (SGEMM on
float32 copies made beforehand), scheme I, scheme II and cuBLAS's emulation with ``out=``, any other audit method
through its ``run``. So neither the allocation of C nor a dtype copy is timed.

In the same rounds each method with a public call (scheme I, scheme II, cuBLAS's emulation) is timed as a
user calls it (:mod:`experiments.core.ascalled`: the same call in a loop of calls, then one synchronise, by the
host's clock), with ``ozaki2.matmul(A, B, out=C)`` at its defaults (:data:`DEFAULTS`, a row of its own whose
time and speed-up are as called) and the library GEMM as called (``cupy.matmul(A, B, out=C)``) as their
reference; each row keeps ``call``, ``as_called_s``, ``host_s`` and ``device_s`` (the call by CUDA events, one
call per sample, as every row's time has been).

Every method runs once untimed (first-use costs: kernel compilation per modulus count, cuBLAS
handles, workspaces), then once timed. As in :mod:`experiments.ozaki.timing`, a method slower than
``slow_factor`` DGEMMs there cannot beat DGEMM and would make the interleaved batches take minutes:
it is stored from that one run (``protocol: "single run"``, ``stable: false``). A product whose
methods are all stored (in this regime) is skipped unless ``--force``; a group with some methods
missing times those and DGEMM again (the DGEMM row is replaced by the newest group's).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any

import numpy as np

from accuracy.methods import (
    get_method,
    ozaki2_level,
    parse_cublas_emulation_method,
    parse_ozaki2_method,
    parse_ozaki_method,
)
from gpu import ozaki, ozaki2
from gpu.backend import Array, Backend
from gpu.ozaki2.api import MAX_PLANS
from gpu.ozaki2.memory import layouts
from gpu.ozaki2.options import k_block

from ..audit.bench import Shape
from ..core.ascalled import AS_CALLED, Call, as_called_fields, call_text, time_called
from ..core.database import Measurement, ResultsDB
from ..core.lab import HEADROOM, Operands, free_memory
from ..core.registry import Context
from ..core.sweep import SweepOutcome, method_sweep
from ..core.timing import Timing, first_calls, slower_than
from ..ozaki.timing import PROTOCOL
from .bench import (
    DGEMM,
    SEED,
    SGEMM,
    TIME,
    TIME_PHI,
    Plan,
    family,
    shape_inputs,
    shape_params,
    shape_text,
    sort_key,
)

Work = Callable[[], Any]
#: ``ozaki2.matmul(A, B, out=C)`` with every option at its default, timed as called only.
DEFAULTS = "ozaki2-defaults"
#: Scheme II configurations per timing group: the plans the cache keeps, less the defaults' own.
GROUP_PLANS = MAX_PLANS - 1


def time_params(shape: Shape, regime: str) -> dict[str, Any]:
    """The stored parameters of a method's time: the product and the power regime."""
    return shape_params(shape, regime=regime)


def public_call(be: Backend, ops: Operands, out: Array, name: str) -> Call | None:
    """The public call of the method ``name`` on the group's operands into ``out`` as a user writes it (None for
    a method with none: the library GEMMs, a method run through its audit entry)."""
    A, B = ops.A, ops.B
    if name == DEFAULTS:
        return Call(call_text("ozaki2.matmul", {}), partial(ozaki2.matmul, A, B, out=out, backend=be))
    if (two := parse_ozaki2_method(name)) is not None:
        options: dict[str, Any] = {"moduli": two[1], "scaling": two[0]}
        if level := ozaki2_level(name):
            options["level"] = level
        return Call(call_text("ozaki2.matmul", options), partial(ozaki2.matmul, A, B, out=out, backend=be, **options))
    if (one := parse_ozaki_method(name)) is not None:
        fmt, remainder = ozaki.parse_variant(one[0])
        options = {"slices": one[1], "slice_format": fmt.name, "remainder": remainder}
        return Call(call_text("ozaki.matmul", options), partial(ozaki.matmul, A, B, out=out, backend=be, **options))
    if (bits := parse_cublas_emulation_method(name)) != "":
        return Call(call_text("ozaki2.emulation.matmul", {"mantissa_bits": bits}),
                    partial(ozaki2.emulation.matmul, A, B, mantissa_bits=bits, out=out, backend=be))
    return None


def timed_work(be: Backend, ops: Operands, out: Array, name: str) -> Work:
    """The computation of the audit method ``name`` on the group's operands, into made outputs."""
    if name == DGEMM:
        return partial(be.gemm, ops.A, ops.B, ops.C)
    if name == SGEMM:
        single = ops.astype(np.float32)
        return partial(be.gemm, single.A, single.B, single.C)
    call = public_call(be, ops, out, name)
    return call.fn if call else partial(get_method(name).run, be, ops.A, ops.B)


def timing_operands(ctx: Context, shape: Shape, methods: Sequence[str]) -> tuple[Operands, Array]:
    """A, B and DGEMM's C on phi = 1 inputs, SGEMM's float32 copies (where timed) and the output of the
    other methods, all made before any method runs (scheme II sizes its path to free memory)."""
    A, B, _ = shape_inputs(ctx.backend, shape, TIME_PHI, SEED)
    ops = Operands.given(ctx.backend, A, B)
    if SGEMM in methods:
        ops.astype(np.float32)
    return ops, ctx.backend.xp.empty_like(ops.C)


def measure_group(ctx: Context, shape: Shape, ops: Operands, out: Array, methods: Sequence[str], plan: Plan,
                  defaults: bool = True) -> None:
    """DGEMM and ``methods`` timed interleaved (slow ones by one run, see the module), stored with the
    speed-up over DGEMM; with ``defaults`` the defaults' call as called too (:data:`DEFAULTS`)."""
    be, names = ctx.backend, list(dict.fromkeys((DGEMM, *methods)))
    works = {name: timed_work(be, ops, out, name) for name in names}
    first = first_calls(be, works)
    slow = slower_than(first, DGEMM, plan.slow_factor)
    flush = ops.needs_flush()
    public = {name: call for name in (*names, *([DEFAULTS] if defaults else [])) if name not in slow
              and (call := public_call(be, ops, out, name)) is not None}
    reference = Call(f"{be.xp.__name__}.matmul(A, B, out=C)", partial(be.xp.matmul, ops.A, ops.B, out=ops.C))
    called = time_called(ops, {k: w for k, w in works.items() if k not in slow}, DGEMM, public, reference,
                         refill=False, regime=ctx.regime, **PROTOCOL)
    timings = {**called.device.timings, **{name: Timing(samples=[first[name]], stable=False) for name in slow}}
    dgemm_s = timings[DGEMM].median
    extra = {"sgemm_s": timings[SGEMM].median} if SGEMM in timings else {}
    for name in names:
        t = timings[name]
        meta = {"regime": ctx.regime, **t.meta(), "protocol": "single run" if name in slow else "interleaved",
                "dgemm_s": dgemm_s, "speedup_vs_dgemm": dgemm_s / t.median, "family": family(name)[0],
                "slow_factor": plan.slow_factor, "flush": flush, **extra, **called.meta(name)}
        ctx.db.add(ctx.run_id, TIME, name, time_params(shape, ctx.regime), value=t.median, unit="s",
                   samples=t.samples, meta=meta)
    if defaults:
        t, record = called.result.timings[AS_CALLED + DEFAULTS], called.meta(DEFAULTS)
        meta = {"regime": ctx.regime, **t.meta(), "protocol": "as called", "dgemm_s": record["reference_s"],
                "speedup_vs_dgemm": record["ratio_as_called"], "family": family(DEFAULTS)[0], "flush": flush, **record}
        ctx.db.add(ctx.run_id, TIME, DEFAULTS, time_params(shape, ctx.regime), value=t.median, unit="s",
                   samples=t.samples, meta=meta)


def plan_bytes(shape: Shape, name: str) -> int:
    """Device bytes of the workspace block a scheme II method's plan takes in its fastest layout (``"auto"``: sized
    for the most moduli; the defaults' for :data:`DEFAULTS`)."""
    two = ("fast", "auto") if name == DEFAULTS else parse_ozaki2_method(name)
    if two is None:
        raise ValueError(f"{name!r} is not a scheme II method")
    count = ozaki2.MAX_MODULI if two[1] == "auto" else int(two[1])
    return layouts(*shape, count, two[0], k_block(None), ozaki2_level(name))[0].nbytes


def timing_groups(shape: Shape, methods: Sequence[str], room: float) -> list[list[str]]:
    """``methods`` in groups, in order: each with at most :data:`GROUP_PLANS` scheme II methods whose plans' bytes
    (:func:`plan_bytes`) fit in ``room``, the first's beside the defaults' (which only the first group times), one
    alone where its own do not fit; the other methods in the first. Where none fits beside the defaults' (N = 32768
    on the H200), the first group times the defaults without one: a plan that freed the defaults' block to make
    room, as the plan cache does, would be rebuilt at every call and timed so."""
    groups: list[list[str]] = [[m for m in methods if parse_ozaki2_method(m) is None]]
    used, held = plan_bytes(shape, DEFAULTS), 0
    for name in (m for m in methods if parse_ozaki2_method(m) is not None):
        size = plan_bytes(shape, name)
        if held == GROUP_PLANS or (used + size > room and (held or len(groups) == 1)):
            groups.append([])
            used, held = 0, 0
        groups[-1].append(name)
        used, held = used + size, held + 1
    return groups


def run_timing(ctx: Context, plan: Plan) -> SweepOutcome:
    """Time (or resume) the plan's methods at every product, in the groups its plans allow (:func:`timing_groups`),
    the kept plans freed between them."""
    def measure(shape: Shape, missing: list[str]) -> None:
        ops, out = timing_operands(ctx, shape, missing)
        room = HEADROOM * ctx.backend.memory_info()[0]
        for number, group in enumerate(timing_groups(shape, missing, room)):
            if number:
                free_memory(ctx.backend)
            measure_group(ctx, shape, ops, out, group, plan, defaults=not number)
    return method_sweep(ctx, TIME, plan.shapes, plan.methods, lambda shape: time_params(shape, ctx.regime), measure,
                        shape_text, "ozaki2 timing", "product")


@dataclass(frozen=True)
class TimeRow:
    """One stored method's time at one product, with its group's DGEMM and the speed-up over it."""

    method: str
    m: int
    k: int
    n: int
    regime: str
    time_s: float
    dgemm_s: float
    speedup_vs_dgemm: float
    stable: bool
    protocol: str
    call: str | None = None                  # the public call timed as called (None: not timed so)
    as_called_s: float | None = None         # its time per call in a loop of calls, host time included
    host_s: float | None = None              # host time of one such call
    ratio_as_called: float | None = None     # the library GEMM as called over it, in the same rounds

    @property
    def shape(self) -> Shape:
        return self.m, self.k, self.n

    @classmethod
    def read(cls, m: Measurement) -> TimeRow:
        p, meta = m.params, m.meta
        return cls(m.method, p["m"], p["k"], p["n"], p["regime"], m.value, meta["dgemm_s"], meta["speedup_vs_dgemm"],
                   bool(meta.get("stable", True)), meta.get("protocol", "interleaved"), **as_called_fields(meta))

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def time_rows(db: ResultsDB, env_key: str, regime: str | None = None) -> list[TimeRow]:
    """Every stored time of one environment (of one ``regime`` where given), by product, then method family."""
    rows = [TimeRow.read(m) for m in db.measurements(TIME, env_key=env_key)]
    return sorted((r for r in rows if regime in (None, r.regime)), key=lambda r: (r.shape, r.regime,
                                                                                  sort_key(r.method)))
