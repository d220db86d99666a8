"""Probe: split-K's deterministic reduction kernel (``splitk_reduce``) in other block sizes and load batches.

Per point m = n, k (``POINTS``, ``MxK,...``): the default plan with the reduction's threads per block
(``kernels.REDUCE_THREADS``: each block adds a group's chain per thread for 512 / groups outputs) and the unroll
of its group loop (the loads of that many chunks issued before their additions) set per variant (``VARIANTS``:
threads, unroll; ``compiled._SOURCE`` patched and the kernel caches cleared), each checked for the default's
bits, then timed as called (``plan.execute(A, B)``, ``splitk_as_called.turning_rounds``: 40 calls back to back,
12 rounds) beside ``cupy.matmul(A, B)``; with ``MODE=ncu`` each variant's call runs once under the profiler
instead. Run on the GPU from the repository root::

    PYTHONPATH=$PWD:$PWD/results/published/scripts OUT=dir python3 results/published/scripts/splitk_reduce_probe.py
"""
import json
import os
import statistics

import cupy
import numpy as np
from splitk_as_called import turning_rounds, versions

from gpu import splitk
from gpu.backend import get_backend
from gpu.splitk import compiled, kernels

BASE = compiled._SOURCE
VARIANTS = {"t512u8": (512, 8), "t128u8": (128, 8), "t128u16": (128, 16), "t256u16": (256, 16), "t64u16": (64, 16)}
POINTS = [tuple(int(x) for x in p.split("x")) for p in os.environ.get(
    "POINTS", "32x4194304,16x16777216,32x16777216,64x1048576").split(",")]


def plan_with(A, B, threads, unroll):
    loop = "\n        for (long long h = first + 1"
    src = BASE.replace("#pragma unroll 8" + loop, f"#pragma unroll {unroll}" + loop)
    assert (unroll == 8) or src != BASE
    compiled._SOURCE = src
    compiled._FUNCTIONS.clear()
    compiled._CHUNK_FUNCTIONS.clear()
    kernels._LAUNCHES.clear()
    kernels.REDUCE_THREADS = threads
    p = splitk.Plan(A, B)
    p._ops = kernels.Launcher(p.split, A, B, (np.int64(B.shape[1]), np.int64(1)), True)
    return p


def point(be, tel, m: int, k: int) -> dict | None:
    rng = cupy.random.default_rng(m * 7 + k)
    A, B = rng.random((m, k)), rng.random((k, m))
    plans = {name: plan_with(A, B, *v) for name, v in VARIANTS.items()}
    ref = plans["t512u8"].execute(A, B)
    bits = {name: bool(cupy.array_equal(p.execute(A, B), ref)) for name, p in plans.items()}
    if os.environ.get("MODE") == "ncu":
        cupy.cuda.runtime.deviceSynchronize()
        cupy.cuda.profiler.start()
        for p in plans.values():
            p.execute(A, B)
        cupy.cuda.runtime.deviceSynchronize()
        cupy.cuda.profiler.stop()
        print(m, k, bits, flush=True)
        return None
    named = {"cupy_matmul": lambda: cupy.matmul(A, B)}
    named.update({name: (lambda p=p: p.execute(A, B)) for name, p in plans.items()})
    samples = turning_rounds(be, tel, named, 12)
    base = samples["cupy_matmul"]
    ratio = {n: statistics.median(b["wall_s"] / s["wall_s"] for b, s in zip(base, r)) for n, r in samples.items()}
    dev = {n: statistics.median(s["device_s"] for s in r) for n, r in samples.items()}
    print(m, k, "same bits" if all(bits.values()) else bits,
          " ".join(f"{n}:{1e6 * dev[n]:.1f}/{ratio[n]:.3f}" for n in named), flush=True)
    split = plans["t512u8"].split.as_dict()
    for p in plans.values():
        p.free()
    return {"m": m, "k": k, "split": split, "bits": bits, "ratio": ratio, "device_s": dev,
            "samples": {n: [{"wall_s": s["wall_s"], "device_s": s["device_s"]} for s in r]
                        for n, r in samples.items()}}


def main() -> None:
    be = get_backend("cupy")
    tel = be.telemetry()
    out = {"environment": versions(be), "variants": VARIANTS, "points": []}
    for m, k in POINTS:
        found = point(be, tel, m, k)
        if found:
            out["points"].append(found)
        cupy.get_default_memory_pool().free_all_blocks()
    if os.environ.get("MODE") != "ncu":
        with open(os.path.join(os.environ.get("OUT", "."), "reduce-probe.json"), "w") as fh:
            json.dump(out, fh)


if __name__ == "__main__":
    main()
