"""Split-K: one wave of wide chunks with the kernel's wide form (``gpu.splitk.kernels.WIDE_SLICES``: half the
blocks, stages twice as deep) against its default form.

Per m = n and k, one interleaved group (device time, sustained) of cuBLAS, a device copy, and each mode's auto
plan made with and without the wide form (``Kernel.wide``), run by the library's executor; the cache is
flushed (read) before every sample, so that no method pays for the copy's written lines. What
``WIDE_SLICES`` was chosen from (results/published/h100-splitk-probes.json, "wide"). Run from the repository
root with ``PYTHONPATH=$PWD``; writes $OUT/splitk_wide.json.
"""

import json
import os
from dataclasses import replace
from functools import partial

import cupy
import numpy as np

from experiments.core.timing import measure_interleaved
from experiments.splitk.bench import SplitOperands
from gpu.backend import get_backend
from gpu.splitk.api import run
from gpu.splitk.plan import plan

be = get_backend("cupy")
ops_splitk = be.ops("splitk")
limits = ops_splitk.limits()


def point(m: int, k: int) -> dict:
    ops = SplitOperands.draw(be, m, k)
    kernel = ops_splitk.kernel(np.float64, m, m)
    plans = {f"{form}-{'det' if det else 'atomic'}": plan(m, m, k, limits, kernel if form == "wide" else
                                                          replace(kernel, wide=None), deterministic=det)
             for form in ("default", "wide") for det in (False, True)}
    works = {"gemm": partial(be.gemm, ops.A, ops.B, ops.C), "copy": ops.copy}
    works.update({name: partial(run, be, ops_splitk, split, ops.A, ops.B, ops.C, 1.0, 0.0)
                  for name, split in plans.items()})
    timings = measure_interleaved(works, be, regime="sustained", hide_launch=True, flush=True)
    copy_bw = 2 * ops.shared.nbytes / timings["copy"].median
    roof = {n: 16 * m * k / t.median / copy_bw for n, t in timings.items() if n != "copy"}
    print(f"m={m} k={k} " + " ".join(f"{n} {r * 100:.1f}" for n, r in roof.items()), flush=True)
    return {"m": m, "k": k, "plans": {n: p.as_dict() for n, p in plans.items()},
            "us": {n: t.median * 1e6 for n, t in timings.items()}, "roof": roof}


if __name__ == "__main__":
    results = []
    for m in (16, 8):
        for e in (20, 21, 22, 23, 24):
            results.append(point(m, 2**e))
            cupy.get_default_memory_pool().free_all_blocks()
            with open(os.path.join(os.environ.get("OUT", "."), "splitk_wide.json"), "w") as fh:
                json.dump(results, fh, indent=1)
