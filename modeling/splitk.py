"""Split-K's time model: the problem is memory-bound, so its floor is the bytes of A and B at the
device's bandwidth. The occupancy formula that sizes the grid lives with the execution layer
(:mod:`gpu.splitk.occupancy`), which runs it; it is re-exported here for the models.
"""

from __future__ import annotations

from gpu.splitk.occupancy import Kernel, SMLimits, chunk_width, chunks, resident_blocks

__all__ = ["Kernel", "SMLimits", "bandwidth_floor_s", "chunk_width", "chunks", "minimum_bytes", "resident_blocks"]


def minimum_bytes(m: int, n: int, k: int, itemsize: int = 8) -> int:
    """Bytes any method must read: A (m x k) and B (k x n) once; the output is negligible."""
    return itemsize * (m + n) * k


def bandwidth_floor_s(m: int, n: int, k: int, bandwidth: float, itemsize: int = 8) -> float:
    """Least time in seconds at ``bandwidth`` bytes/s: the problem is memory-bound."""
    return minimum_bytes(m, n, k, itemsize) / bandwidth
