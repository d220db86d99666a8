"""The ``outofcore`` experiment's result: every method by N as time, TFLOP/s and speed over the
in-core DGEMM, and the verdict against the engine's H100 targets.

Targets (on the H100): the engine runs at >= 90% of the in-core DGEMM's TFLOP/s at N = 32768, measured
in the same group: the DGEMM on operands kept on the device (the device's DGEMM rate; the host-to-
host GEMM, which waits for its copies, is a lower bar and is not judged); N = 65536 completes and is
correct (its sampled rows within the check's tolerance, the square root of FP64's epsilon). A target
whose point was not measured is reported as not judged (None).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..core.summary import Check, Summary, Table
from .rows import ENGINE, GEMM, RESIDENT, OutofcoreRow, method_order

#: The size of the speed target and the share of the in-core DGEMM's TFLOP/s it asks for.
TARGET_N, TARGET_SHARE = 32768, 0.9
#: The size that must complete and be correct.
LARGEST_N = 65536


def method_table(title: str, rows: Sequence[OutofcoreRow], methods: Sequence[str], value: str, scale: float,
                 fmt: str) -> Table:
    """One row per N, one column per method: ``scale`` times the rows' ``value`` (None where that
    method was not stored)."""
    cells = {(r.n, r.method): getattr(r, value) for r in rows}
    sizes = sorted({r.n for r in rows})
    return Table(title, ("N", *methods), [(n, *(None if cells.get((n, m)) is None else cells[(n, m)] * scale
                                                for m in methods)) for n in sizes],
                 formats={name: fmt for name in methods})


def checks(rows: Sequence[OutofcoreRow]) -> list[Check]:
    """The verdict against the engine's targets (see the module notes)."""
    engine = {r.n: r for r in rows if r.method == ENGINE}
    at = engine.get(TARGET_N)
    ratio = at.vs_dgemm if at else None
    share = Check(f"engine >= {TARGET_SHARE:.0%} of the in-core DGEMM's TFLOP/s (operands on the device) at "
                  f"N = {TARGET_N}, same group", f"{ratio:.1%} ({at.tflops:.2f} TFLOP/s)" if ratio is not None
                  else "not measured", ratio >= TARGET_SHARE if ratio is not None else None)
    big = engine.get(LARGEST_N)
    tolerance = np.finfo(np.float64).eps ** 0.5
    correct = Check(f"N = {LARGEST_N} completes out-of-core and is correct (sampled rows against exact_matmul)",
                    f"largest relative error {big.check_error:.2e}, {big.tflops:.2f} TFLOP/s" if big
                    else "not measured", big.check_error <= tolerance if big else None)
    return [share, correct]


def outofcore_summary(counts: Mapping[str, Any], rows: Sequence[OutofcoreRow]) -> Summary:
    """Time, TFLOP/s and speed over the in-core DGEMM of every method by N, and the verdict."""
    methods = method_order(r.method for r in rows)
    engine = [r for r in rows if r.method == ENGINE]
    best = max(engine, key=lambda r: r.tflops, default=None)
    dtypes = ", ".join(sorted({r.dtype for r in rows})) or "nothing measured"
    return Summary(
        scope=f"{counts['sizes']}; {dtypes}",
        facts={**{key: counts[key] for key in ("points measured", "points already stored",
                                                "points left out (memory)", "in-core GEMM left out (device memory)")},
               "best engine TFLOP/s": f"{best.tflops:.3f} (N = {best.n})" if best else None},
        tables=[method_table("time (s)", rows, methods, "time_s", 1.0, ".4g"),
                method_table("TFLOP/s", rows, methods, "tflops", 1.0, ".3f"),
                method_table("speed over the in-core DGEMM, operands on the device", rows,
                             [m for m in methods if m != RESIDENT], "vs_dgemm", 1.0, ".3f"),
                method_table("speed over the in-core DGEMM, host to host", rows, [m for m in methods if m != GEMM],
                             "vs_gemm", 1.0, ".3f")],
        checks=checks(rows),
        notes=["outofcore and gemm go from host memory to host memory: the gemm's time holds the copies of A "
               "and B to the device and of C back; dgemm multiplies A, B and C kept on the device (where they "
               "fit beside the engine's buffers); TFLOP/s is 2 N^3 over the median time",
               "on NumPy the engine gets 4 MiB of 'device' memory so that it streams blocks and panels, and both "
               "in-core products are A @ B"])
