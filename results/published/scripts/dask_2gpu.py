"""Issue 16: the Dask front-end of the out-of-core engine on one and two GPUs of one host.

dask-cuda's LocalCUDACluster runs one worker per GPU. The operands are made on the workers (dask.array
random, persisted in host memory) and C is left there. Each configuration takes the wall time of a
warm-up and REPS runs; per worker, the tasks, compute time and transfers from the task stream; sampled rows
of C are checked against exact_matmul; 3 tasks on 2 workers show the load imbalance.

Run: ``PYTHONPATH=$PWD:<dask wheels> OUT=<dir> NS=32768 python3 results/published/scripts/dask_2gpu.py``
(then again with ``REPLICATE=1``: A's and B's chunks replicated to every worker first); it writes
``$OUT/dask2gpu.json``, published as ``h200x2-dask.json``.
"""
import json
import os
import time

import cupy
import dask.array as da
import numpy as np
from dask_cuda import LocalCUDACluster
from distributed import Client, get_task_stream, wait

from accuracy.reference import exact_matmul
from gpu.multigpu.dask_matmul import submit

OUT = os.environ["OUT"]
NS = [int(x) for x in os.environ.get("NS", "32768").split(",")]
REPS = int(os.environ.get("REPS", "2"))
REPLICATE = bool(os.environ.get("REPLICATE"))
SUFFIX = "-replicated" if REPLICATE else ""
PATH = f"{OUT}/dask2gpu.json"
RESULTS = {}
if os.path.exists(PATH):
    with open(PATH) as f:
        RESULTS = json.load(f)


def save(key, value):
    RESULTS[key] = value
    print(key, json.dumps(value)[:600], flush=True)
    with open(PATH, "w") as f:
        json.dump(RESULTS, f, indent=1)


def stream_stats(data):
    """Per worker: compute tasks (block products and others), their busy seconds, transfers in and their bytes."""
    out = {}
    for t in data:
        w = out.setdefault(t["worker"], {"block_tasks": 0, "other_tasks": 0, "block_s": 0.0, "transfers": 0,
                                          "transfer_s": 0.0})
        for ss in t["startstops"]:
            if ss["action"] == "compute":
                key = t["key"] if isinstance(t["key"], str) else str(t["key"])
                if "outofcore-block" in key:
                    w["block_tasks"] += 1
                    w["block_s"] += ss["stop"] - ss["start"]
                else:
                    w["other_tasks"] += 1
            elif ss["action"] == "transfer":
                w["transfers"] += 1
                w["transfer_s"] += ss["stop"] - ss["start"]
    return out


def run(client, n, workers, block=None, reps=REPS):
    rng = da.random.default_rng(7)
    A = client.persist(rng.random((n, n), chunks=(4096, n)) - 0.5)
    B = client.persist(rng.random((n, n), chunks=(n, 4096)) - 0.5)
    wait([A, B])
    if REPLICATE:
        client.replicate([A, B])
    state = {}

    def once():
        state["p"] = submit(A, B, client=client, backend="cupy", block=block)
        wait(list(state["p"].blocks.values()))

    once()
    seconds, streams = [], []
    for _ in range(reps):
        with get_task_stream(client) as ts:
            t0 = time.perf_counter()
            once()
            seconds.append(time.perf_counter() - t0)
        streams.append(stream_stats(ts.data))
    rows = np.array([0, 1, n // 2 + 3, n - 1])
    got = state["p"].to_dask_array()[rows].compute()
    ref = cupy.asnumpy(exact_matmul(cupy.asarray(A[rows].compute()), cupy.asarray(B.compute()), backend="cupy"))
    err = float(np.max(np.abs(got - ref) / np.abs(ref)))
    med = float(np.median(seconds))
    return {"n": n, "workers": workers, "block": block, "blocks": None, "median_s": med, "samples": seconds,
            "tflops": 2 * n**3 / med / 1e12, "replicated": REPLICATE, "per_worker": streams[-1],
            "max_rel_err_vs_exact": err}


def main():
    for workers in (2, 1):
        visible = ",".join(str(i) for i in range(workers))
        with LocalCUDACluster(n_workers=workers, CUDA_VISIBLE_DEVICES=visible, dashboard_address=":0") as cluster, \
                Client(cluster) as client:
            client.wait_for_workers(workers)
            for n in NS:
                key = f"{n}-{workers}w{SUFFIX}"
                if key not in RESULTS:
                    save(key, run(client, n, workers))
            if workers == 2 and not REPLICATE and "imbalance-32768-2w-3tasks" not in RESULTS and 32768 in NS:
                save("imbalance-32768-2w-3tasks", run(client, 32768, 2, block=(-(-32768 // 3), 32768), reps=1))


if __name__ == "__main__":
    main()
