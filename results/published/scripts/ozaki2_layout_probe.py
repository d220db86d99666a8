"""Scheme II's workspace layouts as a user's kept plan runs them: the whole direct layout (every modulus's INT32
product kept, 11.25 FP64 matrices at 15 moduli), which a ``workspace=`` that holds it takes, against the default
layout, beside DGEMM. The default was the whole direct layout before the row panels; a capped call then took the
planes layout (one INT32 product at a time, reduced into INT8 planes: 6.12 matrices, GEMMul8's 6.1), and the
runs named these plans ``"direct"`` and ``"capped"``. It is now the direct layout in balanced row panels within
the planes' bytes (4 panels of 2048 rows at 8192, 5.16 matrices at 16384, 5.86 at 32768): ``"whole"`` and
``"default"``.

At N = 8192 and 16384 (``NS``) the runs are interleaved round by round (``ROUNDS``, at least 10, after a warm-up
round): kept plans of ``moduli="auto"`` (sized for 20 moduli) and of fast-15, each in both layouts, and
``cupy.matmul``. One sample is a loop of back-to-back ``plan.execute(A, B)`` calls, then one synchronize. At
``BIG`` (default 32768), where the two layouts do not fit together, fast-15 runs in each layout in turn, each
interleaved with DGEMM. Each plan's phases (``phases=``, each synchronized) are read from one more call, and every
result is compared bitwise with the whole layout's. Writes ``$OUT/ozaki2-layout-probe.json``.

``VARIANTS`` (default ``whole,default``) may add ``planes``: the planes layout forced (the layouts offered cut to
the last one while the plan is made), to compare it with the row panels where those are small (N = 4096: 4
panels of 1024 rows). Run on the device: ``OUT=dir PYTHONPATH=$PWD python3
results/published/scripts/ozaki2_layout_probe.py``.
"""

import json
import os
import statistics
from functools import partial

import cupy as cp
from ozaki2_as_called import inputs, sample  # this directory's script: phi = 1 operands, one timed loop

from experiments.core.environment import environment
from gpu import ozaki2
from gpu.backend import get_backend
from gpu.ozaki2 import memory
from gpu.ozaki2.options import Options

ROUNDS = max(10, int(os.environ.get("ROUNDS", 10)))


VARIANTS = tuple(os.environ.get("VARIANTS", "whole,default").split(","))
WHOLE = 2**50  # a workspace= that holds every layout: the whole direct one is taken


def plan(be, A, B, moduli, variant: str):
    """A kept plan in ``variant``'s layout (``direct``, ``rows`` and ``workspace_gib`` in the results say which)."""
    if variant == "planes":
        offered = memory.layouts
        memory.layouts = lambda *args, **kw: offered(*args, **kw)[-1:]
        try:
            return ozaki2.Plan(A, B, options=Options(moduli=moduli), backend=be)
        finally:
            memory.layouts = offered
    return ozaki2.Plan(A, B, options=Options(moduli=moduli, workspace=WHOLE if variant == "whole" else None),
                       backend=be)


def timed(calls: dict, loop: int, telemetry) -> dict:
    """Interleaved rounds of every call: median ms per call, its ratio to DGEMM's, and NVML after each."""
    for run in calls.values():
        sample(run, 1)
    samples, clocks = {k: [] for k in calls}, {k: [] for k in calls}
    for _ in range(ROUNDS):
        for name, run in calls.items():
            samples[name].append(sample(run, loop))
            clocks[name].append(telemetry.read().as_dict() if telemetry is not None else None)
    dgemm = statistics.median(samples["dgemm"])
    return {k: {"ms": 1e3 * statistics.median(v), "x_dgemm": dgemm / statistics.median(v),
                "samples_ms": [1e3 * s for s in v], "telemetry": clocks[k]} for k, v in samples.items()}


def described(p, A, B, direct_C) -> dict:
    """The plan's layout and bytes, its phases on one call, and whether its result equals the direct one's."""
    phases: dict = {}
    C = p.run(A, B, None, phases)
    return {"direct": p.work.direct, "rows": getattr(p.work.layout, "rows", None),
            "workspace_gib": p.work.layout.nbytes / 2**30, "count": p.last_count,
            "phases_ms": {k: 1e3 * v for k, v in phases.items()},
            "bitwise_whole": None if direct_C is None else bool(cp.array_equal(C, direct_C))}


def small(be, n: int, telemetry) -> dict:
    A, B = inputs(n)
    plans = {f"{m}-{variant}": plan(be, A, B, m, variant) for m in ("auto", 15) for variant in VARIANTS}
    calls = {name: partial(p.execute, A, B) for name, p in plans.items()}
    calls["dgemm"] = lambda: cp.matmul(A, B)
    point = {"n": n, "runs": timed(calls, 10 if n <= 8192 else 3, telemetry)}
    refs = {m: plans[f"{m}-whole"].execute(A, B) if "whole" in VARIANTS else None for m in ("auto", 15)}
    point["plans"] = {name: described(p, A, B, refs["auto" if name.startswith("auto") else 15])
                      for name, p in plans.items()}
    for p in plans.values():
        p.free()
    return point


def big(be, n: int, telemetry) -> dict:
    A, B = inputs(n)
    point, ref = {"n": n, "runs": {}, "plans": {}}, None
    for variant in VARIANTS:
        name = f"15-{variant}"
        p = plan(be, A, B, 15, variant)
        got = timed({name: partial(p.execute, A, B), "dgemm": partial(cp.matmul, A, B)}, 1, telemetry)
        point["runs"][name], point["runs"][f"dgemm beside {name}"] = got[name], got["dgemm"]
        point["plans"][name] = described(p, A, B, ref)
        if ref is None:
            ref = p.execute(A, B)
        p.free()
        cp.get_default_memory_pool().free_all_blocks()
    return point


def main() -> None:
    be = get_backend("cupy")
    telemetry = be.telemetry()
    result = {"script": "results/published/scripts/ozaki2_layout_probe.py", "environment": environment(be),
              "rounds": ROUNDS, "points": []}
    out = os.path.join(os.environ.get("OUT", "/tmp"), "ozaki2-layout-probe.json")
    sizes = [int(x) for x in os.environ.get("NS", "8192,16384").split(",") if x]
    for n in sizes + [int(x) for x in os.environ.get("BIG", "32768").split(",") if x]:
        point = small(be, n, telemetry) if n in sizes else big(be, n, telemetry)
        result["points"].append(point)
        print(n, {k: (round(v["ms"], 2), round(v["x_dgemm"], 3)) for k, v in point["runs"].items()}, flush=True)
        print("  ", {k: (v["direct"], round(v["workspace_gib"], 1), v["bitwise_whole"],
                         {p: round(t, 2) for p, t in v["phases_ms"].items()}) for k, v in point["plans"].items()},
              flush=True)
        with open(out, "w") as fh:
            json.dump(result, fh, indent=1, default=str)
        cp.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
