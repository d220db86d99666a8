"""What the ``segmented`` experiment measures: its sizes N per backend, its segments M, the memory a point
needs (points that do not fit are left out, and counted), and the largest N each decomposition allows.

Every point is a square product C = A B of side N (FP32 by default, the paper's), timed as one group of
four methods (:mod:`experiments.segmented.report` names them). The GPU sweep is N = 4096, 8192, 16384; the
CPU sweeps are small, because NumPy runs the kernel's emulation there (:func:`gpu.segmented.emulate`).
1-D and 2-D runs cut C into :data:`SEGMENTS` tasks (2 x 2 for 2-D) with :data:`BUFFERS` slots.

:func:`largest_sizes` applies the spec's segment formulas (:mod:`modeling.decomposition`) to this
machine's memory, as the paper's table did to a K40's: unsplit, A, B and C on the device; 1-D, one task's
segments in each of :data:`BUFFERS` equal shares of the device (one tile row per task, the smallest 1-D
segment, which still holds all of B), A, B and C in host memory; 2-D, A, B and C in host memory, and the
fewest segments whose task fits a share of the device.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpu.backend import Backend, get_backend
from gpu.segmented import TILE
from modeling.decomposition import largest_n, segment_bytes_1d, segment_bytes_2d

from ..core.lab import HEADROOM, free_memory

DTYPE = "float32"
#: Segments of the 1-D and 2-D runs (a perfect square, for 2-D), and the buffer slots they cycle through.
SEGMENTS, BUFFERS = 4, 2

PLANS: dict[tuple[str, bool], tuple[int, ...]] = {
    ("cupy", False): (4096, 8192, 16384),
    ("cupy", True): (4096, 8192),
    ("numpy", False): (128, 256),
    ("numpy", True): (128,),
}


@dataclass(frozen=True)
class Point:
    """A size N, its dtype and the segments M of its 1-D and 2-D runs."""

    n: int
    dtype: str = DTYPE
    m: int = SEGMENTS

    @property
    def itemsize(self) -> int:
        return np.dtype(self.dtype).itemsize


def point_params(point: Point, regime: str = "sustained") -> dict[str, Any]:
    """The stored parameters of a method at a point in a power regime."""
    return {"n": point.n, "dtype": point.dtype, "m": point.m, "regime": regime}


def host_available() -> int:
    """Host bytes available now (the kernel's MemAvailable, else the free pages)."""
    return get_backend("numpy").memory_info()[0]


def needs(point: Point, device_is_host: bool) -> tuple[int, int]:
    """(device, host) bytes of a point: A, B and C on each side, and :data:`BUFFERS` slots of the 1-D task (the
    larger) on the device with their pinned twins on the host (on NumPy both are the host)."""
    operands = 3 * point.n**2 * point.itemsize
    slots = int(BUFFERS * segment_bytes_1d(point.n, point.m, point.itemsize))
    if device_is_host:
        return 0, 2 * operands + slots
    return operands + slots, operands + slots


def custom_points(backend: Backend, sizes: Sequence[int] | None, m: int = SEGMENTS, dtype: str = DTYPE,
                  quick: bool = False) -> list[Point]:
    """The backend's sweep or the given sizes, after the checks: N a multiple of the tile with at least
    sqrt(M) (2-D) and M (1-D) tile rows, M a perfect square."""
    if m < 1 or math.isqrt(m) ** 2 != m:
        raise ValueError(f"--m: the 1-D and 2-D runs share M, so it must be a perfect square such as 4 or 9, got {m}")
    if sizes is not None and not sizes:
        raise ValueError("--n is empty; give sizes such as 4096,8192 or leave it out for the default")
    chosen = PLANS[(backend.name, quick)] if sizes is None else sorted(set(sizes))
    for n in chosen:
        if n < TILE * m or n % TILE:
            raise ValueError(f"--n: N = {n} must be a multiple of the tile {TILE} with at least M = {m} tile rows "
                             f"(N >= {TILE * m})")
    return [Point(n, dtype, m) for n in chosen]


def fitting_points(backend: Backend, points: Sequence[Point]) -> tuple[list[Point], int]:
    """The points whose memory fits in :data:`HEADROOM` of this host's and device's; how many did not.
    ValueError (before anything is measured) when none fits."""
    on_host = backend.name == "numpy"
    device, host = (None if on_host else free_memory(backend)), host_available()
    fits = [p for p in points if all(need <= HEADROOM * free for need, free in zip(needs(p, on_host), (device, host))
                                     if free is not None)]
    if not fits:
        raise ValueError("no segmented size fits in the free memory; choose a smaller --n")
    return fits, len(points) - len(fits)


def largest_one_d(buffer: float, itemsize: int, tile: int = TILE) -> tuple[int, int]:
    """(N, M): the largest N whose 1-D task fits ``buffer`` bytes, with one tile row per task (M = N / tile):
    more segments shrink A's and C's share, never B's."""
    m, n = 1, largest_n(buffer, 1, False, itemsize, tile)
    while n // tile > m:
        m = n // tile
        n = largest_n(buffer, m, False, itemsize, tile)
    return n, max(1, n // tile)


def fewest_2d_segments(n: int, buffer: float, itemsize: int, tile: int = TILE) -> int | None:
    """The smallest M = s^2 whose 2-D task at N fits ``buffer`` bytes (None: not even one tile per task)."""
    for s in range(1, n // tile + 1):
        if segment_bytes_2d(n, s * s, itemsize) <= buffer:
            return s * s
    return None


def largest_sizes(device_bytes: int, host_bytes: int, itemsize: int, buffers: int = BUFFERS,
                  tile: int = TILE) -> dict[str, int | None]:
    """The largest N of each decomposition (see the module notes), and the M it takes."""
    buffer = device_bytes / buffers
    host_n = largest_n(host_bytes, 1, True, itemsize, tile)
    one_d, one_d_m = largest_one_d(buffer, itemsize, tile)
    return {"unsplit": min(largest_n(device_bytes, 1, False, itemsize, tile), host_n),
            "1d": min(one_d, host_n), "1d_m": one_d_m,
            "2d": host_n, "2d_m": fewest_2d_segments(host_n, buffer, itemsize, tile)}


def memory_now(backend: Backend) -> tuple[int, int]:
    """(device, host) bytes free now; on NumPy the "device" is the host."""
    host = host_available()
    return (host if backend.name == "numpy" else free_memory(backend)), host
