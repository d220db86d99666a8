"""The front door's library GEMM against ``cupy.matmul`` on the same operands: ``h200-frontdoor-library-probe.json``.

The front-door grid read the front door 3-5% slower than ``cupy.matmul`` at points where it runs the library GEMM
(N = 2048, and 64 x 2^20 x 64 and 64 x 2^24 x 64 at DGEMM's accuracy). Is it another cuBLAS call? Per shape,
interleaved rounds (16, the first a warm-up) of loops of back-to-back calls timed by CUDA events:
``cupy_new`` ``cupy.matmul(A, B)``; ``door_new`` ``gpu.matmul(A, B)``; ``plan_new`` the front door's library
product alone (:func:`gpu.backend.plans.library_product`, a new C); ``cupy_out`` and ``plan_out`` the same into a
given C. Reports the medians and ``x_cupy_new`` (``cupy_new``'s time over each call's). Run from the repository
root with ``PYTHONPATH=$PWD``; writes ``$OUT/libprobe.json`` with the environment record.
"""

import json
import os
import statistics

import cupy as cp

import gpu
from experiments.core.environment import environment
from gpu.backend import get_backend
from gpu.backend.plans import library_product

SHAPES = ((2048, 2048, 2048), (64, 2**20, 64), (64, 2**24, 64), (4096, 4096, 4096))
ROUNDS = 16


def probe(be, m: int, k: int, n: int) -> dict:
    rng = cp.random.default_rng(1)
    A, B, C = rng.random((m, k)), rng.random((k, n)), cp.empty((m, n))
    new, into = (library_product(be, A, B, out, (8 * m * n, "C", "")) for out in (None, C))
    fns = {"cupy_new": lambda: cp.matmul(A, B), "door_new": lambda: gpu.matmul(A, B),
           "plan_new": lambda: new(A, B, None), "cupy_out": lambda: cp.matmul(A, B, out=C),
           "plan_out": lambda: into(A, B, C)}
    calls = max(3, min(50, int(0.02 / (2 * m * n * k / 50e12))))
    times = {name: [] for name in fns}
    for r in range(ROUNDS):
        for name in list(fns)[r % len(fns):] + list(fns)[:r % len(fns)]:
            be.synchronize()
            start, end = cp.cuda.Event(), cp.cuda.Event()
            start.record()
            for _ in range(calls):
                fns[name]()
            end.record()
            end.synchronize()
            if r:
                times[name].append(cp.cuda.get_elapsed_time(start, end) / calls)
    med = {name: statistics.median(v) for name, v in times.items()}
    return {"calls": calls, "median_ms": med, "x_cupy_new": {k2: med["cupy_new"] / v for k2, v in med.items()}}


def main() -> None:
    be = get_backend("cupy")
    res = {"script": "results/published/scripts/frontdoor_library_probe.py", "environment": environment(be)}
    for m, k, n in SHAPES:
        res[f"{m}x{k}x{n}"] = probe(be, m, k, n)
        print(m, k, n, {name: round(v, 4) for name, v in res[f"{m}x{k}x{n}"]["x_cupy_new"].items()}, flush=True)
        cp.get_default_memory_pool().free_all_blocks()
    with open(os.path.join(os.environ.get("OUT", "."), "libprobe.json"), "w") as fh:
        json.dump(res, fh, indent=1)


if __name__ == "__main__":
    main()
