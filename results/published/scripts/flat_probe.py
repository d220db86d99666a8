"""Probe of flat Winograd (gpu.strassen.flat) on one GPU: bitwise agreement with the recursive fused
product, and where a flat product's time goes (each pass's bandwidth, the GEMMs alone).

Env: OUT (folder for flat-probe.json), PROBE_SIZES (default 8192,16384), PROBE_LEVELS (default 2,3).
Back to back, CUDA events, median of 5-10 after 2 warm-up calls: a breakdown, not a headline number.
"""

import json
import os

import cupy as cp
import numpy as np

from gpu.backend import get_backend
from gpu.strassen import Executor, flat

be = get_backend("cupy")


def timed(fn, reps=10):
    for _ in range(2):
        fn()
    out = []
    for _ in range(reps):
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record()
        fn()
        b.record()
        b.synchronize()
        out.append(cp.cuda.get_elapsed_time(a, b) / 1e3)
    return float(np.median(out))


def probe(A, B, n: int, L: int) -> dict:
    arena = {}
    run, rec = Executor(be, flat=True, arena=arena), Executor(be, fused=True)
    C1, C2 = cp.empty((n, n)), cp.empty((n, n))
    run.multiply("winograd", A, B, C1, L)
    rec.multiply("winograd", A, B, C2, L)
    plan, q, ops = flat.flat_plan("winograd", L), n // 2**L, be.ops(flat.FAMILY)
    stacks = {key[1]: v for key, v in arena.items()}
    row = {"n": n, "level": L, "bitwise_equal_recursive_fused": bool(cp.array_equal(C1, C2)),
           "max_abs_diff": float(cp.abs(C1 - C2).max()), "stacked": plan.stacked}
    for tag, prog, X, Y in (("A", plan.a, A, stacks["A"]), ("B", plan.b, B, stacks["B"]),
                            ("C", plan.c, stacks["P"], C1)):
        t = timed(lambda prog=prog, X=X, Y=Y: ops.run(prog, X, Y, q, q))
        row[f"pass_{tag}_ms"] = 1e3 * t
        row[f"pass_{tag}_TBps"] = (len(prog.loads) + len(prog.stores)) * q * q * 8 / t / 1e12

    def gemms():
        for p in range(plan.products):
            be.gemm(flat.operand(plan.left[p], A, stacks["A"], q, q),
                    flat.operand(plan.right[p], B, stacks["B"], q, q), stacks["P"][p * q:(p + 1) * q])

    row["gemms_ms"] = 1e3 * timed(gemms, 5)
    row["flat_ms"] = 1e3 * timed(lambda: run.multiply("winograd", A, B, C1, L), 5)
    row["recursive_fused_ms"] = 1e3 * timed(lambda: rec.multiply("winograd", A, B, C2, L), 5)
    row["dgemm_ms"] = 1e3 * timed(lambda: be.gemm(A, B, C2), 5)
    return row


def main() -> None:
    report = []
    for n in (int(s) for s in os.environ.get("PROBE_SIZES", "8192,16384").split(",")):
        A, B = be.random((n, n), seed=1), be.random((n, n), seed=2)
        for L in (int(s) for s in os.environ.get("PROBE_LEVELS", "2,3").split(",")):
            report.append(probe(A, B, n, L))
            print(json.dumps(report[-1]), flush=True)
            cp.get_default_memory_pool().free_all_blocks()
    with open(os.path.join(os.environ["OUT"], "flat-probe.json"), "w") as f:
        json.dump(report, f, indent=1)


main()
