"""Stored ``outofcore`` points as rows: what the summary, the command's table and the figure read.

Every size N of the experiment is one interleaved group of :data:`METHODS` (the in-core GEMM only
where it fits on the device), each stored as its own row (parameters n, dtype, regime) with its
TFLOP/s, its speed relative to the GEMM of the same group and, for the engine, its plan.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from ..core.ascalled import as_called_fields
from ..core.database import Measurement, ResultsDB
from ..core.regime import UNRECORDED, panel_group
from ..core.rows import method_order as ordered
from ..core.rows import stored_rows

EXPERIMENT = "outofcore"
ENGINE, GEMM, RESIDENT = "outofcore", "gemm", "dgemm"
#: Every method of a group, in the order tables and legends show them.
METHODS = (ENGINE, GEMM, RESIDENT)
#: How tables and legends name them.
LABELS = {ENGINE: "out-of-core engine", GEMM: "in-core DGEMM, host to host",
          RESIDENT: "in-core DGEMM, operands on the device"}


def method_order(methods: Iterable[str]) -> list[str]:
    """Methods in :data:`METHODS` order, unknown ones last."""
    return ordered(methods, METHODS)


@dataclass(frozen=True)
class OutofcoreRow:
    """One stored method at one size N: time, TFLOP/s, and its speed over the group's host-to-host
    GEMM and over its GEMM on resident operands (None where that one did not run); the engine's block
    and panel."""

    method: str
    n: int
    dtype: str
    time_s: float
    tflops: float
    vs_gemm: float | None
    stable: bool
    check_error: float
    regime: str = UNRECORDED
    block: tuple[int, int] | None = None
    panel: int | None = None
    vs_dgemm: float | None = None
    call: str | None = None                  # the public call timed as called (None: not timed so)
    as_called_s: float | None = None         # its time per call in a loop of calls, host time included
    host_s: float | None = None              # host time of one such call
    ratio_as_called: float | None = None     # the group's baseline as called over it, in the same rounds

    @classmethod
    def read(cls, m: Measurement) -> OutofcoreRow:
        p, meta = m.params, m.meta
        plan = meta.get("plan") or {}
        block = tuple(plan["block"]) if plan.get("block") else None
        return cls(m.method, p["n"], p["dtype"], m.value, meta["tflops"], meta.get("vs_gemm"),
                   bool(meta.get("stable", True)), meta.get("check_error", float("nan")),
                   p.get("regime", UNRECORDED), block, plan.get("panel"), meta.get("vs_dgemm"),
                   **as_called_fields(meta))

    @property
    def group(self) -> str:
        """What a figure panel groups by: the dtype, and the regime where one was recorded."""
        return panel_group(self.dtype, self.regime)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def outofcore_rows(db: ResultsDB, env_key: str, dtype: str | None = None, regime: str | None = None
                   ) -> list[OutofcoreRow]:
    """Stored out-of-core points of one environment, by N and method; of one ``regime`` (or, where
    none was measured in it, those stored before regimes were recorded)."""
    return stored_rows(db, EXPERIMENT, env_key, OutofcoreRow.read, METHODS, lambda r: (r.n,), dtype, regime)
