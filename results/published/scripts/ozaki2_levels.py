"""Where Winograd levels over the residues pay (``ozaki2.matmul(..., level=L)``), and the bounded workspace (CuPy).

At each N of ``NS`` (default 8192, 16384, 32768), on phi = 1 operands drawn on the device, the runs are:
``ozaki2.matmul(A, B, moduli=COUNT)`` (fast scaling; ``COUNT`` default 15) at level 0, 1 and 2, the same at
level 0 capped at 2 FP64 matrices of workspace (``workspace=16 N^2``: tiles), and ``cupy.matmul`` (DGEMM). One
sample is a loop of ``LOOP`` back-to-back calls and one synchronize (as called); runs interleaved over ``ROUNDS``
rounds (at least 10) after a warm-up round; medians and ratios to DGEMM's. Then, per level, one call's phases
(``phases=``: scaling, residues, gemm, reduce, crt; each synchronized) with the INT8 rate of its GEMM phase
(2 COUNT N^3 (7/8)^L operations over its seconds), and whether each run's C equals level 0's bit for bit.
Writes ``$OUT/ozaki2-levels.json``; prints a line per N. Run from the repository root with ``PYTHONPATH=$PWD``.
"""

import functools
import json
import os
import statistics

import cupy as cp
from ozaki2_as_called import fresh_inputs, interleaved  # this folder's script: the same inputs and rounds

from experiments.core.environment import environment
from gpu import ozaki2
from gpu.backend import get_backend

COUNT = int(os.environ.get("COUNT", 15))


def runs(be, A, B, n: int) -> dict:
    out = {f"level-{level}": functools.partial(ozaki2.matmul, A, B, moduli=COUNT, level=level, backend=be)
           for level in (0, 1, 2)}
    out["capped-2"] = lambda: ozaki2.matmul(A, B, moduli=COUNT, workspace=16 * n * n, backend=be)
    out["dgemm"] = lambda: cp.matmul(A, B)
    return out


def main() -> None:
    be = get_backend("cupy")
    telemetry = be.telemetry()
    result = {"script": "results/published/scripts/ozaki2_levels.py", "environment": environment(be),
              "count": COUNT, "points": []}
    rounds = max(10, int(os.environ.get("ROUNDS", 10)))
    for n in (int(x) for x in os.environ.get("NS", "8192,16384,32768").split(",")):
        A, B = fresh_inputs(n)
        calls = runs(be, A, B, n)
        base = calls["level-0"]()
        same = {name: bool(cp.array_equal(run(), base)) for name, run in calls.items() if name != "dgemm"}
        del base
        point = {"n": n, "bitwise_level_0": same, "phases": {}, "int8_tops": {}}
        for L in (0, 1, 2):
            phases = {}
            ozaki2.matmul(A, B, moduli=COUNT, level=L, backend=be, phases=phases)
            point["phases"][L] = phases
            point["int8_tops"][L] = 2 * COUNT * n**3 * (7 / 8) ** L / phases.get("gemm", float("nan")) / 1e12
        loop = int(os.environ.get("LOOP", {8192: 5}.get(n, 2)))
        samples, clocks = interleaved(calls, loop, rounds, telemetry)
        dgemm = statistics.median(samples["dgemm"])
        point["loop"] = loop
        point["runs"] = {name: {"ms_per_call": 1e3 * statistics.median(v), "x_dgemm": dgemm / statistics.median(v),
                                "samples_ms": [1e3 * x for x in v], "telemetry": clocks[name]}
                         for name, v in samples.items()}
        result["points"].append(point)
        print(n, {k: (round(v["ms_per_call"], 2), round(v["x_dgemm"], 3)) for k, v in point["runs"].items()},
              "int8 TOP/s", {L: round(t, 1) for L, t in point["int8_tops"].items()}, "bitwise", same, flush=True)
        del A, B, calls
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "ozaki2-levels.json"), "w") as fh:
        json.dump(result, fh, indent=1, default=str)


if __name__ == "__main__":
    main()
