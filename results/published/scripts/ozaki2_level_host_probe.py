"""The host time of repeated ``ozaki2.matmul(A, B, moduli=COUNT, level=1, out=C)`` calls at N = 32768 (CuPy).

Why: the scheme II benchmark stored 323 ms of host time a call for ``ozaki2-fast-15-w1`` at N = 32768 (the median
of five calls, each issued to an idle device), against 0.7-0.8 ms for fast-14 and fast-16 at level 1. Here each of
seven calls per count (15, then 14) is issued to an idle device and timed by the host's clock, then to its end;
with the plan's graph state (mode, graphs captured) and the memory pool's bytes after it. ``EXTRA=1`` holds 6 GiB
more beside the operands. Writes ``$OUT/hostprobe.json`` (``hostprobe1.json`` with ``EXTRA``); needs nvmath-python
for the graphs. Run from the repository root with ``PYTHONPATH=$PWD:$PWD/results/published/scripts``.
"""

import json
import os
import time

import cupy as cp
from ozaki2_as_called import fresh_inputs  # this folder's script: the same inputs

from gpu import ozaki2
from gpu.backend import get_backend

be = get_backend("cupy")
n = 32768
A, B = fresh_inputs(n)
out = cp.empty((n, n))
extra = cp.empty((3 * n * n // 2,), dtype=cp.float32) if os.environ.get("EXTRA") else None
res = {"supports_graphs": be.supports_graphs, "runs": {}}
pool = cp.get_default_memory_pool()
for count in (15, 14):
    rec = []
    for _ in range(7):
        cp.cuda.Device().synchronize()
        t0 = time.perf_counter()
        ozaki2.matmul(A, B, moduli=count, level=1, out=out, backend=be)
        host = time.perf_counter() - t0
        cp.cuda.Device().synchronize()
        wall = time.perf_counter() - t0
        plan = next(iter(ozaki2.PLANS._plans.values()), None)
        g = getattr(plan, "_graphs", None)
        rec.append({"host_ms": 1e3 * host, "wall_ms": 1e3 * wall, "pool_used_gb": pool.used_bytes() / 2**30,
                    "pool_total_gb": pool.total_bytes() / 2**30, "free_gb": cp.cuda.runtime.memGetInfo()[0] / 2**30,
                    "graph_mode": str(getattr(g, "mode", None)), "captured": len(g.captured) if g else None})
        print(count, rec[-1], flush=True)
    res["runs"][count] = rec
    ozaki2.PLANS.clear()
    pool.free_all_blocks()
with open(os.path.join(os.environ["OUT"], f"hostprobe{os.environ.get('EXTRA', '')}.json"), "w") as fh:
    json.dump(res, fh, indent=1)
