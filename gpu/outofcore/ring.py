"""A ring of small pinned buffers that the panels of pageable operands are staged through, band by band.

The engine's ``"pinned"`` staging holds a pinned buffer as large as each panel slot and the C block: at N = 32768
on one H200 its first call spent about 6 s in ``cudaHostAlloc`` (1.4 GB/s), and ``"lock"`` registers every
byte it reads (16-24 GB/s for mapped files), though a product that is made once reads most of them once. Here
(``staging="stream"``) a panel of A or B is cut into bands of whole lines (:func:`bands`) that each fit one of
:data:`COUNT` buffers of :data:`CHUNK` bytes: the host copies a band into the next buffer (the staging copy, on
threads: 26-41 GB/s on the H100 machine) once that buffer's last copy to the device is done, and the copy
stream takes it from there, so the staging of one band overlaps the link's copy of the one before. The ring
is allocated once per call from CuPy's pinned pool (kept by the pool for the next call): 256 MiB, not the
panels' gigabytes. C's blocks are not staged here: the engine locks its pieces ahead of their write-back
(:mod:`gpu.outofcore.ahead`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: Bytes of one buffer of the ring, and the number of buffers.
CHUNK, COUNT = 64 * 2**20, 4


def bands(shape: tuple[int, int], itemsize: int, order: str, chunk: int) -> list[tuple[slice, slice]]:
    """The bands of whole lines (rows where ``order`` is "C", columns where "F") of a ``shape`` view, each of
    at most ``chunk`` bytes (one line where a line is larger), as index pairs, in order."""
    axis = 0 if order == "C" else 1
    lines, line_bytes = shape[axis], shape[1 - axis] * itemsize
    per = max(1, chunk // max(1, line_bytes))
    whole = slice(None)
    cuts = [slice(a, min(a + per, lines)) for a in range(0, lines, per)]
    return [(cut, whole) if axis == 0 else (whole, cut) for cut in cuts]


class Ring:
    """:data:`COUNT` buffers made by ``empty(elements, dtype)``, each of ``chunk`` bytes, taken in turn
    (:meth:`take`): a buffer is handed out once the fence of its last use (:meth:`fence`, anything with a
    ``synchronize()``: an event after its copy to the device) has passed."""

    def __init__(self, empty: Callable[[int, Any], Any], chunk: int, dtype: Any, count: int = COUNT) -> None:
        self.chunk = chunk
        self.buffers = [empty(max(1, chunk // dtype.itemsize), dtype) for _ in range(count)]
        self.fences: list[Any] = [None] * count
        self.next = 0

    def take(self) -> tuple[int, Any]:
        """The next buffer (its index and flat array), once what last read it is done."""
        index, self.next = self.next, (self.next + 1) % len(self.buffers)
        if self.fences[index] is not None:
            self.fences[index].synchronize()
            self.fences[index] = None
        return index, self.buffers[index]

    def fence(self, index: int, done: Any) -> None:
        """Buffer ``index`` is free again once ``done`` has passed."""
        self.fences[index] = done


def chunk_for(line_bytes: int) -> int:
    """The buffer size: :data:`CHUNK`, or one line where a line is larger."""
    return max(CHUNK, line_bytes)


def ring_bytes() -> int:
    """The host memory of a ring of :data:`COUNT` buffers of :data:`CHUNK` bytes (what a plan's memory check
    counts for it)."""
    return COUNT * CHUNK
