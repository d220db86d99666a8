"""Split-K's pipelined kernel re-tuned on this device: stage depth, stages and warp tile, in both modes.

The kernel constants (``gpu.splitk.variants``: SLICES, WIDE_SLICES, STAGES, the warp tile) were chosen on an
H100; the H200 reads 43% more bytes per second with the same 132 SMs. Per m = n and k, one interleaved group
(device time, sustained, cache flushed before every sample) of cuBLAS (``cupy.matmul``), a device copy, the
public call at its defaults (``splitk.matmul(A, B, out=C)``), and, for each kernel shape of the grid below,
the auto split a plan would make with that kernel (:func:`gpu.splitk.plan.plan`) run by the library's executor
in the deterministic mode and in the atomic mode. Every product is checked before it is timed. (Its run at
4677b4e, ``h200/h200-splitk-tune.json``, also timed the two-launch reduction then kept, as ``det2-``; the reduction
is one launch again since 3e62169, and the sm_90 default is the bulk kernel, tuned by ``splitk_bulk_tune.py``.)
Environment: MS, ES (k = 2**e). Writes
``$OUT/splitk-tune.json``; about 3 minutes on an H200. Run from the repository root with ``PYTHONPATH=$PWD``.
"""

import itertools
import json
import os
import time
from dataclasses import replace

import cupy

from experiments.core.environment import environment
from experiments.core.lab import check_product
from experiments.core.timing import measure_interleaved
from experiments.splitk.bench import SplitOperands
from gpu import splitk
from gpu.backend import get_backend
from gpu.splitk import kernels
from gpu.splitk.executor import run
from gpu.splitk.plan import plan as split_plan

be = get_backend("cupy")
limits = be.ops("splitk").limits()
MS = [int(x) for x in os.environ.get("MS", "16,32,64").split(",")]
ES = [int(x) for x in os.environ.get("ES", "20,22,24").split(",")]
GRID = {"slices": (1, 2, 4), "stages": (2, 3, 4, 6), "warp_tile": (32, 16)}


def variants(m):
    """The grid's kernel shapes for an m x m output, by name, with their resources (those that fit a block)."""
    seen = {}
    for slices, stages, tile in itertools.product(*GRID.values()):
        v = kernels.Variant.pipe(m, m, slices=slices, stages=stages, warp_tile=tile)
        if v.name not in {x.name for x in seen.values()} and tile <= m:
            seen[f"sl{slices}-st{stages}-wt{tile}"] = v
    out, refused = kernels.resources_of(seen)
    for name, err in refused.items():
        print("skip", name, err, flush=True)
    return out


def works_for(ops, m, k):
    A, B, C = ops.A, ops.B, ops.C
    works = {"cublas": lambda: cupy.matmul(A, B, out=C), "copy": ops.copy,
             "public": lambda: splitk.matmul(A, B, out=C)}
    info = {}
    for name, (v, kernel) in variants(m).items():
        for mode, det in (("det", True), ("atom", False)):
            split = split_plan(m, m, k, limits, replace(kernel, wide=None), deterministic=det)
            P = cupy.empty((split.chunks, m, m)) if det else None
            bound = kernels.Launcher(split, A, B, kernels._strides(C), True, v=v)
            works[f"{mode}-{name}"] = (lambda b=bound, s=split, P=P: run(be, b, s, A, B, C, 1.0, 0.0, P))
            info[f"{mode}-{name}"] = {"variant": v.name, "regs": kernel.registers_per_thread, "shared": v.shared,
                                      **split.as_dict()}
    return works, info


def point(m, k):
    ops = SplitOperands.draw(be, m, k)
    works, info = works_for(ops, m, k)
    errors = {n: check_product(ops, f, n) for n, f in works.items() if n != "copy"}
    with be.allocation_policy("pooled"):
        timings = measure_interleaved(works, be, regime="sustained", hide_launch=True, flush=True, max_attempts=2)
    least, copy_bw = 8 * (2 * m) * k, 2 * ops.shared.nbytes / timings["copy"].median
    row = {"m": m, "k": k, "info": info, "errors": errors, "us": {n: t.median * 1e6 for n, t in timings.items()},
           "roof": {n: least / t.median / copy_bw for n, t in timings.items() if n != "copy"},
           "x_cublas": {n: timings["cublas"].median / t.median for n, t in timings.items()},
           "copy_tb_s": copy_bw / 1e12, "stable": {n: t.stable for n, t in timings.items()}}
    ranked = sorted((n for n in row["x_cublas"] if n.startswith(("det-", "atom-"))), key=row["x_cublas"].get)[::-1]
    best_det = next(n for n in ranked if n.startswith("det-"))
    print(f"m={m} k=2^{k.bit_length() - 1}: copy {row['copy_tb_s']:.2f} TB/s, cublas {row['roof']['cublas']:.3f} roof; "
          f"public {row['x_cublas']['public']:.3f}x; best det {best_det} {row['x_cublas'][best_det]:.3f}x; top "
          + ", ".join(f"{n} {row['x_cublas'][n]:.3f}" for n in ranked[:4]), flush=True)
    del ops
    cupy.get_default_memory_pool().free_all_blocks()
    return row


if __name__ == "__main__":
    start = time.time()
    results = {"script": "results/published/scripts/splitk_tune.py", "environment": environment(be), "grid": GRID,
               "points": []}
    for m in MS:
        for e in ES:
            results["points"].append(point(m, 2**e))
            with open(os.path.join(os.environ.get("OUT", "."), "splitk-tune.json"), "w") as fh:
                json.dump(results, fh, indent=1, default=str)
    print(f"{time.time() - start:.0f} s", flush=True)
