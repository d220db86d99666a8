"""Where Ozaki II loses speed in a capped workspace (``ozaki2.matmul(..., workspace=bytes)``), on the GPU.

At each N of ``NS`` (default 8192, 16384), on phi = 1 operands drawn on the device, fast scaling and ``COUNT``
moduli (default 15): the uncapped call, the call capped at each of ``CAPS`` FP64 matrices of workspace (default
2, 3, 4; ``workspace=8 c N^2``), and ``cupy.matmul``, interleaved as called (``ozaki2_as_called.interleaved``:
loops of back-to-back calls, ``ROUNDS`` rounds after a warm-up). Per run: the tiles the plan cut (rows x
columns, their count, whether row panels keep A's residues), whether C equals the uncapped C bit for bit, and
one call's phases summed over its tiles (``phases=``: each phase synchronized, so their sum exceeds the call).
Writes ``$OUT/ozaki2-capped.json``; prints a line per N. Run from the repository root with ``PYTHONPATH=$PWD``.
"""

import json
import os
import statistics
import sys

import cupy as cp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ozaki2_as_called import fresh_inputs, interleaved  # noqa: E402  (this folder's script: the same inputs and rounds)

from experiments.core.environment import environment  # noqa: E402
from gpu import ozaki2  # noqa: E402
from gpu.backend import get_backend  # noqa: E402
from gpu.ozaki2.tiled import TiledPlan  # noqa: E402

COUNT = int(os.environ.get("COUNT", 15))
CAPS = [float(c) for c in os.environ.get("CAPS", "2,3,4").split(",")]


def runs(be, A, B, n: int) -> dict:
    out = {"uncapped": lambda: ozaki2.matmul(A, B, moduli=COUNT, backend=be)}
    for c in CAPS:
        out[f"capped-{c:g}"] = (lambda w: lambda: ozaki2.matmul(A, B, moduli=COUNT, workspace=w, backend=be))(
            int(8 * c * n * n))
    out["dgemm"] = lambda: cp.matmul(A, B)
    return out


def cut(be, A, B, n: int, c: float) -> dict:
    plan = TiledPlan(A, B, options={"moduli": COUNT, "workspace": int(8 * c * n * n)}, backend=be)
    shape = {"rows": plan.rows, "cols": plan.cols, "tiles": plan.tiles, "reuse_a": plan.reuse, "note": plan.note}
    plan.free()
    return shape


def phases_of(be, A, B, n: int, c: float | None) -> dict:
    phases: dict = {}
    if c is None:
        ozaki2.matmul(A, B, moduli=COUNT, backend=be, phases=phases)
    else:
        plan = TiledPlan(A, B, options={"moduli": COUNT, "workspace": int(8 * c * n * n)}, backend=be)
        plan.run(A, B, None, {})
        plan.run(A, B, None, phases)
        plan.free()
    return {k: 1e3 * v for k, v in phases.items()}


def main() -> None:
    be = get_backend("cupy")
    telemetry = be.telemetry()
    result = {"script": "results/published/scripts/ozaki2_capped.py", "environment": environment(be),
              "count": COUNT, "caps": CAPS, "points": []}
    rounds = max(10, int(os.environ.get("ROUNDS", 10)))
    for n in (int(x) for x in os.environ.get("NS", "8192,16384").split(",")):
        A, B = fresh_inputs(n)
        calls = runs(be, A, B, n)
        base = calls["uncapped"]()
        point = {"n": n, "bitwise": {name: bool(cp.array_equal(run(), base)) for name, run in calls.items()
                                     if name.startswith("capped")},
                 "tiles": {f"capped-{c:g}": cut(be, A, B, n, c) for c in CAPS},
                 "phases_ms": {"uncapped": phases_of(be, A, B, n, None)}}
        del base
        for c in CAPS:
            point["phases_ms"][f"capped-{c:g}"] = phases_of(be, A, B, n, c)
        loop = int(os.environ.get("LOOP", {8192: 5}.get(n, 2)))
        samples, clocks = interleaved(calls, loop, rounds, telemetry)
        whole = statistics.median(samples["uncapped"])
        dgemm = statistics.median(samples["dgemm"])
        point["loop"] = loop
        point["runs"] = {name: {"ms_per_call": 1e3 * statistics.median(v), "x_dgemm": dgemm / statistics.median(v),
                                "of_uncapped": whole / statistics.median(v), "samples_ms": [1e3 * x for x in v],
                                "telemetry": clocks[name]} for name, v in samples.items()}
        result["points"].append(point)
        print(n, {k: (round(v["ms_per_call"], 2), round(v["of_uncapped"], 3)) for k, v in point["runs"].items()},
              {k: (t["rows"], t["cols"], t["reuse_a"]) for k, t in point["tiles"].items()}, flush=True)
        for name, ph in point["phases_ms"].items():
            print("   ", name, {k: round(v, 2) for k, v in ph.items()}, flush=True)
        del A, B, calls
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "ozaki2-capped.json"), "w") as fh:
        json.dump(result, fh, indent=1, default=str)


if __name__ == "__main__":
    main()
