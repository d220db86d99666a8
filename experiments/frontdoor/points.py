"""What the ``frontdoor`` experiment measures: its shapes and accuracies per backend, and the memory a shape
needs (shapes that do not fit are left out, each with its reason).

A point is a product m x k x n and an accuracy level (``"dgemm"``, ``"sgemm"`` or a bound t in (0, 1),
:class:`gpu.frontdoor.Accuracy`). The GPU grid is the one the front door must answer well on: squares
N = 512 .. 49152 (the Strassen and Ozaki II range), tall-skinny products m = n in {16, 64} with k in
{2^16, 2^20, 2^24} (split-K's domain) and two rectangular shapes, each at ``"dgemm"``, 1e-10 and ``"sgemm"``.
The CPU grids are small: NumPy stands in for the device there so that the whole pipeline runs in tests.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpu.backend import Backend
from gpu.frontdoor import LEVELS, Accuracy, as_accuracy

from ..core.lab import HEADROOM, free_memory

DTYPE = "float64"
Shape = tuple[int, int, int]
#: The accuracy levels of the grid, the strictest first.
ACCURACIES: tuple[Any, ...] = ("dgemm", 1e-10, "sgemm")
SQUARES = (512, 1024, 2048, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152)
TALL_SKINNY: tuple[Shape, ...] = tuple((m, 2**e, m) for m in (16, 64) for e in (16, 20, 24))
RECTANGULAR: tuple[Shape, ...] = ((4096, 65536, 4096), (32768, 4096, 32768))


def squares(*sizes: int) -> tuple[Shape, ...]:
    """N x N x N products, one per size."""
    return tuple((n, n, n) for n in sizes)


@dataclass(frozen=True)
class Plan:
    """The products and accuracy levels of a sweep: every product at every level."""

    shapes: tuple[Shape, ...]
    accuracies: tuple[Any, ...] = ACCURACIES

    def points(self) -> list[tuple[Shape, Any]]:
        """Every (shape, level) once, in :func:`shape_order`, then the levels' order."""
        return list(itertools.product(sorted(set(self.shapes), key=shape_order), self.accuracies))


PLANS: dict[tuple[str, bool], Plan] = {
    ("cupy", False): Plan(squares(*SQUARES) + TALL_SKINNY + RECTANGULAR),
    ("cupy", True): Plan(squares(1024, 4096, 16384) + ((16, 2**20, 16), (4096, 65536, 4096))),
    ("numpy", False): Plan(squares(64, 128) + ((8, 4096, 8),)),
    ("numpy", True): Plan(squares(32, 64) + ((8, 1024, 8),)),
}


def shape_order(shape: Shape) -> tuple[int, float, Shape]:
    """Squares first by N, then tall-skinny products (an output of at most 64 x 64), then the rest."""
    m, k, n = shape
    kind = 0 if m == k == n else 1 if m * n <= 64 * 64 else 2
    return kind, float(m) * k * n, shape


def power_text(v: int) -> str:
    """``2^20`` for a power of two from 2^16 on, else the number."""
    return f"2^{v.bit_length() - 1}" if v >= 2**16 and v & (v - 1) == 0 else str(v)


def shape_text(shape: Shape) -> str:
    """``N = 4096`` for a square, else ``16 x 2^20 x 16``."""
    m, k, n = shape
    return f"N = {n}" if m == k == n else " x ".join(power_text(v) for v in shape)


def shapes_text(shapes: Sequence[Shape], listed: int = 4) -> str:
    """The shapes of a sweep for its scope: each one up to ``listed``, else the first, the last and the count."""
    ordered = sorted(set(shapes), key=shape_order)
    if len(ordered) <= listed:
        return "; ".join(map(shape_text, ordered)) or "none"
    return f"{shape_text(ordered[0])} to {shape_text(ordered[-1])} ({len(ordered)} shapes)"


def accuracy_text(level: Any) -> str:
    """A level as stored and shown: ``dgemm``, ``sgemm``, or the bound as ``1e-10``."""
    level = Accuracy(level).level
    return level if isinstance(level, str) else f"{level:g}"


def accuracy_level(text: str) -> Any:
    """The level of a stored text (:func:`accuracy_text`'s inverse)."""
    return text if text in LEVELS else float(text)


def accuracy_order(text: str) -> tuple[int, float]:
    """``dgemm`` first, then bounds from the tightest, then ``sgemm``."""
    if text == "dgemm":
        return 0, 0.0
    if text == "sgemm":
        return 2, 0.0
    return 1, float(text)


def point_params(shape: Shape, level: Any, regime: str = "sustained") -> dict[str, Any]:
    """The stored parameters of a point in a power regime (both regimes of one point are kept side by side)."""
    m, k, n = shape
    return {"m": int(m), "k": int(k), "n": int(n), "accuracy": accuracy_text(level), "dtype": DTYPE,
            "regime": regime}


def point_bytes(shape: Shape, itemsize: int = 8) -> int:
    """Device bytes of a shape's operands: A, B and two outputs (each call makes a new one, and the one before
    it may still be held). The candidates' workspaces are not counted: a candidate whose workspace does not
    fit is refused when its plan is built, and the row says so."""
    m, k, n = shape
    return itemsize * (m * k + k * n + 2 * m * n)


def plan_points(shapes: Sequence[Shape], free: int, itemsize: int = 8) -> tuple[list[Shape], list[str]]:
    """The shapes whose bytes fit in :data:`~experiments.core.lab.HEADROOM` of ``free``, and a reason for
    each shape left out."""
    budget = HEADROOM * free
    fits = [s for s in shapes if point_bytes(s, itemsize) <= budget]
    left = [f"{shape_text(s)}: A, B and two outputs need {point_bytes(s, itemsize) / 2**30:.1f} GiB, "
            f"{budget / 2**30:.1f} GiB usable ({HEADROOM:.0%} of the free memory)" for s in shapes if s not in fits]
    return fits, left


def fitting_points(backend: Backend, plan: Plan) -> tuple[Plan, list[str]]:
    """:func:`plan_points` with the backend's free memory: the plan of the shapes that fit, and the reasons
    of those left out; ValueError (before anything is measured) where none fits."""
    fits, left = plan_points(plan.shapes, free_memory(backend), np.dtype(DTYPE).itemsize)
    if not fits:
        raise ValueError(f"no frontdoor shape fits in the memory free on the {backend.name} device: "
                         + "; ".join(left) + "; choose smaller --shape")
    return Plan(tuple(fits), plan.accuracies), left


def custom_plan(backend: Backend, shapes: Sequence[Shape] | None, accuracies: Sequence[Any] | None) -> Plan:
    """``gemmlab frontdoor``'s plan: the backend's grid, with the given shapes or accuracy levels in place of
    its own. An option given but empty, and the level ``"exact"`` (one method, nothing to compare), are
    errors."""
    base = PLANS[(backend.name, False)]
    for what, given in (("--shape", shapes), ("--accuracy", accuracies)):
        if given is not None and not given:      # given but empty: an error, never the default
            raise ValueError(f"{what} is empty; give values such as 4096:4096:4096 or dgemm,1e-10, or leave "
                             "it out for the default grid")
    levels = tuple(dict.fromkeys(as_accuracy(a).level for a in accuracies)) if accuracies else base.accuracies
    if "exact" in levels:
        raise ValueError("--accuracy exact has one method (accuracy.reference.exact_matmul): nothing to compare "
                         "the front door with; give dgemm, sgemm or a bound in (0, 1)")
    return Plan(tuple(dict.fromkeys(shapes)) if shapes else base.shapes, levels)
