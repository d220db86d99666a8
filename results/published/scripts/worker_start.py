"""Where a new dask-cuda worker's first block task loses 1.3-2.4 s before it starts (the benchmark's rows): the
parts of a worker's start, timed in a new cluster by a function that imports nothing until it runs, then
``first_task_after_s`` of a small product on a new cluster, cold and warmed by that function, alternately.
Writes ``$OUT/start-parts.json`` (``results/published/h200/h200x2-worker-start.json`` holds a run)."""
import json
import os
import sys
import tempfile
import time


def parts():
    import importlib
    import time as t
    out = {}
    for mod in ("numpy", "cupy", "gpu.backend", "gpu.outofcore", "gpu.multigpu.dask_matmul"):
        t0 = t.perf_counter()
        importlib.import_module(mod)
        out["import " + mod] = t.perf_counter() - t0
    import cupy
    t0 = t.perf_counter()
    cupy.cuda.runtime.getDevice()
    cupy.cuda.runtime.free(cupy.cuda.runtime.malloc(256))
    out["context"] = t.perf_counter() - t0
    t0 = t.perf_counter()
    cupy.cuda.device.get_cublas_handle()
    out["cublas_handle"] = t.perf_counter() - t0
    from gpu.backend import get_backend
    be = get_backend("cupy")
    x = be.xp.ones((1024, 1024))
    t0 = t.perf_counter()
    be.gemm(x, x, be.xp.empty_like(x))
    be.synchronize()
    out["first_gemm"] = t.perf_counter() - t0
    t0 = t.perf_counter()
    be.ops("outofcore")
    out["engine_ops"] = t.perf_counter() - t0
    return out


def main():
    sys.path.insert(0, os.getcwd())
    from distributed import get_task_stream

    from experiments.multigpu import bench
    from gpu.backend import get_backend
    be, n, rows = get_backend("cupy"), int(os.environ.get("N", "8192")), []
    folder = tempfile.mkdtemp(dir="/dev/shm")
    A, B, out = bench.mapped_operands(folder, n)
    out[:] = 0.0
    for warm in ("cold", "parts", "cold", "parts"):
        cluster, client = bench.new_cluster(be, 2, "tcp")
        with cluster, client:
            t0 = time.perf_counter()
            got = client.run(parts) if warm == "parts" else None
            warm_s = time.perf_counter() - t0
            with get_task_stream(client) as stream:
                began = time.time()
                t0 = time.perf_counter()
                bench.dask_matmul.matmul(A, B, client=client, backend="cupy", out=out)
                call = time.perf_counter() - t0
            t0 = time.perf_counter()
            bench.dask_matmul.matmul(A, B, client=client, backend="cupy", out=out)
            again = time.perf_counter() - t0
            after = client.run(parts) if warm == "cold" else None
            rows.append({"warm": warm, "warm_s": warm_s, "parts": got, "parts_after_call": after, "call_s": call,
                         "again_s": again, "first_task_after_s": bench.first_start(stream.data, began),
                         "spans": bench.task_spans(stream.data, sorted(client.nthreads()))})
            print(json.dumps({k: v for k, v in rows[-1].items() if k != "spans"}), flush=True)
    with open(os.path.join(os.environ["OUT"], "start-parts.json"), "w") as fh:
        json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
