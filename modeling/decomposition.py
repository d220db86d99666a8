"""Segment sizes of a matrix product cut into blocks (Sakai, Ino & Hagihara 2016).

With M segments per matrix and N x N operands (``shared/spec/decomposition.md``):

    1-D blocks (rows of A and C; B whole):  itemsize N^2 (M + 2) / M
    2-D blocks (A, B and C all tiled):      itemsize N^2 (2 sqrt(M) + 1) / M

A 1-D segment never drops below all of B, so the largest product stays bound
by one GPU's memory; a 2-D segment shrinks with M, so only the host bounds it.
The paper used FP32 (itemsize 4), the default here.
"""

from __future__ import annotations

import math

FP32 = 4


def _segments(m: int, square: bool = False) -> None:
    if m < 1:
        raise ValueError(f"the number of segments must be at least 1, got {m}")
    if square and math.isqrt(m) ** 2 != m:
        raise ValueError(f"2-D blocks need a perfect square number of segments, got {m}")


def segment_bytes_1d(n: int, m: int, itemsize: int = FP32) -> float:
    """Bytes one task holds with 1-D blocks: a row block of A and of C, and all of B."""
    _segments(m)
    return itemsize * n * n * (m + 2) / m


def segment_bytes_2d(n: int, m: int, itemsize: int = FP32) -> float:
    """Bytes one task holds with 2-D blocks: sqrt(M) tiles of A and of B, one tile of C."""
    _segments(m, square=True)
    return itemsize * n * n * (2 * math.isqrt(m) + 1) / m


def largest_n(memory_bytes: float, m: int, two_d: bool = True, itemsize: int = FP32) -> int:
    """Largest N whose segment fits in ``memory_bytes`` (a buffer, e.g. half a GPU's memory)."""
    if memory_bytes <= 0:
        raise ValueError(f"memory must be positive, got {memory_bytes}")
    per_n2 = (segment_bytes_2d if two_d else segment_bytes_1d)(1, m, itemsize)
    n = math.isqrt(int(memory_bytes / per_n2))
    while per_n2 * (n + 1) ** 2 <= memory_bytes:
        n += 1
    while n and per_n2 * n * n > memory_bytes:
        n -= 1
    return n
