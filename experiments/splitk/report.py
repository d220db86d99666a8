"""The ``splitk`` experiment's result: every method by (m, k) as time, fraction of the copy's
bandwidth and speed-up over the library GEMM, and the verdict against split-K's targets.

Targets: where k >= 2^20 and m = n in {16, 32, 64}, the best split-K mode reaches at least 90% of the
bandwidth the copy measured in the same group (by the device's clock: a property of the kernel). The
speed targets are judged on the call as a user makes it (as called: a loop of calls, host time included,
against ``cupy.matmul`` as called in the same rounds): there ``splitk.matmul(A, B, out=C)`` at its defaults is
never slower than the library GEMM, and at least 1.2 times as fast at m = n = 16, k = 2^20; at m = n = 64,
k = 2^24 the best mode as called is at least 1.25 times as fast. A target whose points were not measured (or
not as called: rows stored before the as-called times were) is reported as not judged (None).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..core.summary import Check, Summary, Table
from .rows import COPY, DEFAULTS, SPLITK_METHODS, SplitkRow, best_split, k_text, method_order

#: Output sizes and the least k of the bandwidth targets, and the bandwidth fraction they ask for.
TARGET_SIZES, TARGET_K, TARGET_ROOFLINE = (16, 32, 64), 2**20, 0.9
#: The headline point and the speed-up over the library GEMM (both as called) the best mode must reach there.
HEADLINE_M, HEADLINE_K, HEADLINE_SPEEDUP = 64, 2**24, 1.25
#: The point where the defaults, as called, must reach DEFAULTS_SPEEDUP over the library GEMM as called.
DEFAULTS_M, DEFAULTS_K, DEFAULTS_SPEEDUP = 16, 2**20, 1.2


def _where(r: SplitkRow) -> str:
    return f"{r.method} at m = n = {r.m}, k = {k_text(r.k)}"


def method_table(title: str, rows: Sequence[SplitkRow], methods: Sequence[str], value: str, scale: float,
                 fmt: str) -> Table:
    """One row per (m, k), one column per method: ``scale`` times the rows' ``value`` (None where
    that method was not stored)."""
    cells = {(r.m, r.k, r.method): None if getattr(r, value) is None else getattr(r, value) * scale for r in rows}
    points = sorted({(r.m, r.k) for r in rows})
    return Table(title, ("m", "k", *methods), [(m, k, *(cells.get((m, k, name)) for name in methods))
                                               for m, k in points], formats={name: fmt for name in methods})


def _targeted(r: SplitkRow) -> bool:
    return r.m in TARGET_SIZES and r.k >= TARGET_K


def checks(rows: Sequence[SplitkRow]) -> list[Check]:
    """The verdict against split-K's targets (see the module notes)."""
    scope = f"m = n in {', '.join(map(str, TARGET_SIZES))}, k >= {k_text(TARGET_K)}"
    targeted = [r for r in best_split(rows).values() if _targeted(r)]
    low = min(targeted, key=lambda r: r.roofline, default=None)
    bandwidth = Check(f"best split-K mode at >= {TARGET_ROOFLINE:.0%} of the copy's bandwidth ({scope})",
                      f"lowest {low.roofline:.1%} ({_where(low)}) over {len(targeted)} points" if low
                      else "not measured", low.roofline >= TARGET_ROOFLINE if low else None)
    called = [r for r in rows if r.ratio_as_called is not None]
    defaults = {(r.m, r.k): r for r in called if r.method == DEFAULTS}
    slow = min((r for r in defaults.values() if _targeted(r)), key=lambda r: r.ratio_as_called, default=None)
    never = Check(f"splitk.matmul(A, B) at its defaults, as called, never slower than the library GEMM as called "
                  f"({scope})", f"lowest {slow.ratio_as_called:.3f}x (m = n = {slow.m}, k = {k_text(slow.k)})" if slow
                  else "not measured as called", slow.ratio_as_called >= 1.0 if slow else None)
    point = defaults.get((DEFAULTS_M, DEFAULTS_K))
    small = Check(f"splitk.matmul(A, B) at its defaults, as called, >= {DEFAULTS_SPEEDUP}x the library GEMM as called "
                  f"at m = n = {DEFAULTS_M}, k = {k_text(DEFAULTS_K)}",
                  f"{point.ratio_as_called:.3f}x" if point else "not measured as called",
                  point.ratio_as_called >= DEFAULTS_SPEEDUP if point else None)
    head = max((r for r in called if r.method in SPLITK_METHODS and (r.m, r.k) == (HEADLINE_M, HEADLINE_K)),
               key=lambda r: r.ratio_as_called, default=None)
    headline = Check(f"best split-K mode, as called, >= {HEADLINE_SPEEDUP}x the library GEMM as called at "
                     f"m = n = {HEADLINE_M}, k = {k_text(HEADLINE_K)}",
                     f"{head.ratio_as_called:.3f}x ({head.method})" if head else "not measured as called",
                     head.ratio_as_called >= HEADLINE_SPEEDUP if head else None)
    return [bandwidth, never, small, headline]


def best_fact(rows: Sequence[SplitkRow]) -> str | None:
    """The highest speed-up of a split-K mode over the library GEMM, and where."""
    top = max(best_split(rows).values(), key=lambda r: r.speedup, default=None)
    return f"{top.speedup:.3f}x ({_where(top)})" if top else None


def splitk_summary(counts: Mapping[str, Any], rows: Sequence[SplitkRow]) -> Summary:
    """Time, % of the copy's bandwidth and speed-up over the library GEMM of every method by
    (m, k), and the verdict."""
    methods = method_order(r.method for r in rows)
    compared = [name for name in methods if name not in (COPY, DEFAULTS)]
    splits = [name for name in methods if name in SPLITK_METHODS]
    called = [name for name in methods if name != COPY and any(r.method == name and r.as_called_s for r in rows)]
    dtypes = ", ".join(sorted({r.dtype for r in rows})) or "nothing measured"
    return Summary(
        scope=f"{counts['shapes']}; {len(splits)} split-K modes; {dtypes}",
        facts={**{key: counts[key] for key in ("points measured", "points already stored",
                                                "points left out (memory)")},
               "best split-K speed-up over the library GEMM": best_fact(rows)},
        tables=[method_table("time (ms)", rows, [m for m in methods if m != DEFAULTS], "time_s", 1e3, ".4g"),
                method_table("% of the copy's bandwidth", rows, compared, "roofline", 100.0, ".1f"),
                method_table("speed-up over the library GEMM", rows, splits, "speedup", 1.0, ".3f"),
                method_table("as called (ms)", rows, called, "as_called_s", 1e3, ".4g"),
                method_table("host time of one call (us)", rows, called, "host_s", 1e6, ".1f"),
                method_table("as called: speed-up over the library GEMM as called", rows,
                             [m for m in called if m != "gemm"], "ratio_as_called", 1.0, ".3f")],
        checks=checks(rows),
        notes=["bandwidth: the least bytes any method reads, itemsize (m + n) k, over its median time; the copy's: "
               "bytes read and written over its time, measured in the same interleaved group",
               "time: the executor by the device's clock, launch held out; as called: the public call (each mode's "
               "options, or none for splitk-defaults) in a loop of calls then one synchronise, by the host's clock, "
               "in the same rounds, against the library GEMM called the same way",
               "the library GEMM is cuBLAS on a GPU and the CPU BLAS on NumPy"])
