"""The ``splitk`` experiment's result: every method by (m, k) as time, fraction of the copy's
bandwidth and speed-up over the library GEMM, and the verdict against split-K's targets.

Targets (on the H100): where k >= 2^20 and m = n in {16, 32, 64}, the best split-K mode reaches at
least 90% of the bandwidth the copy measured in the same group, and is never slower than the
library GEMM; at m = n = 64, k = 2^24 it is at least 1.25 times as fast. A target whose points
were not measured is reported as not judged (None).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..core.summary import Check, Summary, Table
from .rows import COPY, SPLITK_METHODS, SplitkRow, best_split, k_text, method_order

#: Output sizes and the least k of the bandwidth targets, and the bandwidth fraction they ask for.
TARGET_SIZES, TARGET_K, TARGET_ROOFLINE = (16, 32, 64), 2**20, 0.9
#: The headline point and the speed-up over the library GEMM it asks for.
HEADLINE_M, HEADLINE_K, HEADLINE_SPEEDUP = 64, 2**24, 1.25


def _where(r: SplitkRow) -> str:
    return f"{r.method} at m = n = {r.m}, k = {k_text(r.k)}"


def method_table(title: str, rows: Sequence[SplitkRow], methods: Sequence[str], value: str, scale: float,
                 fmt: str) -> Table:
    """One row per (m, k), one column per method: ``scale`` times the rows' ``value`` (None where
    that method was not stored)."""
    cells = {(r.m, r.k, r.method): getattr(r, value) * scale for r in rows}
    points = sorted({(r.m, r.k) for r in rows})
    return Table(title, ("m", "k", *methods), [(m, k, *(cells.get((m, k, name)) for name in methods))
                                               for m, k in points], formats={name: fmt for name in methods})


def checks(rows: Sequence[SplitkRow]) -> list[Check]:
    """The verdict against split-K's targets (see the module notes)."""
    best = best_split(rows)
    targeted = [r for (m, k), r in best.items() if m in TARGET_SIZES and k >= TARGET_K]
    scope = f"m = n in {', '.join(map(str, TARGET_SIZES))}, k >= {k_text(TARGET_K)}"
    if targeted:
        low = min(targeted, key=lambda r: r.roofline)
        slow = min(targeted, key=lambda r: r.speedup)
        bandwidth = Check(f"best split-K mode at >= {TARGET_ROOFLINE:.0%} of the copy's bandwidth ({scope})",
                          f"lowest {low.roofline:.1%} ({_where(low)}) over {len(targeted)} points",
                          low.roofline >= TARGET_ROOFLINE)
        never = Check(f"best split-K mode never slower than the library GEMM ({scope})",
                      f"lowest speed-up {slow.speedup:.3f}x ({_where(slow)})", slow.speedup >= 1.0)
    else:
        bandwidth = Check(f"best split-K mode at >= {TARGET_ROOFLINE:.0%} of the copy's bandwidth ({scope})",
                          "not measured", None)
        never = Check(f"best split-K mode never slower than the library GEMM ({scope})", "not measured", None)
    head = best.get((HEADLINE_M, HEADLINE_K))
    headline = Check(f"best split-K mode >= {HEADLINE_SPEEDUP}x the library GEMM at m = n = {HEADLINE_M}, "
                     f"k = {k_text(HEADLINE_K)}",
                     f"{head.speedup:.3f}x ({head.method})" if head else "not measured",
                     head.speedup >= HEADLINE_SPEEDUP if head else None)
    return [bandwidth, never, headline]


def best_fact(rows: Sequence[SplitkRow]) -> str | None:
    """The highest speed-up of a split-K mode over the library GEMM, and where."""
    top = max(best_split(rows).values(), key=lambda r: r.speedup, default=None)
    return f"{top.speedup:.3f}x ({_where(top)})" if top else None


def splitk_summary(counts: Mapping[str, Any], rows: Sequence[SplitkRow]) -> Summary:
    """Time, % of the copy's bandwidth and speed-up over the library GEMM of every method by
    (m, k), and the verdict."""
    methods = method_order(r.method for r in rows)
    compared = [name for name in methods if name != COPY]
    splits = [name for name in methods if name in SPLITK_METHODS]
    dtypes = ", ".join(sorted({r.dtype for r in rows})) or "nothing measured"
    return Summary(
        scope=f"{counts['shapes']}; {len(splits)} split-K modes; {dtypes}",
        facts={**{key: counts[key] for key in ("points measured", "points already stored",
                                                "points left out (memory)")},
               "best split-K speed-up over the library GEMM": best_fact(rows)},
        tables=[method_table("time (ms)", rows, methods, "time_s", 1e3, ".4g"),
                method_table("% of the copy's bandwidth", rows, compared, "roofline", 100.0, ".1f"),
                method_table("speed-up over the library GEMM", rows, splits, "speedup", 1.0, ".3f")],
        checks=checks(rows),
        notes=["bandwidth: the least bytes any method reads, itemsize (m + n) k, over its median time; the copy's: "
               "bytes read and written over its time, measured in the same interleaved group",
               "the library GEMM is cuBLAS on a GPU and the CPU BLAS on NumPy"])
