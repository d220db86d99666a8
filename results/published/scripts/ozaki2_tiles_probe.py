"""Where a capped Ozaki II call's time goes beyond its phases: host time, graphs replayed, device time per tile.

At each N of ``NS`` (default 16384, 8192), fast scaling and ``COUNT`` moduli (default 15), phi = 1 operands
drawn on the device, for the uncapped call and the call capped at ``CAP`` FP64 matrices (default 2,
``workspace=8 CAP N^2``), each called as a user calls it (``ozaki2.matmul``, a new C per call) after three
warm-up calls: the host time of one call issued to an idle device (median of 5), the device time per call of a
loop of 4 (CUDA events), the graphs the tile plan holds and has seen, and one call's device time per tile
(CUDA events around each tile's ``Plan.run``, with whether that tile formed A's residues or reused them).
Writes ``$OUT/ozaki2-tiles-probe.json``; prints a line per run. Run from the repository root with
``PYTHONPATH=$PWD``.
"""

import json
import os
import statistics
import sys
import time

import cupy as cp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ozaki2_as_called import fresh_inputs  # noqa: E402  (this folder's script: the same inputs)

from experiments.core.environment import environment  # noqa: E402
from gpu import ozaki2  # noqa: E402
from gpu.backend import get_backend  # noqa: E402
from gpu.ozaki2.plan import Plan  # noqa: E402
from gpu.ozaki2.tiled import TiledPlan  # noqa: E402

COUNT = int(os.environ.get("COUNT", 15))
CAP = float(os.environ.get("CAP", 2))


def host_ms(call) -> float:
    times = []
    for _ in range(5):
        cp.cuda.Device().synchronize()
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    cp.cuda.Device().synchronize()
    return 1e3 * statistics.median(times)


def device_ms(call, loop: int = 4) -> float:
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    for _ in range(loop):
        call()
    stop.record()
    stop.synchronize()
    return cp.cuda.get_elapsed_time(start, stop) / loop


def per_tile(call) -> list[dict]:
    """One call's device time per tile plan run (events around each ``Plan.run``)."""
    marks, real = [], Plan.run

    def timed(self, A, B, out=None, phases=None, reuse_a=False, **reuse_b):
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record()
        got = real(self, A, B, out, phases, reuse_a, **reuse_b)
        b.record()
        marks.append((a, b, bool(reuse_a), tuple(B.shape), tuple(A.shape)))
        return got
    Plan.run = timed
    try:
        call()
        cp.cuda.Device().synchronize()
    finally:
        Plan.run = real
    return [{"ms": cp.cuda.get_elapsed_time(a, b), "reuse_a": r, "a": sa, "b": sb} for a, b, r, sb, sa in marks]


def tiled_plan() -> dict:
    found = [p for p in ozaki2.PLANS._plans.values() if isinstance(p, TiledPlan)]
    if not found or found[-1]._held is None:
        return {}
    g = found[-1]._held._graphs
    return {"tiles": found[-1].tiles, "rows": found[-1].rows, "cols": found[-1].cols, "reuse": found[-1].reuse,
            "graphs_held": len(g.captured._entries), "graph_room": g.captured.size, "mode": str(g.mode)}


def probe(be, n: int) -> dict:
    """The uncapped and the capped call at ``n`` (see the module)."""
    A, B = fresh_inputs(n)
    cap = int(8 * CAP * n * n)
    calls = {"uncapped": lambda: ozaki2.matmul(A, B, moduli=COUNT, backend=be),
             "capped": lambda: ozaki2.matmul(A, B, moduli=COUNT, workspace=cap, backend=be)}
    point = {"n": n}
    for name, call in calls.items():
        for _ in range(3):
            call()
        point[name] = {"host_ms": host_ms(call), "device_ms": device_ms(call), "tiles": per_tile(call),
                       "plan": tiled_plan() if name == "capped" else {}}
        print(n, name, {k: v for k, v in point[name].items() if k != "tiles"},
              [(round(t["ms"], 2), t["reuse_a"]) for t in point[name]["tiles"]], flush=True)
    return point


def main() -> None:
    be = get_backend("cupy")
    result = {"script": "results/published/scripts/ozaki2_tiles_probe.py", "environment": environment(be),
              "count": COUNT, "cap_matrices": CAP,
              "points": [probe(be, int(x)) for x in os.environ.get("NS", "16384,8192").split(",")]}
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "ozaki2-tiles-probe.json"), "w") as fh:
        json.dump(result, fh, indent=1, default=str)


if __name__ == "__main__":
    main()
