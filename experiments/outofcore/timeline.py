"""The experiment ``outofcore-timeline``: when each copy, product and host staging of one engine run
ran: a time-line of copy and compute overlap for one run, from CUDA events.

Per size N (:data:`SIZES`) it draws A and B on the host, plans the engine as the ``outofcore``
experiment does (:func:`~experiments.outofcore.points.engine_plan`), warms up as the power regime asks
(:data:`PROTOCOL`), then runs once more with a :class:`gpu.outofcore.Timeline` and the SM clock, power
and throttle reasons read before and after, checks that run's product on sampled rows, and
stores one row: the run's length (the end of its last span), its spans, and per lane the time it was
busy and the time H2D copies and host staging overlapped the GEMMs. Its figure draws the lanes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from gpu.outofcore import LANES, Span, Timeline, run
from gpu.outofcore.timeline import busy, overlap

from ..core.lab import require_correct, row_error, sample_rows
from ..core.regime import get_regime, idle, reading, settle, summary
from ..core.registry import Context, experiment
from ..core.rows import stored_rows
from ..core.summary import Summary, Table
from ..core.sweep import group_sweep
from .bench import HostOperands, reference_rows
from .points import DTYPE, engine_plan, host_available, point_params
from .rows import ENGINE

EXPERIMENT = "outofcore-timeline"
#: Sizes per (backend, quick): one block (32768 on the H100) and several with write-backs between
#: them (65536); on NumPy the engine streams 3 x 3 blocks of 3 panels (see points.CPU_DEVICE_MEMORY).
SIZES = {("cupy", False): (32768, 65536), ("cupy", True): (32768,), ("numpy", False): (768,),
         ("numpy", True): (768,)}
PROTOCOL = ("one traced run after a warm-up run and, for the sustained regime, runs back to back until the SM "
            "clock settled (cold: after the device idled)")
#: Lanes whose overlap with the GEMMs the row keeps.
HIDDEN = ("staging", "H2D", "D2H", "placement")


@dataclass(frozen=True)
class TimelineRow:
    """One stored time-line: N, the run's length, its spans, and the engine's block and panel."""

    n: int
    regime: str
    seconds: float
    spans: tuple[Span, ...]
    block: tuple[int, int]
    panel: int

    @classmethod
    def read(cls, m: Any) -> TimelineRow:
        plan = m.meta["plan"]
        return cls(m.params["n"], m.params.get("regime", ""), m.value, tuple(Span(*s) for s in m.meta["spans"]),
                   tuple(plan["block"]), plan["panel"])

    method = ENGINE

    def busy(self, lane: str) -> float:
        return busy(list(self.spans), lane)


def lane_meta(spans: list[Span]) -> dict[str, Any]:
    """Per lane the seconds it was busy, and per lane of :data:`HIDDEN` the seconds it overlapped the
    GEMMs."""
    return {"busy": {lane: busy(spans, lane) for lane in LANES},
            "with_gemm": {lane: overlap(spans, lane, "GEMM") for lane in HIDDEN}}


def traced_run(ctx: Context, n: int) -> int:
    """Warm up, then one traced run at N, checked on sampled rows and stored; rows stored (1)."""
    be = ctx.backend
    ops = HostOperands.draw(be, n)
    p = engine_plan(be, n, ops.A.itemsize, host_available())
    engine = be.ops("outofcore")
    regime, telemetry = get_regime(ctx.regime), be.telemetry()
    run(be, engine, p, ops.A, ops.B, ops.C)
    settled = settle(regime, lambda: run(be, engine, p, ops.A, ops.B, ops.C), be, telemetry)
    idle(regime, be)
    timeline, start = Timeline(), reading(telemetry)
    run(be, engine, p, ops.A, ops.B, ops.C, timeline)
    be.synchronize()
    state = summary(regime, [{"start": start, "end": reading(telemetry)} if start else None], settled)
    spans = timeline.spans()
    rows = sample_rows(n)
    expected = reference_rows(ops, rows)
    error = require_correct(row_error(ops.C[rows], expected), f"the traced engine run at N = {n}",
                            np.finfo(ops.A.dtype).eps ** 0.5, f"on {len(rows)} sampled rows, largest relative error")
    seconds = max(s.end for s in spans)
    ctx.db.add(ctx.run_id, EXPERIMENT, ENGINE, point_params(n, DTYPE, ctx.regime), value=seconds, unit="s",
               meta={"spans": [s.as_list() for s in spans], "plan": p.as_dict(), "check_error": error,
                     "tflops": 2 * n**3 / seconds / 1e12, "protocol": PROTOCOL, **state, **lane_meta(spans)})
    return 1


def timeline_rows(db: Any, env_key: str, regime: str | None = None) -> list[TimelineRow]:
    """Stored time-lines of one environment, by N."""
    return stored_rows(db, EXPERIMENT, env_key, TimelineRow.read, (ENGINE,), lambda r: (r.n,), None, regime)


def timeline_summary(rows: list[TimelineRow], measured: int, skipped: int) -> Summary:
    """Per N: the run's length and TFLOP/s, and per lane its busy time and share hidden under GEMMs."""
    table = Table("busy seconds per lane, and the share of each copy lane that ran while a GEMM ran",
                  ("N", "seconds", "TFLOP/s", *LANES, *(f"{lane} hidden" for lane in HIDDEN)),
                  [(r.n, r.seconds, 2 * r.n**3 / r.seconds / 1e12, *(r.busy(lane) for lane in LANES),
                    *(overlap(list(r.spans), lane, "GEMM") / r.busy(lane) if r.busy(lane) else None
                      for lane in HIDDEN)) for r in rows],
                  formats={"seconds": ".4g", "TFLOP/s": ".3f", **{lane: ".3f" for lane in LANES},
                           **{f"{lane} hidden": ".1%" for lane in HIDDEN}})
    return Summary(scope=f"N = {', '.join(str(r.n) for r in rows) or 'none'}; {DTYPE}",
                   facts={"points measured": measured, "points already stored": skipped}, tables=[table],
                   notes=[f"{PROTOCOL}; device spans from CUDA events, host spans (staging into pinned memory, "
                          "placement into the output) from the host clock"])


@experiment(EXPERIMENT, "A time-line of one out-of-core engine run: copies, GEMMs and host staging per lane, "
                        "from CUDA events")
def run_timeline(ctx: Context) -> Summary:
    sizes = SIZES[(ctx.backend.name, ctx.quick)]

    def stored(n: int) -> bool:
        return ctx.db.has(EXPERIMENT, ENGINE, point_params(n, DTYPE, ctx.regime), ctx.env_key)

    outcome = group_sweep(ctx, EXPERIMENT, sizes, stored, lambda n: traced_run(ctx, n), lambda n: f"N={n}")
    rows = [r for r in timeline_rows(ctx.db, ctx.env_key, ctx.regime) if r.n in sizes]
    return timeline_summary(rows, outcome.measured, outcome.skipped)
