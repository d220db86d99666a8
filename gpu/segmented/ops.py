"""The segmented launcher's operations per backend: segment buffers, copies, and the kernel launch.

:func:`gpu.segmented.run` issues one schedule through the same calls whatever the backend, fetched as
``backend.ops("segmented")``: :class:`HostOps` here (NumPy), :class:`gpu.segmented.kernels.CudaOps`
(CuPy, loaded only with that backend). The calls:

* ``launch(mode, A, B, C, launch)``: the kernel with accessor ``mode`` over ``launch``'s blocks, on flat
  buffers holding the launch's segments packed row-major (or the whole matrices);
* ``begin(elements, dtype, buffers)``: ``buffers`` slots, each an A, a B and a C buffer of the given
  element counts, allocated once per call; ``load(slot, a, b)``: host views ``a`` and ``b`` (None: the
  slot already holds that segment) into the slot; ``compute(slot, mode, launch)``; ``store(slot, c)``:
  the slot's C buffer into host view ``c`` (by ``finish`` at the latest); ``release()``, also after an error;
* ``host_bytes(device_bytes)``: host memory the operations allocate beside device buffers of that size.

**The NumPy emulation.** The CUDA kernel cannot run on NumPy, so :func:`emulate` runs its launches with the
same semantics: every flat index the kernel computes (``row N + k`` for A, ``k N + col`` for B,
``row N + col`` for C, over the launch's rows and columns) goes through the accessor's Python evaluator
(the very formula of the C macro, :mod:`gpu.segmented.source`), each must land inside the segment (an
out-of-segment access raises, as a memory checker would report it), and the gathered rows and columns
are multiplied by BLAS. So the CPU tests run the device's index translation, launch geometry and
schedule; only the arithmetic order of the sums differs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..backend import Array, Backend, register_ops
from ..outofcore.ops import packed as outofcore_packed
from .geometry import Launch
from .source import Accessor, accessor_of

FAMILY = "segmented"


def _inside(index: np.ndarray, size: int, what: str) -> np.ndarray:
    if index.size and (index.min() < 0 or index.max() >= size):
        raise IndexError(f"{what}: the accessor reaches {int(index.min())}..{int(index.max())}, outside the "
                         f"segment's {size} elements")
    return index


def emulate(accessor: Accessor, A: np.ndarray, B: np.ndarray, C: np.ndarray, ln: Launch) -> None:
    """One launch of the kernel on NumPy (see the module notes): C's segment of the launch's blocks from the
    gathered A and B, every index through ``accessor``."""
    n = ln.n
    rows = np.arange(ln.rows[0], ln.rows[1] + 1, dtype=np.int64)
    cols = np.arange(ln.cols[0], ln.cols[1] + 1, dtype=np.int64)
    k = np.arange(n, dtype=np.int64)

    def local(full: np.ndarray, name: str) -> np.ndarray:
        segment = getattr(ln, name.lower())
        return _inside(accessor.evaluate(full, n, *segment.origin), segment.size, f"{name} ({accessor.name})")

    a = A[local(rows[:, None] * n + k, "A")]
    b = B[local(k[:, None] * n + cols, "B")]
    C[local(rows[:, None] * n + cols, "C")] = a @ b


def packed(flat: Array, shape: tuple[int, int]) -> Array:
    """The first ``rows x cols`` elements of a flat buffer as a packed row-major matrix (NumPy or CuPy):
    the out-of-core engine's buffer view (:func:`gpu.outofcore.ops.packed`) in row-major order."""
    return outofcore_packed(flat, shape, "C")


class HostOps:
    """The schedule on NumPy: "device" buffers are NumPy arrays, launches are :func:`emulate`."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.release()

    def launch(self, mode: str, A: Array, B: Array, C: Array, ln: Launch) -> None:
        emulate(accessor_of(mode), A, B, C, ln)

    def host_bytes(self, device_bytes: int) -> int:
        """None beyond the "device" buffers, which are host memory (counted as the device's)."""
        return 0

    def begin(self, elements: tuple[int, ...], dtype: Any, buffers: int) -> None:
        self.slots = [[np.empty(e, dtype) for e in elements] for _ in range(buffers)]

    def load(self, slot: int, a: Array | None, b: Array | None) -> None:
        for view, buf in ((a, self.slots[slot][0]), (b, self.slots[slot][1])):
            if view is not None:
                np.copyto(packed(buf, view.shape), view)

    def compute(self, slot: int, mode: str, ln: Launch) -> None:
        self.launch(mode, *self.slots[slot], ln)

    def store(self, slot: int, c: Array) -> None:
        np.copyto(c, packed(self.slots[slot][2], c.shape))

    def finish(self) -> None:
        pass

    def release(self) -> None:
        self.slots: list[list[np.ndarray]] = []


register_ops(FAMILY, "numpy", HostOps)
register_ops(FAMILY, "cupy", "gpu.segmented.kernels:CudaOps")
