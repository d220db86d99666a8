"""``matmul``: C = A B across the workers of a Dask cluster, one task per C block, each running the out-of-core
engine (:func:`gpu.outofcore.matmul`) on its worker's backend.

**Blocks.** C (m x n) is cut into a grid of ``block = (rows, cols)`` blocks, the last row and column of the
grid narrower where the sides do not divide m and n. By default there are as many blocks as workers, the
grid being the process grid below for blocks of one element (a 2 x 1 grid of halves of C on two workers
where m > n, or m = n and the host operands are in rows). Task (i, j) computes ``C[i, j] = A[i, :] @ B[:, j]``,
the whole inner dimension, by calling the engine on A's row panel i and B's column panel j (the engine then
streams k-panels of those through the worker's GPU, in its own blocks: ``device_block``).

**Placement** (2-D block-cyclic, as in ScaLAPACK). The workers, sorted by address, form a ``pr x pc``
process grid (:func:`gpu.multigpu.grid.process_grid`: as many busy workers as the grid of blocks allows, then the least
operand traffic ``k (m pc + n pr)``); block (i, j) runs on worker ``(i mod pr, j mod pc)`` and on no other
(``workers=[w], allow_other_workers=False``). A worker therefore needs A's row panels ``i = p mod pr`` and
B's column panels ``j = q mod pc``, and each of those panels goes to exactly the workers that need it,
once: NumPy panels are scattered there, as one key per worker (``client.scatter(..., workers=[w])``: a
broadcast key's replicas are what Dask's active memory manager drops while no task wants them yet, and a
task placed where one was dropped then fetched it from another worker); panels of
a ``dask.array`` are computed on the cluster (one graph for all of them, so shared chunks run once) and
each worker fetches the ones its tasks need when they first need them; Dask keeps a fetched replica while
tasks on that worker still depend on it. Nothing here schedules: Dask runs the tasks, with these hints.
``workers`` restricts the product to some of the client's workers (a one-GPU baseline on a two-GPU
cluster, say).

**Operands in files** (:mod:`gpu.multigpu.mapped`). A NumPy operand that views a file mapped shared
(``np.load(path, mmap_mode="r")``, a ``.npy`` under ``/dev/shm`` for host memory) is not sent at all: each
task gets the handle of its panel and maps it in its worker, so no operand byte crosses between processes.
On one host that is what a single process driving every GPU would read (the papers' setting: operands in
host memory, every GPU streaming its own panels). Each worker also page-locks the ranges it maps
(:mod:`gpu.outofcore.pagelock`), so that its engine's copies read and write them in place, with no staging
copy: two workers staging at once got 26-30 GB/s each on the two-H200 machine, against 55 GB/s from locked
pages. Mapping pages in and locking them are paid once per range and worker, in the first product that
reads it; by default (``lock_pages="stream"``) the engine streams A's and B's panels through a small pinned
ring and locks C's pieces beside its products (:mod:`gpu.outofcore.ring`), and with ``"ahead"`` it locks
every operand's pieces so (:mod:`gpu.outofcore.ahead`), rather than whole ranges before them
(``lock_pages=True``). At N = 65536 on the two-H200 machine, two workers' first product took 12.2 s
streaming, 13.0-13.4 s ahead and 18.7 s locked whole, each one after 5.3-5.5 s; into an output whose pages
existed, 8.1, 9.5-10.0 and 11.7 s (``results/published/h200/h200x2-multigpu.csv``). ``out=`` likewise: a
writeable mapped ``out`` is written by each task in place, block by block, and nothing is gathered; any
other ``out`` receives the gathered blocks.

**Backends.** ``backend`` names the backend on each worker (``"auto"``: CuPy where the worker's GPU is
usable, NumPy otherwise). :meth:`gpu.backend.Backend.ops` keeps one engine operations object per backend
per process, holding the buffers of the call that runs; engine calls in one process therefore run one at a
time (a lock), which costs nothing with ``dask-cuda``'s one-process-per-GPU workers. A block task waits for
that lock in its worker thread: the holder waits for nothing but the verdict of the finite checks below, and
those run first on every worker.

**NaN and infinity** in mapped operands are checked once across the workers, each checking a band of A
and of B beside the block tasks, which write nothing into C before the checks have passed; :func:`submit`
waits for these checks and raises their error (:mod:`gpu.multigpu.finite`: otherwise every worker's engine
would read all of B again); other operands are checked by each task's engine call, and their errors come
from :meth:`BlockProduct.result`.

**Accuracy**: each C block is one engine call on the whole inner dimension, so the library GEMM's
componentwise bound |C - AB| <= gamma_k |A||B| holds (:mod:`gpu.outofcore.api`).

**Checks** before any work, on the client: A and B are 2-D NumPy arrays (or convertible, not masked, not
device arrays) or ``dask.array`` arrays of known shape with host chunks, of one dtype, float64 or float32,
with matching inner dimensions; the client has a worker; ``block`` is positive, and makes no more than
:data:`~gpu.multigpu.grid.FREE_TASKS_PER_WORKER` tasks per busy worker unless each carries
:data:`~gpu.multigpu.grid.MIN_TASK_WORK` multiply-adds
(:func:`gpu.multigpu.grid.check_task_count`: a task costs Dask about a millisecond, and a worker runs its
blocks one after another, so finer blocks of a small product buy nothing but that cost); ``backend`` is known and
every engine option exists. The engine's own checks (its plan fits the worker's memory, before its work;
NaN and infinity with ``check_finite=True``, before its first write) run in each task, and their errors are
raised by :meth:`BlockProduct.result`. ``out`` is checked as every method checks it (shape, dtype, writeable, no
memory shared with A or B, in the file too). :func:`submit` returns the futures; :func:`matmul` waits and
returns C (``out`` where given, else a NumPy array assembled on the client), and
:meth:`BlockProduct.to_dask_array` gives C as a ``dask.array`` of the block results left on the workers.
"""

from __future__ import annotations

import inspect
import math
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import dask.array as da
import numpy as np
from dask import delayed
from distributed import Client, Future, wait

from .. import outofcore
from ..backend import BACKENDS, blas, check_output, get_backend, require_host
from ..backend.checks import matrix
from . import finite, mapped
from .grid import block_sides, check_task_count, process_grid
from .mapped import MappedMatrix
from .worker import AHEAD, REPORT_TOPIC, block_product

#: Engine options forwarded to :func:`gpu.outofcore.matmul` (``device_block`` is its ``block``).
ENGINE_OPTIONS = tuple(p for p in inspect.signature(outofcore.matmul).parameters if p not in
                       ("A", "B", "out", "block", "backend", "timeline", "before_write", "keep_locked")) + (
    "device_block",)
#: A panel as :class:`BlockProduct` keeps it: a future, a mapped handle, or futures by worker.
Panel = Future | MappedMatrix | dict[str, Future]


def _operand(x: Any, name: str) -> Any:
    """``x`` as a checked dask array or NumPy matrix (dtype checked with the other operand)."""
    if isinstance(x, da.Array):
        if x.ndim != 2:
            raise ValueError(f"{name} must be 2-D, got a dask array of shape {x.shape}")
        if any(math.isnan(s) for s in x.shape):
            raise ValueError(f"{name} has unknown chunk sizes {x.shape}; call {name}.compute_chunk_sizes() first")
        if hasattr(x._meta, "__cuda_array_interface__"):
            raise TypeError(f"{name} is a dask array of device chunks ({type(x._meta).__module__}); the engine "
                            f"streams host memory: pass {name}.map_blocks(lambda c: c.get())")
        return x
    require_host(x, name, "the engine streams host memory", " or a dask.array")
    return matrix(get_backend("numpy"), x, name)[0]


@dataclass
class BlockProduct:
    """The futures of one product: ``blocks[(i, j)]`` computes ``C[rows[i], cols[j]]`` on ``workers[(i, j)]``
    from ``a_panels[i]`` (A's rows ``rows[i]``) and ``b_panels[j]`` (B's columns ``cols[j]``): a future, a
    handle of a mapped operand, or the futures of a scattered NumPy panel by worker. ``out``: the caller's
    output; ``in_place``: the tasks write into it themselves (a writeable mapped ``out``) and return
    nothing."""

    client: Client
    shape: tuple[int, int]
    dtype: np.dtype
    grid: tuple[int, int]
    rows: list[slice]
    cols: list[slice]
    a_panels: list[Panel] = field(default_factory=list)
    b_panels: list[Panel] = field(default_factory=list)
    blocks: dict[tuple[int, int], Future] = field(default_factory=dict)
    workers: dict[tuple[int, int], str] = field(default_factory=dict)
    out: np.ndarray | None = None
    in_place: bool = False
    report: bool = False

    def to_dask_array(self) -> da.Array:
        """C as a ``dask.array`` whose chunks are the block tasks' results, left where they were computed: no
        block crosses to the client until something reads it. On one host the gather of
        :meth:`result` is most of a Dask run's cost (C was 2.1 GB over TCP at N = 16384 on the H100
        machine), so a caller that goes on with C on the cluster (``C[...].sum()``, ``C.to_zarr(...)``)
        keeps it there. Not for a product written into a mapped ``out``: C is in its file."""
        if self.in_place:
            raise ValueError("the blocks were written into out= by the workers and hold nothing: read C from "
                             "out (or map its file on the cluster), or submit without out= to keep the blocks")
        if not self.blocks:
            return da.zeros(self.shape, dtype=self.dtype, chunks=self.shape)
        chunks = [[da.from_delayed(delayed(self.blocks[i, j]), (r.stop - r.start, c.stop - c.start), self.dtype)
                   for j, c in enumerate(self.cols)] for i, r in enumerate(self.rows)]
        return da.block(chunks)

    def reports(self, timeout: float = 10.0) -> list[dict[str, Any]]:
        """Where each block task's time went (submitted with ``report=True``), one dict per block with its
        ``block`` (i, j) and what :func:`gpu.multigpu.worker.log_report` logs: the way to tell a task's engine
        run (copies, products) from its checks and opening. Waits for the tasks, then up to ``timeout`` seconds
        for their events to reach the scheduler."""
        if not self.report:
            raise ValueError("the product was submitted without report=True: its tasks logged nothing")
        keys = {future.key: ij for ij, future in self.blocks.items()}
        wait(list(self.blocks.values()))
        deadline = time.monotonic() + timeout
        while True:
            got = {m["key"]: m for _, m in self.client.get_events(REPORT_TOPIC) if m.get("key") in keys}
            if len(got) == len(keys) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        if len(got) < len(keys):
            raise TimeoutError(f"{len(keys) - len(got)} of {len(keys)} block reports did not reach the scheduler "
                               f"in {timeout} s; call reports() again with a longer timeout")
        return [{"block": keys[key], **got[key]} for key in keys]

    def result(self) -> np.ndarray:
        """C, once every block task has finished (a task's error is raised here): ``out`` where given (the
        gathered blocks copied into it unless the tasks wrote it in place), else a new NumPy array."""
        C = self.out if self.out is not None else np.empty(self.shape, dtype=self.dtype)
        keys = list(self.blocks)
        parts = self.client.gather([self.blocks[key] for key in keys])
        if not self.in_place:
            for (i, j), part in zip(keys, parts):
                C[self.rows[i], self.cols[j]] = part
        return C


def _panels(client: Client, parts: list[Any], groups: list[list[str]]) -> list[Panel]:
    """The panels as tasks take them: handles of mapped ones, futures of the others (NumPy panels scattered
    to each worker of their group, in one call per worker; dask ones computed together)."""
    if isinstance(parts[0], da.Array):
        return client.compute(parts)
    handles = [mapped.locate(part) for part in parts]
    if all(h is not None for h in handles):
        return handles
    wanted: dict[str, list[int]] = {}
    for i, group in enumerate(groups):
        for w in group:
            wanted.setdefault(w, []).append(i)
    panels: list[dict[str, Future]] = [{} for _ in parts]
    for w, indices in wanted.items():
        for i, future in zip(indices, client.scatter([parts[i] for i in indices], workers=[w], hash=False)):
            panels[i][w] = future
    return panels


def _on(panel: Panel, worker: str) -> Future | MappedMatrix:
    """What the task on ``worker`` takes of ``panel``."""
    return panel[worker] if isinstance(panel, dict) else panel


def _workers(client: Client, workers: Any) -> list[str]:
    """The sorted addresses of the workers to use: all of the client's, or the given subset of them."""
    names = sorted(client.nthreads())
    if not names:
        raise ValueError("the client has no workers: start some (LocalCluster(n_workers=2), dask-cuda's "
                         "LocalCUDACluster()) or wait for them with client.wait_for_workers(n)")
    if workers is None:
        return names
    chosen = [workers] if isinstance(workers, str) else list(workers)
    unknown = sorted(set(chosen) - set(names))
    if unknown or not chosen:
        raise ValueError(f"workers must be some of the client's workers {names}, got {workers!r}")
    return sorted(set(chosen))


def _output(out: Any, shape: tuple[int, int], dtype: np.dtype, A: Any, B: Any) -> MappedMatrix | None:
    """Check ``out`` (see the module notes) and return its handle where the tasks write it in place: a
    writeable mapped view that shares no byte of A's or B's files; None otherwise."""
    if out is None:
        return None
    require_host(out, "out", "C is written in host memory", "")
    host = get_backend("numpy")
    view = host.asarray(out) if isinstance(out, np.memmap) else out
    operands = {name: x for name, x in (("A", A), ("B", B)) if isinstance(x, np.ndarray)}
    handle = mapped.locate(check_output(host, view, shape, dtype, operands))
    for name, x in operands.items():
        other = mapped.locate(x)
        if handle is not None and other is not None and handle.meets(other):
            raise ValueError(f"out maps bytes of the file that {name} maps ({handle.path}); pass an out "
                             f"that shares no memory with {name}")
    return handle if handle is not None and handle.writeable else None


def submit(A: Any, B: Any, *, client: Client, block: int | tuple[int, int] | None = None,
           backend: str = "auto", out: Any = None, workers: str | list[str] | None = None,
           lock_pages: bool | str = "stream", report: bool = False, **engine_options: Any) -> BlockProduct:
    """Start ``A @ B`` on ``client``'s workers (or on ``workers``, some of them) and return its futures
    (see the module notes); every check is made before any block task is sent, but the finite checks of
    mapped operands: they run on the workers beside the block tasks, which write nothing into C before they
    pass, and ``submit`` waits for them and raises their error. ``out``: a host array for C (a
    writeable mapped one is written by the tasks in place). ``lock_pages``: each worker page-locks the
    ranges of mapped operands and ``out`` that it reads and writes, so that its engine copies them in
    place (kept with the worker's mappings); ``"reuse"``: only ranges a worker opens a second time (a
    range read once goes through the engine's staging buffers, and a later product finds it locked);
    ``"ahead"``: the engine locks them piece by piece beside its products (``staging="lock"``,
    :mod:`gpu.outofcore.ahead`), kept locked where all three are mapped; ``"stream"`` (the default): the
    engine stages A's and B's panels through a small pinned ring and locks only C's pieces ahead
    (``staging="stream"``); otherwise the engine stages what is not locked through its pinned buffers.
    ``report``: each task logs where its time went (:meth:`BlockProduct.reports`). ``engine_options`` go to
    :func:`gpu.outofcore.matmul` on the workers: ``panel``, ``device_memory``, ``buffers``,
    ``check_finite``, ..., and ``device_block`` (the engine's block on the device, not the Dask block)."""
    if lock_pages not in (True, False, "reuse", *AHEAD):
        raise ValueError(f"lock_pages must be True, False, 'reuse', 'ahead' or 'stream', got {lock_pages!r}")
    unknown = sorted(set(engine_options) - set(ENGINE_OPTIONS))
    if unknown:
        raise TypeError(f"unknown engine option(s) {unknown}; the engine takes {list(ENGINE_OPTIONS)}")
    if not isinstance(backend, str) or backend not in (*BACKENDS, "auto"):
        raise ValueError(f"backend must name a backend each worker makes for itself, one of "
                         f"{(*BACKENDS, 'auto')}, got {backend!r}")
    if not isinstance(client, Client):
        raise TypeError(f"client must be a distributed.Client, got {type(client).__name__}")
    A, B = _operand(A, "A"), _operand(B, "B")
    if A.shape[1] != B.shape[0]:
        raise ValueError(f"A is {A.shape[0]} x {A.shape[1]} and B is {B.shape[0]} x {B.shape[1]}: "
                         "A's columns must equal B's rows")
    dtype = blas.check_dtypes(("A", A), ("B", B))
    m, n = A.shape[0], B.shape[1]
    target = _output(out, (m, n), dtype, A, B)
    names = _workers(client, workers)
    rows_first = not isinstance(A, da.Array) and A.strides[0] >= A.strides[1]
    br, bc = block_sides(block, m, n, len(names), rows_first)
    rows = [slice(r, min(r + br, m)) for r in range(0, m, br)]
    cols = [slice(c, min(c + bc, n)) for c in range(0, n, bc)]
    product = BlockProduct(client, (m, n), dtype, (1, 1), rows, cols, out=out,
                           in_place=target is not None, report=bool(report))
    if not rows or not cols:
        return product
    pr, pc = product.grid = process_grid(len(names), len(rows), len(cols), m, n, rows_first)
    check_task_count(block, (m, A.shape[1], n), (min(br, m), min(bc, n)), len(rows) * len(cols), pr * pc)
    owner = {(i, j): names[(i % pr) * pc + j % pc] for i in range(len(rows)) for j in range(len(cols))}
    row_groups = [[names[(i % pr) * pc + q] for q in range(pc)] for i in range(len(rows))]
    col_groups = [[names[p * pc + j % pc] for p in range(pr)] for j in range(len(cols))]
    for x in (A, B):
        if isinstance(x, np.ndarray):
            mapped.flush(x)
    product.a_panels = _panels(client, [A[r, :] for r in rows], row_groups)
    product.b_panels = _panels(client, [B[:, c] for c in cols], col_groups)
    token = uuid.uuid4().hex[:12]
    handles = {name: mapped.locate(x) for name, x in (("A", A), ("B", B)) if isinstance(x, np.ndarray)}
    checks = []
    if engine_options.get("check_finite", False) and len(handles) == 2 and all(handles.values()):
        checks = finite.start(client, handles, names, token)
        engine_options = {**engine_options, "check_finite": False, "before_write": finite.gate(token)}
    product.blocks = _send_blocks(client, product, owner, target, token, backend, engine_options,
                                  lock_pages, bool(report))
    product.workers = owner
    if checks:
        finite.settle(client, checks, token, list(product.blocks.values()))
    return product


def _send_blocks(client: Client, product: BlockProduct, owner: dict[tuple[int, int], str], target: Any, token: str,
                 backend: str, options: dict[str, Any], lock_pages: bool | str,
                 report: bool) -> dict[tuple[int, int], Future]:
    """Send every block task, those of each worker in one message (``client.map``): one ``submit`` per
    block made a message per task, 2-3 s of the client's time for 4225 tasks."""
    mine: dict[str, list[tuple[int, int]]] = {}
    for ij, worker in owner.items():
        mine.setdefault(worker, []).append(ij)
    blocks = {}
    for worker, ijs in mine.items():
        outs = [target[product.rows[i], product.cols[j]] if target is not None else None for i, j in ijs]
        futures = client.map(block_product, [_on(product.a_panels[i], worker) for i, _ in ijs],
                             [_on(product.b_panels[j], worker) for _, j in ijs], outs,
                             key=[f"outofcore-block-{token}-{i}-{j}" for i, j in ijs], workers=[worker],
                             allow_other_workers=False, pure=False, backend=backend, options=options,
                             lock_pages=lock_pages, report=report)
        blocks.update(zip(ijs, futures))
    return {ij: blocks[ij] for ij in owner}


def matmul(A: Any, B: Any, *, client: Client, block: int | tuple[int, int] | None = None, backend: str = "auto",
           out: Any = None, workers: str | list[str] | None = None, lock_pages: bool | str = "stream",
           **engine_options: Any) -> np.ndarray:
    """``A @ B``, computed block by block on ``client``'s workers: :func:`submit`, then
    :meth:`BlockProduct.result`. A and B are NumPy arrays (views of mapped files are read by the workers
    in place) or ``dask.array`` arrays (m x k and k x n, float64 or float32); ``block`` is the C block of
    one task (a side or (rows, cols); default: one block per worker); ``out`` receives C (default: a new
    NumPy array); ``workers`` limits the product to some workers; ``lock_pages`` page-locks mapped
    operands on the workers (see :func:`submit`); ``backend`` and ``engine_options`` are
    those of :func:`gpu.outofcore.matmul` on each worker. Raises TypeError and ValueError before any work
    (see the module notes)."""
    return submit(A, B, client=client, block=block, backend=backend, out=out, workers=workers,
                  lock_pages=lock_pages, **engine_options).result()
