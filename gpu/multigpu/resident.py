"""``matmul``: C = A B of ``dask.array`` operands whose chunks stay where they are (CuPy chunks on the workers'
GPUs, the usual Dask-CuPy setting, or NumPy chunks in their memory), C returned as a ``dask.array`` of the same
kind of chunk, lazily: nothing goes through the client or host memory.

**Blocks.** By default C's blocks are A's own row chunks by B's own column chunks where those are regular and
give each busy worker at least one (:func:`_own_blocks`), else one block per busy worker. A is rechunked into
row panels of the whole inner dimension and B into column panels, and C block (i, j) is one task,
``A_i @ B_j``: one library GEMM on its worker (cuBLAS on a CuPy chunk), the whole inner dimension in one sum,
so the library GEMM's componentwise bound |C - AB| <= gamma_k |A||B| holds. Dask moves the panels a task needs
to its worker (over NVLink where the workers' communication has it): the rechunk and the transfers are Dask's
own work, and nothing here schedules.

**Placement** (2-D block-cyclic, as :mod:`gpu.multigpu.dask_matmul` places its blocks). With a ``client``, its
workers sorted by address form the ``pr x pc`` process grid of :func:`gpu.multigpu.grid.process_grid`, and C
block (i, j) is annotated to run on worker ``(i mod pr, j mod pc)`` and no other: each worker then needs A's row
panels ``i = p mod pr`` and B's column panels ``j = q mod pc``. Without one, Dask places the blocks.

**Checks** before any work: dask arrays, 2-D, of known chunk sizes, one real dtype (float64 or float32), chunks
of one kind (NumPy or CuPy) for both, matching inner dimensions, and a positive ``block``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import dask
import dask.array as da
import numpy as np

from .grid import FREE_TASKS_PER_WORKER, block_sides, check_task_count, process_grid

#: The dtypes a product takes.
DTYPES = (np.dtype(np.float64), np.dtype(np.float32))


def _chunk_kind(x: da.Array) -> str:
    """The module of x's chunks (``"numpy"`` or ``"cupy"``)."""
    return type(x._meta).__module__.split(".")[0]


def _check(A: Any, B: Any) -> None:
    for name, x in (("A", A), ("B", B)):
        if not isinstance(x, da.Array):
            raise TypeError(f"{name} is a {type(x).__module__}.{type(x).__name__}; this product takes dask arrays "
                            "(for host arrays use gpu.multigpu.dask_matmul.matmul)")
        if x.ndim != 2:
            raise ValueError(f"{name} must be 2-D, got a dask array of shape {x.shape}")
        if any(math.isnan(s) for s in x.shape):
            raise ValueError(f"{name} has unknown chunk sizes {x.shape}; call {name}.compute_chunk_sizes() first")
        if x.dtype not in DTYPES:
            raise TypeError(f"{name} has dtype {x.dtype}; pass float64 or float32")
    if A.dtype != B.dtype:
        raise TypeError(f"A is {A.dtype} and B is {B.dtype}: convert one so that both have one dtype")
    if _chunk_kind(A) != _chunk_kind(B):
        raise TypeError(f"A's chunks are {_chunk_kind(A)} arrays and B's are {_chunk_kind(B)}: move one "
                        "(x.map_blocks(cupy.asarray) or x.map_blocks(lambda c: c.get()))")
    if A.shape[1] != B.shape[0]:
        raise ValueError(f"A is {A.shape[0]} x {A.shape[1]} and B is {B.shape[0]} x {B.shape[1]}: A's columns "
                         "must equal B's rows")


def _own_blocks(A: da.Array, B: da.Array, busy: int) -> tuple[int | None, int | None]:
    """C blocks of A's own row chunks by B's own column chunks, where both are regular (equal but the last, as
    ``dask.array`` cuts them) and make from one block per busy worker to ``FREE_TASKS_PER_WORKER`` of them
    (:mod:`gpu.multigpu.grid`): no chunk is then merged to form a panel, else (None, None). (On two H200
    workers over TCP at N = 32768, one block per worker merged B's two column chunks into one panel on one
    worker, 4.4-5.5 s, before either block could fetch it.)"""
    rows, cols = _regular(A.chunks[0]), _regular(B.chunks[1])
    if rows is None or cols is None:
        return None, None
    blocks = len(A.chunks[0]) * len(B.chunks[1])
    return (rows, cols) if busy <= blocks <= FREE_TASKS_PER_WORKER * busy else (None, None)


def _regular(chunks: tuple[int, ...]) -> int | None:
    """The chunk size where every chunk but the last has it and the last no more, else None."""
    first = chunks[0] if chunks else 0
    if first < 1 or any(c != first for c in chunks[:-1]) or chunks[-1] > first:
        return None
    return first


def _block(a: Any, b: Any) -> Any:
    """One C block: the library GEMM of its chunks' own array module (cuBLAS for CuPy chunks)."""
    return a @ b


def _placement(name: str, workers: list[str], grid: tuple[int, int]) -> Callable[[Any], list[str]]:
    """The worker of each C block key (block-cyclic over the process grid, see the module notes)."""
    pr, pc = grid

    def where(key: Any) -> list[str]:
        i, j = key[1], key[2]
        return [workers[(i % pr) * pc + j % pc]]
    return where


def matmul(A: Any, B: Any, *, block: int | tuple[int, int] | None = None, client: Any = None,
           name: str | None = None) -> da.Array:
    """``A @ B`` as a ``dask.array`` (see the module): C blocks of ``block`` (rows, cols), by default the operands'
    own chunks where they suit (see the module), else one per busy worker of the process grid (a client's
    workers, else A's row chunks by B's column chunks). With a
    ``client``, C is persisted there at once, block-cyclically, and stays on the workers (the call returns at
    once; ``.compute()`` gathers it): Dask's graph optimization would fuse the blocks with the rechunk and drop
    their placement, so the graph goes as built. Without one, C is lazy and Dask places it. ``name``: the key
    prefix of C's blocks (default: a token of the operands, so that the same product asked for again while its
    result is held is that result, as Dask does; a benchmark gives each product its own)."""
    _check(A, B)
    (m, k), n = A.shape, B.shape[1]
    workers = sorted(client.nthreads()) if client is not None else []
    if client is not None and not workers:
        raise ValueError("the client has no workers: start some (LocalCluster(n_workers=2), dask-cuda's "
                         "LocalCUDACluster()) or wait for them with client.wait_for_workers(n)")
    busy = len(workers) or max(1, len(A.chunks[0]) * len(B.chunks[1]))
    rows, cols = _own_blocks(A, B, busy) if block is None else (None, None)
    if rows is None or cols is None:
        rows, cols = block_sides(block, m, n, busy)
    blocks_r, blocks_c = -(-m // max(rows, 1)), -(-n // max(cols, 1))
    check_task_count(block, (m, k, n), (rows, cols), blocks_r * blocks_c, busy)
    panels_a, panels_b = A.rechunk((rows, k)), B.rechunk((k, cols))
    name = name or f"gemmlab-resident-{dask.base.tokenize(panels_a, panels_b)}"
    annotations = {}
    if workers:
        grid = process_grid(len(workers), blocks_r, blocks_c, m, n)
        annotations = {"workers": _placement(name, workers, grid), "allow_other_workers": False}
    with dask.annotate(**annotations):
        C = da.blockwise(_block, "ij", panels_a, "ik", panels_b, "kj", dtype=A.dtype, name=name, meta=A._meta,
                         concatenate=True)
    return C if client is None else client.persist(C, optimize_graph=False)
