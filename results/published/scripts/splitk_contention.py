"""Split-K: does contention of the atomic additions on few L2 lines cost the atomic mode at one wave?

The same chunk kernel adds into C (m x n contiguous: m n / 16 lines of 128 bytes) or into a spread C (one
128-byte line per output), for one wave, two waves and 1024-wide chunks; no scaling pass; device time,
sustained, interleaved with cuBLAS and a device copy (results/published/h100-splitk-probes.json,
"contention"). Run from the repository root with ``PYTHONPATH=$PWD``; writes $OUT/splitk_contention.json.
"""

import json
import os
from functools import partial

import cupy
import numpy as np

from experiments.core.timing import measure_interleaved
from experiments.splitk.bench import SplitOperands
from gpu.backend import get_backend
from gpu.splitk import kernels
from gpu.splitk.occupancy import chunks
from gpu.splitk.plan import ALIGN, SplitPlan

be = get_backend("cupy")
limits = be.ops("splitk").limits()


def plans(m: int, k: int, per_wave: int) -> dict[str, SplitPlan]:
    counts = {"1wave": per_wave, "2wave": 2 * per_wave, "w1k": per_wave * max(1, round(k / (per_wave * 1024)))}
    return {name: SplitPlan(m, m, k, p, int(np.sqrt(p - 1)) + 1, False, 1, ALIGN) for name, p in counts.items()}


def point(m: int, k: int) -> dict:
    ops = SplitOperands.draw(be, m, k)
    v = kernels.variant(np.float64, m, m)
    per_wave = chunks(m, m, limits, kernels.resources(v))
    spread = cupy.zeros(m * m * 16)
    into_c, into_spread = (*kernels._strides(ops.C), np.int64(0)), (np.int64(16 * m), np.int64(16), np.int64(0))
    works = {"gemm": partial(be.gemm, ops.A, ops.B, ops.C), "copy": ops.copy}
    for name, plan in plans(m, k, per_wave).items():
        works[f"acc-{name}"] = partial(kernels.launch, v, ops.A, ops.B, ops.C, into_c, plan, 1.0, True)
        works[f"spread-{name}"] = partial(kernels.launch, v, ops.A, ops.B, spread, into_spread, plan, 1.0, True)
    timings = measure_interleaved(works, be, regime="sustained", hide_launch=True)
    copy_bw = 2 * ops.shared.nbytes / timings["copy"].median
    roof = {n: 16 * m * k / t.median / copy_bw for n, t in timings.items() if n != "copy"}
    print(f"m={m} k={k} " + " ".join(f"{n} {r * 100:.1f}" for n, r in roof.items()), flush=True)
    return {"m": m, "k": k, "per_wave": per_wave, "us": {n: t.median * 1e6 for n, t in timings.items()}, "roof": roof}


if __name__ == "__main__":
    results = []
    for m in (8, 16, 32):
        for e in (20, 22):
            results.append(point(m, 2**e))
            cupy.get_default_memory_pool().free_all_blocks()
    with open(os.path.join(os.environ.get("OUT", "."), "splitk_contention.json"), "w") as fh:
        json.dump(results, fh, indent=1)
