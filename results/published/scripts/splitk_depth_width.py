"""The pipelined split-K kernel's stage depth against the atomic mode's chunk width.

Per m = n and k, one interleaved group (device time, sustained) of cuBLAS, a device copy, and the atomic mode
(C zeroed by a memset) with each kernel shape of :data:`SHAPES` (slices of 16 per warp that splits k, stages)
and chunks 1024 or 4096 wide in whole waves, or one wave, all cut in whole 64-element units; two passes,
the second in the reverse order of k. What ``gpu.splitk.kernels.SLICES`` and ``gpu.splitk.plan.NARROW_WAVES``
were chosen from (results/published/h100-splitk-probes.json, "depth_width"). Run from the repository root
with ``PYTHONPATH=$PWD``; environment: MS, ES (k = 2**e), PASSES; writes $OUT/splitk_depth_width.json.
"""

import json
import os
from functools import partial

import cupy
import numpy as np

from experiments.core.environment import environment
from experiments.core.lab import check_product
from experiments.core.timing import measure_interleaved
from experiments.splitk.bench import SplitOperands
from gpu.backend import get_backend
from gpu.splitk import kernels
from gpu.splitk.api import run
from gpu.splitk.occupancy import chunks
from gpu.splitk.plan import ALIGN, SplitPlan

be = get_backend("cupy")
limits = be.ops("splitk").limits()
MS = [int(x) for x in os.environ.get("MS", "16,32,64").split(",")]
ES = [int(x) for x in os.environ.get("ES", "20,21,22,24").split(",")]
PASSES = int(os.environ.get("PASSES", 2))
SHAPES = {16: {"sl1": {"slices": 1}, "sl2": {"slices": 2}, "sl4": {"slices": 4}},
          32: {"sl1": {"slices": 1}, "sl2": {"slices": 2}, "sl1st4": {"slices": 1, "stages": 4},
               "sl2st2": {"slices": 2, "stages": 2}},
          64: {"sl2": {"slices": 2}, "sl4": {"slices": 4}, "sl1": {"slices": 1}}}
WIDTHS = {"w1k": 1024, "w4k": 4096, "1wave": None}


class Fixed(kernels.CudaOps):
    """The atomic mode with chunk kernel ``v`` instead of the default one."""

    def __init__(self, backend, v):
        super().__init__(backend)
        self.v = v

    def accumulate(self, A, B, C, plan, alpha):
        kernels.launch(self.v, A, B, C, (*kernels._strides(C), np.int64(0)), plan, alpha, True)


def works_for(ops: SplitOperands, m: int, k: int) -> tuple[dict, dict]:
    works = {"gemm": partial(be.gemm, ops.A, ops.B, ops.C), "copy": ops.copy}
    info = {}
    for shape, options in SHAPES[m].items():
        v = kernels.Variant.pipe(m, m, **options)
        try:
            kernel = kernels.resources(v)
        except ValueError as err:                      # more shared memory than a block may have
            print("skip", shape, err)
            continue
        per_wave = chunks(m, m, limits, kernel)
        for name, width in WIDTHS.items():
            p = per_wave if width is None else per_wave * max(1, round(k / (per_wave * width)))
            if p > k // ALIGN:
                continue
            plan = SplitPlan(m, m, k, p, int(np.sqrt(p - 1)) + 1, False, -(-p // per_wave), ALIGN)
            works[f"{shape}-{name}"] = partial(run, be, Fixed(be, v), plan, ops.A, ops.B, ops.C, 1.0, 0.0)
            info[f"{shape}-{name}"] = {"variant": v.name, "shared": v.shared, "regs": kernel.registers_per_thread,
                                       "per_wave": per_wave, "chunks": p, "width": plan.width}
    return works, info


def point(m: int, k: int, number: int) -> dict:
    ops = SplitOperands.draw(be, m, k)
    works, info = works_for(ops, m, k)
    errors = {n: check_product(ops, f, n) for n, f in works.items() if n != "copy"}
    with be.allocation_policy("pooled"):
        timings = measure_interleaved(works, be, regime="sustained", hide_launch=True)
    least, copy_bw = 8 * (2 * m) * k, 2 * ops.shared.nbytes / timings["copy"].median
    row = {"pass": number, "m": m, "k": k, "info": info, "errors": errors,
           "ms": {n: t.median * 1e3 for n, t in timings.items()},
           "roof": {n: least / t.median / copy_bw for n, t in timings.items() if n != "copy"},
           "x_gemm": {n: timings["gemm"].median / t.median for n, t in timings.items()},
           "spread": {n: t.spread for n, t in timings.items()}}
    best = max((n for n in row["roof"] if n != "gemm"), key=row["roof"].get)
    print(f"pass {number} m={m} k={k}: gemm {row['roof']['gemm'] * 100:.1f}%, best {best} "
          f"{row['roof'][best] * 100:.1f}% ({row['x_gemm'][best]:.3f}x)", flush=True)
    return row


if __name__ == "__main__":
    results = {"env": environment(be), "points": []}
    for number in range(PASSES):
        for m in MS:
            for e in ES if number % 2 == 0 else ES[::-1]:
                results["points"].append(point(m, 2**e, number))
                cupy.get_default_memory_pool().free_all_blocks()
    with open(os.path.join(os.environ.get("OUT", "."), "splitk_depth_width.json"), "w") as fh:
        json.dump(results, fh, indent=1, default=str)
