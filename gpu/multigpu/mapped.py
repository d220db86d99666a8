"""Host matrices that every worker can map for itself: views of memory-mapped files, sent as handles.

A Dask task that needs a panel of a NumPy operand gets its bytes through the scheduler: scattered from the
client, or fetched from the worker that holds it. On one host that is a copy between processes over TCP
(1.6 GB/s on the two-H200 machine: 5.3 s for the 8.6 GB B panel of an N = 32768 product, three times the
product itself). Where the operand is a view of a file mapped shared (``np.load(path, mmap_mode="r")``,
``np.lib.format.open_memmap``, ``np.memmap`` in mode ``"r"``, ``"r+"`` or ``"w+"``), every worker that can
open the file can map the very panel it needs instead: on one host the mappings share the page cache (a
file under ``/dev/shm`` is host memory), and on several hosts a shared file system serves them. The task
then gets a :class:`MappedMatrix`, a handle of about a hundred bytes (file, byte offset of element [0, 0],
shape, byte strides, dtype), and :meth:`MappedMatrix.open` maps its byte range in the worker.

Mappings in mode ``"c"`` (copy-on-write: the caller's writes are private), views with a negative stride,
and arrays not backed by a file have no handle (:func:`locate` returns None) and travel as bytes.

**Page tables.** A fresh mapping costs a page fault per 64 KB at first touch. On the two-H200 machine (a
virtual machine) a worker mapping its 12.9 GB of panels afresh for each N = 32768 product streamed them
at 7-8 GB/s, against the 26-41 GB/s its staging threads copy from memory the process has touched.
So each process keeps its whole-file mappings (:data:`MAX_MAPPINGS`, the most recently used) and
populates a view's byte range with ``madvise(MADV_POPULATE_READ)`` (``_WRITE`` for an output) the first
time a view of it is opened, in parts on threads (:func:`gpu.outofcore.ahead.populate_range`): one call
ran at 5.6 GB/s on the two-H200 machine, 4.6 s of an 8.9 s one-shot product at N = 32768, and parts on 8
threads at 77-97 GB/s. Only the first: on pages already mapped the call still walks them,
about 100 ns a page there (0.6 s for the 26 GB of an N = 32768 product). A kept mapping is dropped
once its path names another file or none (replaced or deleted), so a new file under an old name is mapped
anew, and a deleted file's memory is given back when its last view goes and the process next opens a
view, or at once with :func:`release` (``client.run(release)`` on every worker).

**Page-locking.** :meth:`MappedMatrix.open` given a ``locker`` (the out-of-core engine's operations,
``backend.ops("outofcore")``) also locks the view's byte range of the kept mapping
(:mod:`gpu.outofcore.pagelock`), so that the engine's copies read and write the file's pages in place,
with no staging copy. The ranges stay locked with the mapping and are unlocked before it is dropped.
Opened with ``ahead=True`` a view is neither mapped in nor locked here: the engine does both piece by piece
beside its products (:mod:`gpu.outofcore.ahead`), and the mapping keeps the locker to unlock the pieces.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from ..backend import blas
from ..outofcore import ahead as lock_ahead
from ..outofcore import fileback

#: Modes of ``np.memmap`` whose mapping is shared with the file (and so with every other mapping of it).
SHARED_MODES = frozenset({"r", "r+", "w+"})
#: Whole-file mappings each process keeps (see the module notes).
MAX_MAPPINGS = 8

_LOCK = threading.Lock()


class PageLocker(Protocol):
    """What locks a mapping's pages for a device's copies: the out-of-core engine's operations."""

    def lock_pages(self, address: int, nbytes: int, writeable: bool) -> bool: ...

    def pages_locked(self, address: int, nbytes: int, writeable: bool = False) -> bool: ...

    def unlock_pages(self, address: int, nbytes: int) -> None: ...


@dataclass
class _Kept:
    """A kept whole-file mapping: its path, the mapping and its address, the byte ranges populated, and
    the lockers that locked pages of it."""

    path: str
    region: mmap.mmap
    address: int
    populated: list[tuple[int, int]]
    lockers: list[PageLocker]

    def drop(self) -> None:
        fileback.forget(self.address)
        for locker in self.lockers:
            locker.unlock_pages(self.address, len(self.region))


_MAPPINGS: OrderedDict[tuple[int, int, int, bool], _Kept] = OrderedDict()


def _same_file(path: str, key: tuple[int, int, int, bool]) -> bool:
    try:
        st = os.stat(path)
    except OSError:
        return False
    return (st.st_dev, st.st_ino, st.st_size) == key[:3]


def _mapping(path: str, writeable: bool, lo: int = 0, hi: int = 0, locker: PageLocker | None = None,
             reuse: bool = False, ahead: bool = False) -> mmap.mmap:
    """This process's shared mapping of the whole file at ``path``, its bytes ``[lo, hi)`` mapped in and,
    with a ``locker``, locked (kept; see the module notes); ``reuse``: locked only from the range's second
    opening on (a range read once is copied through the engine's staging buffers instead); ``ahead``:
    neither mapped in nor locked here, the engine doing both piece by piece (:mod:`gpu.outofcore.ahead`),
    the ``locker`` only kept with the mapping, which unlocks what it locked before it is dropped."""
    st = os.stat(path)
    key = (st.st_dev, st.st_ino, st.st_size, writeable)
    with _LOCK:
        for old, kept in list(_MAPPINGS.items()):
            if not _same_file(kept.path, old):
                _MAPPINGS.pop(old).drop()
        if key not in _MAPPINGS:
            with open(path, "r+b" if writeable else "rb") as f:
                region = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_WRITE if writeable else mmap.ACCESS_READ)
            address = np.frombuffer(region, np.uint8).ctypes.data if len(region) else 0
            _MAPPINGS[key] = _Kept(path, region, address, [], [])
            if writeable and address:
                fileback.register(address, len(region), path)
            while len(_MAPPINGS) > MAX_MAPPINGS:
                _MAPPINGS.popitem(last=False)[1].drop()
        _MAPPINGS.move_to_end(key)
        kept = _MAPPINGS[key]
        if ahead:
            if locker is not None and locker not in kept.lockers:
                kept.lockers.append(locker)
            return kept.region
        seen = any(a <= lo and hi <= b for a, b in kept.populated)
        if reuse and not seen:
            locker = None
        if hi > lo and not seen:
            start, began = lo - lo % mmap.PAGESIZE, time.perf_counter()
            if writeable:
                fileback.allocate(path, start, hi - start)
            populate(kept.region, kept.address, start, hi, writeable)
            kept.populated.append((lo, hi))
            lock_ahead.count("populate", time.perf_counter() - began, hi - start)
        fresh = locker is not None and hi > lo and not locker.pages_locked(kept.address + lo, hi - lo, writeable)
        began = time.perf_counter()
        locked = locker is not None and hi > lo and locker.lock_pages(kept.address + lo, hi - lo, writeable)
        if locked and fresh:
            lock_ahead.count("lock", time.perf_counter() - began, hi - lo)
        if locked and locker not in kept.lockers:
            kept.lockers.append(locker)
        return kept.region


def populate(region: mmap.mmap, address: int, start: int, stop: int, writeable: bool) -> None:
    """Map bytes ``[start, stop)`` of ``region`` (at ``address``; ``start`` page-aligned) in, in parts on
    threads where libc's ``madvise`` can be called without the interpreter's lock (``mmap.madvise`` holds it:
    :func:`gpu.outofcore.ahead.populate_range`); where the kernel has no populate advice, nothing: the pages
    fault in as they are read."""
    if not lock_ahead.HAS_LIBC or address == 0:
        with contextlib.suppress(OSError, ValueError):
            region.madvise(lock_ahead.POPULATE[writeable], start, stop - start)
        return
    lock_ahead.populate_range(address + start, stop - start, writeable)


def first_touch() -> dict[str, float]:
    """What this process has spent, since it started, making its mappings' pages ready for the device: seconds
    and bytes of mapping them in (``madvise`` populate) and of page-locking them (ranges not locked before). A
    product's first call pays these and its later calls do not, so a benchmark reads them from every worker
    (``client.run(first_touch)``) to split a one-shot product's time. The engine's pieces locked ahead
    (:mod:`gpu.outofcore.ahead`) count in the same table."""
    return lock_ahead.costs()


@dataclass(frozen=True)
class MappedMatrix:
    """A 2-D view of a file: element [i, j] is the ``dtype`` value at byte ``offset + i s0 + j s1`` of
    ``path``, for ``shape`` = (rows, cols) and ``strides`` = (s0, s1) >= 0. ``writeable``: the view may be
    written (the file was mapped ``"r+"`` or ``"w+"``, and the view is writeable)."""

    path: str
    offset: int
    shape: tuple[int, int]
    strides: tuple[int, int]
    dtype: str
    writeable: bool

    def extent(self) -> tuple[int, int]:
        """The byte range ``[lo, hi)`` of the file that the view reads (empty where it holds no element)."""
        if 0 in self.shape:
            return self.offset, self.offset
        last = sum((n - 1) * s for n, s in zip(self.shape, self.strides))
        return self.offset, self.offset + last + np.dtype(self.dtype).itemsize

    def __getitem__(self, key: tuple[slice, slice]) -> MappedMatrix:
        """The handle of the sub-view ``[rows, cols]`` (slices of step 1), as NumPy would slice it."""
        starts, shape = [], []
        for s, n in zip(key, self.shape):
            start, stop, step = s.indices(n)
            if step != 1:
                raise ValueError(f"a mapped view takes slices of step 1, got {s}")
            starts.append(start)
            shape.append(max(0, stop - start))
        offset = self.offset + sum(i * st for i, st in zip(starts, self.strides))
        return replace(self, offset=offset, shape=(shape[0], shape[1]))

    def meets(self, other: MappedMatrix) -> bool:
        """Whether the two views may share bytes: the same file and byte ranges that meet."""
        (lo, hi), (olo, ohi) = self.extent(), other.extent()
        if not blas.bytes_meet(lo, hi - lo, olo, ohi - olo):
            return False
        return self.path == other.path or os.path.samefile(self.path, other.path)

    def flush(self) -> None:
        """Write what this process wrote through the view to the file (for readers on other hosts)."""
        lo, hi = self.extent()
        if self.writeable and lo != hi:
            start = lo - lo % mmap.ALLOCATIONGRANULARITY
            _mapping(self.path, True).flush(start, hi - start)

    def open(self, locker: PageLocker | None = None, reuse: bool = False, ahead: bool = False) -> np.ndarray:
        """The view as a plain NumPy array over this process's mapping of the file (read-only unless
        ``writeable``), its pages mapped, and locked by ``locker`` where one is given (see the module notes:
        not while a copy from the mapping may run; with ``reuse``, only where this process opened the range
        before; with ``ahead``, neither: the engine maps and locks its pieces as it goes, and the mapping
        keeps ``locker`` to unlock them); the mapping lives at least as long as the array."""
        lo, hi = self.extent()
        if lo == hi:
            return np.empty(self.shape, dtype=self.dtype)
        region = _mapping(self.path, self.writeable, lo, hi, locker, reuse, ahead)
        return np.ndarray(self.shape, dtype=self.dtype, buffer=region, offset=self.offset, strides=self.strides)


def release() -> None:
    """Drop this process's kept mappings: the memory of files deleted since goes back once no view holds it
    (on the two-H200 machine, the kept mappings of one size's deleted operands held 58 GB of ``/dev/shm``
    until each worker opened the next size's)."""
    with _LOCK:
        while _MAPPINGS:
            _MAPPINGS.popitem()[1].drop()


def locate(x: np.ndarray) -> MappedMatrix | None:
    """The handle of ``x`` where it is a 2-D view of a file mapped shared (see the module notes), else None."""
    root = fileback.memmap_root(x)
    if root is None or root.mode not in SHARED_MODES or root.filename is None or x.ndim != 2:
        return None
    if any(s < 0 for s in x.strides):
        return None
    offset = root.offset + (x.__array_interface__["data"][0] - root.__array_interface__["data"][0])
    return MappedMatrix(os.fspath(root.filename), int(offset), (int(x.shape[0]), int(x.shape[1])),
                        (int(x.strides[0]), int(x.strides[1])), x.dtype.str,
                        bool(root.mode != "r" and x.flags.writeable))


def flush(x: np.ndarray) -> None:
    """Write the caller's changes to ``x``'s file where it views an ``np.memmap``, so that workers on other
    hosts read them (on one host the mappings share the page cache already)."""
    root = fileback.memmap_root(x)
    if root is not None and root.mode != "r":
        root.flush()
