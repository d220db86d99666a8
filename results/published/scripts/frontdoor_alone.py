"""The front door's call at one large N in a process of its own, against ``cupy.matmul`` (CuPy).

In the H200 grid at N = 32768 (``gemmlab frontdoor``), the front door's Ozaki II (level 0) ran at 1.011x the
library GEMM while Ozaki II at level 1, timed in the same interleaved group, ran at 1.498x: each plan keeps its
workspace, and level 0's (direct layout) and level 1's do not both fit beside A, B and C. A user's process holds
the one plan it calls. This probe times, in a new process per ``WHAT`` (``frontdoor``: ``gpu.matmul(A, B)``;
``level1``: ``gpu.ozaki2.matmul(A, B, level=1)``; ``level0``: ``gpu.ozaki2.matmul(A, B)``), that call and
``cupy.matmul(A, B)`` as called (a new C each, one call then a synchronise, host time included; interleaved,
``ROUNDS`` rounds after one warm call each), uniform [0, 1) operands. Appends one line per run to
``$OUT/frontdoor-alone.json`` (a JSON list): medians, samples, the ratio, what the front door chose, the plan's
workspace bytes and the pool's bytes. Run from the repository root with ``PYTHONPATH=$PWD``.
"""

import json
import os
import statistics
import time

import cupy as cp

import gpu
from experiments.core.environment import environment
from gpu.backend import get_backend
from gpu.backend.plans import operand_signature
from gpu.frontdoor import as_accuracy
from gpu.frontdoor.api import PLANS

N = int(os.environ.get("N", "32768"))
WHAT = os.environ.get("WHAT", "frontdoor")
ROUNDS = int(os.environ.get("ROUNDS", "10"))


def wall(fn) -> float:
    cp.cuda.Device().synchronize()
    start = time.perf_counter()
    fn()
    cp.cuda.Device().synchronize()
    return time.perf_counter() - start


def main() -> None:
    be = get_backend("cupy")
    rng = cp.random.default_rng(N)
    A, B = rng.random((N, N)), rng.random((N, N))
    calls = {"frontdoor": lambda: gpu.matmul(A, B), "level1": lambda: gpu.ozaki2.matmul(A, B, level=1),
             "level0": lambda: gpu.ozaki2.matmul(A, B)}
    works = {"cupy.matmul": lambda: cp.matmul(A, B), WHAT: calls[WHAT]}
    first = {name: wall(fn) for name, fn in works.items()}
    samples: dict[str, list[float]] = {name: [] for name in works}
    for r in range(ROUNDS):
        for name in (list(works) if r % 2 == 0 else list(works)[::-1]):
            samples[name].append(wall(works[name]))
    med = {name: statistics.median(v) for name, v in samples.items()}
    point = {"n": N, "what": WHAT, "first_s": first, "median_s": med, "samples_s": samples,
             "ratio": med["cupy.matmul"] / med[WHAT], "pool_bytes": cp.get_default_memory_pool().total_bytes()}
    if WHAT == "frontdoor":
        kept = PLANS.get((operand_signature(be, A, B, None), as_accuracy("dgemm"), False), None)
        point["chosen"] = kept.chosen.name
        point["explain"] = kept.explain()
    path = os.path.join(os.environ.get("OUT", "/tmp"), "frontdoor-alone.json")
    doc = {"script": "results/published/scripts/frontdoor_alone.py", "environment": environment(be), "points": []}
    if os.path.exists(path):
        with open(path) as fh:
            doc = json.load(fh)
    doc["points"].append(point)
    with open(path, "w") as fh:
        json.dump(doc, fh, indent=1, default=str)
    print(WHAT, N, {k: round(v * 1e3, 1) for k, v in med.items()}, "ratio", round(point["ratio"], 3),
          point.get("chosen", ""), flush=True)


if __name__ == "__main__":
    main()
