"""The Strassen speed-up targets, judged on stored ``strassen-speedup`` rows (``gemmlab strassen --stored``).

Per regime, the best configuration at each size with its SM clock and power, and beside it the best
configuration that needs no memory beyond A, B and C as the sweep times it (inputs overwritten; the
memory model of :func:`gpu.strassen.strassen_memory` says which). Speed-ups are over the DGEMM of the
configuration's own interleaved group, so groups measured at other times stay comparable. The targets
are data (:data:`TARGETS`, :data:`CROSSOVER`); a target whose size or regime has no stored row is
reported as not judged, never as met.

The call a user makes, ``strassen.matmul(A, B, out=C)`` at its defaults, is judged as called (a loop of calls,
host time included, against ``cupy.matmul`` called the same way in the same rounds), sustained: never below
:data:`DEFAULTS_FLOOR` x DGEMM at any stored size, at least :data:`DEFAULTS_TARGETS` where given, and within
:data:`DEFAULTS_WITHIN` of the best configuration as called at each N >= :data:`WITHIN_FROM`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpu.strassen import strassen_memory

from ..core.summary import Check, Summary, Table, spread
from .rows import SpeedupRow, best_by_size


@dataclass(frozen=True)
class Target:
    """The best configuration's speed-up over DGEMM at ``size`` in ``regime`` is at least ``minimum``."""

    regime: str
    size: int
    minimum: float


#: The Strassen speed-up targets on the H100: sustained >= 1.45x at 49152, 1.30x at 32768, 1.25x at 16384;
#: cold >= 1.35x at 49152.
TARGETS = (Target("sustained", 49152, 1.45), Target("sustained", 32768, 1.30), Target("sustained", 16384, 1.25),
           Target("cold", 49152, 1.35))
#: The smallest N at which the best configuration beats DGEMM is at most this (judged in every regime stored).
CROSSOVER = 6144
COLUMNS = ("N", "speed-up", "configuration", "level", "SM MHz", "W", "zero-memory speed-up",
           "zero-memory configuration")
#: The defaults as called: their floor over DGEMM, their targets by size, and how close to the best configuration
#: as called they stay from WITHIN_FROM on.
DEFAULTS_FLOOR, DEFAULTS_TARGETS, DEFAULTS_WITHIN, WITHIN_FROM = 0.99, {16384: 1.28, 49152: 1.45}, 0.03, 8192


def zero_memory(row: SpeedupRow) -> bool:
    """Whether the row's schedule needs no memory beyond A, B and C at its size and level, inputs overwritten."""
    estimate = strassen_memory(row.schedule, row.size, row.level, np.dtype(row.dtype).itemsize)
    return estimate.extra == 0


def _name(row: SpeedupRow | None) -> str | None:
    return None if row is None else f"{row.method}, level {row.level}"


def regime_table(regime: str, rows: Sequence[SpeedupRow]) -> Table:
    """The best and the best zero-memory configuration per size of one regime."""
    best, zero = best_by_size(rows), best_by_size(r for r in rows if zero_memory(r))
    cells = [(n, r.speedup, r.method, r.level, r.sm_clock_mhz, r.power_w,
              zero[n].speedup if n in zero else None, _name(zero.get(n))) for n, r in sorted(best.items())]
    return Table(f"best configuration per size, {regime}", COLUMNS, cells,
                 formats={"speed-up": ".3f", "zero-memory speed-up": ".3f", "SM MHz": ".0f", "W": ".0f"})


def target_check(target: Target, best: dict[str, dict[int, SpeedupRow]]) -> Check:
    text = f"best configuration >= {target.minimum:.2f}x DGEMM at N = {target.size}, {target.regime}"
    found = best.get(target.regime, {}).get(target.size)
    if found is None:
        return Check(text, "no stored row", None)
    return Check(text, f"{found.speedup:.3f}x ({_name(found)}; SM {found.sm_clock_mhz or 0:.0f} MHz, "
                       f"{found.power_w or 0:.0f} W)", found.speedup >= target.minimum)


def crossover_check(regime: str, best: dict[int, SpeedupRow]) -> Check:
    """Met where a stored size at or below :data:`CROSSOVER` beats DGEMM; not judged where none is stored."""
    text = f"the smallest N where the best configuration beats DGEMM is <= {CROSSOVER}, {regime}"
    wins = sorted(n for n, r in best.items() if r.speedup > 1)
    measured = (f"N = {wins[0]} ({best[wins[0]].speedup:.3f}x, {_name(best[wins[0]])})" if wins
                else f"no stored size beats DGEMM (N = {spread(sorted(best))})")
    if not any(n <= CROSSOVER for n in best):
        return Check(text, measured + f"; nothing stored at or below {CROSSOVER}", None)
    return Check(text, measured, bool(wins) and wins[0] <= CROSSOVER)


def best_as_called(rows: Sequence[SpeedupRow]) -> dict[int, SpeedupRow]:
    """Per size, the configuration with the highest speed-up as called (rows with one only)."""
    best: dict[int, SpeedupRow] = {}
    for r in rows:
        if r.ratio_as_called is not None and (r.size not in best or r.ratio_as_called > best[r.size].ratio_as_called):
            best[r.size] = r
    return best


def defaults_checks(defaults: Sequence[SpeedupRow], rows: Sequence[SpeedupRow]) -> list[Check]:
    """The defaults as called, sustained (see the module notes); not judged where not measured as called."""
    mine = {r.size: r for r in defaults if r.regime == "sustained" and r.ratio_as_called is not None}
    best = best_as_called([r for r in rows if r.regime == "sustained"])
    low = min(mine.values(), key=lambda r: r.ratio_as_called, default=None)
    call, none = "strassen.matmul(A, B) at its defaults", "not measured as called"
    checks = [Check(f"{call}, as called, >= {DEFAULTS_FLOOR}x DGEMM as called at every stored size, sustained",
                    f"lowest {low.ratio_as_called:.3f}x at N = {low.size} over {len(mine)} sizes" if low else none,
                    low.ratio_as_called >= DEFAULTS_FLOOR if low else None)]
    for n, goal in sorted(DEFAULTS_TARGETS.items()):
        r = mine.get(n)
        checks.append(Check(f"{call}, as called, >= {goal}x DGEMM as called at N = {n}, sustained",
                            f"{r.ratio_as_called:.3f}x" if r else none, r.ratio_as_called >= goal if r else None))
    judged = [(n, r.ratio_as_called / best[n].ratio_as_called, best[n]) for n, r in sorted(mine.items())
              if n >= WITHIN_FROM and n in best]
    worst = min(judged, key=lambda t: t[1], default=None)
    checks.append(Check(f"{call} within {DEFAULTS_WITHIN:.0%} of the best configuration, both as called, at every "
                        f"N >= {WITHIN_FROM}, sustained",
                        f"lowest {worst[1]:.3f} of the best ({_name(worst[2])}) at N = {worst[0]}" if worst else none,
                        worst[1] >= 1 - DEFAULTS_WITHIN if worst else None))
    return checks


def defaults_table(defaults: Sequence[SpeedupRow], rows: Sequence[SpeedupRow]) -> Table:
    """Per size: the defaults as called, their host time, and the best configuration as called beside them."""
    best = best_as_called(rows)
    cells = [(r.size, r.regime, r.ratio_as_called, None if r.host_s is None else 1e6 * r.host_s,
              best[r.size].ratio_as_called if r.size in best else None, _name(best.get(r.size)))
             for r in sorted(defaults, key=lambda r: (r.regime, r.size))]
    best_x = "best configuration as called x DGEMM"
    return Table("strassen.matmul(A, B) at its defaults, as called",
                 ("N", "regime", "as called x DGEMM", "host (us)", best_x, "best configuration"), cells,
                 formats={"as called x DGEMM": ".3f", "host (us)": ".0f", best_x: ".3f"})


def judge(rows: Sequence[SpeedupRow], defaults: Sequence[SpeedupRow] = ()) -> Summary:
    """The tables and checks of the Strassen speed-up targets on ``rows`` (one environment, any regimes), and
    those of the defaults as called on ``defaults`` (:func:`~experiments.strassen.rows.defaults_rows`)."""
    regimes = sorted({r.regime for r in rows}, key=lambda g: (g != "sustained", g))
    by_regime = {g: [r for r in rows if r.regime == g] for g in regimes}
    best = {g: best_by_size(mine) for g, mine in by_regime.items()}
    checks = [target_check(t, best) for t in TARGETS] + [crossover_check(g, best[g]) for g in regimes]
    return Summary(
        scope=f"{len(rows)} stored points; regimes {', '.join(regimes) or 'none'}; "
              f"N = {spread(sorted({r.size for r in rows}))}",
        tables=[regime_table(g, by_regime[g]) for g in regimes] + [defaults_table(defaults, rows)] * bool(defaults),
        checks=checks + defaults_checks(defaults, rows),
        notes=["speed-ups over the DGEMM of each configuration's own interleaved group (the configurations' "
               "targets by the device's clock: the executor); zero-memory: no bytes beyond A, B and C with the "
               "inputs overwritten, as timed (the memory model); the defaults' targets as called"])
