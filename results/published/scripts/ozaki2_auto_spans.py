"""Host time and wall time per call of ``ozaki2.matmul(A, B, level=1)`` at N = 32768, in one variant (``VARIANT``):

* ``auto-new``: ``moduli="auto"``, a new C per call (the block, sized for 20 moduli, carved anew for the count read);
* ``old-new``: the same with the block's own spans for every count (``Carved.for_count`` replaced by the identity:
  the library before it carved anew);
* ``auto-out``: ``moduli="auto"`` into a given C;
* ``fixed-new``: ``moduli=15``, a new C per call.

One process per variant (run it four times). Phi = 1 operands drawn on the device (``ozaki2_as_called.fresh_inputs``).
The first call (plan, kernels); the host time of 4 calls, each from an idle device; then a loop of 4 calls with one
synchronise: the host time to issue them and the wall time per call. Under ``"auto"`` each call reads its count and
so waits for the calls before it: the loop's issue time is the device's, whatever the launches. Prints one JSON line
with the count, the spans of the top half's rows, the INT8 GEMM calls per product and the graphs kept. Run on the
device from the repository root: ``VARIANT=auto-new PYTHONPATH=$PWD:$PWD/results/published/scripts python3
results/published/scripts/ozaki2_auto_spans.py`` (about 20 s on an H200).
"""

import json
import os
import time

import cupy as cp
from ozaki2_as_called import fresh_inputs

from gpu import ozaki2
from gpu.ozaki2 import memory


def main() -> None:
    variant, n = os.environ["VARIANT"], int(os.environ.get("N", 32768))
    if variant.startswith("old"):
        memory.Carved.for_count = lambda self, count: self
    A, B = fresh_inputs(n)
    C = cp.empty((n, n)) if "out" in variant else None
    options = {"level": 1, **({"moduli": 15} if variant.startswith("fixed") else {}),
               **({"out": C} if C is not None else {})}
    sync = cp.cuda.Device().synchronize

    def call():
        return ozaki2.matmul(A, B, **options)
    t = time.perf_counter()
    call()
    sync()
    first = time.perf_counter() - t
    hosts = []
    for _ in range(4):
        sync()
        t = time.perf_counter()
        call()
        hosts.append(time.perf_counter() - t)
    sync()
    t = time.perf_counter()
    for _ in range(4):
        call()
    t1 = time.perf_counter()
    sync()
    t2 = time.perf_counter()
    plan = next(iter(ozaki2.PLANS._plans.values()))
    part = plan.part(plan.last_count)
    print(json.dumps({"variant": variant, "first_s": round(first, 3), "host_ms": [round(h * 1e3, 1) for h in hosts],
                      "loop4_issue_ms": round((t1 - t) * 1e3, 1),
                      "loop4_wall_per_call_ms": round((t2 - t) / 4 * 1e3, 1),
                      "count": plan.last_count, "spans": [s.stop - s.start for s in part.spans],
                      "gemm_calls": sum(len(g) for g in part.gemms), "block_rows": plan.work.layout.rows,
                      "graphs": len(plan._graphs.captured), "seen": len(plan._graphs.seen),
                      "free_gib": round(cp.cuda.Device().mem_info[0] / 2**30, 1),
                      "pool_gib": round(cp.get_default_memory_pool().total_bytes() / 2**30, 1)}), flush=True)


if __name__ == "__main__":
    main()
