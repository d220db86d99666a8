"""Page-locked host ranges: host memory the device's copy engines read and write in place.

The engine's route for a pageable host operand is host view -> pinned staging -> device
(:mod:`gpu.outofcore.kernels`): a host copy by the staging threads, then the DMA. Where the operand's own
pages are locked (``cudaHostRegister``), the DMA reads the strided view itself (one ``cudaMemcpy2DAsync``
with the view's pitch) and the host copy, its threads and its memory traffic go. Measured on the two-H200
machine: locking an 8.6 GB shared mapping of a ``/dev/shm`` file took 0.4-0.6 s (populated first, 0.7-1.2
s), and copies from views of it with 32 KB or wider lines ran at 55 GB/s each way, the link's rate, against
26-30 GB/s for staging when two processes staged at once.

:class:`LockedRanges` keeps one process's locked ranges as data: disjoint page-aligned byte ranges, each
one registration, so that the engine asks :meth:`LockedRanges.holds` whether a view lies inside a single
one (a copy may assume its source is locked only then). Locking a range that meets locked ones replaces
them by one registration of their union. The registering calls are given: CUDA's in
:mod:`gpu.outofcore.kernels`, and none on NumPy, where :class:`gpu.outofcore.ops.HostOps` takes the same
direct route so that the CPU tests run it. Unlock what you locked before the memory is unmapped or freed
(:func:`gpu.outofcore.page_locked` does; :mod:`gpu.multigpu.mapped` unlocks a kept mapping before it
drops it), and never while a copy from the range may still run.
"""

from __future__ import annotations

import mmap
import threading
import time
from collections.abc import Callable

import numpy as np

from ..backend import blas

#: ``register(address, nbytes, writeable)``: lock the pages (raise where they cannot be locked).
Register = Callable[[int, int, bool], None]
#: ``unregister(address)``: undo the registration that starts at ``address``.
Unregister = Callable[[int], None]


def extent(x: np.ndarray) -> tuple[int, int]:
    """The address and byte count of the memory a host view spans (zero bytes for an empty view)."""
    if not x.size:
        return x.__array_interface__["data"][0], 0
    lo, hi = np.lib.array_utils.byte_bounds(x)
    return lo, hi - lo


def _pages(address: int, nbytes: int) -> tuple[int, int]:
    lo = address - address % mmap.PAGESIZE
    hi = -(-(address + nbytes) // mmap.PAGESIZE) * mmap.PAGESIZE
    return lo, hi


class LockedRanges:
    """One process's page-locked ranges (see the module notes): ``ranges``, ``{start: (end, writeable)}``,
    and ``seconds``, the time spent registering so far (locking is paid once per range, not per product:
    a benchmark reports it apart)."""

    def __init__(self, register: Register, unregister: Unregister) -> None:
        self._register, self._unregister = register, unregister
        self.ranges: dict[int, tuple[int, bool]] = {}
        self.seconds = 0.0
        self._lock = threading.Lock()
        self._registering = threading.Lock()

    @property
    def nbytes(self) -> int:
        """Bytes locked now."""
        return sum(hi - lo for lo, (hi, _) in self.ranges.items())

    def holds(self, address: int, nbytes: int, writeable: bool = False) -> bool:
        """Whether locked ranges (that the device may write, where ``writeable``) cover ``[address, address +
        nbytes)``: one, or several side by side (a copy is cut at their boundaries); an empty range is held."""
        return not self.gaps(address, nbytes, writeable)

    def gaps(self, address: int, nbytes: int, writeable: bool = False) -> list[tuple[int, int]]:
        """The parts of ``[address, address + nbytes)``'s pages that no locked range holds (for the device to
        write, where ``writeable``), as ``(start, end)`` in order: what is left to lock without merging into
        ranges locked before (:mod:`gpu.outofcore.ahead` locks only these, and so unlocks only its own)."""
        if nbytes <= 0:
            return []
        lo, hi = _pages(address, nbytes)
        with self._lock:
            held = sorted((a, b) for a, (b, w) in self.ranges.items() if (w or not writeable) and a < hi and lo < b)
        out, at = [], lo
        for a, b in held:
            if a > at:
                out.append((at, a))
            at = max(at, b)
        return out + ([(at, hi)] if at < hi else [])

    def lock(self, address: int, nbytes: int, writeable: bool) -> bool:
        """Lock the pages of ``[address, address + nbytes)`` (the device writes them only where
        ``writeable``) and say whether they are locked now; False where the registration failed, the
        range then left as the pages were (pageable, or in their old ranges). One registration at a time;
        the table stays readable (:meth:`holds`, :meth:`spans`) while one runs. Ranges it meets are merged
        into one registration (:meth:`lock_gaps` merges with none it can avoid)."""
        if self.holds(address, nbytes, writeable):
            return True
        with self._registering:
            return self._merged(address, nbytes, writeable)

    def lock_gaps(self, address: int, nbytes: int, writeable: bool) -> list[tuple[int, int]]:
        """Lock the :meth:`gaps` of ``[address, address + nbytes)``, each a registration of its own, with no
        other registration in between (another thread cannot lock a gap meanwhile); the ranges registered
        here, which only their caller may unlock. A gap meets a range only where that range is read-only and
        the device must write: it is then merged, as :meth:`lock` does."""
        out = []
        with self._registering:
            for lo, hi in self.gaps(address, nbytes, writeable):
                if self._merged(lo, hi - lo, writeable):
                    out.append((lo, hi))
        return out

    def _merged(self, address: int, nbytes: int, writeable: bool) -> bool:
        """:meth:`lock`'s registration, ``_registering`` held."""
        if self.holds(address, nbytes, writeable):
            return True
        lo, hi = _pages(address, nbytes)
        with self._lock:
            met = {a: self.ranges.pop(a) for a in self._meeting(lo, hi)}
        lo, hi = min([lo, *met]), max([hi, *(b for b, _ in met.values())])
        writeable = writeable or any(w for _, w in met.values())
        for a in met:
            self._unregister(a)
        t0 = time.perf_counter()
        try:
            self._register(lo, hi - lo, writeable)
        except Exception:
            self._restore(met)
            return False
        finally:
            self.seconds += time.perf_counter() - t0
        with self._lock:
            self.ranges[lo] = (hi, writeable)
        return True

    def spans(self) -> list[tuple[int, int]]:
        """The locked ranges as ``(start, end)``, sorted: a copy must not cross the boundary of one."""
        with self._lock:
            return sorted((lo, hi) for lo, (hi, _) in self.ranges.items())

    def _meeting(self, lo: int, hi: int) -> list[int]:
        """Starts of the locked ranges that share a byte with ``[lo, hi)`` (the lock held)."""
        return [a for a, (b, _) in self.ranges.items() if blas.bytes_meet(a, b - a, lo, hi - lo)]

    def _restore(self, ranges: dict[int, tuple[int, bool]]) -> None:
        for a, (b, w) in ranges.items():
            try:
                self._register(a, b - a, w)
            except Exception:
                continue
            with self._lock:
                self.ranges[a] = (b, w)

    def unlock(self, address: int, nbytes: int) -> None:
        """Unlock every locked range that meets ``[address, address + nbytes)`` (a range that reaches beyond
        it is unlocked whole)."""
        lo, hi = _pages(address, nbytes)
        with self._registering:
            with self._lock:
                met = self._meeting(lo, hi)
                for a in met:
                    del self.ranges[a]
            for a in met:
                self._unregister(a)
