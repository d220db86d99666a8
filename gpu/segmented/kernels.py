"""The segmented launcher on a CUDA device (CuPy only): the kernel compiled per mode, pinned staging, streams.

Loaded by :meth:`gpu.backend.Backend.ops` for the CuPy backend only (``"segmented"``): :class:`CudaOps` is
the GPU twin of :class:`gpu.segmented.ops.HostOps`. The kernel of :mod:`gpu.segmented.source` is compiled by
NVRTC once per (access mode, dtype, index type, tile) and cached (:func:`compiled`).

**Route of a segment** (as in :mod:`gpu.outofcore.kernels`, whose :func:`pinned_empty`, :func:`copy_async` and
staging threads are reused): host view -> pinned staging (packed, copied by threads) -> device slot by one
``cudaMemcpy2DAsync``; C's segment back the same way. **Streams and events**, per slot (``buffers`` of them,
tasks dealt in turn):

* copy stream: H2D copies. Before it refills a slot it waits for ``consumed[slot]`` (the launch that last read
  it); after, it records ``loaded[slot]``. The host waits for ``loaded[slot]`` before it overwrites the slot's
  pinned staging.
* compute stream: the launch waits for ``loaded[slot]`` and for ``stored[slot]`` (the write-back of the C buffer
  it is about to overwrite), and records ``consumed[slot]``.
* store stream: the D2H copy of the C buffer after ``consumed[slot]``; it records ``stored[slot]``. The host
  moves the staged C segment into the output when the slot is next stored, or at ``finish``.

So the copies of task i + 1 overlap the launch of task i, and its write-back the launch of task i + 1.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from functools import cache
from typing import Any

import cupy
import numpy as np

from ..backend import Array, Backend
from ..outofcore.kernels import copy_async, pinned_empty
from ..outofcore.ops import STAGING_THREADS, stage
from .geometry import Launch
from .ops import packed
from .source import KERNEL, index_type, kernel_source

_RUNTIME = cupy.cuda.runtime
_H2D, _D2H = _RUNTIME.memcpyHostToDevice, _RUNTIME.memcpyDeviceToHost
_INDEX = {"int": np.int32, "long long": np.int64}


@cache
def compiled(mode: str, dtype: str, index: str, tile: int) -> Any:
    """The kernel for one access mode, dtype name, index type and tile, compiled once."""
    return cupy.RawKernel(kernel_source(mode, dtype, index, tile), KERNEL, options=("--std=c++14",))


class CudaOps:
    """The segmented schedule on the current CUDA device (see the module notes)."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.pool = ThreadPoolExecutor(STAGING_THREADS, thread_name_prefix="segmented-staging")
        self.copy_stream, self.compute_stream, self.store_stream = (backend.stream() for _ in range(3))
        self.release()

    def launch(self, mode: str, A: Array, B: Array, C: Array, ln: Launch) -> None:
        """The kernel over ``ln``'s blocks on the current stream; flat device buffers A, B, C."""
        index = index_type(ln.n)
        kernel = compiled(mode, np.dtype(C.dtype).name, index, ln.tile)
        cast = _INDEX[index]
        n, by0, bx0, *origins = ln.arguments()
        kernel(ln.grid, ln.block, (A, B, C, cast(n), np.int32(by0), np.int32(bx0), *(cast(v) for v in origins)))

    def host_bytes(self, device_bytes: int) -> int:
        """The pinned staging: one twin of every device buffer."""
        return device_bytes

    def begin(self, elements: tuple[int, ...], dtype: Any, buffers: int) -> None:
        self.device = [[cupy.empty(e, dtype) for e in elements] for _ in range(buffers)]
        self.pinned = [[pinned_empty(e, dtype) for e in elements] for _ in range(buffers)]
        self.loaded: list[Any] = [None] * buffers
        self.consumed: list[Any] = [None] * buffers
        self.stored: list[Any] = [None] * buffers
        self.pending: list[Any] = [None] * buffers

    def load(self, slot: int, a: Array | None, b: Array | None) -> None:
        if self.loaded[slot] is not None:
            self.loaded[slot].synchronize()             # the slot's staging has reached the device: free
        if self.consumed[slot] is not None:
            self.copy_stream.wait_event(self.consumed[slot])
        for view, which in ((a, 0), (b, 1)):
            if view is not None:
                staged = packed(self.pinned[slot][which], view.shape)
                stage(self.pool, staged, view)
                copy_async(packed(self.device[slot][which], view.shape), staged, _H2D, self.copy_stream)
        self.loaded[slot] = self.copy_stream.record()

    def compute(self, slot: int, mode: str, ln: Launch) -> None:
        stream = self.compute_stream
        stream.wait_event(self.loaded[slot])
        if self.stored[slot] is not None:
            stream.wait_event(self.stored[slot])
        with stream:
            self.launch(mode, *self.device[slot], ln)
        self.consumed[slot] = stream.record()

    def store(self, slot: int, c: Array) -> None:
        self._place(slot)
        staged = packed(self.pinned[slot][2], c.shape)
        self.store_stream.wait_event(self.consumed[slot])
        copy_async(staged, packed(self.device[slot][2], c.shape), _D2H, self.store_stream)
        self.stored[slot] = self.store_stream.record()
        self.pending[slot] = (c, staged, self.stored[slot])

    def _place(self, slot: int) -> None:
        """The slot's staged C segment (if any) into the output, once its D2H copy is done."""
        if self.pending[slot] is not None:
            c, staged, stored = self.pending[slot]
            stored.synchronize()
            stage(self.pool, c, staged)
            self.pending[slot] = None

    def finish(self) -> None:
        for slot in range(len(self.pending)):
            self._place(slot)

    def release(self) -> None:
        """Wait for the three streams, then drop the buffers (back to CuPy's pools)."""
        for stream in (self.copy_stream, self.compute_stream, self.store_stream):
            stream.synchronize()
        self.device: list[list[Any]] = []
        self.pinned: list[list[np.ndarray]] = []
        self.loaded, self.consumed, self.stored, self.pending = [], [], [], []
