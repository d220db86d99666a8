"""What the ``splitk`` experiment measures: its (m, k) points per backend, the split of each
mode, and the memory a point needs (points that do not fit are left out, and counted).

Every point is an output m x n with n = m and an inner dimension k. The GPU sweep is the
grid m = n in {8, 16, 32, 64, 128} by k = 2^14 .. 2^24, plus shapes that are not
multiples of the 16 x 16 output tile (m = n = 17 and 50) and an inner dimension that no chunk
width divides (k = 10^6 + 3). The CPU sweeps are small: NumPy stands in for the device there
so that the whole pipeline runs in tests.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from gpu.backend import Backend
from gpu.splitk import MAX_OUTPUTS, MIN_K, Kernel, SMLimits, SplitPlan
from gpu.splitk import plan as split_plan

from ..core.lab import HEADROOM, free_memory
from .rows import EXPERIMENT

DTYPE = "float64"
#: The chunk kernel of an m x n output (``partial(ops.kernel, dtype)``): kernels differ by output.
KernelOf = Callable[[int, int], Kernel]
#: The paper's most stable chunk width (K_offset), timed beside the planner's own choice.
PAPER_WIDTH = 1024
#: An inner dimension no chunk width divides (a prime above 10^6).
ODD_K = 10**6 + 3
#: How each split-K mode calls the planner: auto chunks (whole waves of the occupancy formula)
#: or chunks at most :data:`PAPER_WIDTH` wide; the deterministic reduction or atomic additions.
MODES: dict[str, dict[str, Any]] = {
    "splitk-det": {"deterministic": True},
    "splitk-atomic": {"deterministic": False},
    "splitk-det-w1024": {"deterministic": True, "chunk_width": PAPER_WIDTH},
    "splitk-atomic-w1024": {"deterministic": False, "chunk_width": PAPER_WIDTH},
}
#: B starts on this byte boundary in the buffer it shares with A (a library GEMM may pick
#: slower kernels for a misaligned operand).
ALIGN_BYTES = 256


@dataclass(frozen=True)
class Plan:
    """The grid ``sizes`` (m = n) x ``ks``, and ``extra`` (m, k) points beyond it."""

    sizes: tuple[int, ...]
    ks: tuple[int, ...]
    extra: tuple[tuple[int, int], ...] = ()

    def shapes(self) -> list[tuple[int, int]]:
        """Every (m, k) of the plan once, smallest m first, then smallest k."""
        return sorted({*itertools.product(self.sizes, self.ks), *self.extra})


POW2_K = tuple(2**e for e in range(14, 25))
PLANS: dict[tuple[str, bool], Plan] = {
    ("cupy", False): Plan((8, 16, 32, 64, 128), POW2_K,
                          tuple((m, k) for m in (17, 50) for k in POW2_K[::2])
                          + tuple((m, ODD_K) for m in (8, 16, 17, 32, 50, 64, 128))),
    ("cupy", True): Plan((16, 64), (2**16, 2**20, 2**22), ((17, ODD_K), (50, 2**20))),
    ("numpy", False): Plan((8, 16, 32, 64), (2**12, 2**14, 2**16, 2**18), ((17, 10**5 + 3), (50, 10**5 + 3))),
    ("numpy", True): Plan((8, 17), (2**12, 2**14)),
}


def point_params(m: int, k: int, dtype: str = DTYPE, regime: str = "sustained") -> dict[str, Any]:
    """The stored parameters of a method at (m, k) in a power regime (n = m); both regimes of one
    point are kept side by side."""
    return {"m": int(m), "n": int(m), "k": int(k), "dtype": dtype, "regime": regime}


def mode_splits(limits: SMLimits, kernel_of: KernelOf, m: int, k: int) -> dict[str, SplitPlan]:
    """The split each mode of :data:`MODES` runs at (m, k) with these device limits and the
    chunk kernel ``kernel_of(m, n)`` of that output."""
    kernel = kernel_of(m, m)
    return {name: split_plan(m, m, k, limits, kernel, **options) for name, options in MODES.items()}


def b_offset(m: int, k: int, itemsize: int) -> int:
    """Elements before B in the buffer A and B share: A's, rounded up to :data:`ALIGN_BYTES`."""
    step = ALIGN_BYTES // itemsize
    return -(-m * k // step) * step


def point_bytes(m: int, k: int, itemsize: int, splits: dict[str, SplitPlan]) -> int:
    """Device bytes of one point: A and B (one buffer), the copy's destination of the same size,
    C, and the largest deterministic workspace (one m x n partial per chunk)."""
    shared = b_offset(m, k, itemsize) + k * m
    workspace = max((s.workspace_elements() for s in splits.values()), default=0)
    return itemsize * (2 * shared + m * m + workspace)


def plan_points(plan: Plan, free: int, itemsize: int, limits: SMLimits, kernel_of: KernelOf
                ) -> tuple[list[tuple[int, int]], int]:
    """The (m, k) points whose bytes fit in :data:`HEADROOM` of ``free``, and how many did not."""
    budget = HEADROOM * free
    shapes = plan.shapes()
    fits = [(m, k) for m, k in shapes if point_bytes(m, k, itemsize, mode_splits(limits, kernel_of, m, k)) <= budget]
    return fits, len(shapes) - len(fits)


def fitting_points(backend: Backend, plan: Plan, dtype: str = DTYPE) -> tuple[list[tuple[int, int]], int]:
    """:func:`plan_points` with the backend's free memory, device limits and kernel; ValueError
    (before anything is measured) when no point fits."""
    ops = backend.ops("splitk")
    points, skipped = plan_points(plan, free_memory(backend), np.dtype(dtype).itemsize, ops.limits(),
                                  partial(ops.kernel, dtype))
    if not points:
        raise ValueError(f"no {EXPERIMENT} point fits in the memory free on the {backend.name} device; "
                         "choose smaller --m or --k")
    return points, skipped


def custom_plan(backend: Backend, sizes: Sequence[int] | None, ks: Sequence[int] | None) -> Plan:
    """``gemmlab splitk``'s plan: the backend's full sweep, or the grid of the given m and k (the
    full sweep's values for one left out; no extra shapes). An option given but empty, an m whose
    output is too large for split-K, and a k below :data:`~gpu.splitk.MIN_K` are errors."""
    base = PLANS[(backend.name, False)]
    for what, given in (("--m", sizes), ("--k", ks)):
        if given is not None and not given:      # given but empty: an error, never the default
            raise ValueError(f"{what} is empty; give values such as 16,32 or leave it out for the default")
    if sizes is None and ks is None:
        return base
    for m in sizes or ():
        if m < 1 or m * m > MAX_OUTPUTS:
            raise ValueError(f"--m: m = n = {m} is not an output split-K takes (1 to {MAX_OUTPUTS} outputs)")
    for k in ks or ():
        if k < MIN_K:
            raise ValueError(f"--k: k = {k} is below split-K's MIN_K = {MIN_K}; the library GEMM has enough "
                             "work per output tile there")
    return Plan(tuple(sorted(set(sizes or base.sizes))), tuple(sorted(set(ks or base.ks))))
