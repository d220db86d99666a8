"""Stored ``strassen-speedup`` points as rows: what the summary, the figures and the exports read."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from gpu.strassen import Config

from ..core.ascalled import as_called_fields
from ..core.database import Measurement, ResultsDB
from ..core.regime import UNRECORDED, of_regime, panel_group

EXPERIMENT = "strassen-speedup"
#: ``strassen.matmul(A, B, out=C)`` with every option at its default, timed as called only (level 0, schedule
#: ``defaults``: it picks its own); not a configuration, so :func:`speedup_table` leaves it out.
DEFAULTS = "strassen-defaults"


@dataclass(frozen=True)
class SpeedupRow:
    """One stored Strassen point: its time, and its speed-up over the GEMM of its group."""

    method: str
    size: int
    level: int
    schedule: str
    fused: bool
    dtype: str
    time_s: float
    speedup: float
    gemm_s: float
    stable: bool
    regime: str = UNRECORDED
    sm_clock_mhz: float | None = None
    power_w: float | None = None
    call: str | None = None                  # the public call timed as called (None: not timed so)
    as_called_s: float | None = None         # its time per call in a loop of calls, host time included
    host_s: float | None = None              # host time of one such call
    ratio_as_called: float | None = None     # the library GEMM as called over it, in the same rounds

    @classmethod
    def read(cls, m: Measurement) -> SpeedupRow:
        p = m.params
        return cls(m.method, p["size"], p["level"], p["schedule"], bool(p["fused"]), p["dtype"], m.value,
                   m.meta["speedup"], m.meta["gemm_s"], bool(m.meta.get("stable", True)),
                   p.get("regime", UNRECORDED), m.meta.get("sm_clock_mhz"), m.meta.get("power_w"),
                   **as_called_fields(m.meta))

    @property
    def group(self) -> str:
        """What a figure panel groups by: the dtype, and the regime where one was recorded."""
        return panel_group(self.dtype, self.regime)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def speedup_table(db: ResultsDB, env_key: str, dtype: str | None = None, regime: str | None = None
                  ) -> list[SpeedupRow]:
    """Stored Strassen points of one environment (GEMM rows left out), smallest first; of one
    ``regime`` (or, where none was measured in it, those stored before regimes were recorded)."""
    return [r for r in stored_rows(db, env_key, dtype, regime) if r.method != DEFAULTS]


def defaults_rows(db: ResultsDB, env_key: str, dtype: str | None = None, regime: str | None = None
                  ) -> list[SpeedupRow]:
    """The stored rows of ``strassen.matmul(A, B, out=C)`` at its defaults, timed as called, smallest first."""
    return [r for r in stored_rows(db, env_key, dtype, regime) if r.method == DEFAULTS]


def stored_rows(db: ResultsDB, env_key: str, dtype: str | None, regime: str | None) -> list[SpeedupRow]:
    """Every stored row but the groups' GEMM, smallest first (see :func:`speedup_table`)."""
    found = db.measurements(EXPERIMENT, env_key=env_key)
    found = of_regime(found, regime) if regime is not None else found
    rows = [SpeedupRow.read(m) for m in found if m.method != "gemm" and (dtype is None or m.params["dtype"] == dtype)]
    return sorted(rows, key=lambda r: (r.size, r.method, r.level))


def best_by_size(rows: Iterable[SpeedupRow]) -> dict[int, SpeedupRow]:
    """The row with the highest speed-up at each size."""
    best: dict[int, SpeedupRow] = {}
    for r in rows:
        if r.size not in best or r.speedup > best[r.size].speedup:
            best[r.size] = r
    return best


def best_per_size(rows: Iterable[SpeedupRow]) -> dict[str, str]:
    best = best_by_size(rows)
    return {f"N={n}": f"{r.speedup:.3f}x ({r.method}, level {r.level})" for n, r in sorted(best.items())}


def rum_crossover(rows: Iterable[SpeedupRow]) -> int | None:
    """Smallest size at which some RUM configuration beats GEMM."""
    return min((r.size for r in rows if Config(r.schedule).is_rum and r.speedup > 1), default=None)
