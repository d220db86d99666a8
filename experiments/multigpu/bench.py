"""Products across the workers of a Dask cluster, one shot and steady: the experiment ``multigpu``.

Per point (N, kind, workers; :mod:`experiments.multigpu.points`) a **new cluster** of that many workers is made
(dask-cuda's ``LocalCUDACluster`` on a GPU machine, one worker per GPU; single-thread ``LocalCluster`` workers
in this process on the CPU), the operands put in place (for ``host``, mapped ``.npy`` files in shared memory,
``/dev/shm`` where the host has it, read by the workers in place, with C a mapped file the workers write: the
setting of the measurements the toolkit reproduces, and of a product too large for one device; for
``resident``, chunks of row and column panels persisted on the workers, on their GPUs with CuPy), and the
product timed by the host's clock until C is complete (written in its file for ``host``, persisted on the
workers for ``resident``): the first product is the one shot, then :data:`SAMPLES` more (:data:`FEW` where the
first took over :data:`SLOW_S`) give the steady time, and one more is recorded from Dask's task stream (each
task's transfers and compute on its worker: the ``timeline`` row). The one shot keeps its own task stream, the
seconds from the call to its first task's start (``first_task_after_s``), and
each worker's seconds and bytes of mapping the operands' pages in and locking them
(:func:`gpu.multigpu.mapped.first_touch`, read after it and again after the steady calls): what splits a slow
first call into page work, transfers and compute. Operands that neither ``/dev/shm`` nor the temporary folder
has room for are refused before anything is written.

NumPy arrays in the client's memory are not the ``host`` setting: Dask serializes them to every worker on
every call (on an H200 pair, N = 16384 on one worker took 6.3 s a product, of which 0.29 s computing).
The first product's C is checked on sampled rows against a float64 product of those rows, within gamma_(N+2)
(uniform [0, 1) inputs, so that bound holds entry by entry), so a wrong product is never stored. An NVML
reading is kept where the client's device has telemetry.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import dask
import dask.array as da
import numpy as np
from distributed import Client, LocalCluster, get_task_stream, wait

from gpu.backend import get_backend
from gpu.frontdoor.contract import gamma
from gpu.multigpu import dask_matmul, mapped, resident

from ..core.lab import require_correct, row_error, sample_rows
from ..core.registry import Context, experiment
from ..core.summary import Summary
from ..core.sweep import group_sweep
from .points import LOCKS, PLANS, Plan, Point, fitting, point_params
from .report import EXPERIMENT, ONESHOT, STEADY, TIMELINE, MultigpuRow, multigpu_rows, multigpu_summary

SAMPLES, FEW, SLOW_S = 10, 3, 5.0
SEED = 11
#: Where the mapped operands live when the host has it (shared memory: no disk under the timing).
SHARED_MEMORY = "/dev/shm"
#: Elements each generator draws, and the threads that draw the operands.
FILL_BAND, FILL_THREADS = 2**22, max(1, min(32, os.cpu_count() or 1))


def new_cluster(backend: Any, workers: int, protocol: str = "tcp") -> tuple[Any, Client]:
    """A fresh cluster of ``workers`` workers talking over ``protocol`` and its client (see the module notes)."""
    if backend.name == "cupy":
        from gpu.multigpu.cluster import local_cuda_cluster  # imports dask-cuda: a GPU run's, not the CPU tests'
        cluster = local_cuda_cluster(workers, dashboard_address=":0", protocol=protocol)
    else:
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=False, dashboard_address=":0")
    return cluster, Client(cluster)


def mapped_operands(folder: str, n: int, seed: int = SEED) -> tuple[np.memmap, np.memmap, np.memmap]:
    """A and B, uniform [0, 1), drawn into mapped ``.npy`` files in ``folder`` (:func:`fill_uniform`) and
    opened read-only, and C's writeable mapped file (see the module notes)."""
    for name, stream in zip(("A", "B"), np.random.SeedSequence(seed).spawn(2)):
        x = np.lib.format.open_memmap(os.path.join(folder, f"{name}.npy"), mode="w+", dtype=np.float64, shape=(n, n))
        fill_uniform(x, stream)
        x.flush()
        del x
    A, B = (np.load(os.path.join(folder, f"{name}.npy"), mmap_mode="r") for name in ("A", "B"))
    return A, B, new_out(folder, n)


def fill_uniform(x: np.ndarray, seed: np.random.SeedSequence) -> None:
    """Fill contiguous ``x`` with uniform [0, 1) draws, :data:`FILL_BAND` elements per generator (spawned from
    ``seed``, so the draws do not depend on the threads), the bands on up to :data:`FILL_THREADS` threads (a
    generator lets go of the interpreter's lock while it fills): one thread drew about 0.5 GB/s."""
    flat = x.reshape(-1)
    seeds = seed.spawn(-(-flat.size // FILL_BAND))

    def band(i: int) -> None:
        np.random.default_rng(seeds[i]).random(out=flat[i * FILL_BAND:(i + 1) * FILL_BAND])
    with ThreadPoolExecutor(FILL_THREADS) as pool:
        list(pool.map(band, range(len(seeds))))


def new_out(folder: str, n: int, name: str = "C.npy") -> np.memmap:
    """C's mapped file made anew (its pages not yet in memory, as a new output's are at a user's first call)."""
    path = os.path.join(folder, name)
    if os.path.exists(path):
        os.unlink(path)
    return np.lib.format.open_memmap(path, mode="w+", dtype=np.float64, shape=(n, n))


class OperandFiles:
    """The mapped operands of one sweep, by N (room made for ``matrices`` n x n files): A and B written once per
    size (in a new folder, the previous size's removed), C made anew for every point, so that each one shot
    writes into pages a new output has (or, for ``filled`` points, a C whose pages were written before the
    first of them). On the lent virtual
    machines a new page costs about as much wherever it was used before: 103 GB of anonymous memory took 34 s
    to touch on eight threads of the two-H200 machine, and 31 s again once let go, so a new C's first touch
    (34 GB at N = 65536) is most of what a one shot adds there."""

    def __init__(self, matrices: int = 3) -> None:
        self.matrices, self.n, self.folder, self.operands, self.filled = matrices, None, None, None, None

    def get(self, n: int, filled: bool = False) -> tuple[np.memmap, np.memmap, np.memmap]:
        """A, B and C for a point at ``n``: C a new file, or (``filled``) the size's filled output, its pages
        written before its first point."""
        if n != self.n:
            self.close()
            self.folder = operand_folder(self.matrices * 8 * n**2)
            self.n, self.operands = n, mapped_operands(self.folder.name, n)
        A, B, _ = self.operands
        if filled and self.filled is None:
            self.filled = new_out(self.folder.name, n, "C-filled.npy")
            self.filled[:] = 0.0
        self.operands = A, B, self.filled if filled else new_out(self.folder.name, n)
        return self.operands

    def close(self) -> None:
        self.operands = self.filled = None
        if self.folder is not None:
            self.folder.cleanup()
        self.n = self.folder = None

    def __enter__(self) -> OperandFiles:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def operand_folder(nbytes: int) -> tempfile.TemporaryDirectory:
    """A new temporary folder for ``nbytes`` of mapped operands: in shared memory where the host has it and it has
    room, else in the system's temporary folder; ValueError where neither has room (before anything is written)."""
    for where in (SHARED_MEMORY, tempfile.gettempdir()):
        if os.path.isdir(where) and _free_bytes(where) >= nbytes:
            return tempfile.TemporaryDirectory(prefix="gemmlab-multigpu-", dir=where)
    raise ValueError(f"the mapped operands need {nbytes / 2**30:.1f} GiB, more than {SHARED_MEMORY} or "
                     f"{tempfile.gettempdir()} has free; choose smaller --sizes, or make room there")


def _free_bytes(folder: str) -> int:
    found = os.statvfs(folder)
    return found.f_bavail * found.f_frsize


def in_place(backend: Any, client: Client, A: np.ndarray, B: np.ndarray, workers: int) -> tuple[Any, Any]:
    """A's row panels and B's column panels persisted on the workers (on their GPUs with CuPy), each read by its
    worker from the operand's mapped file: the client sends file handles, not the operands (which Dask would
    pickle into the graph: 16 GiB at N = 32768, past what its messages carry)."""
    n = A.shape[0]
    side = -(-n // workers)
    convert = backend.xp.asarray if backend.name == "cupy" else np.array
    dA = da.concatenate([_panel(A, (slice(lo, lo + side), slice(None)), convert) for lo in range(0, n, side)], 0)
    dB = da.concatenate([_panel(B, (slice(None), slice(lo, lo + side)), convert) for lo in range(0, n, side)], 1)
    dA, dB = client.persist([dA, dB])
    wait([dA, dB])
    settle(backend, client)
    return dA, dB


def _panel(x: np.ndarray, key: tuple[slice, slice], convert: Callable[[np.ndarray], Any]) -> da.Array:
    """The panel ``x[key]`` as one dask chunk that its worker reads from x's mapped file and converts."""
    handle = mapped.locate(x)
    if handle is None:
        raise TypeError("resident operands are read by the workers from mapped files: pass np.load(..., mmap_mode)")
    part = handle[key]
    meta = convert(np.empty((0, 0), dtype=x.dtype))
    return da.from_delayed(dask.delayed(_read)(part, convert), part.shape, dtype=x.dtype, meta=meta)


def _read(part: mapped.MappedMatrix, convert: Callable[[np.ndarray], Any]) -> Any:
    """A worker's copy of a mapped panel, in its own memory (on its GPU with CuPy)."""
    return convert(part.open())


def settle(backend: Any, client: Client) -> None:
    """Wait until every worker's device has finished what it was given: a CuPy task returns once its work is
    queued, so a product's time ends here, not at Dask's ``wait``."""
    if backend.name == "cupy":
        client.run(_synchronize)


def _synchronize() -> None:
    get_backend("cupy").synchronize()


def product(kind: str, backend: Any, client: Client, A: Any, B: Any, out: np.memmap, lock: str = "true") -> Any:
    """One product as a user makes it: C complete when it returns (in ``out`` for ``host``, its workers
    locking pages by ``lock``, a name of :data:`~experiments.multigpu.points.LOCKS`)."""
    if kind == "host":
        return dask_matmul.matmul(A, B, client=client, backend=backend.name, out=out, lock_pages=LOCKS[lock])
    C = resident.matmul(A, B, client=client, name=f"gemmlab-resident-{uuid.uuid4().hex}")   # computed each time
    wait(C)
    settle(backend, client)
    return C


def timed(run: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    C = run()
    return time.perf_counter() - start, C


def check(backend: Any, C: Any, A: np.ndarray, B: np.ndarray, where: str) -> float:
    """The largest relative error of C's sampled rows (RuntimeError beyond gamma_(N+2))."""
    n = A.shape[0]
    rows = sample_rows(n)
    got = C[rows]
    got = np.asarray(backend.to_numpy(got.compute() if isinstance(got, da.Array) else got), dtype=np.float64)
    return require_correct(row_error(got, A[rows] @ B), where, gamma(n + 2),
                           f"on {len(rows)} sampled rows, largest relative error")


def measure_point(ctx: Context, files: OperandFiles, point: Point) -> int:
    """A new cluster, the operands in place (``files``), the one shot (checked) and the steady samples; rows
    stored."""
    be = ctx.backend
    where = f"N = {point.n}, {point.setting}, {point.workers} workers"
    A, B, out = files.get(point.n, point.output == "filled")
    asked = time.perf_counter()
    cluster, client = new_cluster(be, point.workers, point.protocol)
    with cluster, client:
        client.wait_for_workers(point.workers)
        started = time.perf_counter() - asked
        a, b = (A, B) if point.kind == "host" else in_place(be, client, A, B, point.workers)
        run = partial(product, point.kind, be, client, a, b, out, point.lock)
        lanes = sorted(client.nthreads())
        with get_task_stream(client) as stream:
            began = time.time()
            first, C = timed(run)
        one_shot = {"spans": task_spans(stream.data, lanes), "first_touch": touched(client, lanes),
                    "first_task_after_s": first_start(stream.data, began), "cluster_start_s": started}
        error = check(be, C, A, B, where)
        del C
        samples = [timed(run)[0] for _ in range(FEW if first > SLOW_S else SAMPLES)]
        with get_task_stream(client) as stream:
            last, _ = timed(run)
        spans = task_spans(stream.data, lanes)
        one_shot["later_touch"] = touched(client, lanes)
    del A, B, out, a, b
    telemetry = be.telemetry()
    meta = {"check_error": error, "backend": be.name, "check_rows": len(sample_rows(point.n)),
            "telemetry": None if telemetry is None else telemetry.read().as_dict()}
    params = point_params(point, ctx.regime)
    ctx.db.add(ctx.run_id, EXPERIMENT, ONESHOT, params, value=first, unit="s", samples=[first],
               meta={**meta, **one_shot})
    ctx.db.add(ctx.run_id, EXPERIMENT, STEADY, params, value=statistics.median(samples), unit="s", samples=samples,
               meta=meta)
    ctx.db.add(ctx.run_id, EXPERIMENT, TIMELINE, params, value=last, unit="s", samples=[last],
               meta={**meta, "spans": spans})
    return 3


def touched(client: Client, workers: Sequence[str]) -> list[dict[str, float]]:
    """Each worker's seconds and bytes spent so far mapping its operands' pages in and locking them
    (:func:`gpu.multigpu.mapped.first_touch`), in ``workers``' order: read after the one shot, they split its
    time; read again after the steady calls, the difference is what those calls paid."""
    found = client.run(mapped.first_touch)
    return [found.get(w, {}) for w in workers]


def task_spans(records: Sequence[dict[str, Any]], workers: Sequence[str]) -> list[list[Any]]:
    """The task stream of one product as [worker lane, action (compute or transfer), start, stop, task name]
    spans, seconds from its first start (the lanes in ``workers``' order)."""
    found = [(workers.index(r["worker"]) if r["worker"] in workers else -1, s["action"], s["start"], s["stop"],
              str(r["key"][0] if isinstance(r["key"], tuple) else r["key"]).rsplit("-", 1)[0])
             for r in records for s in r.get("startstops", ())]
    t0 = min((start for _, _, start, _, _ in found), default=0.0)
    return [[lane, action, start - t0, stop - t0, name] for lane, action, start, stop, name in found]


def first_start(records: Sequence[dict[str, Any]], began: float) -> float | None:
    """Seconds from ``began`` (the host's wall clock when the product was called) to the first start in the task
    stream: the part of a one shot before any task runs. To a few milliseconds: a worker's times are shifted
    by its estimate of its clock's offset from the scheduler's."""
    starts = [s["start"] for r in records for s in r.get("startstops", ())]
    return min(starts) - began if starts else None


def stored(ctx: Context, point: Point) -> bool:
    return ctx.db.has(EXPERIMENT, STEADY, point_params(point, ctx.regime), ctx.env_key)


def run_points(ctx: Context, points: Sequence[Point], left_out: Sequence[str]) -> tuple[dict[str, Any],
                                                                                         list[MultigpuRow]]:
    """Measure (or resume) the points, each stored as soon as measured; the counts and their stored rows."""
    with OperandFiles(4 if any(p.output == "filled" for p in points) else 3) as files:
        outcome = group_sweep(ctx, EXPERIMENT, points, partial(stored, ctx), partial(measure_point, ctx, files),
                              lambda p: f"N={p.n} {p.setting} x{p.workers}")
    wanted = {(p.n, p.setting, p.workers) for p in points}
    rows = [r for r in multigpu_rows(ctx.db, ctx.env_key, ctx.regime) if (r.n, r.kind, r.workers) in wanted]
    sizes = ", ".join(str(n) for n in sorted({p.n for p in points}))
    workers = ", ".join(str(w) for w in sorted({p.workers for p in points}))
    protocols = ", ".join(sorted({p.protocol for p in points}))
    return {"scope": f"N = {sizes}; workers {workers}; protocol {protocols or 'none'}",
            "points measured": outcome.measured, "points already stored": outcome.skipped,
            "left out": "; ".join(left_out) or "none"}, rows


@experiment(EXPERIMENT, "Products across 1, 2 and 4 workers of a Dask cluster, one shot and steady, for host "
                        "operands and device-resident dask arrays: speed-up over one worker")
def run_multigpu(ctx: Context) -> Summary:
    plan: Plan = PLANS[(ctx.backend.name, ctx.quick)]
    points, left_out = fitting(ctx.backend, plan)
    counts, rows = run_points(ctx, points, left_out)
    return multigpu_summary(counts, rows)
