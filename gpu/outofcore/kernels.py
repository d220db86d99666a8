"""The out-of-core engine on a CUDA device (CuPy only): pinned staging, three streams, events, cuBLAS.

Loaded by :meth:`gpu.backend.Backend.ops` for the CuPy backend only (``"outofcore"``): :class:`CudaOps` is
the GPU twin of :class:`gpu.outofcore.ops.HostOps` and keeps its calls and buffers.

**Route of a panel**: host view -> pinned staging -> device. The host arrays are pageable, and a copy from
pageable memory is staged by the driver through its own small pinned buffers, with the calling thread held
until the source has been read. Here the staging is explicit: :func:`gpu.outofcore.ops.stage` copies the
strided host view into a pinned buffer laid out like the device slot (packed, in the host array's order, so
that it reads whole contiguous lines), with :data:`gpu.outofcore.ops.STAGING_THREADS` threads, while the
device multiplies earlier panels; then one ``cudaMemcpy2DAsync`` per operand (:func:`copy_async`: pitch,
line width and line count from the two views' layouts) moves it to the device slot on the copy stream at
the link's rate. Where an operand's own pages are locked (:mod:`gpu.outofcore.pagelock`, registered here
with ``cudaHostRegister``, portable, read-only unless C), the copy reads the host view itself and the
staging goes (D2H likewise, straight into C, with no placement).

**Streams and events** (``plan.buffers`` = S slots, panels dealt to them in turn):

* copy stream: the H2D copies. Before it refills a slot it waits for ``consumed[slot]``, the event of the
  GEMM that last read the slot; after, it records ``loaded[slot]``. The host waits for ``loaded[slot]``
  before it overwrites the slot's pinned staging.
* compute stream: the GEMMs (cuBLAS through ``backend.gemm`` on the packed views), beta = 1 after the
  block's first panel. Each waits for ``loaded[slot]``; a block's first GEMM also waits for ``stored[c]``,
  the write-back of the block that last used its C buffer.
* store stream: the D2H copy of a finished block, after the compute stream's event at that point; it
  records ``stored[c]``. It runs on the other copy engine while the copy stream loads the next block's
  panels (and, with ``c_buffers = 2``, while the compute stream multiplies them).

A placement thread moves each staged block or strip into the output once its D2H copy is done, so the
host thread never waits for a write-back while it can issue loads and products.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from functools import partial
from typing import Any

import cupy
import numpy as np

from ..backend import Array, Backend, blas
from .ahead import Ahead, copy_segments
from .ops import (
    STAGING_THREADS,
    Buffers,
    PageLocking,
    host_span,
    median_seconds,
    new_block,
    orders,
    part,
    stage,
    staging_rate,
)
from .pagelock import LockedRanges
from .plan import ALL_STAGED, OutOfCorePlan
from .ring import ring_bytes
from .timeline import Timeline

#: Share of the host's available memory the engine may pin.
PIN_SHARE = 0.5
_RUNTIME = cupy.cuda.runtime
_H2D, _D2H = _RUNTIME.memcpyHostToDevice, _RUNTIME.memcpyDeviceToHost
#: ``cudaHostRegisterPortable`` (every device's context sees the range) and ``cudaHostRegisterReadOnly``.
_PORTABLE, _READ_ONLY = 1, 8


def _register(address: int, nbytes: int, writeable: bool) -> None:
    _RUNTIME.hostRegister(address, nbytes, _PORTABLE | (0 if writeable else _READ_ONLY))


#: The process's page-locked ranges (registrations belong to the process, not to a device).
RANGES = LockedRanges(_register, _RUNTIME.hostUnregister)


def pinned_empty(size: int, dtype: Any) -> np.ndarray:
    """A NumPy array of ``size`` elements in page-locked host memory (CuPy's pinned pool)."""
    dtype = np.dtype(dtype)
    memory = cupy.cuda.alloc_pinned_memory(max(1, size) * dtype.itemsize)
    return np.frombuffer(memory, dtype, size)


def _pointer(x: Array) -> int:
    return x.ctypes.data if isinstance(x, np.ndarray) else x.data.ptr


def _lines(x: Array) -> tuple[int, int, int]:
    """(pitch in bytes, line width in bytes, line count) of a 2-D view as ``cudaMemcpy2D`` reads it."""
    lay = blas.layout(x, _pointer(x))
    inner, outer = (lay.cols, lay.rows) if lay.order == "C" else (lay.rows, lay.cols)
    return lay.ld * x.itemsize, inner * x.itemsize, outer


def copy_async(dst: Array, src: Array, kind: int, stream: Any, ranges: LockedRanges | None = None) -> None:
    """``dst = src`` (one host and one device view of one shape and order) by ``cudaMemcpy2DAsync`` on
    ``stream``: one call, or, where the host view crosses a boundary of the locked ``ranges`` (a copy must
    lie inside one registration), one per part on either side (:func:`gpu.outofcore.ahead.copy_segments`)."""
    (dpitch, width, height), (spitch, swidth, sheight) = _lines(dst), _lines(src)
    if (width, height) != (swidth, sheight):
        raise RuntimeError(f"copy between views of different layouts: {dst.shape} {dst.strides} and "
                           f"{src.shape} {src.strides}")
    if not (width and height):
        return
    d, s = _pointer(dst), _pointer(src)

    def one(line: int, lines: int, offset: int, nbytes: int) -> None:
        _RUNTIME.memcpy2DAsync(d + line * dpitch + offset, dpitch, s + line * spitch + offset, spitch, nbytes, lines,
                               kind, stream.ptr)
    host, pitch = (s, spitch) if kind == _H2D else (d, dpitch)
    copy_segments(one, host, pitch, width, height, ranges.spans() if ranges is not None else ())


class CudaOps(PageLocking):
    """The out-of-core schedule on the current CUDA device (see the module notes)."""

    ranges = RANGES

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.pool = ThreadPoolExecutor(STAGING_THREADS, thread_name_prefix="outofcore-staging")
        self.placer = ThreadPoolExecutor(1, thread_name_prefix="outofcore-placement")
        self.copy_stream, self.compute_stream, self.store_stream = (backend.stream() for _ in range(3))
        self.pending: list[Future] = []
        self.release()

    def budget(self, host_free: int, staged: tuple[bool, bool, bool] = ALL_STAGED) -> int:
        """Device memory for the plan: what the device has free (CuPy's cached blocks included), and, where
        anything is ``staged``, no more than :data:`PIN_SHARE` of what the host has available: the pinned
        staging is as large as the device buffers (less a second C block), and locked memory is taken from
        everything else on the host. At N = 65536 FP64 on the H100 machine (125 GB of host memory, 103 GB
        of it A, B and C) that is the bound, not the GPU's 80 GB."""
        free = self.backend.memory_info()[0]
        return min(free, int(host_free * PIN_SHARE)) if any(staged) else free

    def host_bytes(self, plan: OutOfCorePlan, staged: tuple[bool, bool, bool] = ALL_STAGED,
                   ring: bool = False) -> int:
        """Host memory the operations allocate: the pinned staging buffers, or the ring."""
        return plan.staging_bytes(staged) + ring * ring_bytes()

    def begin(self, plan: OutOfCorePlan, A: Array, B: Array, C: Array, timeline: Timeline | None = None,
              direct: bool = False, ahead: Ahead | None = None, ring: bool = False) -> None:
        """The call's device buffers and pinned staging (none where ``direct``, ``ahead`` or ``ring``: copies
        from and to the operands' own pages, pageable or locked ahead of them, or A and B through a small
        pinned ring, :mod:`gpu.outofcore.ring`), and no event yet (nothing to wait for); with a time-line, its
        origin: an event on the idle device, and the host clock once it has passed."""
        self.timeline, self.ahead = timeline, ahead
        direct = direct or ahead is not None or ring
        if timeline is not None:
            self.origin = self.compute_stream.record()
            self.origin.synchronize()
            timeline.start()
        layout = orders(A, B, C)
        self.route = self.staged(A, B, C, direct)
        self.device = Buffers(cupy.empty, plan, A.dtype, layout, plan.c_buffers)
        self.staging = Buffers(pinned_empty, plan, A.dtype, layout, 1, self.route)
        self.streams(plan, A, B, ring, pinned_empty)
        self.slots = [None] * plan.buffers
        self.loaded: list[Any] = [None] * plan.buffers
        self.consumed: list[Any] = [None] * plan.buffers
        self.stored: list[Any] = [None] * plan.c_buffers

    @contextmanager
    def _span(self, lane: str, tag: int, stream: Any) -> Iterator[None]:
        """The device work the ``with`` body issues on ``stream`` as a span of ``lane`` (events around it,
        read after the run), where there is a time-line."""
        if self.timeline is None:
            yield
            return
        start = stream.record()
        yield
        end, origin = stream.record(), self.origin
        self.timeline.add(lane, tag, lambda: (cupy.cuda.get_elapsed_time(origin, start) / 1e3,
                                              cupy.cuda.get_elapsed_time(origin, end) / 1e3))

    def load(self, slot: int, a: Array, b: Array) -> None:
        """Stage panels ``a`` and ``b`` into the slot's pinned buffers (a page-locked operand's panel is not
        staged; a streamed one goes band by band through the ring), then copy them to its device buffers on
        the copy stream once the slot's last GEMM is done."""
        if self.loaded[slot] is not None and any(self.route[:2]):
            self.loaded[slot].synchronize()          # the slot's staging has reached the device: free
        if self.consumed[slot] is not None:
            self.copy_stream.wait_event(self.consumed[slot])     # the slot's last GEMM is done
        views, copy = [], partial(self._h2d, slot)
        for device, x, streamed in self.panel_sources(slot, a, b):
            if streamed:
                self.stream_panel(device, x, copy, self.copy_stream.record)
            else:
                copy(device, x)
            views.append(device)
        self.loaded[slot] = self.copy_stream.record()
        self.slots[slot] = tuple(views)

    def _h2d(self, slot: int, device: Array, x: Array) -> None:
        with self._span("H2D", slot, self.copy_stream):
            copy_async(device, x, _H2D, self.copy_stream, self.ranges)

    def multiply(self, slot: int, c_slot: int, first: bool, strip: slice | None = None) -> None:
        """The slot's GEMM into C buffer ``c_slot`` (its rows ``strip``) on the compute stream, once its
        panels are in."""
        a, b = self.slots[slot]
        c = part(self.device.c_view(c_slot, (a.shape[0], b.shape[1])), strip)
        a = part(a, strip)
        stream = self.compute_stream
        stream.wait_event(self.loaded[slot])
        if first and self.stored[c_slot] is not None:
            stream.wait_event(self.stored[c_slot])   # the block that used this C buffer has left the device
        with stream, self._span("GEMM", slot, stream):
            self.backend.gemm(a, b, c, 1.0, 0.0 if first else 1.0)
        self.consumed[slot] = stream.record()
        self.issued = [*self.issued[-1:], self.consumed[slot]]

    def busy(self) -> bool:
        """Whether the device has more than one product queued (the one before the last is not done): time
        for the host to lock a piece ahead (:meth:`gpu.outofcore.ahead.Ahead.advance`) without idling it."""
        return len(self.issued) == 2 and not self.issued[0].done

    def store(self, c_slot: int, c: Array, strip: slice | None = None) -> None:
        """C buffer ``c_slot`` (its rows ``strip``) to the pinned C staging on the store stream after the
        GEMMs so far, then into ``c`` (its rows ``strip``) by the placement thread once that copy is done,
        while this thread goes on issuing products (a new block first waits for every placement: it
        reuses the staging)."""
        if new_block(strip):
            self._place()
        staged = self.store_target(c, strip)
        self.store_stream.wait_event(self.compute_stream.record())
        with self._span("D2H", c_slot, self.store_stream):
            copy_async(staged, part(self.device.c_view(c_slot, c.shape), strip), _D2H, self.store_stream,
                       self.ranges)
        self.stored[c_slot] = self.store_stream.record()
        if self.route[2]:
            self.pending.append(self.placer.submit(self._placement, part(c, strip), staged, self.stored[c_slot]))

    def _placement(self, c: Array, staged: Array, stored: Any) -> None:
        stored.synchronize()
        with host_span(self.timeline, "placement"):
            stage(self.pool, c, staged)

    def _place(self) -> None:
        """Wait for every placement issued so far (raising the first error of any)."""
        pending, self.pending = self.pending, []
        for done in pending:
            done.result()

    def finish(self) -> None:
        """The last block into the output (its D2H copy waited for)."""
        self._place()
        self.store_stream.synchronize()

    def rates(self, nbytes: int, side: int, reps: int) -> dict[str, float]:
        """Pinned-to-device copies each way, a device copy and a GEMM, each timed by the backend's timer
        (CUDA events) on the copy or compute stream (medians of ``reps`` after a warm-up)."""
        host = pinned_empty(nbytes // 8, np.float64)
        dev, dev2 = cupy.empty(nbytes // 8), cupy.empty(nbytes // 8)
        a = cupy.ones((side, side))
        c = cupy.empty_like(a)

        def timed(stream: Any, work: Any) -> float:
            def once() -> float:
                with stream, self.backend.timer() as t:
                    work()
                return t.seconds
            return median_seconds(once, reps)

        copy = self.copy_stream
        h2d = timed(copy, lambda: _RUNTIME.memcpyAsync(dev.data.ptr, host.ctypes.data, host.nbytes, _H2D, copy.ptr))
        d2h = timed(copy, lambda: _RUNTIME.memcpyAsync(host.ctypes.data, dev.data.ptr, host.nbytes, _D2H, copy.ptr))
        hbm = timed(self.compute_stream, lambda: dev2.__setitem__(slice(None), dev))
        gemm = timed(self.compute_stream, lambda: self.backend.gemm(a, a, c))
        return {"h2d_bytes_per_s": host.nbytes / h2d, "d2h_bytes_per_s": host.nbytes / d2h,
                "staging_bytes_per_s": staging_rate(self.pool, host, reps), "hbm_bytes_per_s": 2 * host.nbytes / hbm,
                "gemm_flops_per_s": 2 * side**3 / gemm}

    def release(self) -> None:
        """Wait for the three streams (nothing in flight may still read or write the buffers), then drop them:
        the pinned and device blocks go back to CuPy's pools."""
        for stream in (self.copy_stream, self.compute_stream, self.store_stream):
            stream.synchronize()
        wait(self.pending)
        self.device = self.staging = self.timeline = self.ahead = self.ring = None
        self.pending = []
        self.slots, self.loaded, self.consumed, self.stored, self.issued = [], [], [], [], []
        self.route, self.streamed = ALL_STAGED, (False, False)
