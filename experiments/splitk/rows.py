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

from ..core.database import Measurement, ResultsDB
from ..core.regime import UNRECORDED, panel_group
from ..core.rows import method_order as ordered
from ..core.rows import stored_rows

EXPERIMENT = "splitk"
GEMM, COPY = "gemm", "copy"
#: The split-K modes: auto chunks (whole waves of the occupancy formula), or the paper's 1024-wide chunks.
SPLITK_METHODS = ("splitk-det", "splitk-atomic", "splitk-det-w1024", "splitk-atomic-w1024")
#: Every method of a group, in the order tables and legends show them.
METHODS = (GEMM, *SPLITK_METHODS, COPY)


def method_order(methods: Iterable[str]) -> list[str]:
    """Methods in :data:`METHODS` order, unknown ones last."""
    return ordered(methods, METHODS)


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

    @classmethod
    def read(cls, m: Measurement) -> SplitkRow:
        p, meta = m.params, m.meta
        plan = meta.get("plan") or {}
        return cls(m.method, p["m"], p["n"], p["k"], p["dtype"], m.value, meta["gbs"], meta["roofline"],
                   meta["speedup"], bool(meta.get("stable", True)), p.get("regime", UNRECORDED),
                   plan.get("chunks"), plan.get("width"))

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
    return stored_rows(db, EXPERIMENT, env_key, SplitkRow.read, METHODS, lambda r: (r.m, r.k), dtype, regime)


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
