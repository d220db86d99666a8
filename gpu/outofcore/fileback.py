"""Pages of a shared file mapping made in the file before they are mapped in: a new output's first touch.

A product into a new output file (``np.lib.format.open_memmap(..., mode="w+")``, a file under ``/dev/shm``)
first has every page of it made: zeroed memory for the file, then mapped into the process. On the lent
virtual machines making them through page faults (``madvise(MADV_POPULATE_WRITE)``) ran at 3.8 GB/s on 8
threads of one process and 4.7 GB/s in 8 processes, while ``fallocate`` of the file's range ran at 10.5 GB/s
on one thread, after which mapping the made pages in is cheap (17 GB in 0.45 s)
(``results/published/h200/h200x2-shm-populate.json``; on memory no variant had used before, 10.5 GB/s on one
thread and no faster on 4 or 8, against 4.1 GB/s through faults; inside a one-shot product, made inline
before each piece's mapping beside the other worker's and the pinned ring's copies, 17 GB per worker took
8.5 s). So a writeable range of a file mapped shared is allocated in its file first
(:class:`Allocator`: Linux's ``fallocate`` keeping the file's size,
which leaves the bytes already there as they are and never writes zeros itself; where the file system has
no ``fallocate``, nothing is done and the pages fault in as before). Locking ahead
(:class:`gpu.outofcore.ahead.Ahead`, where it maps pieces in) allocates a call's output pieces on a thread of
its own from the call's start, in the order they are written: ``fallocate`` works on the file, not on the
process's mappings, so it runs beside the mapping in and the page-locking of the pieces before them.

Where a range lies in a file: an ``np.memmap`` view knows its file; a mapping made elsewhere (the kept
mappings of :mod:`gpu.multigpu.mapped`) is named here by :func:`register` and dropped by :func:`forget`.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import threading
from typing import Any

import numpy as np

#: Linux's ``FALLOC_FL_KEEP_SIZE``: allocate without changing the file's size.
KEEP_SIZE = 1
#: This process's C library (``madvise`` for :mod:`gpu.outofcore.ahead`, ``fallocate`` here), None off POSIX.
LIBC = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True) if os.name == "posix" else None
_LIBC = LIBC
_HAS_FALLOCATE = _LIBC is not None and hasattr(_LIBC, "fallocate")
if _HAS_FALLOCATE:
    _LIBC.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
_FILES: dict[int, tuple[int, str]] = {}
_LOCK = threading.Lock()


def register(address: int, nbytes: int, path: str) -> None:
    """Name the file that a shared mapping at ``address`` of ``nbytes`` maps from its byte 0."""
    with _LOCK:
        _FILES[address] = (nbytes, path)


def forget(address: int) -> None:
    """Drop the mapping at ``address`` (before it is unmapped)."""
    with _LOCK:
        _FILES.pop(address, None)


def memmap_root(x: np.ndarray) -> np.memmap | None:
    """The ``np.memmap`` that mapped the file ``x`` views (the one whose base is the mmap), or None."""
    base: Any = x
    while isinstance(base, np.ndarray):
        if isinstance(base, np.memmap) and isinstance(base.base, mmap.mmap):
            return base
        base = base.base
    return None


def backing(x: np.ndarray) -> tuple[str, int] | None:
    """``(path, origin)`` where ``x`` views a file mapped shared and writeable, so that the byte at address a
    is byte ``a - origin`` of the file; None otherwise."""
    root = memmap_root(x)
    if root is not None and root.filename is not None:
        if root.mode not in ("r+", "w+"):
            return None
        return os.fspath(root.filename), root.__array_interface__["data"][0] - root.offset
    address = x.__array_interface__["data"][0]
    with _LOCK:
        for start, (nbytes, path) in _FILES.items():
            if start <= address < start + nbytes:
                return path, start
    return None


def allocate(path: str, offset: int, nbytes: int) -> bool:
    """Make the file's pages of bytes ``[offset, offset + nbytes)`` with ``fallocate`` (one use of an
    :class:`Allocator`, which see); whether they are made or were already."""
    with Allocator() as files:
        return files.allocate(path, offset, nbytes)


class Allocator:
    """Makes pages of files with ``fallocate``, keeping each file open from its first range to :meth:`close`
    (one call's output pieces open it once). A range is clipped to the file's size, which is kept, and the
    bytes already there are left as they are; a file whose pages are all made is left alone (a written output:
    a call over made pages still walks them, 0.6 s per 17 GB on the two-H200 machine). Like any descriptor of a
    file, closing it gives up the ``fcntl`` locks this process holds on the file, and the file's modification
    time moves though no byte changes."""

    def __init__(self) -> None:
        self._fds: dict[str, int] = {}

    def allocate(self, path: str, offset: int, nbytes: int) -> bool:
        """Bytes ``[offset, offset + nbytes)`` of ``path`` made; False where they could not be (no ``fallocate``
        here or on the file system, the file not opened for writing, or no room left)."""
        if not _HAS_FALLOCATE or nbytes <= 0:
            return False
        fd = self._fds.get(path)
        if fd is None:
            try:
                fd = self._fds[path] = os.open(path, os.O_RDWR)
            except OSError:
                return False
        st = os.fstat(fd)
        lo, hi = max(0, offset), min(st.st_size, offset + nbytes)
        if hi <= lo or st.st_blocks * 512 >= st.st_size:
            return True
        return _LIBC.fallocate(fd, KEEP_SIZE, lo, hi - lo) == 0

    def close(self) -> None:
        """Close the files opened."""
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def __enter__(self) -> Allocator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
