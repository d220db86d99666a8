"""Probe: Strassen's level-4 configurations with and without a CUDA graph, host and device time of one call.

A level-4 fused plan makes 3208-3249 kernel launches (``gpu.strassen.costs.total_launches``); CUDA's launch queue
holds about a thousand, so the host waits inside the call for about two thirds of its device time (645-1338 ms
of host time per call at N = 32768-40960 in the as-called sweeps, ``h200-strassen-as-called.md``). As one graph
the same work is one launch. For each N and configuration this times, behind a 50 ms kernel so that the host's
time is its own: the first call (the capture, where a graph is asked for), then five calls' host time and
device time (CUDA events), and the error against ``cupy.matmul``. If the graph's device time matches, the
configurations' graph variants are worth calibrating (``gemmlab calibrate --configurations --candidates
L4:lai7/winograd+fused+graph,L4:rum/rum/winograd+fused+graph --sizes 32768,...``).

Run on the GPU from the repository root: ``PYTHONPATH=$PWD OUT=dir python
results/published/scripts/strassen_l4_graph_probe.py`` (``SIZES``: 16384,24576).
"""
import json
import os
import statistics
import time

import cupy as cp
import numpy as np

from gpu import strassen
from gpu.backend import get_backend
from tests.gpu.busy import busy

SIZES = tuple(int(n) for n in os.environ.get("SIZES", "16384,24576").split(","))
SCHEDULES = ("rum/rum/winograd", "lai7/winograd")


def one(A, B, C, ref, options: dict) -> dict:
    """First call, then the medians of five calls' host and device time, and the error."""
    start = time.perf_counter()
    strassen.matmul(A, B, out=C, options=options)
    cp.cuda.Device().synchronize()
    first = time.perf_counter() - start
    error = float(cp.max(cp.abs(C - ref)) / cp.max(cp.abs(ref)))
    host, device = [], []
    for _ in range(5):
        busy(50)
        begin, end = cp.cuda.Event(), cp.cuda.Event()
        begin.record()
        start = time.perf_counter()
        strassen.matmul(A, B, out=C, options=options)
        host.append(time.perf_counter() - start)
        end.record()
        end.synchronize()
        device.append(cp.cuda.get_elapsed_time(begin, end) / 1e3)
    return {"first_s": first, "host_s": statistics.median(host), "device_s": statistics.median(device),
            "error": error}


def main() -> None:
    be = get_backend("cupy")
    out = {"script": "results/published/scripts/strassen_l4_graph_probe.py", "points": []}
    for n in SIZES:
        rng = np.random.default_rng(1)
        A, B = cp.asarray(rng.random((n, n))), cp.asarray(rng.random((n, n)))
        C, ref = cp.empty((n, n)), A @ B
        for schedule in SCHEDULES:
            for graph in (False, True):
                options = {"level": 4, "schedule": schedule, "fused": True, "graph": graph}
                point = {"n": n, **options, **one(A, B, C, ref, options)}
                out["points"].append(point)
                print(point, flush=True)
            strassen.forget()
        del A, B, C, ref
        be.release_memory()
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "strassen-l4-graph.json"), "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
