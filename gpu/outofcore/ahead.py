"""Page-locking ahead of the copies: the operands' pages locked in pieces while the products run.

A first product on host operands pays for getting their pages to the device. Measured on one H200 of
``nvidia-h200`` (``results/published/h200/h200-pagelock-probe.json``): ``cudaHostRegister`` of a populated
``/dev/shm`` mapping ran at 24 GB/s (16 GB/s unpopulated; 35-38 GB/s on anonymous memory) and did not run
faster on more threads; pinned staging buffers cost ``cudaHostAlloc`` at 1.4 GB/s, and a copy from pageable
memory, which the driver stages itself, ran at 6.7 GB/s. Locking the operands whole before the product (0.5 s
per 8.6 GB matrix) puts that time in front of it. Here (``staging="lock"``) the engine instead queues
the **pieces** of every range its schedule reads, in the order the schedule first reads them: aligned
:data:`PIECE`-byte chunks of the address space, clipped to the page-rounded extent of the array's memory,
so that two views of one array get the same pieces. The pieces are mapped in (``madvise`` populate, in
:data:`SUB_PIECE` parts on :data:`POPULATE_THREADS` threads) and registered one by one, each before the
first copy that reads it (:meth:`Ahead.wait`) and, while the device has queued work to run, ahead of it
(:meth:`Ahead.advance`), so that the products of the first panels overlap the locking of the later ones.
(Mapping pieces in on threads of their own, beside the registrations, slowed both: on two H200s at N =
65536 one worker's pieces took 102 thread-seconds to map in and 11.8 s to lock, against 1.2 s and 5.0 s
for whole ranges mapped in and then locked.) A writeable piece of a file mapped shared, a new output's, is
first made in its file (:mod:`gpu.outofcore.fileback`) on a thread of its own from the call's start (where
pieces are mapped in): that holds the file, not the mappings, and took a new C's one shot on two H200s at
N = 65536 from 14.5 to 10.2 s.

A copy from or to page-locked memory must lie inside **one** registration (a copy across two failed with
``cudaErrorInvalidValue`` on the H200), so a copy whose host view crosses a piece boundary is cut there
(:func:`cuts`, :func:`segments`): whole lines inside one piece go as one 2-D copy, and a line that crosses
a boundary goes as one copy per side. A piece is locked only where no range locked before holds it
(:meth:`~gpu.outofcore.pagelock.LockedRanges.gaps`: a caller's ``page_locked`` range sharing a page with it is
neither merged nor unlocked here). Pieces locked here are unlocked when the call ends, unless the
caller keeps them (``keep``: memory whose lifetime it manages, such as the kept mappings of
:mod:`gpu.multigpu.mapped`, which unlock them before they are dropped).
"""

from __future__ import annotations

import ctypes
import mmap
import os
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import numpy as np

from . import fileback
from .pagelock import LockedRanges, extent
from .timeline import Timeline

#: Bytes per locked piece: large enough that the registrations' fixed cost is small, small enough that the
#: first panel's pieces are locked long before the last ones.
PIECE = 2**30
#: Threads that map a piece's pages in just before it is registered, and the bytes each maps per call: a
#: piece's parts go to all the threads (parts of 256 MiB kept four of eight busy: 69 GB of mapped files took
#: 3.2 s per worker on two H200s at N = 65536, against 1.1 s for whole ranges on eight).
POPULATE_THREADS, SUB_PIECE = max(1, min(8, os.cpu_count() or 1)), 2**27
#: ``madvise`` advice that maps a range's pages in (Linux 5.14 and later; elsewhere the pages fault in).
POPULATE = {False: getattr(mmap, "MADV_POPULATE_READ", 22), True: getattr(mmap, "MADV_POPULATE_WRITE", 23)}
_LIBC = fileback.LIBC
#: Whether :func:`populate` can call libc's ``madvise`` (which lets go of the interpreter's lock).
HAS_LIBC = _LIBC is not None
_COSTS_LOCK = threading.Lock()
#: What this process's ahead locking has spent (see :func:`costs`).
_COSTS = {"populate_s": 0.0, "populate_bytes": 0, "lock_s": 0.0, "lock_bytes": 0}


def populate(address: int, nbytes: int, writeable: bool) -> bool:
    """Map the pages of ``[address, address + nbytes)`` in with libc's ``madvise`` (which lets go of the
    interpreter's lock); False where it cannot (no libc, an old kernel): the pages then fault in as read."""
    if _LIBC is None or nbytes <= 0:
        return False
    lo = address - address % mmap.PAGESIZE
    return int(_LIBC.madvise(ctypes.c_void_p(lo), ctypes.c_size_t(address + nbytes - lo), POPULATE[writeable])) == 0


def populate_range(address: int, nbytes: int, writeable: bool, pool: Executor | None = None) -> bool:
    """:func:`populate` of ``[address, address + nbytes)`` (``address`` page-aligned) in parts of
    :data:`SUB_PIECE` on ``pool``'s threads (on up to :data:`POPULATE_THREADS` made for the call where none
    is given): one ``madvise`` on one thread maps about 11 GB/s in, 4-8 threads 77-97 GB/s on two H200s'
    host. Whether every part was mapped in."""
    parts = range(address, address + nbytes, SUB_PIECE)

    def one(start: int) -> bool:
        return populate(start, min(SUB_PIECE, address + nbytes - start), writeable)
    if len(parts) <= 1:
        return all(one(start) for start in parts)
    if pool is not None:
        return all(pool.map(one, parts))
    with ThreadPoolExecutor(min(POPULATE_THREADS, len(parts)), thread_name_prefix="gemmlab-populate") as made:
        return all(made.map(one, parts))


def costs() -> dict[str, float]:
    """Seconds and bytes this process has spent populating and locking pages: the pieces locked ahead here,
    and the ranges :mod:`gpu.multigpu.mapped` maps in and locks whole (:func:`count`)."""
    with _COSTS_LOCK:
        return dict(_COSTS)


def count(what: str, seconds: float, nbytes: int) -> None:
    """Add ``seconds`` and ``nbytes`` of ``what`` (``"populate"`` or ``"lock"``) to this process's :func:`costs`."""
    with _COSTS_LOCK:
        _COSTS[f"{what}_s"] += seconds
        _COSTS[f"{what}_bytes"] += nbytes


def root_extent(x: np.ndarray) -> tuple[int, int]:
    """The address and byte count of the memory of the outermost array ``x`` views (its allocation, or the
    whole mapped file of an ``np.memmap``)."""
    root = x
    while isinstance(root.base, np.ndarray):
        root = root.base
    return extent(root)


def pieces(address: int, nbytes: int, bounds: tuple[int, int], piece: int | None = None) -> list[tuple[int, int]]:
    """The pieces ``(lo, hi)`` that hold ``[address, address + nbytes)``: the aligned ``piece``-byte chunks of
    the address space that meet it, clipped to the page-rounded ``bounds`` ``(address, nbytes)`` of the
    memory it lies in."""
    piece = piece or PIECE
    if nbytes <= 0:
        return []
    page = mmap.PAGESIZE
    first, last = bounds[0] - bounds[0] % page, -(-(bounds[0] + bounds[1]) // page) * page
    start = address - address % piece
    return [(max(c, first), min(c + piece, last)) for c in range(start, address + nbytes, piece)]


def cuts(ranges: Iterable[tuple[int, int]], address: int, nbytes: int) -> list[int]:
    """The boundaries of ``ranges`` (locked ranges as ``(lo, hi)``) strictly inside ``[address, address +
    nbytes)``, sorted: a copy of those bytes must not cross one."""
    inside = {b for lo, hi in ranges for b in (lo, hi) if address < b < address + nbytes}
    return sorted(inside)


def segments(base: int, pitch: int, width: int, height: int, boundaries: list[int]) -> list[tuple[int, int, int, int]]:
    """A copy of ``height`` lines of ``width`` bytes, ``pitch`` bytes apart from ``base``, cut so that no
    part crosses an address in ``boundaries`` (sorted): ``(line, lines, offset, nbytes)`` parts, each
    ``lines`` whole lines from ``line`` (``offset`` 0, ``nbytes`` = ``width``), or bytes ``[offset, offset +
    nbytes)`` of one line."""
    out, line, i = [], 0, 0
    while line < height:
        start = base + line * pitch
        while i < len(boundaries) and boundaries[i] <= start:
            i += 1
        if i == len(boundaries) or start + width <= boundaries[i]:
            last = height if i == len(boundaries) or pitch <= 0 else (boundaries[i] - width - base) // pitch + 1
            stop = min(height, last)
            out.append((line, stop - line, 0, width))
            line = stop
            continue
        at, j = start, i
        while at < start + width:
            end = min(start + width, boundaries[j]) if j < len(boundaries) else start + width
            out.append((line, 1, at - start, end - at))
            at, j = end, j + 1
        line += 1
    return out


class Ahead:
    """One call's page-locking ahead of its copies (see the module notes): :meth:`request` queues the pieces
    of a host view (each once, in the order asked, none already locked), :meth:`wait` maps in and locks
    the queued pieces in order up to the last a view needs (those whose locking fails are read pageable),
    :meth:`advance` locks more while the device still has work queued, and :meth:`close` stops and, unless
    ``keep``, unlocks the pieces it locked. The locking runs on the thread that issues the copies:
    ``cudaHostRegister`` holds up every other CUDA call of the process while it runs (on the H200 a copy
    issued beside a thread that registered pieces went no faster than the registrations), so it goes where
    that thread would otherwise wait. ``populate_pages``: map pieces in before they are registered;
    ``timeline``: record each piece's mapping and locking (lanes ``"mapping"`` and ``"locking"``, tagged by
    the order the piece was asked for; its clock started before the first request)."""

    def __init__(self, ranges: LockedRanges, keep: bool = False, populate_pages: bool = True,
                 piece: int | None = None, timeline: Timeline | None = None) -> None:
        self.ranges, self.keep, self.piece, self.timeline = ranges, keep, piece or PIECE, timeline
        self._mapper = ThreadPoolExecutor(POPULATE_THREADS, thread_name_prefix="gemmlab-populate") \
            if populate_pages else None
        self._queue: list[tuple[tuple[int, int], bool, tuple[str, int] | None]] = []
        self._maker: ThreadPoolExecutor | None = None
        self._made: dict[tuple[int, int], Future[bool]] = {}
        self._files = fileback.Allocator()
        self._index: dict[tuple[int, int], int] = {}
        self._next = 0
        self._fresh: list[tuple[int, int]] = []

    @property
    def pending(self) -> int:
        """Pieces queued and not locked yet."""
        return len(self._queue) - self._next

    def request(self, x: np.ndarray, writeable: bool = False) -> int:
        """Queue the pieces of host view ``x`` not queued yet and not locked already (by one range or several);
        the queue position of the last of its pieces (-1 where none is queued)."""
        address, nbytes = extent(x)
        last, back = -1, fileback.backing(x) if writeable else None
        for p in pieces(address, nbytes, root_extent(x), self.piece):
            if p not in self._index:
                if not self.ranges.gaps(p[0], p[1] - p[0], writeable):
                    continue
                self._index[p] = len(self._queue)
                self._queue.append((p, writeable, back))
                if back is not None:
                    self._make(p, back)
            last = max(last, self._index[p])
        return last

    def wait(self, x: np.ndarray, writeable: bool = False) -> None:
        """Lock the queued pieces in order up to the last that ``x`` needs (queued first where they were not)."""
        last = self.request(x, writeable)
        while self._next <= last:
            self._lock_next()

    def advance(self, busy: Callable[[], bool]) -> None:
        """Lock the next queued pieces while ``busy()`` says the device has work queued that outlasts one."""
        while self._next < len(self._queue) and busy():
            self._lock_next()

    def _make(self, p: tuple[int, int], back: tuple[str, int]) -> None:
        """Start making piece ``p``'s pages in its file (``back``: path and origin), in queue order on a thread of
        its own, beside the mapping in and locking of the pieces before it (``fallocate`` holds the file, not the
        process's mappings, which ``madvise`` and ``cudaHostRegister`` hold); a piece waits for its own before it
        is mapped in. Only where pieces are mapped in (``populate_pages``)."""
        if self._mapper is None:
            return
        if self._maker is None:
            self._maker = ThreadPoolExecutor(1, thread_name_prefix="gemmlab-allocate")
        self._made[p] = self._maker.submit(self._files.allocate, back[0], p[0] - back[1], p[1] - p[0])

    def _span(self, lane: str, tag: int) -> AbstractContextManager[None]:
        return nullcontext() if self.timeline is None else self.timeline.host(lane, tag)

    def _lock_next(self) -> None:
        """Map the next queued piece's gaps in (the parts no earlier range holds; a writeable file's pages made
        in the file first, :mod:`gpu.outofcore.fileback`; sub-pieces on the mapping threads) and lock them."""
        p, writeable, back = self._queue[self._next]
        tag, self._next = self._next, self._next + 1
        gaps = [(max(lo, p[0]), min(hi, p[1])) for lo, hi in self.ranges.gaps(p[0], p[1] - p[0], writeable)]
        if not gaps:                                   # held meanwhile (by ranges locked since it was queued)
            made = self._made.pop(p, None)
            if made is not None:
                made.cancel()
            return
        if self._mapper is not None:
            t0 = time.perf_counter()
            with self._span("mapping", tag):
                if p in self._made:
                    self._made.pop(p).result()
                done = [populate_range(lo, hi - lo, writeable, self._mapper) for lo, hi in gaps]
            if all(done):
                count("populate", time.perf_counter() - t0, sum(hi - lo for lo, hi in gaps))
        t0 = time.perf_counter()
        with self._span("locking", tag):
            mine = self.ranges.lock_gaps(p[0], p[1] - p[0], writeable)
        self._fresh += mine
        if mine:
            count("lock", time.perf_counter() - t0, sum(hi - lo for lo, hi in mine))

    def close(self) -> list[tuple[int, int]]:
        """Stop mapping pieces in and, unless ``keep``, unlock the ranges locked here (no copy from them may
        still run); the ranges this call locked, as ``(start, end)``."""
        if self._mapper is not None:
            self._mapper.shutdown()
        if self._maker is not None:
            self._maker.shutdown(cancel_futures=True)
        self._files.close()
        mine, self._fresh = self._fresh, []
        if not self.keep:
            for lo, hi in mine:
                self.ranges.unlock(lo, hi - lo)
        return mine


def first_uses(steps: Iterable[Any], A: np.ndarray, B: np.ndarray, C: np.ndarray,
               panels: bool = True) -> list[tuple[np.ndarray, bool]]:
    """The host views a schedule reads and writes, in the order it first does (``(view, writeable)``): per
    loading step its A and B panels (where ``panels``), per finished block (or strip) its C block."""
    out, seen = [], set()
    for s in steps:
        views = [(A[s.rows, s.panel], False), (B[s.panel, s.cols], False)] if s.load and panels else []
        views += [(C[s.rows, s.cols], True)] if s.last else []
        for view, writeable in views:
            key = (extent(view), writeable)
            if key not in seen:
                seen.add(key)
                out.append((view, writeable))
    return out


def copy_segments(copy: Callable[[int, int, int, int], None], base: int, pitch: int, width: int, height: int,
                  ranges: Iterable[tuple[int, int]]) -> int:
    """Issue ``copy(line, lines, offset, nbytes)`` for each part of a host view's copy (lines of ``width``
    bytes, ``pitch`` apart from ``base``) cut at the boundaries of ``ranges`` (:func:`segments`); the
    number of parts."""
    span = (height - 1) * pitch + width if height else 0
    parts = segments(base, pitch, width, height, cuts(ranges, base, span))
    for part in parts:
        copy(*part)
    return len(parts)
