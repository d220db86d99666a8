"""Stored ``splitk`` points as rows: what the summary, the command's table and the figures read.

Every (m, k) point of the experiment is one interleaved group of :data:`METHODS`, each stored
as its own row (parameters m, n, k, dtype, regime) with its bandwidth, its fraction of the
copy's bandwidth measured in the same group (``roofline``) and its speed-up over the library
GEMM of the same group.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from ..core.ascalled import as_called_fields
from ..core.database import Measurement, ResultsDB
from ..core.regime import UNRECORDED, panel_group
from ..core.rows import method_order as ordered
from ..core.rows import stored_rows

EXPERIMENT = "splitk"
GEMM, COPY = "gemm", "copy"
#: The split-K modes: auto chunks (whole waves of the occupancy formula), or the paper's 1024-wide chunks.
SPLITK_METHODS = ("splitk-det", "splitk-atomic", "splitk-det-w1024", "splitk-atomic-w1024")
#: Every method of a group timed by the device's clock, in the order tables and legends show them.
METHODS = (GEMM, *SPLITK_METHODS, COPY)
#: ``splitk.matmul(A, B, out=C)`` with every option at its default, timed as called only (its row's time is the
#: as-called time, its speed-up that over the library GEMM as called).
DEFAULTS = "splitk-defaults"
#: Every stored row of a point.
STORED = (*METHODS, DEFAULTS)


def method_order(methods: Iterable[str]) -> list[str]:
    """Methods in :data:`METHODS` order, unknown ones last."""
    return ordered(methods, STORED)


def k_text(k: int) -> str:
    """An inner dimension as a reader knows it: ``2^20`` for a power of two, else the number."""
    return f"2^{k.bit_length() - 1}" if k > 0 and k & (k - 1) == 0 else str(k)


@dataclass(frozen=True)
class SplitkRow:
    """One stored method at one (m, k) point: time, bandwidth, and its ratios within the group."""

    method: str
    m: int
    n: int
    k: int
    dtype: str
    time_s: float
    gbs: float
    roofline: float
    speedup: float
    stable: bool
    regime: str = UNRECORDED
    chunks: int | None = None
    width: int | None = None
    call: str | None = None                  # the public call timed as called (None: rows stored before it was)
    as_called_s: float | None = None         # that call's time per call in a loop of calls, host time included
    host_s: float | None = None              # host time of one such call
    ratio_as_called: float | None = None     # the library GEMM as called over it, in the same rounds
    device_s: float | None = None            # the executor by the device's clock (None for the defaults)

    @classmethod
    def read(cls, m: Measurement) -> SplitkRow:
        p, meta = m.params, m.meta
        plan = meta.get("plan") or {}
        return cls(m.method, p["m"], p["n"], p["k"], p["dtype"], m.value, meta["gbs"], meta["roofline"],
                   meta["speedup"], bool(meta.get("stable", True)), p.get("regime", UNRECORDED),
                   plan.get("chunks"), plan.get("width"), **as_called_fields(meta),
                   device_s=meta.get("device_s", None if m.method == DEFAULTS else m.value))

    @property
    def group(self) -> str:
        """What a figure panel groups by besides m: the dtype, and the regime where one was recorded."""
        return panel_group(self.dtype, self.regime)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def splitk_rows(db: ResultsDB, env_key: str, dtype: str | None = None, regime: str | None = None
                ) -> list[SplitkRow]:
    """Stored split-K points of one environment, by m, k and method; of one ``regime`` (or, where
    none was measured in it, those stored before regimes were recorded)."""
    return stored_rows(db, EXPERIMENT, env_key, SplitkRow.read, STORED, lambda r: (r.m, r.k), dtype, regime)


def best_split(rows: Iterable[SplitkRow]) -> dict[tuple[int, int], SplitkRow]:
    """Per (m, k): the split-K mode with the highest speed-up over the GEMM of its group (so also
    the highest bandwidth: every mode reads the same bytes)."""
    best: dict[tuple[int, int], SplitkRow] = {}
    for r in rows:
        if r.method in SPLITK_METHODS and math.isfinite(r.speedup):
            key = (r.m, r.k)
            if key not in best or r.speedup > best[key].speedup:
                best[key] = r
    return dict(sorted(best.items()))
