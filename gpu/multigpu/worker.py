"""What a block task of :mod:`gpu.multigpu.dask_matmul` runs on its worker, apart from the client's code.

A worker unpickles a task's function by importing its module, so this module imports only what the task
needs: the out-of-core engine and the mapped handles, not ``dask.array``. On a new ``dask-cuda`` worker of
``nvidia-h200-x2``, importing :mod:`gpu.multigpu.dask_matmul` took 1.2-1.7 s after CuPy and
:mod:`gpu.backend` (0.35-0.45 s together), and a first product at N = 8192 started its first task 1.4-1.9 s
after the call, against 0.008 s on workers that had imported it before
(``results/published/h200/h200x2-worker-start.json``).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
from distributed import get_worker

from .. import outofcore
from ..backend import get_backend
from ..outofcore.ops import FAMILY as OUTOFCORE
from ..outofcore.timeline import LANES, Timeline, busy
from .mapped import MappedMatrix

#: Topic of the events that block tasks log with ``report=True`` (distributed's event log).
REPORT_TOPIC = "gemmlab-outofcore-block"
#: One engine call at a time per process (see :mod:`gpu.multigpu.dask_matmul`).
ENGINE_LOCK = threading.Lock()
#: The ``lock_pages`` values whose pages the engine locks itself, beside its products, and its ``staging`` for each.
AHEAD = {"ahead": "lock", "stream": "stream"}


def block_product(a: np.ndarray | MappedMatrix, b: np.ndarray | MappedMatrix, out: MappedMatrix | None, *,
                  backend: str, options: dict[str, Any], lock_pages: bool | str = "stream",
                  report: bool = False) -> np.ndarray | None:
    """One C block on the worker that runs it: the engine on its row panel of A and column panel of B
    (mapped here where they are handles, and page-locked with ``lock_pages``); written into ``out``'s
    block in place where it is given. With ``report``, logs where its time went (:func:`log_report`). The task
    keeps its worker thread while it waits for the engine lock: the holder waits for nothing but the finite
    checks' verdict, and leaves the pool for that wait where it must (:func:`gpu.multigpu.finite.verdict`).
    (Every block task leaving the pool at once made a thread per task: 4225 tasks of a 65 x 65 product took
    24-76 s on two workers, and hung in distributed's ``secede`` in 5 of 15 runs.)"""
    options = dict(options)
    if "device_block" in options:
        options["block"] = options.pop("device_block")
    with ENGINE_LOCK:
        t0 = time.perf_counter()
        ops = get_backend(backend).ops(OUTOFCORE)
        locker, reuse, ahead = (ops if lock_pages else None), lock_pages == "reuse", lock_pages in AHEAD
        options.setdefault("staging", AHEAD.get(lock_pages, "pinned"))
        if ahead:
            options["keep_locked"] = out is not None and all(isinstance(x, MappedMatrix) for x in (a, b))
        a, b = (x.open(locker, reuse, ahead) if isinstance(x, MappedMatrix) else x for x in (a, b))
        c = out.open(locker, reuse, ahead) if out is not None else None
        line = Timeline() if report else None
        t1 = time.perf_counter()
        C = outofcore.matmul(a, b, out=c, backend=backend, timeline=line, **options)
        t2 = time.perf_counter()
        if out is not None:
            out.flush()
        if line is not None:
            log_report(ops.staged(a, b, c), line, (t1 - t0, t2 - t1, time.perf_counter() - t2))
        return None if out is not None else C


def log_report(route: tuple[bool, bool, bool], line: Timeline, seconds: tuple[float, float, float]) -> None:
    """Log a block task's account in :data:`REPORT_TOPIC`: its key and worker, whether A, B and C were
    staged (False: page-locked, copied in place), seconds to open its operands, of the engine call (its
    checks and plan included) and to flush C, and the engine run's span and busy seconds per lane."""
    spans, worker = line.spans(), get_worker()
    run = max((s.end for s in spans), default=0.0) - min((s.start for s in spans), default=0.0)
    worker.log_event(REPORT_TOPIC, {
        "key": worker.get_current_task(), "worker": worker.address, "staged": list(route),
        "open_s": seconds[0], "call_s": seconds[1], "flush_s": seconds[2], "run_s": run,
        "busy_s": {lane: busy(spans, lane) for lane in LANES}})
