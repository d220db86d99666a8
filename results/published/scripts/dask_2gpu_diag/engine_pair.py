"""Two-GPU diagnostic: the out-of-core engine in one process per GPU, no Dask, on page-locked /dev/shm files.

``python3 engine_pair.py MODE PART PEERS TAG`` (run by ``engine_pair.sh``, one process per GPU with
``CUDA_VISIBLE_DEVICES``): maps ``/dev/shm/diag/{a,b,c}.npy``, takes the rows PART (``0``, ``1``: a half;
``all``) of A and C, locks their pages (:func:`gpu.outofcore.page_locked`), runs the engine once, waits
at a file barrier for PEERS processes of TAG, then times it. With ``REPS`` set: REPS runs back to back
(sustained), each with its wall time, GEMM busy time and an NVML reading. Without: one run with its
time-line per lane, then the finite checks of A's rows and of B, and ``gpu.outofcore.matmul`` with and
without ``check_finite``. Prints one JSON line.
"""
import glob
import json
import os
import sys
import time

import cupy
import numpy as np

from gpu import outofcore
from gpu.backend import get_backend
from gpu.backend.telemetry import nvml_telemetry
from gpu.outofcore import Timeline, page_locked, plan, run

MODE, PART, PEERS, TAG = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
DIR = "/dev/shm/diag"


def barrier():
    open(f"{DIR}/ready.{TAG}.{PART}", "w").close()
    while len(glob.glob(f"{DIR}/ready.{TAG}.*")) < PEERS:
        time.sleep(0.01)


def lanes(line):
    spans, out = line.spans(), {}
    for lane in ("H2D", "GEMM", "D2H", "staging"):
        ss = [s for s in spans if s.lane == lane]
        out[lane] = {"count": len(ss), "sum_s": sum(s.end - s.start for s in ss)}
    return out


def sustained(be, ops, p, a, B, c, reps):
    tel = nvml_telemetry(cupy.cuda.Device(0).pci_bus_id)
    m, k = a.shape
    series = []
    for _ in range(reps):
        line = Timeline()
        t = time.perf_counter()
        run(be, ops, p, a, B, c, line)
        wall = time.perf_counter() - t
        gemm = lanes(line)["GEMM"]["sum_s"]
        series.append({"wall_s": wall, "gemm_s": gemm, "gemm_tflops": 2 * m * k * B.shape[1] / gemm / 1e12,
                       "nvml": tel.read().as_dict() if tel else None})
    return series


def once(be, ops, p, a, B, c, C):
    m, k = a.shape
    line = Timeline()
    t = time.perf_counter()
    run(be, ops, p, a, B, c, line)
    out = {"wall_s": time.perf_counter() - t, **lanes(line)}
    out["gemm_tflops"] = 2 * m * k * B.shape[1] / out["GEMM"]["sum_s"] / 1e12
    host = get_backend("numpy")
    for name, x in (("finite_a_s", a), ("finite_b_s", B)):
        t = time.perf_counter()
        host.all_finite(x)
        out[name] = time.perf_counter() - t
    for name, kw in (("api_nocheck_s", {"check_finite": False}), ("api_s", {}), ("api2_s", {})):
        t = time.perf_counter()
        outofcore.matmul(a, B, out=c.view(np.ndarray), backend="cupy", **kw)
        out[name] = time.perf_counter() - t
    t = time.perf_counter()
    C.flush()
    out["flush_s"] = time.perf_counter() - t
    return out


def main():
    A, B = np.load(f"{DIR}/a.npy", mmap_mode="r"), np.load(f"{DIR}/b.npy", mmap_mode="r")
    C = np.load(f"{DIR}/c.npy", mmap_mode="r+")
    n = A.shape[0]
    rows = {"0": slice(0, n // 2), "1": slice(n // 2, n), "all": slice(0, n)}[PART]
    a, c = A[rows], C[rows]
    be = get_backend("cupy")
    out = {"mode": MODE, "part": PART, "peers": PEERS, "tag": TAG}
    with page_locked(a, B, c) as locked:
        out["locked"] = locked
        m, k = a.shape
        p = plan(m, k, n, 8, device_memory=int(be.memory_info()[0] * 0.8))
        out["plan"] = {"block": list(p.block), "panel": p.panel, "grid": list(p.grid)}
        ops = be.ops("outofcore")
        run(be, ops, p, a, B, c)
        be.release_memory()
        barrier()
        reps = int(os.environ.get("REPS", "0"))
        out.update({"sustained": sustained(be, ops, p, a, B, c, reps)} if reps else once(be, ops, p, a, B, c, C))
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
