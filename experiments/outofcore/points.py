"""What the ``outofcore`` experiment measures: its sizes N per backend, the memory each method
needs (points that do not fit are left out, and counted), and the engine's plan.

Every point is a square FP64 product C = A B of side N, A, B and C in host memory. The GPU sweep
is N = 8192 .. 65536: the engine runs wherever A, B and C fit in :data:`HEADROOM` of
the host's available memory, the in-core DGEMM only where they also fit in that share of the
device's free memory (up to N = 49152 on an 80 GB H100; N = 65536 is out-of-core only).

The CPU sweeps are small (NumPy stands in for the device so that the whole pipeline runs in
tests) and give the engine :data:`CPU_DEVICE_MEMORY`, 4 MiB of "device" memory: with two C
blocks and two panel slots it holds blocks of 256 x 256 only, so N = 384 runs as 2 x 2 blocks of
one panel, N = 512 as 2 x 2 blocks of two 256-wide panels and N = 768 as 3 x 3 blocks of three:
the engine really streams there. On NumPy the in-core product is ``A @ B`` and always runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpu.backend import Backend, get_backend
from gpu.outofcore import HEADROOM as ENGINE_HEADROOM
from gpu.outofcore import OutOfCorePlan, plan, rates
from gpu.profile import backend_profile

from ..core.lab import HEADROOM, free_memory
from .rows import ENGINE, EXPERIMENT, GEMM, RESIDENT

DTYPE = "float64"
#: The engine's device memory on NumPy (see the module notes); None on a GPU: the engine's default.
CPU_DEVICE_MEMORY = 4 * 2**20
#: C blocks resident on the device: the second overlaps a block's write-back with the next block's products
#: (the plan keeps one where there is a single block).
C_BUFFERS = 2

PLANS: dict[tuple[str, bool], tuple[int, ...]] = {
    ("cupy", False): (8192, 16384, 32768, 49152, 65536),
    ("cupy", True): (8192, 16384, 32768),
    ("numpy", False): (384, 512, 768),
    ("numpy", True): (384, 512),
}


@dataclass(frozen=True)
class Point:
    """A size N, whether the in-core GEMM runs there beside the engine (host to host), and whether
    it also runs on operands kept on the device beside the engine's buffers (``dgemm``)."""

    n: int
    gemm: bool
    dgemm: bool = False

    @property
    def methods(self) -> tuple[str, ...]:
        return (ENGINE, *((GEMM,) if self.gemm else ()), *((RESIDENT,) if self.dgemm else ()))


def point_params(n: int, dtype: str = DTYPE, regime: str = "sustained") -> dict[str, Any]:
    """The stored parameters of a method at N in a power regime."""
    return {"n": int(n), "dtype": dtype, "regime": regime}


def operand_bytes(n: int, itemsize: int = 8) -> int:
    """A, B and C of an N x N x N product."""
    return 3 * n * n * itemsize


def host_available() -> int:
    """Host bytes available now (the kernel's MemAvailable, else the free pages)."""
    return get_backend("numpy").memory_info()[0]


def plan_points(sizes: Sequence[int], host_free: int, device_free: int | None, itemsize: int = 8,
                engine_bytes: Callable[[int], int] | None = None) -> tuple[list[Point], int]:
    """The sizes whose A, B and C fit in :data:`HEADROOM` of ``host_free``, each with whether they
    also fit in that share of ``device_free`` (None: the device is the host, the GEMMs always run),
    and whether they fit there beside the engine's device buffers (``engine_bytes(n)``; none where
    not given): then the GEMM on resident operands runs in the same group; and how many sizes did
    not fit at all."""
    fits = [n for n in sorted(set(sizes)) if operand_bytes(n, itemsize) <= HEADROOM * host_free]

    def on_device(n: int, extra: int) -> bool:
        return device_free is None or operand_bytes(n, itemsize) + extra <= HEADROOM * device_free

    points = [Point(n, on_device(n, 0), engine_bytes is not None and on_device(n, engine_bytes(n))) for n in fits]
    return points, len(set(sizes)) - len(points)


def fitting_points(backend: Backend, sizes: Sequence[int], itemsize: int = 8) -> tuple[list[Point], int]:
    """:func:`plan_points` with this host's and device's memory; ValueError (before anything is
    measured) when no size fits."""
    device, host = None if backend.name == "numpy" else free_memory(backend), host_available()
    points, skipped = plan_points(sizes, host, device, itemsize,
                                  lambda n: engine_plan(backend, n, itemsize, host).device_bytes)
    if not points:
        raise ValueError(f"no {EXPERIMENT} size fits in {HEADROOM:.0%} of the host's available memory; "
                         "choose a smaller --n")
    return points, skipped


def device_memory(backend: Backend, host_free: int) -> int:
    """The engine's device memory: :data:`CPU_DEVICE_MEMORY` on NumPy, else the engine's default
    (:data:`gpu.outofcore.HEADROOM` of what its operations allow, with ``host_free`` on the host)."""
    if backend.name == "numpy":
        return CPU_DEVICE_MEMORY
    return int(backend.ops("outofcore").budget(host_free) * ENGINE_HEADROOM)


def engine_plan(backend: Backend, n: int, itemsize: int = 8, host_free: int | None = None) -> OutOfCorePlan:
    """The plan :func:`gpu.outofcore.matmul` makes with ``staging="pinned"`` for N with :func:`device_memory`,
    :data:`C_BUFFERS` and the rates of the device's profile where it holds them: made once per point,
    before anything is timed."""
    host_free = host_available() if host_free is None else host_free
    return plan(n, n, n, itemsize, device_memory=device_memory(backend, host_free), c_buffers=C_BUFFERS,
                **rates.from_profile(backend_profile(backend)))


def custom_sizes(backend: Backend, sizes: Sequence[int] | None) -> tuple[int, ...]:
    """``gemmlab outofcore``'s sizes: the backend's full sweep, or the given ones (empty or below 1:
    an error)."""
    if sizes is None:
        return PLANS[(backend.name, False)]
    if not sizes:
        raise ValueError("--n is empty; give sizes such as 8192,16384 or leave it out for the default")
    for n in sizes:
        if n < 1:
            raise ValueError(f"--n: N = {n} is not a matrix size")
    return tuple(sorted(set(sizes)))


def itemsize_of(dtype: str = DTYPE) -> int:
    return np.dtype(dtype).itemsize
