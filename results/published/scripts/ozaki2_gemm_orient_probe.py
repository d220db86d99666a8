"""Does cuBLAS run scheme II's INT8 GEMMs faster with the output's sides swapped, under the 700 W cap?

A tile's INT8 GEMM writes P = a b^T (rows x cols, row-major), which cuBLAS runs with m = cols and n = rows. Its
transpose Q = b a^T holds the same integers with m = rows and n = cols. For each shape of ``SHAPES`` (rows x cols
x k, comma-separated; default the capped tiles at N = 16384, 8192x2048x16384, the earlier 4096x4096x16384 and the
uncapped span 3072x16384x16384), ``COUNT`` GEMMs back to back (one per modulus, random INT8 operands) of P and of
Q, interleaved over ``ROUNDS`` rounds, timed by CUDA events; Q must equal P^T exactly.

    OUT=dir PYTHONPATH=$PWD:$PWD/results/published/scripts python3 results/published/scripts/ozaki2_gemm_orient_probe.py

Writes ``$OUT/ozaki2-gemm-orient-probe.json``.
"""

import os
import statistics

import cupy as cp
from rounds import event_rounds, write_json

from experiments.core.environment import environment
from gpu.backend import get_backend

SHAPES = [tuple(int(v) for v in s.split("x")) for s in
          os.environ.get("SHAPES", "8192x2048x16384,4096x4096x16384,3072x16384x16384").split(",")]
COUNT = int(os.environ.get("COUNT", "15"))
ROUNDS = int(os.environ.get("ROUNDS", "12"))


def orient(be, rng, rows: int, cols: int, k: int) -> dict:
    """P and Q of one shape, checked and timed (see the module)."""
    a = rng.integers(-127, 128, (rows, k), dtype=cp.int8)
    b = rng.integers(-127, 128, (cols, k), dtype=cp.int8)
    P, Q = cp.empty((rows, cols), cp.int32), cp.empty((cols, rows), cp.int32)
    runs = {"P": lambda: [be.gemm_ex(a, b.T, P, recipe="int8") for _ in range(COUNT)],
            "Q": lambda: [be.gemm_ex(b, a.T, Q, recipe="int8") for _ in range(COUNT)]}
    for run in runs.values():
        run()
    equal = bool(cp.array_equal(Q, P.T))
    ms = event_rounds(runs, ROUNDS)
    ops = 2.0 * rows * cols * k * COUNT
    return {"rows": rows, "cols": cols, "k": k, "q_equals_p_t": equal,
            "median_ms": {n: statistics.median(v) for n, v in ms.items()},
            "tops": {n: ops / statistics.median(v) / 1e9 for n, v in ms.items()}, "samples_ms": ms}


def main() -> None:
    be = get_backend("cupy")
    rng = cp.random.default_rng(1)
    result = {"script": "results/published/scripts/ozaki2_gemm_orient_probe.py", "environment": environment(be),
              "count": COUNT, "rounds": ROUNDS, "points": []}
    for rows, cols, k in SHAPES:
        point = orient(be, rng, rows, cols, k)
        result["points"].append(point)
        print(rows, cols, k, point["q_equals_p_t"], {n: round(v, 1) for n, v in point["tops"].items()}, flush=True)
    write_json(result, "ozaki2-gemm-orient-probe.json")

if __name__ == "__main__":
    main()
