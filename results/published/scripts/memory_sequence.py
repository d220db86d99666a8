"""The H200's memory failures, replayed in one process: each call runs, or raises MemoryPlanError before any work.

1. N x N operands (N = 32768 by default: A, B and each output 8 GiB); ``gpu.ozaki2.matmul`` in fast scaling
   with 14 moduli, then 15 with the first result kept (on the H200 the second died with OutOfMemoryError: the
   pool held 82 GiB in cached blocks, none of which could hold its 60 GiB of INT32 products). Each count: a
   first call under CuPy's counting allocator (its exact peak and largest block: the workspace layout taken);
   then, with both results dropped, two more calls per count, timed, with the bytes the pool took from the
   driver for each (none for the second: its block and output served from the cache, no wait for the device).
2. With a 52 GB allocation held (the pool's cache handed back first), ``accuracy.reference.exact_matmul`` of
   256 sampled rows of A against B (it ran out of device memory there: it had no memory plan), timed, with its
   blocks and exact peak; checked against a float64 GEMM (cuBLAS) of the same rows, and the scheme II results
   of step 1 against it.

Writes ``$OUT/memory_sequence.json`` and prints a compact summary. Run on the device from the repository root:
``PYTHONPATH=$PWD python3 results/published/scripts/memory_sequence.py`` (``N=8192`` for a quick check;
``HOLD_GB`` the held allocation, 52 by default).
"""

import json
import os
import time
import traceback

import cupy as cp
import numpy as np

import accuracy.reference as reference
from accuracy.metrics import error_report
from gpu import ozaki2
from gpu.backend import MemoryPlanError, get_backend
from gpu.ozaki2 import memory

GIB = 2**30


def pool_state(be) -> dict:
    pool = cp.get_default_memory_pool()
    driver_free, total = cp.cuda.runtime.memGetInfo()
    return {"pool_used_gib": pool.used_bytes() / GIB, "pool_held_gib": pool.total_bytes() / GIB,
            "pool_cached_gib": pool.free_bytes() / GIB, "driver_free_gib": driver_free / GIB,
            "memory_info_free_gib": be.memory_info()[0] / GIB, "device_gib": total / GIB}


def operands(n: int, seed: int = 0):
    """A and B of the Ozaki benchmark's kind, drawn on the device: (U - 1/2) exp(phi G), phi = 1."""
    rng = cp.random.default_rng(seed)
    out = []
    for _ in range(2):
        X = rng.standard_normal((n, n))
        cp.exp(X, out=X)
        X *= rng.random((n, n)) - 0.5
        out.append(X)
    cp.get_default_memory_pool().free_all_blocks()
    return out


def attempt(step: dict, call):
    """``call()``, recording its outcome in ``step``: ran, MemoryPlanError (the promise), or anything else."""
    try:
        result = call()
        step["outcome"] = "ran"
        return result
    except MemoryPlanError as exc:
        step["outcome"], step["message"] = "MemoryPlanError", str(exc)
    except Exception as exc:                           # OutOfMemoryError here is the failure this replays
        step["outcome"], step["message"] = type(exc).__name__, str(exc)
        step["traceback"] = traceback.format_exc(limit=6)
    return None


def ozaki_step(be, A, B, count: int) -> tuple[dict, object]:
    n = A.shape[0]
    step = {"call": f"ozaki2 fast-{count}", "before": pool_state(be),
            "direct_block_gib": ozaki2.workspace_bytes(n, n, n, count, "fast", direct=True) / GIB,
            "planes_block_gib": ozaki2.workspace_bytes(n, n, n, count, "fast") / GIB}
    start = time.perf_counter()
    with be.track_allocations() as report:
        C = attempt(step, lambda: ozaki2.matmul(A, B, moduli=count, scaling="fast", backend=be))
    step["first_seconds"] = time.perf_counter() - start        # with kernel compilation
    step["peak_gib"], step["largest_allocation_gib"] = report.peak_bytes / GIB, max(report.sizes, default=0) / GIB
    if C is not None:
        direct = report.sizes and max(report.sizes) == ozaki2.workspace_bytes(n, n, n, count, "fast", direct=True)
        step["layout"] = "direct" if direct else "planes"
        step["plan_peak_gib"] = memory.peak_bytes(be, n, n, n, count, "fast", bool(direct)) / GIB
        step["peak_within_plan"] = report.peak_bytes <= step["plan_peak_gib"] * GIB
    step["after"] = pool_state(be)
    return step, C


def repeat(be, A, B, count: int, step: dict) -> None:
    """Two more calls, timed, with the bytes the pool took from the driver for each: the first's output is new
    where the caller holds the previous one; the second's block and output come from the pool's cache."""
    pool, step["repeats"] = cp.get_default_memory_pool(), []
    for _ in range(2):
        held, outcome = pool.total_bytes(), {}
        start = time.perf_counter()
        again = attempt(outcome, lambda: ozaki2.matmul(A, B, moduli=count, scaling="fast", backend=be))
        be.synchronize()
        step["repeats"].append({"seconds": time.perf_counter() - start, "outcome": outcome["outcome"],
                                "new_pool_gib": (pool.total_bytes() - held) / GIB})
        del again
    step["repeat_seconds"] = step["repeats"][-1]["seconds"]
    step["repeat_served_from_cache"] = step["repeats"][-1]["new_pool_gib"] == 0


def reference_step(be, A, B, rows, hold_gb: float) -> tuple[dict, object]:
    step = {"call": f"exact_matmul of {rows.size} rows beside {hold_gb:g} GB held"}
    be.release_memory()                            # the held block a fresh allocation, as in the original run
    hold = attempt(step, lambda: cp.empty(int(hold_gb * 1e9), dtype=np.uint8))
    step["hold"] = step.pop("outcome")
    A_rows = A[cp.asarray(rows)]
    step["before"] = pool_state(be)
    plans = []
    planner = reference.plan_blocks
    reference.plan_blocks = lambda s, budget: plans.append((s, budget, planner(s, budget))) or plans[-1][2]
    start = time.perf_counter()
    try:
        with be.track_allocations() as report:
            R = attempt(step, lambda: reference.exact_matmul(A_rows, B, backend=be))
    finally:
        reference.plan_blocks = planner
    step["seconds"], step["peak_gib"] = time.perf_counter() - start, report.peak_bytes / GIB
    if plans:
        shape, budget, plan = plans[-1]
        step["plan"] = {"budget_gib": budget / GIB, "rows": plan.rows, "cols": plan.cols, "tile": plan.tile,
                        "peak_gib": plan.peak / GIB, "slices_a": shape.slices_a, "slices_b": shape.slices_b,
                        "limbs": shape.limbs}
    if R is not None:
        start = time.perf_counter()
        G = A_rows @ B
        be.synchronize()
        step["dgemm_seconds"] = time.perf_counter() - start
        err = error_report(G, R, A_rows, B)
        step["dgemm_vs_exact"] = {"max_rel": err.max_rel, "max_comp": err.max_comp, "nrm": err.nrm}
    step["after"] = pool_state(be)
    del hold
    return step, R


def main() -> None:
    be, out = get_backend("cupy"), os.environ.get("OUT", "/tmp")
    n, hold_gb = int(os.environ.get("N", 32768)), float(os.environ.get("HOLD_GB", 52))
    record = {"device": be.device_info(), "N": n, "steps": []}
    rows = np.sort(np.random.default_rng(1).choice(n, size=min(256, n), replace=False))
    try:
        A, B = operands(n)
        sampled, steps = {}, {}
        for count in (14, 15):                      # fast-14's result stays alive through fast-15's first call
            steps[count], C = ozaki_step(be, A, B, count)
            record["steps"].append(steps[count])
            if C is not None:
                sampled[count] = C[cp.asarray(rows)]
            if count == 14:
                C14 = C
        del C14, C
        for count, step in steps.items():
            if step["outcome"] == "ran":
                repeat(be, A, B, count, step)
            print(json.dumps({k: step.get(k) for k in ("call", "outcome", "layout", "first_seconds",
                                                        "repeat_seconds", "peak_gib")}), flush=True)
        step, R = reference_step(be, A, B, rows, hold_gb)
        record["steps"].append(step)
        if R is not None:
            record["ozaki2_vs_exact"] = {f"fast-{c}": error_report(S, R).max_rel for c, S in sampled.items()}
    except Exception as exc:
        record["error"] = f"{type(exc).__name__}: {exc}"
        record["traceback"] = traceback.format_exc(limit=8)
    finally:
        with open(f"{out}/memory_sequence.json", "w") as fh:
            json.dump(record, fh, indent=1, default=float)
    summary = [{k: s.get(k) for k in ("call", "outcome", "layout", "first_seconds", "repeat_seconds",
                                      "repeat_served_from_cache", "peak_gib", "plan_peak_gib", "seconds", "plan",
                                      "dgemm_vs_exact", "message") if s.get(k) is not None}
               for s in record["steps"]]
    print(json.dumps({"N": n, "steps": summary, "ozaki2_vs_exact": record.get("ozaki2_vs_exact"),
                      "error": record.get("error")}, indent=1, default=float))


if __name__ == "__main__":
    main()
