"""The segmented launcher: one single-GPU kernel run over segments with index translation.

:func:`segmented_matmul` takes host operands and a list of tasks (``modeling.decomposition.plan_segments``
gives them, for 1-D or 2-D blocks and any M; gpu takes them as duck-typed data): for each task it copies
the task's segments of A and B to the device, launches the plain kernel of :mod:`gpu.segmented.source` over
the task's blocks with the ``translated`` accessor (the segments' origins and widths as arguments), and
copies the task's C segment back; slots of buffers are dealt in turn so that copies overlap launches. One
executor, :func:`run`, runs every plan. A slot that already holds a task's segment (B in every 1-D task,
a shared panel in 2-D) is not loaded again.

:func:`whole_matmul` and :func:`translated_matmul` run the same kernel on device-resident whole arrays,
``whole`` (the unsplit baseline) and ``translated`` with the whole matrix as one segment, so that their
time ratio isolates the index arithmetic from any transfer; :func:`run_device` is their unchecked core.

Everything is checked before any work: operands (square, equal, float32 or float64, N a multiple of the
tile, finite with ``check_finite=True``), ``out``, the tasks (:mod:`gpu.segmented.geometry`), and memory:
``buffers`` slots of the largest task's segments on the device, their pinned twins and ``out`` on the host,
refused with the way out (more segments, or 2-D blocks) as :class:`gpu.backend.MemoryPlanError`.
Inputs are never written.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..backend import (
    Array,
    Backend,
    MemoryPlanError,
    blas,
    check_output,
    get_backend,
    matrix_pair,
    require_finite,
    require_host,
    require_memory,
)
from ..backend.checks import byte_count, gib
from .geometry import Launch, buffer_elements, check_square, launches, whole_launch
from .ops import FAMILY
from .source import TILE, check_tile

NONFINITE = "NaN and infinity then flow through the sums as through any GEMM"
ADVICE = "cut C into more segments (a larger M), or use 2-D blocks (a 1-D segment holds all of B whatever M)"


def _buffers(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"buffers must be a positive integer (2: double buffering), got {value!r}")
    return int(value)


def device_bytes(found: Sequence[Launch], buffers: int, itemsize: int) -> int:
    """Device memory of ``buffers`` slots, each holding the largest A, B and C segments of the launches."""
    return buffers * sum(buffer_elements(found)) * itemsize


def _require_device(be: Backend, need: int, device_memory: Any, what: str, advice: str) -> None:
    if device_memory is None:
        require_memory(be, need, what, advice)
        return
    byte_count(device_memory, "device_memory")
    if need > device_memory:
        raise MemoryPlanError(f"{what} needs {gib(need)} but device_memory is {gib(device_memory)}; {advice}")


def prepare(host: Backend, A: Any, B: Any, tasks: Sequence[Any], out: Any, tile: int
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, tuple[Launch, ...]]:
    """Host A, B, out and the tasks' launches, after every check of their own, before any work."""
    for name, x in (("A", A), ("B", B), ("out", out)):
        require_host(x, name, "the segmented launcher copies segments from host memory",
                     ", or use whole_matmul for operands already on the device")
    A, B, _, _ = matrix_pair(host, A, B)
    blas.check_dtypes(("A", A), ("B", B))
    n = check_square(*A.shape, B.shape, check_tile(tile))
    C = check_output(host, out, (n, n), A.dtype, {"A": A, "B": B})
    return A, B, C, launches(tasks, n, tile)


def segmented_matmul(A: Any, B: Any, tasks: Sequence[Any], *, out: Any = None, tile: int = TILE,
                     backend: str | Backend = "auto", buffers: int = 2, check_finite: bool = False,
                     device_memory: int | None = None) -> np.ndarray:
    """``A @ B`` into ``out`` where given (a new NumPy array otherwise), task by task on the device.

    A and B are N x N host NumPy arrays (float32 or float64, any strides), N a multiple of ``tile``; ``tasks``
    cover C's tiles exactly once and each holds the segments its blocks touch (see
    :mod:`gpu.segmented.geometry`). ``buffers``: slots of segment buffers (2: double buffering);
    ``device_memory``: bytes the slots may take (default: what the device has free). On NumPy the launches
    are emulated (:func:`gpu.segmented.ops.emulate`). Raises TypeError, ValueError and
    :class:`gpu.backend.MemoryPlanError` before any work (see the module notes).
    """
    be, host = get_backend(backend), get_backend("numpy")
    A, B, C, found = prepare(host, A, B, tasks, out, tile)
    buffers, n = _buffers(buffers), A.shape[0]
    ops = be.ops(FAMILY)
    need = device_bytes(found, buffers, A.itemsize)
    what = (f"the segmented product N = {n} in {len(found)} tasks ({buffers} buffers of "
            f"{gib(need // buffers)}: the largest task's A, B and C segments)")
    _require_device(be, need, device_memory, what, f"{ADVICE}, or fewer buffers")
    new_out = 0 if C is not None else n * n * A.itemsize
    require_memory(host, new_out + ops.host_bytes(need), f"{what} (pinned staging{'' if C is not None else ', out'})",
                   f"pass out=, or {ADVICE}")
    require_finite(host, check_finite, {"A": A, "B": B}, NONFINITE)
    C = np.empty((n, n), dtype=A.dtype) if C is None else C
    run(ops, found, A, B, C, buffers)
    return C


def run(ops: Any, found: Sequence[Launch], A: Array, B: Array, C: Array, buffers: int = 2) -> None:
    """The one executor of every plan: task i goes to slot i mod ``buffers``: its A and B segments loaded
    (unless the slot holds them already), the kernel launched with the ``translated`` accessor over its
    blocks, its C segment stored into C; all through ``ops`` (:mod:`gpu.segmented.ops`), released even on
    error. A, B and C are host arrays; ``found`` comes from :func:`gpu.segmented.geometry.launches`."""
    ops.begin(buffer_elements(found), C.dtype, buffers)
    held: list[tuple[Any, Any]] = [(None, None)] * buffers
    try:
        for i, ln in enumerate(found):
            slot = i % buffers
            ops.load(slot, None if held[slot][0] == ln.a else A[ln.a.slices],
                     None if held[slot][1] == ln.b else B[ln.b.slices])
            held[slot] = (ln.a, ln.b)
            ops.compute(slot, "translated", ln)
            ops.store(slot, C[ln.c.slices])
        ops.finish()
    finally:
        ops.release()


def _row_major(x: Array, name: str) -> None:
    if not x.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous (row-major, no leading dimension): the kernel indexes it "
                         f"as row * N + col; pass xp.ascontiguousarray({name})")


def _device_call(mode: str, A: Any, B: Any, out: Any, tile: int, backend: str | Backend, check_finite: bool
                 ) -> Array:
    be = get_backend(backend)
    A, B, _, _ = matrix_pair(be, A, B)
    blas.check_dtypes(("A", A), ("B", B))
    n = check_square(*A.shape, B.shape, check_tile(tile))
    _row_major(A, "A")
    _row_major(B, "B")
    C = check_output(be, out, (n, n), A.dtype, {"A": A, "B": B})
    if C is None:
        require_memory(be, n * n * A.itemsize, f"the output of the {mode} kernel at N = {n}", "pass out=")
    else:
        _row_major(C, "out")
    require_finite(be, check_finite, {"A": A, "B": B}, NONFINITE)
    C = be.xp.empty((n, n), dtype=A.dtype) if C is None else C
    run_device(be, mode, A, B, C, tile)
    return C


def whole_matmul(A: Any, B: Any, *, out: Any = None, tile: int = TILE, backend: str | Backend = "auto",
                 check_finite: bool = False) -> Array:
    """``A @ B`` by the plain kernel on whole device-resident arrays (the ``whole`` accessor: the unsplit
    baseline). A, B and ``out`` are C-contiguous N x N arrays of the backend (others are converted)."""
    return _device_call("whole", A, B, out, tile, backend, check_finite)


def translated_matmul(A: Any, B: Any, *, out: Any = None, tile: int = TILE, backend: str | Backend = "auto",
                      check_finite: bool = False) -> Array:
    """``A @ B`` by the same kernel with the ``translated`` accessor, each whole array one segment (origin 0,
    width N): the index arithmetic of a segmented run with no transfer, against :func:`whole_matmul`."""
    return _device_call("translated", A, B, out, tile, backend, check_finite)


def run_device(be: Backend, mode: str, A: Array, B: Array, C: Array, tile: int = TILE) -> None:
    """The kernel with accessor ``mode`` over all blocks of C-contiguous device arrays, unchecked (for timing)."""
    be.ops(FAMILY).launch(mode, A.reshape(-1), B.reshape(-1), C.reshape(-1), whole_launch(A.shape[0], tile))
