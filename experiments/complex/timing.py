"""The complex benchmark's times: every method's public call as called beside ZGEMM's, one group per size.

A user calls a complex product in a loop and synchronises where the result is needed, and each call returns a new
C. So every method is timed as called (:mod:`experiments.core.ascalled`: its audit entry's call, which is the
public call of its family, :func:`experiments.complex.bench.call_text`, issued back to back then one synchronise,
by the host's clock, host work and allocation included), interleaved with ZGEMM called the same way
(``cupy.matmul(A, B)``, ``numpy.matmul`` on the CPU: the reference), on phi = 1 operands drawn once per size
(:func:`experiments.complex.bench.point_inputs`), in the run's power regime. Rows go to ``complex-time``, one per
(method, n, regime): value the seconds per call, with the speed-up over ZGEMM (ZGEMM's time over the method's),
the call, its host time, ZGEMM's time, how it was timed and the backend.

Every call is made once untimed (first-use costs: kernels, plans, handles), then once timed from an idle device.
A method slower there than ``slow_factor`` ZGEMMs cannot beat ZGEMM and would make the interleaved rounds long: it
is stored from that one call, its speed-up that of the single calls (``protocol: "single run"``,
``stable: false``). A size whose methods are all stored (in this regime) is skipped unless ``--force``; a group
with some methods missing times those and ZGEMM again (ZGEMM's row is replaced by the newest group's).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any

from accuracy.methods import get_method
from gpu.backend import Array, Backend

from ..core.ascalled import AS_CALLED, Call, Called, time_called, wall_seconds
from ..core.database import Measurement, ResultsDB
from ..core.lab import Operands
from ..core.registry import Context
from ..core.sweep import SweepOutcome, method_sweep
from ..core.timing import first_calls, slower_than
from ..ozaki.timing import PROTOCOL
from .bench import TIME, TIME_PHI, ZGEMM, Plan, call_text, family, point_inputs, sort_key

INTERLEAVED, SINGLE = "interleaved", "single run"


def time_params(n: int, regime: str) -> dict[str, Any]:
    """The stored parameters of a method's time: the size and the power regime."""
    return {"n": int(n), "regime": regime}


def public_calls(be: Backend, A: Array, B: Array, names: Sequence[str]) -> dict[str, Call]:
    """Each method's call on the group's operands, through its audit entry, with the text a user writes."""
    return {name: Call(call_text(name, be.xp.__name__), partial(get_method(name).run, be, A, B)) for name in names}


def interleaved_meta(called: Called, name: str) -> tuple[float, list[float], dict[str, Any]]:
    """(seconds per call, samples, what the row adds) of a method timed in the interleaved rounds."""
    timed, meta = called.result.timings[AS_CALLED + name], called.meta(name)
    return timed.median, timed.samples, {**timed.meta(), **meta, "protocol": INTERLEAVED,
                                         "zgemm_s": meta["reference_s"], "speedup_vs_zgemm": meta["ratio_as_called"]}


def single_meta(calls: dict[str, Call], single: dict[str, float], name: str) -> tuple[float, list[float],
                                                                                      dict[str, Any]]:
    """(seconds, samples, what the row adds) of a method timed by one call (see the module notes)."""
    seconds = single[name]
    return seconds, [seconds], {"protocol": SINGLE, "stable": False, "call": calls[name].text, "as_called_s": seconds,
                                "zgemm_s": single[ZGEMM], "speedup_vs_zgemm": single[ZGEMM] / seconds,
                                "ratio_as_called": single[ZGEMM] / seconds}


def measure_group(ctx: Context, n: int, A: Array, B: Array, methods: Sequence[str], plan: Plan) -> None:
    """ZGEMM and ``methods`` timed as called (slow ones by one call, see the module), stored with the speed-up."""
    be, names = ctx.backend, list(dict.fromkeys((ZGEMM, *methods)))
    calls = public_calls(be, A, B, names)
    single = first_calls(be, {name: call.fn for name, call in calls.items()}, wall_seconds)
    slow = slower_than(single, ZGEMM, plan.slow_factor)
    reference = calls[ZGEMM]
    public = {name: calls[name] for name in names if name != ZGEMM and name not in slow}
    called = time_called(Operands.given(be, A, B), {ZGEMM: reference.fn}, ZGEMM, public, reference, refill=False,
                         regime=ctx.regime, **PROTOCOL)
    for name in names:
        value, samples, meta = single_meta(calls, single, name) if name in slow else interleaved_meta(called, name)
        meta.update({"regime": ctx.regime, "backend": be.name, "family": family(name)[0],
                     "slow_factor": plan.slow_factor})
        ctx.db.add(ctx.run_id, TIME, name, time_params(n, ctx.regime), value=value, unit="s", samples=samples,
                   meta=meta)


def run_timing(ctx: Context, plan: Plan) -> SweepOutcome:
    """Time (or resume) the plan's methods at every size, one interleaved group each."""
    def measure(n: int, missing: list[str]) -> None:
        A, B, _ = point_inputs(ctx.backend, n, TIME_PHI)
        measure_group(ctx, n, A, B, missing, plan)
    return method_sweep(ctx, TIME, plan.sizes, plan.methods, lambda n: time_params(n, ctx.regime), measure,
                        lambda n: f"N = {n}", "complex timing", "size")


@dataclass(frozen=True)
class TimeRow:
    """One stored method's time at one size, as called, with its group's ZGEMM and the speed-up over it."""

    method: str
    n: int
    regime: str
    time_s: float
    zgemm_s: float
    speedup_vs_zgemm: float
    stable: bool
    protocol: str
    backend: str
    call: str | None = None
    host_s: float | None = None

    @classmethod
    def read(cls, m: Measurement) -> TimeRow:
        p, meta = m.params, m.meta
        return cls(m.method, p["n"], p["regime"], m.value, meta["zgemm_s"], meta["speedup_vs_zgemm"],
                   bool(meta.get("stable", True)), meta.get("protocol", INTERLEAVED), meta.get("backend", "numpy"),
                   meta.get("call"), meta.get("host_s"))

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def time_rows(db: ResultsDB, env_key: str, regime: str | None = None) -> list[TimeRow]:
    """Every stored time of one environment (of one ``regime`` where given), by size, then method family."""
    rows = [TimeRow.read(m) for m in db.measurements(TIME, env_key=env_key)]
    return sorted((r for r in rows if regime in (None, r.regime)), key=lambda r: (r.n, r.regime, sort_key(r.method)))
