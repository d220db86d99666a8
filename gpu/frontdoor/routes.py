"""Where the front door sends a product that is not in one device's memory: the out-of-core engine and Dask.

* **Host operands larger than the device** (NumPy arrays on a GPU backend, or on any backend where the caller's
  ``memory`` is smaller than A, B and C together): the out-of-core engine (:mod:`gpu.outofcore`), which streams
  them through the device and hands C back complete in host memory, within ``memory`` bytes of device memory where
  given. Host operands that fit are converted to device arrays and ranked like any others.
* **A Dask client, or ``dask.array`` operands:** :func:`gpu.multigpu.dask_matmul.matmul` on the client's workers
  (the client given, else the current one), which runs the out-of-core engine per C block on each worker.

Both sum each entry with the library GEMM, panel by panel, so their bound is the library GEMM's gamma_k
(:func:`gpu.frontdoor.contract.library`): they keep ``"dgemm"`` and every looser level, and a tighter bound is
refused before any work, naming the route. Both wait for the device: they return C complete in host memory.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import outofcore
from ..backend import Array, Backend, get_backend
from ..backend.checks import byte_count
from ..backend.interface import load
from ..backend.plans import MatmulPlan
from . import contract
from .contract import Accuracy
from .rank import Ranked, Ranking

#: Where the Dask front-end lives (loaded only when asked for: ``import gpu`` never loads Dask), and the product of
#: ``dask.array`` operands whose chunks are on the workers' devices (C left there).
DASK_MATMUL = "gpu.multigpu.dask_matmul:matmul"
RESIDENT_MATMUL = "gpu.multigpu.resident:matmul"
#: The client Dask's ``distributed`` gives where none is passed.
CURRENT_CLIENT = "distributed:get_client"


def is_dask(x: Any) -> bool:
    """Whether ``x`` is a ``dask.array`` array (asked without importing Dask)."""
    return type(x).__module__.startswith("dask.array")


def host_route(be: Backend, A: Any, B: Any, out: Any, memory: Any) -> bool:
    """Whether (A, B, ``out``) go to the out-of-core engine: 2-D real NumPy arrays (host memory, whatever ``be``
    computes on) that outgrow the device memory (:func:`outgrows`)."""
    plain = all(isinstance(x, np.ndarray) and x.ndim == 2 and x.dtype.kind != "c" for x in (A, B)) and (
        out is None or isinstance(out, np.ndarray))
    return plain and A.shape[1] == B.shape[0] and outgrows(be, A, B, out, memory)


def outgrows(be: Backend, A: np.ndarray, B: np.ndarray, out: np.ndarray | None, memory: Any) -> bool:
    """Whether A, B and C need more device memory than ``memory`` bytes (default: what the device has free, less
    the out-of-core engine's headroom); only host operands can, since device operands are already in it."""
    need = A.nbytes + B.nbytes + A.shape[0] * B.shape[1] * A.itemsize
    if memory is not None:
        return need > byte_count(memory, "memory")
    return be.xp is not np and need > be.memory_info()[0] * outofcore.HEADROOM


def _refuse_tighter(route: str, accuracy: Accuracy, k: int) -> contract.Guarantee:
    g = contract.library(k)
    keeps, why = contract.keeps(g, accuracy, k)
    if not keeps:
        raise ValueError(f"{route} sums with the library GEMM, whose bound does not keep accuracy "
                         f"{accuracy.level!r} here ({why}); ask for 'dgemm' or a looser level, or make the product "
                         "fit on one device")
    return g


class OutOfCoreRoute(MatmulPlan):
    """Host operands larger than the device memory (or the caller's ``memory``) through the out-of-core engine."""

    def __init__(self, A: np.ndarray, B: np.ndarray, out: np.ndarray | None, be: Backend, accuracy: Accuracy,
                 memory: Any) -> None:
        (m, k), n = A.shape, B.shape[1]
        route = "the out-of-core engine (host operands larger than the device memory)"
        g = _refuse_tighter(route, accuracy, k)
        options = None if memory is None else {"device_memory": byte_count(memory, "memory")}
        self._inner = outofcore.Plan(A, B, out=out, options=options, backend=be)
        self.backend, self.signature = self._inner.backend, self._inner.signature
        self.chosen = Ranked(f"outofcore({'' if memory is None else f'device_memory={memory!r}'})", "outofcore",
                             options or {}, None, "not ranked: the only method for host operands this large", g,
                             True, waits=True, why="streams A and B through the device, C back to host memory")
        self.ranking = Ranking((m, k, n), accuracy, (self.chosen,), f"A, B and C need more than the device memory "
                               f"{'given' if memory is not None else 'free'}: {route}")

    def _execute(self, A: Array, B: Array, out: Array | None) -> Array:
        return self._inner._execute(A, B, out)

    def _release(self) -> None:
        self._inner.free()


def dask_product(A: Any, B: Any, out: Any, client: Any, accuracy: Accuracy, backend: str | Backend) -> Any:
    """``A @ B`` on ``client``'s workers (the current client where None), after the accuracy check: ``dask.array``
    operands whose chunks are device arrays stay where they are and C comes back as a ``dask.array`` left on the
    workers (:mod:`gpu.multigpu.resident`, one library GEMM per block); any others go through the Dask
    front-end of the out-of-core engine, C in host memory (the workers' backend is ``backend``'s name)."""
    k = A.shape[1]
    _refuse_tighter("the Dask product (one library GEMM or out-of-core engine call per block)", accuracy, k)
    client = load(CURRENT_CLIENT)() if client is None else client
    if on_devices(A) and on_devices(B):
        if out is not None:
            raise ValueError("out= is a host array; device-resident dask arrays give C as a dask array left on the "
                             "workers: leave out= out and call .compute() to gather it")
        return load(RESIDENT_MATMUL)(A, B, client=client)
    name = backend if isinstance(backend, str) else get_backend(backend).name
    return load(DASK_MATMUL)(A, B, client=client, out=out, backend=name)


def on_devices(x: Any) -> bool:
    """Whether ``x`` is a ``dask.array`` whose chunks are device arrays (CuPy's)."""
    return is_dask(x) and hasattr(getattr(x, "_meta", None), "__cuda_array_interface__")
