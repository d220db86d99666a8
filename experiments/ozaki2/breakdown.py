"""Where scheme II's time goes: seconds per phase of chosen configurations (``ozaki2-breakdown``).

:func:`gpu.ozaki2.matmul` with ``phases={}`` reports each phase synchronized: ``scaling`` (line
exponents, bars and the bounds; in accurate scaling this holds one extra INT8 GEMM, of the bars),
``residues``, ``gemm`` (one INT8 GEMM per modulus and k block), ``reduce`` (only where k is cut into
blocks beyond 2**17 - 1, or the INT32 products do not fit) and ``crt``. After one untimed run, the
device is brought to the run's power regime (:func:`experiments.core.regime.settle` for sustained, an
idle gap before each run for cold) and :data:`RUNS` runs are taken on phi = 1 inputs.

One row per (configuration, m, k, n, phase, regime): the median seconds of that phase, every run's
seconds as samples. The ``gemm`` row also keeps the INT8 rate it implies: 2 m n k operations per
modulus GEMM (k blocks together; the padding to multiples of 16 and accurate scaling's bound GEMM
not counted) over its median seconds.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from accuracy.methods import ozaki2_level, parse_ozaki2_method
from gpu import ozaki2
from gpu.backend import Backend

from ..audit.bench import Shape
from ..core.database import ResultsDB
from ..core.regime import get_regime, idle, reading, settle, summary
from ..core.registry import Context
from ..core.sweep import SweepOutcome, group_sweep
from .bench import (
    BREAKDOWN,
    SEED,
    TIME_PHI,
    flops,
    shape_inputs,
    shape_params,
    shape_text,
    sort_key,
)

#: The phases :func:`gpu.ozaki2.matmul` reports, in order; every run has all but ``sums`` (a fused Winograd level's
#: operand sums where they take passes of their own: on the GPU the residue pass forms them where it can) and
#: ``reduce``.
PHASES = ("scaling", "residues", "sums", "gemm", "reduce", "crt")
ALWAYS = ("scaling", "residues", "gemm", "crt")
RUNS = 5


def breakdown_params(shape: Shape, phase: str, regime: str) -> dict[str, Any]:
    """The stored parameters of one phase of one configuration."""
    return shape_params(shape, phase=phase, regime=regime)


def gemm_ops(shape: Shape, config: str) -> float | None:
    """Integer operations of the modulus GEMMs: 2 m n k per modulus, 7/8 of it per Winograd level (None for
    ``auto``: count unknown)."""
    moduli = parse_ozaki2_method(config)[1]
    return None if moduli == "auto" else moduli * flops(shape) * (7 / 8) ** ozaki2_level(config)


def measure_phases(be: Backend, shape: Shape, config: str, regime: str, runs: int = RUNS
                   ) -> tuple[list[dict[str, float]], dict[str, Any]]:
    """Seconds per phase of ``runs`` runs of one configuration (see the module), and the regime's record."""
    scaling, moduli = parse_ozaki2_method(config)
    A, B, _ = shape_inputs(be, shape, TIME_PHI, SEED)
    out = be.xp.empty((shape[0], shape[2]))
    work = partial(ozaki2.matmul, A, B, moduli=moduli, scaling=scaling, level=ozaki2_level(config), out=out,
                   backend=be)
    work()
    chosen, telemetry = get_regime(regime), be.telemetry()
    settled = settle(chosen, work, be, telemetry)
    samples: list[dict[str, float]] = []
    readings: list[dict[str, Any] | None] = []
    for _ in range(runs):
        idle(chosen, be)
        start, phases = reading(telemetry), {}
        work(phases=phases)
        readings.append(None if start is None else {"start": start, "end": reading(telemetry)})
        samples.append(phases)
    return samples, summary(chosen, readings, settled)


def store_phases(ctx: Context, shape: Shape, config: str, samples: list[dict[str, float]],
                 regime_record: dict[str, Any]) -> None:
    """One row per phase seen in ``samples`` (median seconds, every run's as samples)."""
    total = statistics.median(sum(s.values()) for s in samples)
    scaling, moduli = parse_ozaki2_method(config)
    for phase in (p for p in PHASES if any(p in s for s in samples)):
        values = [s.get(phase, 0.0) for s in samples]
        median = statistics.median(values)
        meta = {**regime_record, "runs": len(samples), "total_s": total, "scaling": scaling, "moduli": moduli,
                "level": ozaki2_level(config)}
        ops = gemm_ops(shape, config) if phase == "gemm" else None
        if ops:
            meta.update(int8_ops=ops, int8_ops_per_s=ops / median if median > 0 else None)
        ctx.db.add(ctx.run_id, BREAKDOWN, config, breakdown_params(shape, phase, ctx.regime), value=median,
                   unit="s", samples=values, meta=meta)


def run_breakdown(ctx: Context, shapes: tuple[Shape, ...], configs: tuple[str, ...]) -> SweepOutcome:
    """Measure (or resume) every configuration at every product; a point is stored when its phases are."""
    for config in configs:
        if parse_ozaki2_method(config) is None:
            raise ValueError(f"{config!r} is not a scheme II configuration ozaki2-<accurate|fast>-<moduli>[-w<level>]")

    def stored(point: tuple[Shape, str]) -> bool:
        """Whether every phase a run always has is stored for the point in this regime."""
        shape, config = point
        return all(ctx.db.has(BREAKDOWN, config, breakdown_params(shape, p, ctx.regime), ctx.env_key)
                   for p in ALWAYS)

    def measure(point: tuple[Shape, str]) -> None:
        """Measure one point's phases and store them."""
        shape, config = point
        store_phases(ctx, shape, config, *measure_phases(ctx.backend, shape, config, ctx.regime))

    points = [(shape, config) for shape in shapes for config in configs]
    return group_sweep(ctx, BREAKDOWN, points, stored, measure, lambda p: f"{shape_text(p[0])}, {p[1]}")


@dataclass(frozen=True)
class BreakdownRow:
    """One configuration at one product: median seconds per phase and the INT8 rate of its GEMM phase."""

    method: str
    m: int
    k: int
    n: int
    regime: str
    seconds: dict[str, float] = field(default_factory=dict)
    int8_ops_per_s: float | None = None

    @property
    def shape(self) -> Shape:
        return self.m, self.k, self.n

    @property
    def total_s(self) -> float:
        """Seconds of all phases together."""
        return sum(self.seconds.values())

    def shares(self) -> dict[str, float]:
        """Each phase's share of the total."""
        return {p: s / self.total_s for p, s in self.seconds.items()} if self.total_s > 0 else {}

    def as_dict(self) -> dict[str, Any]:
        return {"method": self.method, "m": self.m, "k": self.k, "n": self.n, "regime": self.regime,
                "total_s": self.total_s, **{f"{p}_s": s for p, s in self.seconds.items()},
                "int8_ops_per_s": self.int8_ops_per_s}


def breakdown_rows(db: ResultsDB, env_key: str, regime: str | None = None) -> list[BreakdownRow]:
    """Every stored breakdown of one environment (of one ``regime`` where given), by product and
    configuration, phases in :data:`PHASES` order."""
    found: dict[tuple[str, Shape, str], dict[str, Any]] = defaultdict(dict)
    rates: dict[tuple[str, Shape, str], float | None] = {}
    for m in db.measurements(BREAKDOWN, env_key=env_key):
        p = m.params
        key = (m.method, (p["m"], p["k"], p["n"]), p["regime"])
        if regime in (None, p["regime"]):
            found[key][p["phase"]] = m.value
            if p["phase"] == "gemm":
                rates[key] = m.meta.get("int8_ops_per_s")
    rows = [BreakdownRow(method, *shape, reg, {ph: phases[ph] for ph in PHASES if ph in phases}, rates.get(key))
            for key, phases in found.items() for method, shape, reg in [key]]
    return sorted(rows, key=lambda r: (r.shape, r.regime, sort_key(r.method)))


def rate_text(ops_per_s: float | None) -> str:
    """An integer-operation rate as a reader knows it: ``1350 TOP/s``, ``612 TOP/s``, ``2.13 GOP/s`` (never an
    exponent)."""
    if not ops_per_s:
        return "n/a"
    value, unit = (ops_per_s / 1e12, "TOP/s") if ops_per_s >= 1e12 else (ops_per_s / 1e9, "GOP/s")
    return f"{value:.0f} {unit}" if value >= 100 else f"{value:.3g} {unit}"
