"""The measured time of each method per class of shape, from a device profile's ``methods`` section.

A profile (:mod:`gpu.profile`) may hold, per power regime, beside Strassen's ``configurations``, a **methods**
section: per measured shape, each public call timed as called beside the library GEMM in one interleaved
group, and the ratio of their times (the GEMM's over the method's: above 1, faster)::

    {"points": [{"shape": [16384, 16384, 16384], "gemm_s": 0.166,
                 "timed": [{"method": "ozaki2", "config": {"moduli": "auto", "target": "dgemm"},
                            "ratio": 1.480, "waits": true, "source": "results/published/h200/..."}]},
                {"shape": [16, 1048576, 16], "gemm_s": 9.6e-5,
                 "timed": [{"method": "splitk", "config": {"deterministic": false}, "ratio": 1.285}]}]}

Shapes fall in **classes** (:func:`classify`): ``"tiny"`` outputs over a long inner dimension (m n at most
512^2 and k at least 4096: split-K's domain), keyed by k among the points whose output has the same m and n;
``"square"`` products (every side within 2x of the others), keyed by the cube root of m k n; ``"rect"``, the
rest, measured shapes only. Within a class a method's ratio at a size comes from
:func:`gpu.strassen.choose.estimates`: the measured ratio where it was measured, between two measured neighbours
no more than 2x apart the ratio linear in log size (a method's ratio grows smoothly with the size: Ozaki scheme
II measured 1.156x at N = 6144 on the H200, against 1.0x and 1.29x at 4096 and 8192, where the lower of the two,
Strassen's rule, said 1.03x), the lower of the two across a wider gap (the H200's Ozaki II points at 16384 and
49152 are 3x apart: 1.45x and 1.61x), the largest size's above it, and nothing below the smallest.

A point may say what its numbers rest on (``"basis"``): absent, they were measured; a section predicted for a GPU
nobody measured (``gpu/profiles/transfer-methods.json``, :func:`gpu.profile.methods`) says ``"predicted
(transfer model from H100, H200)"`` on every point, and the estimates built on such points say so instead of
"measured" (:func:`basis_of`). A split-K entry may record the split the measuring device took at its shape
(``"split": [chunk width, chunks]``, written by ``gemmlab calibrate --methods``): its proven bound rests on that
split, so a ranking made away from the device (``gemmlab choose --gpu``) proves what the device's would.

The methods whose bound is proven on the data (Ozaki scheme II under ``moduli="auto"`` and Ozaki I at a
target: :data:`PROVEN`) stay candidates where their class was never measured, with no estimate: where the
library GEMM cannot prove the accuracy asked for (a tight bound over a long inner dimension) they are what
keeps it. :func:`elsewhere` gives each one's median ratio over every shape measured, which orders them then.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..splitk.plan import MAX_OUTPUTS, MIN_K
from ..strassen.choose import estimates

#: Widest ratio between the sides of a product in the "square" class.
SQUARE_SPREAD = 2.0


@dataclass(frozen=True)
class Timed:
    """One method and its configuration, as a profile entry names them (the configuration as sorted pairs)."""

    method: str
    config: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def of(cls, method: str, config: Mapping[str, Any] | None = None) -> Timed:
        return cls(method, tuple(sorted((config or {}).items())))

    @property
    def options(self) -> dict[str, Any]:
        return dict(self.config)

    @property
    def name(self) -> str:
        """``ozaki2(moduli='auto', target='dgemm')``."""
        return f"{self.method}({', '.join(f'{k}={v!r}' for k, v in self.config)})"


#: The methods a product may take unmeasured (see the module notes), as a profile entry names them.
PROVEN = (Timed.of("ozaki2", {"moduli": "auto", "target": "dgemm"}), Timed.of("ozaki", {"target": "dgemm"}))
#: Methods of a section that multiply complex operands (:mod:`gpu.frontdoor.complexmm`): no real candidates.
COMPLEX_METHODS = ("ozaki2c",)


def legacy_config(method: str, config: Mapping[str, Any] | None) -> dict[str, Any]:
    """A profile entry's options as the current code reads them: an Ozaki II complex entry that names no scheme was
    timed when Karatsuba's 3M was the default (before 2M over the Gaussian moduli), so it names 3M."""
    config = dict(config or {})
    if method == "ozaki2c" and "scheme" not in config:
        config["scheme"] = "3m"
    return config


def classify(m: int, k: int, n: int) -> tuple[str, Any, int]:
    """(class, what points of the class must share, the size a ratio is estimated along) of an m x k by k x n
    product (see the module notes)."""
    if m * n <= MAX_OUTPUTS and k >= MIN_K:
        return "tiny", (m, n), k
    sides = (m, k, n)
    if max(sides) <= SQUARE_SPREAD * min(sides):
        return "square", None, round((m * k * n) ** (1 / 3))
    return "rect", (m, k, n), 0


@dataclass(frozen=True)
class Estimate:
    """A method's estimated ratio to the library GEMM at a shape, what it rests on, and whether it waits."""

    ratio: float
    basis: str
    waits: bool = False
    split: tuple[int, int] | None = None   # split-K's (chunk width, chunks) on the measuring device, at this shape


MEASURED = "measured"


def basis_of(points: Iterable[Mapping[str, Any]]) -> str:
    """What a set of points rests on: the first point's ``"basis"`` that is not "measured", else "measured"."""
    return next((str(p["basis"]) for p in points if p.get("basis", MEASURED) != MEASURED), MEASURED)


def label_of(section: Mapping[str, Any] | None) -> str:
    """"measured" or "predicted": the first word of what the section's points rest on."""
    return basis_of((section or {}).get("points", ())).partition(" ")[0]


def estimate_all(section: Mapping[str, Any] | None, m: int, k: int, n: int, dtype: str = "float64"
                 ) -> dict[Timed, Estimate]:
    """Every measured (or predicted) method's estimate for an m x k by k x n product of ``dtype`` (see the module
    notes; a point says ``"dtype": "complex128"`` where it timed complex products, else it timed float64 ones)."""
    kind, shared, size = classify(m, k, n)
    measured: dict[int, dict[Timed, float]] = {}
    waits: dict[Timed, bool] = {}
    splits: dict[Timed, tuple[int, int]] = {}
    used = []
    for point in (section or {}).get("points", ()):
        if point.get("dtype", "float64") != dtype:
            continue
        pm, pk, pn = (int(x) for x in point["shape"])
        p_kind, p_shared, p_size = classify(pm, pk, pn)
        if p_kind != kind or p_shared != shared:
            continue
        used.append(point)
        row = measured.setdefault(p_size, {})
        for entry in point.get("timed", ()):
            if entry.get("ratio") is None:
                continue
            key = Timed.of(entry["method"], legacy_config(entry["method"], entry.get("config")))
            row[key] = float(entry["ratio"])
            waits[key] = waits.get(key, False) or bool(entry.get("waits", False))
            if entry.get("split") and (pm, pk, pn) == (m, k, n):
                splits[key] = (int(entry["split"][0]), int(entry["split"][1]))
    found = estimates(measured, size, interpolate=True)
    along = "k" if kind == "tiny" else "N"
    where = {"tiny": f"m = {m}, n = {n}", "square": "square products", "rect": "this shape"}[kind]

    label, _, detail = basis_of(used).partition(" (")
    detail = detail.removesuffix(")")

    def said(basis: str) -> str:
        if kind == "rect":
            return f"{label} at this shape" + (f" ({detail})" if detail else "")
        return f"{label} ({detail + '; ' if detail else ''}{where}; {basis.replace('N = ', along + ' = ')})"
    return {key: Estimate(ratio, said(basis), waits[key], splits.get(key)) for key, (ratio, basis) in found.items()}


def elsewhere(section: Mapping[str, Any] | None) -> dict[tuple[str, Any], float]:
    """Each method's median ratio at each target over every shape the ``methods`` section measured it at (any
    class, any other option), by (method, target)."""
    seen: dict[tuple[str, Any], list[float]] = {}
    for point in (section or {}).get("points", ()):
        for entry in point.get("timed", ()):
            if entry.get("ratio") is not None:
                key = (entry["method"], (entry.get("config") or {}).get("target"))
                seen.setdefault(key, []).append(float(entry["ratio"]))
    return {key: statistics.median(ratios) for key, ratios in seen.items()}


def library_seconds(sections: Iterable[Mapping[str, Any] | None], m: int, k: int, n: int,
                    dtype: str = "float64") -> float | None:
    """The library GEMM's time for an m x k by k x n product, estimated from the measured point of its class of
    shape (:func:`classify`; ``methods`` points by shape, Strassen ``configurations`` points by size) nearest in
    work, scaled by the ratio of work: flops where the GEMM is bound by them, the bytes of A, B and C for a tiny
    output, which the traffic bounds (on the H200 16 x 2^20 x 16 took 0.2 ms, where a square point's flops would
    say 0.03); None where no point of the class holds a time."""
    kind = classify(m, k, n)[0]
    known = []
    for section in sections:
        for point in (section or {}).get("points", ()):
            if point.get("dtype", "float64") != dtype:
                continue
            shape = point.get("shape") or [point.get("size")] * 3
            if point.get("gemm_s") and all(shape) and classify(*shape)[0] == kind:
                known.append((_work(kind, *shape), float(point["gemm_s"])))
    if not known or not (m and k and n):
        return None
    work = _work(kind, m, k, n)
    near, seconds = min(known, key=lambda ws: abs(math.log(ws[0] / work)))
    return seconds * work / near


def _work(kind: str, m: int, k: int, n: int) -> float:
    """What a library GEMM's time grows with in a class of shape: A, B and C's elements for a tiny output, flops
    otherwise."""
    return float(m) * k + float(k) * n + float(m) * n if kind == "tiny" else float(m) * k * n
