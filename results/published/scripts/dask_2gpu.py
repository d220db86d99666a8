"""The Dask front-end of the out-of-core engine on two GPUs of one host against one.

One dask-cuda ``LocalCUDACluster`` runs a worker per GPU. A and B are ``.npy`` files in host memory (a tmpfs,
``/dev/shm`` by default) of uniform [-0.5, 0.5) values drawn by host threads; C is a third such file.
``gpu.multigpu.dask_matmul`` sends each task the handles of its panels and of its C block
(:mod:`gpu.multigpu.mapped`), so every worker maps the bytes it streams and writes its block in place: no
operand or result crosses between processes. Each worker also page-locks the ranges it maps
(``lock_pages=True``), so that its engine copies them in place, without staging; at sizes up to
``UNLOCKED_MAX_N`` the pair is first timed without locking (the staged route), then with it.

The one-GPU baseline is the same cluster restricted to its first worker (``workers=``), so both run the
same processes, code and files. Per size: a warm-up of each, then ``REPS`` samples of each (``ORDER``:
``interleaved`` pairs, two workers then one, or ``blocked``, every two-worker sample first), wall time from
``submit`` until every block is written. Per sample: the block tasks, their busy time and the transfers per
worker from the task stream; each task's own account (``report=True``: opening, engine call, the run's
span and busy lanes); the GPUs' mean SM clock and power over the run (NVML every 50 ms) and a reading at
its end. Then sampled rows of C against ``exact_matmul`` after a two-worker and after a one-worker run;
and, at sizes up to ``IMBALANCE_MAX_N``, 3 and 4 tasks on the two workers (load imbalance).

Run (device machine, Dask wheels installed): ``OUT=<dir> NS=32768,49152,65536 python3
results/published/scripts/dask_2gpu.py``; it writes ``$OUT/dask2gpu.json`` (keys already there are kept,
so a second call with other sizes, or the same sizes with ``ORDER=blocked``, keyed ``"<N>-blocked"``,
adds to it), published as ``h200x2-dask.json``. ``CHECK=1,0`` times each pair also with ``check_finite=False``
(keys ``*_unchecked``, the size's key ``"<N>-unchecked"``): what the NaN check of the operands costs.
"""
import json
import os
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import cupy
import numpy as np
from dask_cuda import LocalCUDACluster
from distributed import Client, get_task_stream

from accuracy.reference import exact_matmul
from experiments.core.environment import environment
from gpu.backend import get_backend
from gpu.backend.telemetry import nvml_telemetry
from gpu.multigpu import mapped
from gpu.multigpu.dask_matmul import submit

OUT = os.environ["OUT"]
NS = [int(x) for x in os.environ.get("NS", "32768").split(",")]
REPS = int(os.environ.get("REPS", "3"))
BIG_N = int(os.environ.get("BIG_N", "49152"))             # sizes above it take BIG_REPS samples
BIG_REPS = int(os.environ.get("BIG_REPS", "2"))
IMBALANCE_MAX_N = int(os.environ.get("IMBALANCE_MAX_N", "49152"))
UNLOCKED_MAX_N = int(os.environ.get("UNLOCKED_MAX_N", "32768"))
ORDER = os.environ.get("ORDER", "interleaved")              # or "blocked": every 2w sample, then every 1w one
CHECKS = [c.strip() == "1" for c in os.environ.get("CHECK", "1").split(",")]  # "1,0": also check_finite=False
PATH = f"{OUT}/dask2gpu.json"
RESULTS = {}
if os.path.exists(PATH):
    with open(PATH) as f:
        RESULTS = json.load(f)


def sample_rows(n):
    return np.array([0, 1, n // 2 + 3, n - 1])


def save(key, value):
    RESULTS[key] = value
    print(key, json.dumps(value)[:700], flush=True)
    with open(PATH, "w") as f:
        json.dump(RESULTS, f, indent=1)


def meminfo():
    with open("/proc/meminfo") as f:
        fields = dict(line.split(":", 1) for line in f)
    return {k: int(fields[k].split()[0]) // 2**20 for k in ("MemTotal", "MemAvailable", "Shmem")}


def folder(need):
    for d in (os.environ.get("DATA_DIR"), "/dev/shm", "/tmp"):
        if d and os.path.isdir(d) and shutil.disk_usage(d).free > need * 1.05:
            os.makedirs(f"{d}/gemmlab-dask", exist_ok=True)
            return f"{d}/gemmlab-dask"
    raise SystemExit(f"no folder has {need / 1e9:.0f} GB free")


def draw(path, n, seed):
    """An n x n FP64 .npy of uniform [-0.5, 0.5) values, drawn in 32 threads band by band (the GPU's
    D2H copies into the file's fresh pages ran at 0.9 GB/s)."""
    x = np.lib.format.open_memmap(path, mode="w+", dtype=np.float64, shape=(n, n))
    band = max(1, 2**25 // n)
    starts = range(0, n, band)
    seeds = np.random.SeedSequence(seed).spawn(len(starts))

    def fill(i):
        part = x[starts[i]:starts[i] + band]
        np.random.default_rng(seeds[i]).random(out=part)
        part -= 0.5

    with ThreadPoolExecutor(32) as pool:
        list(pool.map(fill, range(len(starts))))
    x.flush()
    return np.load(path, mmap_mode="r")


def free_pools():
    cupy.get_default_memory_pool().free_all_blocks()


def check(A, B, C, n):
    """Sampled rows of C against the correctly rounded product: largest element-wise relative error, and
    largest error relative to (|A| |B|) of the entry (the scale a GEMM's error bound has)."""
    rows = sample_rows(n)
    a = cupy.asarray(np.ascontiguousarray(A[rows]))
    worst_rel = worst_scaled = 0.0
    for c in range(0, n, 8192):
        b = cupy.asarray(np.ascontiguousarray(B[:, c:c + 8192]))
        ref = exact_matmul(a, b, backend="cupy")
        got = cupy.asarray(np.ascontiguousarray(C[rows, c:c + 8192]))
        err = cupy.abs(got - ref)
        worst_rel = max(worst_rel, float(cupy.max(err / cupy.abs(ref))))
        worst_scaled = max(worst_scaled, float(cupy.max(err / (cupy.abs(a) @ cupy.abs(b)))))
    del a, b, ref, got, err
    cupy.get_default_memory_pool().free_all_blocks()
    return {"rows": rows.tolist(), "max_rel_err": worst_rel, "max_err_over_abs_product": worst_scaled}


def stream_stats(data):
    """Per worker: block tasks, their busy seconds, other tasks, transfers in and their seconds."""
    out = {}
    for t in data:
        w = out.setdefault(t["worker"], {"block_tasks": 0, "block_s": 0.0, "other_tasks": 0, "other_s": 0.0,
                                          "transfers": 0, "transfer_s": 0.0})
        for ss in t["startstops"]:
            if ss["action"] == "compute" and "outofcore-block" in str(t["key"]):
                w["block_tasks"] += 1
                w["block_s"] += ss["stop"] - ss["start"]
            elif ss["action"] == "compute":
                w["other_tasks"] += 1
                w["other_s"] += ss["stop"] - ss["start"]
            elif ss["action"] == "transfer":
                w["transfers"] += 1
                w["transfer_s"] += ss["stop"] - ss["start"]
    return out


def telemetry():
    readers = [nvml_telemetry(cupy.cuda.Device(i).pci_bus_id) for i in range(cupy.cuda.runtime.getDeviceCount())]
    return lambda: [r.read().as_dict() if r else None for r in readers]


def locked():
    """This worker's page-locked bytes and the seconds it spent locking them."""
    ranges = get_backend("cupy").ops("outofcore").ranges
    return {"locked_bytes": ranges.nbytes, "lock_s": ranges.seconds}


class Sampler:
    """NVML readings of every GPU every ``every`` seconds while the ``with`` body runs: per GPU, the mean SM
    clock and power over the run and the throttle reasons seen (a reading at the end only shows the idle
    moment after the product)."""

    def __init__(self, read, every=0.05):
        self.read, self.every, self.rows, self.stop = read, every, [], threading.Event()

    def __enter__(self):
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()
        return self

    def _loop(self):
        while not self.stop.wait(self.every):
            self.rows.append(self.read())

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()

    def summary(self):
        gpus = list(zip(*[r for r in self.rows if None not in r]))
        return [{"samples": len(g), "sm_mhz_mean": float(np.mean([x["sm_mhz"] for x in g])),
                 "power_w_mean": float(np.mean([x["power_w"] for x in g])),
                 "reasons_seen": sorted({x["reasons"] for x in g})} for g in gpus]


def timed(client, A, B, C, workers, read_nvml, block=None, lock=True, check=True):
    """One product: wall seconds from submit to the last block written, the task stream per worker, each
    block task's own account (``report=True``: opening, engine call, run, busy lanes) and the GPUs' mean
    clocks and power over the run."""
    with get_task_stream(client) as ts, Sampler(read_nvml) as power:
        t0 = time.perf_counter()
        product = submit(A, B, client=client, backend="cupy", out=C, block=block, workers=workers,
                         lock_pages=lock, report=True, check_finite=check)
        product.result()
        seconds = time.perf_counter() - t0
    return {"seconds": seconds, "per_worker": stream_stats(ts.data), "tasks": product.reports(),
            "nvml_run": power.summary()}


def pairs(configs, reps):
    """The (key, config) runs of the timed samples, in ``ORDER``."""
    if ORDER == "blocked":
        return [(key, w) for key, w in configs.items() for _ in range(reps)]
    return [(key, w) for _ in range(reps) for key, w in configs.items()]


def measure(client, names, n, read_nvml):
    need = 3 * 8 * n * n
    d = folder(need)
    t0 = time.perf_counter()
    A, B = draw(f"{d}/a.npy", n, 1), draw(f"{d}/b.npy", n, 2)
    C = np.lib.format.open_memmap(f"{d}/c.npy", mode="w+", dtype=np.float64, shape=(n, n))
    drawn_s = time.perf_counter() - t0
    record = {"n": n, "folder": d, "draw_s": drawn_s, "meminfo_gib": meminfo(), "order": ORDER, "runs": {}}
    for lock in ((False, True) if n <= UNLOCKED_MAX_N else (True,)):   # unlocked first: locks stay
        tags = {("" if lock else "_unlocked") + ("" if finite else "_unchecked"): finite for finite in CHECKS}
        configs = {w + tag: (workers, finite) for tag, finite in tags.items()
                   for w, workers in (("2w", names), ("1w", names[:1]))}
        for key, (workers, finite) in configs.items():
            warm = timed(client, A, B, C, workers, read_nvml, lock=lock, check=finite)
            record["runs"][key] = {"warmup_s": warm["seconds"], "warmup_tasks": warm["tasks"], "samples": [],
                                   "nvml": [], "nvml_run": [], "tasks": []}
            if key.startswith("2w"):
                client.run(free_pools)
                record["check_" + key] = check(A, B, C, n)
        for key, (workers, finite) in pairs(configs, REPS if n <= BIG_N else BIG_REPS):
            got = timed(client, A, B, C, workers, read_nvml, lock=lock, check=finite)
            run = record["runs"][key]
            run["samples"].append(got["seconds"])
            run["nvml"].append(read_nvml())
            run["nvml_run"].append(got["nvml_run"])
            run["tasks"].append(got["tasks"])
            run["per_worker"] = got["per_worker"]
        for tag in tags:
            record["speedup_2w_over_1w" + tag] = (float(np.median(record["runs"]["1w" + tag]["samples"]))
                                                  / float(np.median(record["runs"]["2w" + tag]["samples"])))
    record["page_locks"] = client.run(locked)
    client.run(free_pools)
    record["check_1w"] = check(A, B, C, n)
    for run in record["runs"].values():
        run["median_s"] = float(np.median(run["samples"]))
        run["tflops"] = 2 * n**3 / run["median_s"] / 1e12
    if n <= IMBALANCE_MAX_N:
        for tasks in (3, 4):
            rows = -(-n // tasks)
            samples, stats = [], None
            timed(client, A, B, C, names, read_nvml, block=(rows, n))
            for _ in range(2):
                got = timed(client, A, B, C, names, read_nvml, block=(rows, n))
                samples.append(got["seconds"])
                stats = got["per_worker"]
            busy = [w["block_s"] for w in stats.values()]
            record[f"tasks_{tasks}_on_2w"] = {
                "block": [rows, n], "samples": samples, "median_s": float(np.median(samples)),
                "per_worker": stats, "busy_makespan_s": max(busy), "busy_balanced_s": sum(busy) / 2,
                "lost_to_imbalance": 1 - (sum(busy) / 2) / max(busy),
                "wall_over_two_tasks": float(np.median(samples)) / record["runs"]["2w"]["median_s"]}
    del A, B, C
    client.run(free_pools)
    for f in ("a", "b", "c"):
        os.remove(f"{d}/{f}.npy")
    client.run(mapped.release)
    return record


def main():
    print("meminfo before", meminfo(), flush=True)
    import dask
    import dask_cuda
    import distributed
    env = environment(get_backend("cupy"))
    env.update(dask=dask.__version__, distributed=distributed.__version__, dask_cuda=dask_cuda.__version__,
               gpus=cupy.cuda.runtime.getDeviceCount())
    save("environment", env)
    read_nvml = telemetry()
    # No memory limit: a worker's resident memory counts the mapped operand pages and the pinned staging
    # (at N = 49152, 58 GB of files and 20-40 GB pinned), and the default limit's monitor paused the worker.
    with LocalCUDACluster(dashboard_address=":0", memory_limit=0) as cluster, Client(cluster) as client:
        names = sorted(client.nthreads())
        save("workers", {"names": names, "count": len(names), "protocol": cluster.scheduler_address.split(":")[0]})
        for n in NS:
            key = str(n) + ("" if ORDER == "interleaved" else f"-{ORDER}") + ("" if all(CHECKS) else "-unchecked")
            if key not in RESULTS:
                save(key, measure(client, names, n, read_nvml))


if __name__ == "__main__":
    main()
