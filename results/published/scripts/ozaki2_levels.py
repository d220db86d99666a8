"""Where Winograd levels over the residues pay (``ozaki2.matmul(..., level=L)``), and the bounded workspace (CuPy).

At each N of ``NS`` (default 8192, 16384, 32768), on phi = 1 operands drawn on the device, the runs are:
``ozaki2.matmul(A, B, moduli=COUNT)`` (fast scaling; ``COUNT`` default 15) at level 0, 1 and 2, the same at
level 0 capped at 2 FP64 matrices of workspace (``workspace=16 N^2``: tiles), and ``cupy.matmul`` (DGEMM). One
sample is a loop of ``LOOP`` back-to-back calls and one synchronize (as called); runs interleaved over ``ROUNDS``
rounds (at least 10) after a warm-up round; medians and ratios to DGEMM's. Then, per level, one call's phases
(``phases=``: scaling, residues, gemm, reduce, crt; each synchronized) with the INT8 rate of its GEMM phase
(2 COUNT N^3 (7/8)^L operations over its seconds), and whether each run's C equals level 0's bit for bit.
Writes ``$OUT/ozaki2-levels.json``; prints a line per N. Run from the repository root with ``PYTHONPATH=$PWD``.

``LEVELS`` (default 0,1,2) and ``CAPPED`` (default 1) pick the runs. ``SEPARATE=1``: each level in an interleaved
group of its own with DGEMM, the kept plans of the last freed first (at N = 32768 the level-1 plan's fused layout,
92 GB at 15 moduli, and level 0's 49 GB do not fit beside each other on the H200); C is then compared with level
0's on the host.
"""

import functools
import json
import os

import cupy as cp
import numpy as np
from ozaki2_as_called import fresh_inputs, timed  # this folder's script: the same inputs, rounds and groups

from experiments.core.environment import environment
from gpu import ozaki2
from gpu.backend import get_backend

COUNT = int(os.environ.get("COUNT", 15))
LEVELS = tuple(int(x) for x in os.environ.get("LEVELS", "0,1,2").split(","))
CAPPED, SEPARATE = os.environ.get("CAPPED", "1") == "1", os.environ.get("SEPARATE") == "1"


def runs(be, A, B, n: int) -> dict:
    out = {f"level-{level}": functools.partial(ozaki2.matmul, A, B, moduli=COUNT, level=level, backend=be)
           for level in LEVELS}
    if CAPPED:
        out["capped-2"] = lambda: ozaki2.matmul(A, B, moduli=COUNT, workspace=16 * n * n, backend=be)
    out["dgemm"] = lambda: cp.matmul(A, B)
    return out


def bitwise(calls: dict) -> dict:
    """Whether each run's C is level 0's, bit for bit (on the host, one run's plans at a time, with SEPARATE)."""
    if not SEPARATE:
        base = calls["level-0"]()
        return {name: bool(cp.array_equal(run(), base)) for name, run in calls.items() if name != "dgemm"}
    ozaki2.PLANS.clear()
    base = cp.asnumpy(calls["level-0"]())
    same = {}
    for name, run in calls.items():
        if name != "dgemm":
            ozaki2.PLANS.clear()
            cp.get_default_memory_pool().free_all_blocks()
            same[name] = bool(np.array_equal(cp.asnumpy(run()), base))
    return same


def main() -> None:
    be = get_backend("cupy")
    telemetry = be.telemetry()
    result = {"script": "results/published/scripts/ozaki2_levels.py", "environment": environment(be),
              "count": COUNT, "points": []}
    rounds = max(10, int(os.environ.get("ROUNDS", 10)))
    for n in (int(x) for x in os.environ.get("NS", "8192,16384,32768").split(",")):
        A, B = fresh_inputs(n)
        calls = runs(be, A, B, n)
        same = bitwise(calls)
        point = {"n": n, "bitwise_level_0": same, "phases": {}, "int8_tops": {}}
        for L in LEVELS:
            phases = {}
            if SEPARATE:
                ozaki2.PLANS.clear()
                cp.get_default_memory_pool().free_all_blocks()
            ozaki2.matmul(A, B, moduli=COUNT, level=L, backend=be, phases=phases)
            point["phases"][L] = phases
            point["int8_tops"][L] = 2 * COUNT * n**3 * (7 / 8) ** L / phases.get("gemm", float("nan")) / 1e12
        loop = int(os.environ.get("LOOP", {8192: 5}.get(n, 2)))
        point["loop"], point["runs"] = loop, timed(be, calls, SEPARATE, loop, rounds, telemetry, host=False)
        result["points"].append(point)
        print(n, {k: (round(v["ms_per_call"], 2), round(v["x_dgemm"], 3)) for k, v in point["runs"].items()},
              "int8 TOP/s", {L: round(t, 1) for L, t in point["int8_tops"].items()}, "bitwise", same, flush=True)
        del A, B, calls
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "ozaki2-levels.json"), "w") as fh:
        json.dump(result, fh, indent=1, default=str)


if __name__ == "__main__":
    main()
