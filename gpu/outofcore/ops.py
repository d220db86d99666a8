"""The out-of-core engine's operations per backend: panel slots, staged copies, products and write-back.

:func:`gpu.outofcore.run` issues one schedule (:meth:`gpu.outofcore.plan.OutOfCorePlan.steps`) through the
same calls whatever the backend, fetched as ``backend.ops("outofcore")``: :class:`HostOps` here (NumPy), and
:class:`gpu.outofcore.kernels.CudaOps` (CuPy, loaded only with that backend). The calls:

* ``begin(plan, A, B, C, timeline=None)``: the buffers of one call, allocated once and reused by every
  step: on the device the C block(s) and ``plan.buffers`` slots of an A and a B panel; on the host a
  staging buffer for each slot and one for the C block. Each buffer holds its panel or block packed (a
  fringe one at the start of the buffer) in the order, row- or column-major, of the host array it comes
  from or goes to, so that every copy moves whole contiguous lines (:func:`order_of`, :func:`packed`);
* ``load(slot, a, b)``: host views ``a`` (block rows x panel) of A and ``b`` (panel x block columns) of B
  into panel slot ``slot``: host view -> staging (:func:`stage`), staging -> device; or host view ->
  device, where the operand's pages are locked (below);
* ``multiply(slot, c_slot, first, strip=None)``: C buffer ``c_slot`` = a b where ``first`` (beta = 0:
  whatever the buffer held is ignored), += a b after (beta = 1); only the rows ``strip`` of a and of the
  buffer where one is given;
* ``store(c_slot, c, strip=None)``: C buffer ``c_slot`` (its rows ``strip``) back into ``c``, a host view
  of the output block (its rows ``strip``): device -> staging now, staging -> ``c`` by a later ``store``
  or by ``finish`` (the GPU's copy engines run meanwhile). A block's strips go to disjoint parts of the
  staging buffer, so a strip's copy is issued before the previous strip is placed; a new block's waits
  for the placement of everything before it. Where C's pages are locked, device -> ``c`` directly;
* ``finish()``: complete everything; ``release()``: let go of the buffers, also after an error.

Given a :class:`gpu.outofcore.timeline.Timeline` at ``begin``, the operations record when each of their
parts ran (:func:`host_span` here; CUDA events on the device).

Before any work: ``staged(A, B, C)``, which operands go through staging (those whose pages are not
locked), ``budget(host_free, staged)``, the device memory the plan may take where the host has
``host_free`` bytes available beside the output, and ``host_bytes(plan, staged)``, the host memory the
operations allocate.

**Page-locked operands** (:mod:`gpu.outofcore.pagelock`): ``lock_pages(address, nbytes, writeable)`` and
``unlock_pages(address, nbytes)`` keep the process's locked ranges, and an operand inside one skips the
staging: its panels are copied from the host view itself and C's blocks straight into it, with no host
copy, staging buffer or placement. On NumPy nothing is registered but the route is the same.

:class:`HostOps` runs the same copies as the GPU with NumPy (every copy of a pageable operand through a
staging buffer, the write-back deferred the same way), so the CPU tests exercise the very schedule and
layouts the GPU runs, fringes included.
"""

from __future__ import annotations

import functools
import os
import statistics
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import numpy as np

from ..backend import Array, Backend, register_ops
from .ahead import Ahead, copy_segments
from .pagelock import LockedRanges, extent
from .plan import ALL_STAGED, OutOfCorePlan
from .ring import Ring, bands, chunk_for, ring_bytes
from .timeline import Timeline

FAMILY = "outofcore"
#: Threads that copy host views into staging buffers and staged blocks into the output. NumPy lets go of
#: the GIL while it copies. Measured on the H100 machine (16 cores), a 32768 x 4096 FP64 panel of a
#: row-major matrix into pinned memory: 6.7 GB/s on one thread, 26 on 8, 41 on 16 (the link: 55).
STAGING_THREADS = max(1, min(16, os.cpu_count() or 1))
#: A copy is cut into bands for the threads only where each band has at least this many bytes.
MIN_BAND_BYTES = 4 * 2**20


def order_of(x: Array) -> str:
    """``"F"`` where x's columns are contiguous and its rows are not, else ``"C"``."""
    return "F" if x.strides[0] == x.itemsize and x.strides[1] != x.itemsize else "C"


def packed(flat: Array, shape: tuple[int, int], order: str) -> Array:
    """The first ``rows x cols`` elements of a flat buffer as a packed matrix of that order (NumPy or CuPy)."""
    rows, cols = shape
    head = flat[:rows * cols]
    return head.reshape(rows, cols) if order == "C" else head.reshape(cols, rows).T


def stage(pool: Executor, dst: np.ndarray, src: np.ndarray, bands: int = STAGING_THREADS) -> None:
    """``dst[...] = src`` on the host, cut into up to ``bands`` bands along dst's outer axis (its rows where
    it is row-major) that ``pool``'s threads copy at once; one copy where bands would be below
    :data:`MIN_BAND_BYTES`."""
    axis = 0 if order_of(dst) == "C" else 1
    lines = dst.shape[axis]
    count = max(1, min(bands, lines, dst.nbytes // max(1, MIN_BAND_BYTES)))
    if count == 1:
        np.copyto(dst, src)
        return
    cuts = [lines * i // count for i in range(count + 1)]
    parts = [(slice(a, b),) if axis == 0 else (slice(None), slice(a, b)) for a, b in zip(cuts, cuts[1:])]
    for done in [pool.submit(np.copyto, dst[p], src[p]) for p in parts]:
        done.result()


def _byte_lines(x: np.ndarray, order: str) -> np.ndarray:
    """A 2-D view's lines (its rows in ``order`` "C", its columns in "F") as rows of bytes."""
    lines = x if order == "C" else x.T
    return np.lib.stride_tricks.as_strided(lines, lines.shape, (lines.strides[0], lines.itemsize)).view(np.uint8)


def copy_lines(dst: np.ndarray, src: np.ndarray, ranges: LockedRanges, host: str = "src") -> None:
    """``dst[...] = src`` for NumPy views of one shape, lines in the ``host`` view's order (``"src"`` or
    ``"dst"``: the other is a buffer packed in that order), cut as the GPU's copy is where the host view
    crosses a boundary of the locked ``ranges`` (:func:`gpu.outofcore.kernels.copy_async`), so that the CPU
    runs the very parts the device copies."""
    if not dst.size:
        return
    order = order_of(src if host == "src" else dst)
    d, s = _byte_lines(dst, order), _byte_lines(src, order)
    h = s if host == "src" else d

    def one(line: int, lines: int, offset: int, nbytes: int) -> None:
        d[line:line + lines, offset:offset + nbytes] = s[line:line + lines, offset:offset + nbytes]
    copy_segments(one, h.ctypes.data, h.strides[0], h.shape[1], h.shape[0], ranges.spans())


def host_span(timeline: Timeline | None, lane: str, tag: int = 0) -> AbstractContextManager[None]:
    """The host work of a ``with`` body as a span of ``lane``, where there is a time-line."""
    return nullcontext() if timeline is None else timeline.host(lane, tag)


def median_seconds(once: Callable[[], float], reps: int) -> float:
    """Median of ``reps`` calls of ``once`` (each runs the work and returns its seconds) after a warm-up."""
    once()
    return statistics.median(once() for _ in range(reps))


def median_time(work: Callable[[], Any], reps: int, clock: Callable[[], float] = time.perf_counter) -> float:
    """Median seconds of ``reps`` runs of ``work`` on the host clock, after one warm-up run."""
    def once() -> float:
        t0 = clock()
        work()
        return clock() - t0
    return median_seconds(once, reps)


def staging_rate(pool: Executor, flat: np.ndarray, reps: int) -> float:
    """Bytes/s of :func:`stage` from a panel (a quarter of the columns) of a pageable row-major matrix into
    ``flat`` (pinned memory on a GPU), as the engine stages its panels."""
    rows = max(1, int((flat.size // 4) ** 0.5))
    host = np.ones((rows, 4 * rows))
    view = host[:, rows:2 * rows]
    dst = packed(flat, view.shape, "C")
    return view.nbytes / median_time(lambda: stage(pool, dst, view), reps)


def part(x: Array, strip: slice | None) -> Array:
    """The rows ``strip`` of x (all of x where None)."""
    return x if strip is None else x[strip]


def new_block(strip: slice | None) -> bool:
    """Whether a store starts a block (whose staging may still hold the previous block's last strip)."""
    return strip is None or strip.start == 0


class Buffers:
    """The buffers of one call on one side (device or host staging), made by ``empty(size, dtype)``:
    ``c_count`` C blocks and ``plan.buffers`` slots of an A and a B panel, with packed views of them (none
    for an operand not in ``which``, A, B and C: the staging of a page-locked one)."""

    def __init__(self, empty: Callable[[int, Any], Array], plan: OutOfCorePlan, dtype: Any,
                 orders: tuple[str, str, str], c_count: int, which: tuple[bool, bool, bool] = ALL_STAGED) -> None:
        (rows, cols), w = plan.block, plan.panel
        self.orders = orders
        self.a = [empty(rows * w, dtype) for _ in range(plan.buffers * which[0])]
        self.b = [empty(w * cols, dtype) for _ in range(plan.buffers * which[1])]
        self.c = [empty(rows * cols, dtype) for _ in range(c_count * which[2])]

    def panel(self, side: int, slot: int, shape: tuple[int, int]) -> Array:
        """Slot ``slot``'s A panel (``side`` 0) or B panel (1) as a packed view of ``shape``."""
        return packed((self.a, self.b)[side][slot], shape, self.orders[side])

    def c_view(self, c_slot: int, shape: tuple[int, int]) -> Array:
        return packed(self.c[c_slot], shape, self.orders[2])


def orders(A: Array, B: Array, C: Array) -> tuple[str, str, str]:
    """The orders of the A, B and C buffers: those of the host arrays they copy."""
    return order_of(A), order_of(B), order_of(C)


class PageLocking:
    """What both backends' operations share of the page-locked route (see the module notes): the locked
    ranges of the process, ``ranges``, set by each."""

    ranges: LockedRanges

    def lock_pages(self, address: int, nbytes: int, writeable: bool) -> bool:
        """Lock the pages of a host range for copies in place (the device writes it only where
        ``writeable``); whether they are locked now."""
        return self.ranges.lock(address, nbytes, writeable)

    def pages_locked(self, address: int, nbytes: int, writeable: bool = False) -> bool:
        """Whether a host range lies inside one locked range (that the device may write, where
        ``writeable``)."""
        return self.ranges.holds(address, nbytes, writeable)

    def unlock_pages(self, address: int, nbytes: int) -> None:
        """Unlock the locked ranges that meet a host range (before it is unmapped or freed)."""
        self.ranges.unlock(address, nbytes)

    def staged(self, A: Array, B: Array, C: Array | None, direct: bool = False) -> tuple[bool, bool, bool]:
        """Which of A, B and C (None: not allocated yet) go through staging: those not inside a locked range
        (one the device may write, for C); none where ``direct`` (copies straight from and to pageable
        memory, which the driver stages itself: no pinned buffers to allocate)."""
        if direct:
            return False, False, False
        return tuple(x is None or not self.pages_locked(*extent(x), writeable)
                     for x, writeable in ((A, False), (B, False), (C, True)))

    def panel_sources(self, slot: int, a: Array, b: Array) -> Iterator[tuple[Array, Array, bool]]:
        """For panels ``a`` and ``b`` of slot ``slot`` in turn: its device buffer view, the host array its
        copy reads (the view itself where the operand is page-locked or streamed, else its staging buffer,
        filled before it is yielded, so that one panel's copy can go while the next is staged), and whether
        it goes through the ring band by band (:meth:`stream_panel`). Needs the call's ``route``,
        ``streamed``, ``device`` and ``staging`` buffers, ``pool`` and ``timeline``."""
        for side, x in enumerate((a, b)):
            device = self.device.panel(side, slot, x.shape)
            if self.streamed[side]:
                yield device, x, True
                continue
            if self.ahead is not None:
                self.ahead.wait(x)
            if self.route[side]:
                staged = self.staging.panel(side, slot, x.shape)
                with host_span(self.timeline, "staging", slot):
                    stage(self.pool, staged, x)
                x = staged
            yield device, x, False

    def stream_panel(self, device: Array, x: Array, copy: Callable[[Array, Array], None],
                     fence: Callable[[], Any]) -> None:
        """Host view ``x`` into ``device`` band by band through the call's ring (:mod:`gpu.outofcore.ring`):
        each band staged into the next free buffer, then ``copy(device band, buffer)``; the buffer is free
        again once ``fence()`` (taken right after the copy) has passed."""
        order = order_of(x)
        for key in bands(x.shape, x.itemsize, order, self.ring.chunk):
            index, flat = self.ring.take()
            staged = packed(flat, x[key].shape, order)
            with host_span(self.timeline, "staging", index):
                stage(self.pool, staged, x[key])
            copy(device[key], staged)
            self.ring.fence(index, fence())

    def streams(self, plan: OutOfCorePlan, A: Array, B: Array, ring: bool, empty: Callable[[int, Any], Any]
                ) -> None:
        """Set ``streamed`` (A and B go through a ring: where ``ring`` and their pages are not locked) and
        make the call's ``ring`` of ``empty`` buffers where one does, each buffer at least one line of
        either panel."""
        self.streamed = tuple(ring and not self.pages_locked(*extent(x)) for x in (A, B))
        if not any(self.streamed):
            self.ring = None
            return
        (rows, cols), w = plan.block, plan.panel
        lines = [(s[1] if order_of(x) == "C" else s[0]) * x.itemsize for x, s in ((A, (rows, w)), (B, (w, cols)))]
        self.ring = Ring(empty, chunk_for(max(lines)), A.dtype)

    def store_target(self, c: Array, strip: slice | None) -> Array:
        """Where a finished block's (or strip's) copy from the device lands: the C staging buffer, or ``c``
        itself where C is page-locked (once its pieces are, where they are locked ahead). Needs the call's
        ``route`` and ``staging`` buffers."""
        if self.route[2]:
            return part(self.staging.c_view(0, c.shape), strip)
        if self.ahead is not None:
            self.ahead.wait(c, writeable=True)
        return part(c, strip)


#: The NumPy operations' locked ranges: nothing to register, the route is the GPU's.
HOST_RANGES = LockedRanges(lambda address, nbytes, writeable: None, lambda address: None)


class HostOps(PageLocking):
    """The schedule on NumPy: "device" buffers are NumPy arrays too, every copy goes through a staging buffer
    as on the GPU (:func:`stage`, then ``np.copyto`` for the DMA) unless the operand is "page-locked"
    (copied in place, as on the GPU), and products are the backend's GEMM on the packed views."""

    ranges = HOST_RANGES

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.pool = ThreadPoolExecutor(STAGING_THREADS, thread_name_prefix="outofcore-staging")
        self.release()

    def budget(self, host_free: int, staged: tuple[bool, bool, bool] = ALL_STAGED) -> int:
        """Device memory for the plan: half the host's, because every "device" buffer may have a staging twin
        in the same memory."""
        return host_free // 2

    def host_bytes(self, plan: OutOfCorePlan, staged: tuple[bool, bool, bool] = ALL_STAGED,
                   ring: bool = False) -> int:
        """Host memory the operations allocate: the "device" buffers, the staging buffers and the ring."""
        return plan.device_bytes + plan.staging_bytes(staged) + ring * ring_bytes()

    def begin(self, plan: OutOfCorePlan, A: Array, B: Array, C: Array, timeline: Timeline | None = None,
              direct: bool = False, ahead: Ahead | None = None, ring: bool = False) -> None:
        """The call's "device" buffers and their staging twins (one C staging buffer: see ``store``; none where
        ``direct`` or ``ahead``), and the ring A and B are streamed through where ``ring``."""
        self.timeline, self.ahead = timeline, ahead
        direct = direct or ahead is not None or ring
        if timeline is not None:
            timeline.start()
        layout = orders(A, B, C)
        self.route = self.staged(A, B, C, direct)
        self.device = Buffers(np.empty, plan, A.dtype, layout, plan.c_buffers)
        self.staging = Buffers(np.empty, plan, A.dtype, layout, 1, self.route)
        self.streams(plan, A, B, ring, np.empty)
        self.slots = [None] * plan.buffers

    def load(self, slot: int, a: Array, b: Array) -> None:
        """Panels ``a`` and ``b`` into slot ``slot``: host view -> staging -> "device", as on the GPU (host
        view -> "device" for a page-locked operand; band by band through the ring for a streamed one)."""
        views, copy = [], functools.partial(self._h2d, slot)
        for device, x, streamed in self.panel_sources(slot, a, b):
            if streamed:
                self.stream_panel(device, x, copy, lambda: None)
            else:
                copy(device, x)
            views.append(device)
        self.slots[slot] = tuple(views)

    def _h2d(self, slot: int, device: Array, x: Array) -> None:
        with host_span(self.timeline, "H2D", slot):
            copy_lines(device, x, self.ranges)

    def multiply(self, slot: int, c_slot: int, first: bool, strip: slice | None = None) -> None:
        """C buffer ``c_slot`` (its rows ``strip``) = (``first``) or += the product of the slot's panels."""
        a, b = self.slots[slot]
        c = self.device.c_view(c_slot, (a.shape[0], b.shape[1]))
        with host_span(self.timeline, "GEMM", slot):
            self.backend.gemm(part(a, strip), b, part(c, strip), 1.0, 0.0 if first else 1.0)

    def store(self, c_slot: int, c: Array, strip: slice | None = None) -> None:
        """C buffer ``c_slot`` (its rows ``strip``) into the staging buffer now, into ``c`` (its rows
        ``strip``) at a later store or at finish."""
        if new_block(strip):
            self._place()
        staged = self.store_target(c, strip)
        with host_span(self.timeline, "D2H", c_slot):
            copy_lines(staged, part(self.device.c_view(c_slot, c.shape), strip), self.ranges, host="dst")
        self._place()
        if self.route[2]:
            self.pending.append((part(c, strip), staged))

    def busy(self) -> bool:
        """Never: every call here has finished when it returns."""
        return False

    def _place(self) -> None:
        """The staged blocks or strips (if any) into their places in the output."""
        for c, staged in self.pending:
            with host_span(self.timeline, "placement"):
                stage(self.pool, c, staged)
        self.pending = []

    def finish(self) -> None:
        """The last staged block into the output."""
        self._place()

    def rates(self, nbytes: int, side: int, reps: int) -> dict[str, float]:
        """Host memory copies standing in for the link and HBM, and BLAS's GEMM rate (medians)."""
        src, dst = np.ones(nbytes // 8), np.empty(nbytes // 8)
        a = np.ones((side, side))
        copy = median_time(lambda: np.copyto(dst, src), reps)
        gemm = median_time(lambda: self.backend.gemm(a, a, np.empty_like(a)), reps)
        return {"h2d_bytes_per_s": src.nbytes / copy, "d2h_bytes_per_s": src.nbytes / copy,
                "staging_bytes_per_s": staging_rate(self.pool, dst, reps), "hbm_bytes_per_s": 2 * src.nbytes / copy,
                "gemm_flops_per_s": 2 * side**3 / gemm}

    def release(self) -> None:
        """Drop the call's buffers (also after an error)."""
        self.device = self.staging = self.timeline = self.ahead = self.ring = None
        self.pending = []
        self.slots = []
        self.route, self.streamed = ALL_STAGED, (False, False)


register_ops(FAMILY, "numpy", HostOps)
register_ops(FAMILY, "cupy", "gpu.outofcore.kernels:CudaOps")
