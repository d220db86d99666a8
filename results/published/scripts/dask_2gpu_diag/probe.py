"""Two-GPU diagnostic of the Dask front-end: inside the Dask workers, the engine's route, phases and time-line
on the handles that block tasks get. ``N=49152 python3 probe.py`` (Dask wheels installed): two-worker,
one-worker and two-worker products through ``submit`` (wall times), then twice a probe task on each worker
at once on its half, then one on the first worker on the whole product; prints one line each."""
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from dask_cuda import LocalCUDACluster
from distributed import Client

from gpu.multigpu import mapped
from gpu.multigpu.dask_matmul import submit

n = int(os.environ.get("N", "49152"))
d = "/dev/shm/gemmlab-dask"
os.makedirs(d, exist_ok=True)


def draw(path, seed):
    x = np.lib.format.open_memmap(path, mode="w+", dtype=np.float64, shape=(n, n))
    with ThreadPoolExecutor(32) as p:
        list(p.map(lambda r: np.random.default_rng(seed * 100000 + r).random(out=x[r:r + 512]), range(0, n, 512)))
    x.flush()
    return np.load(path, mmap_mode="r")


def probe(ah, bh, ch):
    from gpu.backend import get_backend
    from gpu.outofcore import Timeline, matmul, plan, run
    be = get_backend("cupy")
    ops = be.ops("outofcore")
    out = {"visible": os.environ.get("CUDA_VISIBLE_DEVICES")}
    t = time.perf_counter()
    a, b, c = ah.open(ops), bh.open(ops), ch.open(ops)
    out["open_s"] = time.perf_counter() - t
    out["staged"] = ops.staged(a, b, c)
    for name, kw in (("api_s", {}), ("api_nocheck_s", {"check_finite": False})):
        t = time.perf_counter()
        matmul(a, b, out=c, backend=be, **kw)
        out[name] = time.perf_counter() - t
    m, k = a.shape
    p = plan(m, k, b.shape[1], 8, device_memory=int(ops.budget(0, out["staged"]) * 0.9))
    out["plan"] = [list(p.block), p.panel, list(p.grid)]
    line = Timeline()
    t = time.perf_counter()
    run(be, ops, p, a, b, c, line)
    out["run_s"] = time.perf_counter() - t
    for lane in ("staging", "H2D", "GEMM", "D2H", "placement"):
        ss = [s for s in line.spans() if s.lane == lane]
        out[lane] = [len(ss), round(sum(s.end - s.start for s in ss), 3)]
    t = time.perf_counter()
    ch.flush()
    out["flush_s"] = time.perf_counter() - t
    return out


def main():
    with LocalCUDACluster(dashboard_address=":0", memory_limit=0) as cluster, Client(cluster) as client:
        names = sorted(client.nthreads())
        A, B = draw(f"{d}/a.npy", 1), draw(f"{d}/b.npy", 2)
        C = np.lib.format.open_memmap(f"{d}/c.npy", mode="w+", dtype=np.float64, shape=(n, n))
        for workers in (names, names[:1], names):
            t = time.perf_counter()
            submit(A, B, client=client, backend="cupy", out=C, workers=workers).result()
            print("submit", len(workers), round(time.perf_counter() - t, 3), flush=True)
        h = n // 2
        ah = [mapped.locate(A[:h]), mapped.locate(A[h:])]
        bh, ch = mapped.locate(B), [mapped.locate(C[:h]), mapped.locate(C[h:])]
        for rep in range(2):
            futs = [client.submit(probe, ah[i], bh, ch[i], workers=[w], pure=False) for i, w in enumerate(names)]
            for w, r in zip(names, client.gather(futs)):
                print("2w", rep, w[-5:], json.dumps(r), flush=True)
        r = client.submit(probe, mapped.locate(A), bh, mapped.locate(C), workers=names[:1], pure=False).result()
        print("1w", json.dumps(r), flush=True)
        for f in "abc":
            os.remove(f"{d}/{f}.npy")


if __name__ == "__main__":
    main()
