"""Where a default ``strassen.matmul`` at level 0 loses to ``cupy.matmul`` at N <= 1024 (CuPy).

On the H200 the default call ran at 0.76x ``cupy.matmul`` as called at N = 512 with ``out=C`` (and 0.735x by the
device's clock alone), at 0.54x without ``out``. This probe separates the two clocks and the handles, interleaved
in rounds at each size of :data:`SIZES`, on one set of uniform [0, 1) FP64 operands:

* ``cupy.matmul``: ``cupy.matmul(A, B, out=C)``, CuPy's cuBLAS handle;
* ``cupy.cublas``: CuPy's ``cublas.dgemm`` on CuPy's handle, called directly with the backend's arguments;
* ``backend.gemm``: ``Backend.gemm`` (nvmath-python's per-stream handle with its own workspace, where installed);
* ``gemm_call``: ``Backend.gemm_call`` (the same call, checked once), what a level-0 plan runs;
* ``strassen``: ``gpu.strassen.matmul(A, B, out=C)`` at its defaults; ``strassen_new``: without ``out``.

For each: **wall**, a loop of back-to-back calls then one synchronise, per call (as a user's loop makes them);
**device**, the same loop issued behind a stream hold (``gpu.backend.hold``) and timed by CUDA events (the
device alone); **host**, one call's host time on an idle device. Medians of :data:`ROUNDS` rounds (``SIZES`` and
``CALLS`` in the environment override the sizes and the calls per sample). Writes
``$OUT/level0-probe.json``; about 20 s on an H200. Run from the repository root with ``PYTHONPATH=$PWD``.
"""

import json
import os
import statistics
import time

import cupy as cp
import numpy as np

from experiments.core.ascalled import host_seconds
from experiments.core.environment import environment
from gpu.backend import get_backend
from gpu.backend.blas import plan_gemm
from gpu.strassen import matmul

SIZES = tuple(int(n) for n in os.environ.get("SIZES", "512,768,1024,2048").split(","))
ROUNDS, CALLS = 15, int(os.environ.get("CALLS", 50))


def calls(be, A, B, C) -> dict:
    """The calls compared, by name (see the module)."""
    from cupy_backends.cuda.libs import cublas

    call = plan_gemm(be.layout(A), be.layout(B), be.layout(C))
    one, zero = np.array(1.0), np.array(0.0)

    def cupy_cublas():
        handle = cp.cuda.device.get_cublas_handle()
        cublas.dgemm(handle, call.transa, call.transb, call.m, call.n, call.k, one.ctypes.data, call.a, call.lda,
                     call.b, call.ldb, zero.ctypes.data, call.c, call.ldc)

    gemm_call = be.gemm_call(A, B, C)
    return {"cupy.matmul": lambda: cp.matmul(A, B, out=C), "cupy.cublas": cupy_cublas,
            "backend.gemm": lambda: be.gemm(A, B, C), "gemm_call": lambda: gemm_call(A, B, C),
            "strassen": lambda: matmul(A, B, out=C), "strassen_new": lambda: matmul(A, B)}


def wall(work) -> float:
    cp.cuda.Device().synchronize()
    start = time.perf_counter()
    for _ in range(CALLS):
        work()
    cp.cuda.Device().synchronize()
    return (time.perf_counter() - start) / CALLS


def device(be, work) -> float:
    with be.timer(hide_launch=True) as t:
        for _ in range(CALLS):
            work()
    return t.seconds / CALLS


def pieces(be, A, B, C) -> dict:
    """Host microseconds per call of the pieces of a default level-0 call with ``out=C`` (the device left to
    queue; one synchronise per 200 calls so the queue stays short)."""
    from gpu.backend.plans import operand_signature
    from gpu.profile import profile_stamp
    from gpu.strassen.api import PLANS
    from gpu.strassen.options import options_of

    matmul(A, B, out=C)
    o = options_of(None, {})
    key = operand_signature(be, A, B, C)
    plan = PLANS.get((key, o), None)
    parts = {"options_of": lambda: options_of(None, {"level": None, "schedule": None, "graph": None}),
             "signature": lambda: operand_signature(be, A, B, C), "cache_get": lambda: PLANS.get((key, o), None),
             "profile_stamp": lambda: profile_stamp(be), "meet": lambda: plan._meet(A, B, C),
             "pointer": lambda: be.pointer(A), "level0": lambda: plan._gemm(A, B, C),
             "execute": lambda: plan._execute(A, B, C), "matmul": lambda: matmul(A, B, out=C),
             "cupy.matmul": lambda: cp.matmul(A, B, out=C)}
    return host_us(parts)


def host_us(parts: dict) -> dict:
    """Host microseconds per call of each of ``parts``: the best of 5 loops of 200 calls (the device left to
    queue; one synchronise per loop so the queue stays short)."""
    out = {}
    for name, work in parts.items():
        best = float("inf")
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(200):
                work()
            best = min(best, (time.perf_counter() - start) / 200)
            cp.cuda.Device().synchronize()
        out[name] = best * 1e6
    return out


def measured(be, works: dict) -> dict:
    """``works`` (``cupy.matmul`` among them) warmed up, then each one's wall and device time (medians of
    :data:`ROUNDS` rotated rounds), host time, and both ratios to ``cupy.matmul``."""
    for work in works.values():
        work()
    samples = {name: {"wall": [], "device": []} for name in works}
    names = list(works)
    for r in range(ROUNDS):
        for name in names[r % len(names):] + names[:r % len(names)]:
            samples[name]["wall"].append(wall(works[name]))
            samples[name]["device"].append(device(be, works[name]))
    medians = {name: {k: statistics.median(v) for k, v in s.items()} for name, s in samples.items()}
    ref = medians["cupy.matmul"]
    return {"median_s": medians, "host_s": {name: host_seconds(be, work) for name, work in works.items()},
            "x_cupy_matmul": {name: {k: ref[k] / m[k] for k in m} for name, m in medians.items()}}


def main() -> None:
    be = get_backend("cupy")
    out = {"script": "results/published/scripts/level0_probe.py", "environment": environment(be),
           "nvmath_handle": be.supports_graphs, "calls_per_sample": CALLS, "rounds": ROUNDS, "points": []}
    for n in SIZES:
        rng = cp.random.default_rng(n)
        A, B, C = rng.random((n, n)), rng.random((n, n)), cp.empty((n, n))
        point = {"n": n, **measured(be, calls(be, A, B, C))}
        if n == SIZES[0]:
            point["pieces_us"] = pieces(be, A, B, C)
            print("pieces (us)", {k: round(v, 2) for k, v in point["pieces_us"].items()}, flush=True)
        out["points"].append(point)
        print(n, {name: (round(x["wall"], 3), round(x["device"], 3), round(1e6 * point["host_s"][name], 1))
                  for name, x in point["x_cupy_matmul"].items()}, flush=True)
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "level0-probe.json"), "w") as fh:
        json.dump(out, fh, indent=1, default=str)


if __name__ == "__main__":
    main()
