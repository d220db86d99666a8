"""The ``segmented`` experiment's rows and result: every method by N as time, TFLOP/s and time over the
whole-array kernel (the index-translation overhead for ``translated``), and the largest N of each
decomposition on this machine.

Methods, one interleaved group per N: ``whole`` (the plain kernel on device-resident whole arrays, the
baseline), ``translated`` (the same kernel with the translating accessor, the whole arrays one segment:
index arithmetic alone), ``1d`` and ``2d`` (the segmented launcher, host memory to host memory, M
segments). The paper lost 27-28% to the translation; this experiment describes, it has no target.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ..core.database import Measurement, ResultsDB
from ..core.regime import UNRECORDED
from ..core.rows import method_order as ordered
from ..core.rows import stored_rows
from ..core.summary import Summary, Table

EXPERIMENT = "segmented"
WHOLE, TRANSLATED, ONE_D, TWO_D = "whole", "translated", "1d", "2d"
#: Every method of a group, in the order tables show them.
METHODS = (WHOLE, TRANSLATED, ONE_D, TWO_D)
KERNEL, EMULATION = "CUDA kernel", "NumPy emulation"
EMULATION_NOTE = ("on NumPy the CUDA kernel does not run: its launches are emulated (gpu.segmented.emulate), every "
                  "index the kernel computes passed through the accessor's formula and the gathered tiles multiplied "
                  "by BLAS, over the same tasks, segments and buffers; CPU times say nothing of the GPU's index "
                  "arithmetic")


def method_order(methods: Any) -> list[str]:
    return ordered(methods, METHODS)


@dataclass(frozen=True)
class SegmentedRow:
    """One stored method at one size: time, TFLOP/s, time over the group's ``whole`` kernel."""

    method: str
    n: int
    dtype: str
    m: int
    time_s: float
    tflops: float
    over_whole: float
    stable: bool
    check_error: float
    executor: str
    regime: str = UNRECORDED

    @classmethod
    def read(cls, m: Measurement) -> SegmentedRow:
        p, meta = m.params, m.meta
        return cls(m.method, p["n"], p["dtype"], p["m"], m.value, meta["tflops"], meta["over_whole"],
                   bool(meta.get("stable", True)), meta.get("check_error", float("nan")), meta["executor"],
                   p.get("regime", UNRECORDED))

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def segmented_rows(db: ResultsDB, env_key: str, dtype: str | None = None, regime: str | None = None
                   ) -> list[SegmentedRow]:
    """Stored points of one environment, by N and method."""
    return stored_rows(db, EXPERIMENT, env_key, SegmentedRow.read, METHODS, lambda r: (r.n, r.m), dtype, regime)


def method_table(title: str, rows: Sequence[SegmentedRow], value: str, fmt: str) -> Table:
    """One row per (N, M), one column per method (None where not stored)."""
    methods = method_order(r.method for r in rows)
    cells = {(r.n, r.m, r.method): getattr(r, value) for r in rows}
    keys = sorted({(r.n, r.m) for r in rows})
    return Table(title, ("N", "M", *methods), [(n, m, *(cells.get((n, m, x)) for x in methods)) for n, m in keys],
                 formats={x: fmt for x in methods})


def limits_table(limits: Mapping[str, Mapping[str, int | None]]) -> Table:
    """The largest N of each decomposition per dtype (:func:`experiments.segmented.points.largest_sizes`)."""
    return Table("largest N on this machine", ("dtype", "unsplit (M = 1)", "1-D", "1-D M", "2-D (host-bound)",
                                                "2-D M"),
                 [(dtype, x["unsplit"], x["1d"], x["1d_m"], x["2d"], x["2d_m"]) for dtype, x in limits.items()])


def overhead_text(rows: Sequence[SegmentedRow]) -> str | None:
    """The translation overhead (translated over whole, less one) at the largest N measured."""
    found = [r for r in rows if r.method == TRANSLATED]
    if not found:
        return None
    r = max(found, key=lambda r: r.n)
    return f"{r.over_whole - 1:+.1%} at N = {r.n} ({r.dtype}, {r.executor})"


def segmented_summary(counts: Mapping[str, Any], rows: Sequence[SegmentedRow],
                      limits: Mapping[str, Mapping[str, int | None]], memory: tuple[int, int]) -> Summary:
    """Time, TFLOP/s and time over the whole kernel by N, the largest N table, and the notes."""
    executors = sorted({r.executor for r in rows})
    dtypes = ", ".join(sorted({r.dtype for r in rows})) or "nothing measured"
    return Summary(
        scope=f"{counts['sizes']}; {dtypes}; M = {', '.join(str(m) for m in sorted({r.m for r in rows})) or 'n/a'}",
        facts={**{k: counts[k] for k in ("points measured", "points already stored", "points left out (memory)")},
               "index-translation overhead": overhead_text(rows),
               "executor": ", ".join(executors) or None,
               "memory for the largest-N table (device, host)":
                   f"{memory[0] / 2**30:.1f} GiB, {memory[1] / 2**30:.1f} GiB"},
        tables=[method_table("time (s)", rows, "time_s", ".4g"),
                method_table("TFLOP/s", rows, "tflops", ".3f"),
                method_table("time over the whole-array kernel", rows, "over_whole", ".3f"),
                limits_table(limits)],
        notes=["whole and translated run on device-resident arrays, so their ratio is the index arithmetic alone "
               "(the paper lost 27-28%); 1d and 2d go from host memory to host memory (copies of the segments "
               "overlapped with the launches)",
               "largest N: the spec's segment formulas on the free memory above, FP32 and FP64; 1-D and 2-D give "
               "each of the buffers an equal share of the device, and 2-D keeps A, B and C in host memory "
               "(pinned staging not counted)",
               *([EMULATION_NOTE] if EMULATION in executors else [])])
