"""What the front door runs at N (its choice and what it refused), then Ozaki II's levels 0-2 each alone as a kept plan
(moduli from MODULI: a count or "auto"; level 2 not under "auto"): the fused levels its layout takes, the spans' rows,
one call's phases (each synchronized) and four synchronized calls. NS=28672,24576 MODULI=15 (or auto)."""

import os
import time

import cupy as cp
from ozaki2_as_called import fresh_inputs

import gpu
from gpu import ozaki2

for N in map(int, os.environ.get("NS", "28672").split(",")):
    A, B = fresh_inputs(N)
    with gpu.frontdoor.plan(A, B) as p:
        inner = p._inner
        print(N, "chosen", p.chosen.name, "fused_levels", getattr(inner, "fused_levels", None),
              "refused", [(r.name, why[:120]) for r, why in p.refused], flush=True)
    for level, moduli in [(lv, m) for m in os.environ.get("MODULI", "15").split(",") for lv in (0, 1, 2)]:
        if level == 2 and moduli == "auto":
            continue
        with ozaki2.Plan(A, B, options={"moduli": int(moduli) if moduli != "auto" else "auto", "level": level}) as plan:
            plan.execute(A, B)
            cp.cuda.Device().synchronize()
            ph = {}
            plan.run(A, B, phases=ph)
            t = []
            for _ in range(4):
                s = time.perf_counter()
                plan.execute(A, B)
                cp.cuda.Device().synchronize()
                t.append(time.perf_counter() - s)
            print(N, moduli, "level", level, "fused", plan.fused_levels, "rows", plan.work.layout.rows,
                  {k: round(v * 1e3, 1) for k, v in ph.items()}, "ms", [round(x * 1e3, 1) for x in t], flush=True)
    del A, B
    gpu.frontdoor.PLANS.clear()
    ozaki2.PLANS.clear()
    cp.get_default_memory_pool().free_all_blocks()
