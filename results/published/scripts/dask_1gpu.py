"""The 1-GPU Dask run (dask-cuda's LocalCUDACluster, one worker) against the out-of-core engine
called directly, host memory to host memory, with where Dask's time goes.

* ``direct``: :func:`gpu.outofcore.matmul` on NumPy operands in this process.
* ``dask_numpy``: :func:`gpu.multigpu.dask_matmul.submit` on the same NumPy operands, timed in three phases:
  sending A's and B's panels to the worker, the block task, gathering C back.
* ``dask_array_on_worker``: operands made on the worker (``dask.array`` random, persisted) and C left there
  (the futures of the block tasks); then the gather of C alone.

Wall time, medians of 3 runs after a warm-up (runs of 1.6 to 37 s); every product checked on sampled rows
against cuBLAS's product of those rows (largest element-wise relative error). Run on the device with
``PYTHONPATH=$PWD:<dask wheels> OUT=<dir> python3 results/published/scripts/dask_1gpu.py``; it writes
``$OUT/dask2.json`` (published as ``h100-dask-1gpu.json``).
"""

import json
import os
import time

import cupy
import dask.array as da
import numpy as np
from dask_cuda import LocalCUDACluster
from distributed import Client, wait

from experiments.outofcore.bench import HostOperands
from gpu.backend import get_backend
from gpu.multigpu.dask_matmul import submit
from gpu.outofcore import matmul as engine

N = int(os.environ.get("DASK_N", "32768"))
ROWS = np.array([0, 1, 777, N - 1])
RESULTS = {"n": N}


def timed(work, reps=3):
    work()
    seconds = []
    for _ in range(reps):
        start = time.perf_counter()
        work()
        seconds.append(time.perf_counter() - start)
    median = float(np.median(seconds))
    return {"median_s": median, "samples": seconds, "tflops": 2 * N**3 / median / 1e12}


def row_error(got, a_rows, B):
    ref = cupy.asnumpy(cupy.asarray(a_rows) @ cupy.asarray(B))
    return float(np.max(np.abs(got - ref) / np.abs(ref)))


def save(key, value):
    RESULTS[key] = value
    print(key, json.dumps(value), flush=True)
    with open(os.environ["OUT"] + "/dask2.json", "w") as f:
        json.dump(RESULTS, f, indent=1)


def direct_and_numpy(client):
    ops = HostOperands.draw(get_backend("numpy"), N)
    A, B, C = ops.A, ops.B, ops.C
    save("direct", timed(lambda: engine(A, B, out=C, backend="cupy")) | {"error": row_error(C[ROWS], A[ROWS], B)})
    cupy.get_default_memory_pool().free_all_blocks()
    cupy.get_default_pinned_memory_pool().free_all_blocks()
    phases = {"send": [], "compute": [], "gather": []}
    for _ in range(2):
        t0 = time.perf_counter()
        product = submit(A, B, client=client, backend="cupy")
        wait(product.a_panels + product.b_panels)
        t1 = time.perf_counter()
        wait(list(product.blocks.values()))
        t2 = time.perf_counter()
        got = product.result()
        t3 = time.perf_counter()
        for key, value in zip(phases, (t1 - t0, t2 - t1, t3 - t2)):
            phases[key].append(value)
    save(
        "dask_numpy",
        {
            "phases_s": phases,
            "total_s": [sum(x) for x in zip(*phases.values())],
            "error": row_error(got[ROWS], A[ROWS], B),
        },
    )


def on_worker(client):
    rng = da.random.default_rng(7)
    A = client.persist(rng.random((N, N), chunks=(4096, N)) - 0.5)
    B = client.persist(rng.random((N, N), chunks=(N, 4096)) - 0.5)
    wait([A, B])
    state = {}

    def run():
        state["product"] = submit(A, B, client=client, backend="cupy")
        wait(list(state["product"].blocks.values()))

    result = timed(run)
    got = state["product"].to_dask_array()[ROWS].compute()
    save(
        "dask_array_on_worker",
        result
        | {
            "error": row_error(got, A[ROWS].compute(), B.compute()),
            "note": "operands made on the worker, C left there",
        },
    )
    start = time.perf_counter()
    state["product"].result()
    save("gather_C_s", time.perf_counter() - start)


def main():
    with LocalCUDACluster(n_workers=1, dashboard_address=":0") as cluster, Client(cluster) as client:
        client.wait_for_workers(1)
        direct_and_numpy(client)
        on_worker(client)


if __name__ == "__main__":
    main()
