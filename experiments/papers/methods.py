"""Hattori's split-K, Sakai's decomposition and Nanai's Ozaki scheme: their published numbers beside ours.

Ours, all on the H100: the split-K sweep (``h100-splitk.csv``: cuBLAS DGEMM and each split-K mode in one
group per point), the segmented kernel (``h100-segmented.csv``: the plain kernel whole, with the translating
accessor, and 1-D and 2-D host to host, FP32 as the paper) and the Ozaki benchmark (``h100-ozaki.csv``: max
relative errors against the exact product, times against DGEMM and SGEMM in one group).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from modeling import hardware
from modeling import published as pub

from ..core.csvio import ExportRow
from .compare import Comparison, not_measured
from .exports import FILES, Exports, device, regime
from .strassen import cited

#: Our split-K configurations compared with the paper's: its 1024-wide chunks, and the toolkit's plan.
SPLITK = {"splitk-atomic-w1024": "1024-wide chunks, the paper's steadiest width",
          "splitk-atomic": "the toolkit's chunk plan"}
#: The paper's kernel needs sizes that are multiples of its 16 x 16 block.
BLOCK = 16


def _exponent(k: int) -> str:
    return f"2^{k.bit_length() - 1}" if k & (k - 1) == 0 else f"{k}"


def splitk_speedups(rows: Sequence[ExportRow], method: str, m: int, n: int, ks: tuple[int, int]) -> dict[int, float]:
    """Speed-up over the group's cuBLAS DGEMM by k, for one method and output, over the paper's k range and
    its sizes (multiples of the block)."""
    return {r.params["k"]: float(r.meta["speedup"]) for r in rows
            if r.method == method and (r.params["m"], r.params["n"]) == (m, n)
            and ks[0] <= r.params["k"] <= ks[1] and r.params["k"] % BLOCK == 0}


def hattori(ex: Exports) -> list[Comparison]:
    """Up to 2x at m = n = 16 and faster at every k at m = n = 32, against the largest and the smallest of
    ours over the same k."""
    rows = ex.rows("h100-splitk", "splitk")
    out = []
    for row in pub.load().splitk:
        for method, what in SPLITK.items():
            found = splitk_speedups(rows, method, row.m, row.n, row.k)
            pick, extreme = (max, "largest") if row.statistic == "max" else (min, "smallest")
            k = pick(found, key=found.__getitem__)
            holds = "" if row.statistic == "max" else \
                " The paper's statement holds here." if found[k] > row.speedup else " The paper's statement fails here."
            out.append(cited(
                row, quantity=f"speed-up over cuBLAS DGEMM, {extreme} over k: {method}",
                point=f"m = n = {row.m}, k = {_exponent(row.k[0])}-{_exponent(row.k[1])}", paper_value=row.speedup,
                paper_high=None, statistic="above" if row.strict else row.statistic, device=device(rows),
                value=found[k], high=None, regime=regime(rows), source=f"{FILES['h100-splitk']} ({method})",
                match=f"same m, n and k range ({len(found)} sizes); ours at k = {_exponent(k)}", fmt=".3g",
                note=f"ours: atomic adds into C, {what}.{holds}"))
    return out


def segmented(rows: Sequence[ExportRow], dtype: str = "float32") -> dict[str, dict[int, float]]:
    """Per method, per N, the time over the group's whole-array kernel."""
    out: dict[str, dict[int, float]] = {}
    for r in rows:
        if r.params["dtype"] == dtype:
            out.setdefault(r.method, {})[r.params["n"]] = float(r.meta["over_whole"])
    return out


def _span(values: dict[int, float]) -> str:
    return f"N = {min(values)}-{max(values)}"


def decomposition(row: Any, rows: Sequence[ExportRow]) -> dict[str, Any]:
    """The fields of one comparison with the segmented export (FP32, M = 4)."""
    over = segmented(rows)
    if row.quantity == "translation_speed_loss":
        loss = {n: 1 - 1 / t for n, t in over["translated"].items()}
        return {"quantity": "kernel speed lost to index translation", "point": "N not given",
                "value": min(loss.values()), "high": max(loss.values()), "fmt": ".1%",
                "match": f"the paper gives no N; ours lowest to highest over {_span(loss)}",
                "note": "ours: the same kernel with and without the translating accessor, on device-resident arrays"}
    if row.quantity == "slowdown_2d_over_1d":
        ratio = {n: over["2d"][n] / over["1d"][n] for n in over["2d"]}
        return {"quantity": "2-D time over 1-D time (the paper: 'up to 28% slower')", "point": "sizes both ran",
                "paper_value": 1 + row.value, "value": max(ratio.values()), "high": None, "fmt": ".3f",
                "match": f"largest over the sizes both ran, {_span(ratio)}",
                "note": "ours: host to host, M = 4, 2 buffers"}
    label = {"unsplit": "unsplit", "1d": "1-D blocks", "2d": "2-D blocks"}.get(row.method, row.method)
    what = {"largest_n": (f"largest N, {label}", ",.0f", "our sweep ran N = 4096-16384 and did not search "
                                                               "for the largest N that fits"),
            "speedup_two_gpus": ("two GPUs over one", ".3g", "the segmented export runs on one GPU"),
            "imbalance_loss": (f"time lost to load imbalance, M = {row.segments} on {row.gpus} GPUs", ".0%",
                               "the segmented export runs on one GPU")}[row.quantity]
    return {"quantity": what[0], "point": "", "fmt": what[1], **not_measured(what[2]),
            "note": f"paper: {row.memory:g} GiB of data" if row.memory else ""}


def sakai(ex: Exports) -> list[Comparison]:
    """Sakai's largest N, translation overhead, 2-D against 1-D and two-GPU scaling, beside the H100."""
    rows = ex.rows("h100-segmented", "segmented")
    out = []
    for row in pub.load().decomposition:
        fields = {"paper_value": row.value, "paper_high": row.high, "statistic": row.statistic,
                  "device": device(rows), "regime": regime(rows), "source": f"{FILES['h100-segmented']} (FP32)",
                  **decomposition(row, rows)}
        if fields["value"] is None:
            fields.update(regime="n/a", source="")
        out.append(cited(row, **fields))
    return out


def ozaki_errors(rows: Sequence[ExportRow], n: int, phi: float) -> dict[str, float]:
    """Max relative error by method at one size and phi (the first seed stored)."""
    found: dict[str, tuple[int, float]] = {}
    for r in rows:
        p = r.params
        mine = r.experiment == "ozaki-error" and p["n"] == n and p["phi"] == phi
        if mine and (r.method not in found or p["seed"] < found[r.method][0]):
            found[r.method] = (p["seed"], r.value)
    return {method: value for method, (_, value) in found.items()}


def ozaki_time(rows: Sequence[ExportRow], slices: int, n: int, key: str) -> float | None:
    """``speedup_vs_dgemm`` or ``slowdown_vs_sgemm`` of the paper's FP32 form at ``slices`` and ``n``."""
    found = [r.meta[key] for r in rows if r.experiment == "ozaki-time" and r.method == f"ozaki-fp32r-{slices}"
             and r.params["n"] == n]
    return float(found[0]) if found else None


def _accuracy(row: Any, rows: Sequence[ExportRow], n: int) -> dict[str, Any]:
    errors = ozaki_errors(rows, n, row.phi)
    return {"quantity": f"decimal digits gained over SGEMM, phi = {row.phi:g}", "fmt": ".3g", "high": None,
            "value": math.log10(errors["fp32"] / errors[f"ozaki-fp32r-{row.splits}"]),
            "match": f"N = {n}, one seed (the paper: N = 1024-4096, ten seeds each)",
            "note": "max relative error over all entries, against the exact product"}


def _timing(row: Any, rows: Sequence[ExportRow], n: int) -> dict[str, Any]:
    over_dgemm = row.quantity == "speedup_over_dgemm"
    size = row.sizes[0] if row.sizes else n
    value = ozaki_time(rows, row.splits, size, "speedup_vs_dgemm" if over_dgemm else "slowdown_vs_sgemm")
    gpu = hardware.lookup(device(rows))
    ours = {"value": value, "high": None, "match": "same N" if row.sizes else f"the paper gives no N; ours at N = {n}"}
    return {"quantity": "speed-up over DGEMM" if over_dgemm else "time over SGEMM", "fmt": ".3g",
            **(ours if value is not None else not_measured(f"our Ozaki timings start at N = {n}")),
            "note": f"paper: FP64 at 1/{row.fp32_over_fp64:g} of FP32; ours: DGEMM peak {gpu.peak_flops / 1e12:g}, "
                    f"SGEMM peak {gpu.fp32_tflops:g} TFLOP/s"}


def nanai(ex: Exports, n: int = 4096) -> list[Comparison]:
    """Digits gained over SGEMM (phi = 0.1), speed-ups over DGEMM and times over SGEMM, beside ours at ``n``."""
    rows = ex.rows("h100-ozaki")
    common = {"device": device(rows), "regime": regime(rows), "source": f"{FILES['h100-ozaki']} (fp32r)"}
    out = []
    for row in pub.load().ozaki:
        accuracy = row.quantity == "digits_gained_over_sgemm"
        point = f"{row.splits} splits" + (f", N = {row.sizes[0]}" if row.sizes and not accuracy else "")
        fields = (_accuracy if accuracy else _timing)(row, rows, n)
        out.append(cited(row, point=point, paper_value=row.value, paper_high=row.high, statistic=row.statistic,
                         **common, **fields))
    return out
