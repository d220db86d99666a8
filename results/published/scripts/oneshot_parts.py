"""Where a one-shot multi-GPU product's time goes beside its page-locking, in three parts (one run):

* ``start``: the seconds from the call to the first block task in a new cluster, with and without the workers
  warmed first (``client.run`` of :func:`warm`, which times each worker's imports of CuPy and the Dask front-end,
  its CUDA context and cuBLAS handle, and the out-of-core operations object): whether the 1.4-2.0 s measured at
  N = 65536 on two H200s is the workers' own start;
* ``pinned``: seconds to get page-locked staging memory, by ``cudaHostAlloc`` (CuPy's ``hostAlloc``) and by
  anonymous memory mapped in on threads and registered (``cudaHostRegister``), new and again after a free;
* ``staging``: bytes/s of the engine's staging copy (:func:`gpu.outofcore.ops.stage`) from a panel of a
  mapped ``.npy`` in ``/dev/shm`` opened anew (its pages faulted in by the copy) and again, into pinned memory,
  per thread count.

Environment: ``N`` (default 32768), ``WORKERS`` (2), ``PROTOCOL`` (tcp), ``BACKEND`` (cupy; numpy checks the
script on CPU workers and skips ``pinned``). Writes ``$OUT/oneshot-parts.json``. Run: ``OUT=dir
PYTHONPATH=$PWD python3 results/published/scripts/oneshot_parts.py``.
"""

import json
import mmap
import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from distributed import get_task_stream

from experiments.core.environment import environment
from experiments.multigpu import bench
from gpu.backend import get_backend
from gpu.outofcore import ahead, ops

BACKEND = os.environ.get("BACKEND", "cupy")
GIB = 2**30


def _seconds(work, *args, **kwargs) -> float:
    t0 = time.perf_counter()
    work(*args, **kwargs)
    return time.perf_counter() - t0


def warm() -> dict:
    """On a worker: seconds of each part of its start that a first block task would otherwise pay."""
    out = {"import_front_end": _seconds(__import__, "gpu.multigpu.dask_matmul")}
    if BACKEND == "cupy":
        out["import_cupy"] = _seconds(__import__, "cupy")
        import cupy
        out["context"] = _seconds(cupy.cuda.runtime.malloc, 256)
        out["cublas_handle"] = _seconds(cupy.cuda.device.get_cublas_handle)
    out["engine_ops"] = _seconds(get_backend(BACKEND).ops, "outofcore")
    return out


def start(be, n: int, workers: int, protocol: str, A, B, folder: str) -> list[dict]:
    """A one shot and two later products in a new cluster, cold and with the workers warmed first."""
    rows = []
    for warmed in (False, True):
        out = bench.new_out(folder, n)
        cluster, client = bench.new_cluster(be, workers, protocol)
        with cluster, client:
            parts = client.run(warm) if warmed else None
            call = (bench.dask_matmul.matmul, A, B)
            kwargs = {"client": client, "backend": BACKEND, "out": out}
            with get_task_stream(client) as stream:
                began = time.time()
                first = _seconds(*call, **kwargs)
            later = [_seconds(*call, **kwargs) for _ in range(2)]
            spans = bench.task_spans(stream.data, sorted(client.nthreads()))
            rows.append({"warmed": warmed, "warm_parts": parts, "one_shot_s": first, "later_s": later,
                         "first_task_after_s": bench.first_start(stream.data, began),
                         "task_s": [s[3] - s[2] for s in spans], "first_touch": client.run(bench.mapped.first_touch)})
    return rows


def pinned(sizes=(GIB // 4, GIB, 4 * GIB)) -> list[dict]:
    """Seconds to get page-locked memory of each size, by cudaHostAlloc and by registered anonymous memory."""
    import cupy
    rt, rows = cupy.cuda.runtime, []
    for nbytes in sizes:
        for attempt in ("new", "again"):
            t0 = time.perf_counter()
            ptr = rt.hostAlloc(nbytes, 0)
            alloc = time.perf_counter() - t0
            rt.freeHost(ptr)
            region = mmap.mmap(-1, nbytes)
            address = np.frombuffer(region, np.uint8).ctypes.data
            populate = _seconds(ahead.populate_range, address, nbytes, True)
            register = _seconds(rt.hostRegister, address, nbytes, 1)
            rt.hostUnregister(address)
            region.close()
            rows.append({"bytes": nbytes, "attempt": attempt, "host_alloc_s": alloc, "populate_s": populate,
                         "register_s": register})
    return rows


def staging(path: str, n: int, into: np.ndarray) -> list[dict]:
    """The staging copy's rate from a row panel of the mapped file at ``path``, opened anew, then again."""
    rows = []
    for threads in (4, 8, 16):
        A = np.load(path, mmap_mode="r")
        panel = A[: into.size // n]
        dst = into[: panel.size].reshape(panel.shape)
        with ThreadPoolExecutor(threads) as pool:
            first = _seconds(ops.stage, pool, dst, panel, threads)
            again = _seconds(ops.stage, pool, dst, panel, threads)
        rows.append({"threads": threads, "bytes": panel.nbytes, "first_gb_s": panel.nbytes / first / 1e9,
                     "again_gb_s": panel.nbytes / again / 1e9})
    return rows


def main() -> None:
    be = get_backend(BACKEND)
    n, workers = int(os.environ.get("N", 32768)), int(os.environ.get("WORKERS", 2))
    protocol = os.environ.get("PROTOCOL", "tcp")
    result = {"script": "results/published/scripts/oneshot_parts.py", "n": n, "workers": workers,
              "protocol": protocol, "environment": environment(be)}
    with tempfile.TemporaryDirectory(dir=bench.SHARED_MEMORY if os.path.isdir(bench.SHARED_MEMORY) else None) as d:
        A, B, _ = bench.mapped_operands(d, n)
        result["start"] = start(be, n, workers, protocol, A, B, d)
        print(json.dumps(result["start"], default=str)[:2000], flush=True)
        if BACKEND == "cupy":
            result["pinned"] = pinned()
            print(json.dumps(result["pinned"]), flush=True)
        into = (np.frombuffer(__import__("cupy").cuda.alloc_pinned_memory(GIB), np.float64) if BACKEND == "cupy"
                else np.empty(GIB // 8))
        result["staging"] = staging(os.path.join(d, "A.npy"), n, into)
        print(json.dumps(result["staging"]), flush=True)
    with open(os.path.join(os.environ.get("OUT", "."), "oneshot-parts.json"), "w") as fh:
        json.dump(result, fh, indent=1, default=str)


if __name__ == "__main__":
    main()
