"""Issue 14: the pipelined split-K kernel launched plainly against as clusters of one block (``__cluster_dims__``).

Per m = n and k, one interleaved group (device time, sustained) of cuBLAS, a device copy, and the same kernel
code compiled with and without ``gpu.splitk.kernels.CLUSTER_LAUNCH``: the atomic mode (memset C, then the chunk
kernel) at one wave and with 1024-wide chunks, and the deterministic mode's auto plan (chunk kernel and
reduction). What ``CLUSTER_LAUNCH`` was chosen from (results/published/h100-splitk-probes.json,
"cluster_launch"). Run from the repository root with ``PYTHONPATH=$PWD``; writes $OUT/splitk_cluster_launch.json.
"""

import json
import os
from functools import partial

import cupy
import numpy as np

from experiments.core.timing import measure_interleaved
from experiments.splitk.bench import SplitOperands
from gpu.backend import get_backend
from gpu.splitk import kernels, source
from gpu.splitk.api import run
from gpu.splitk.occupancy import chunks
from gpu.splitk.plan import ALIGN, SplitPlan, plan

be = get_backend("cupy")
limits = be.ops("splitk").limits()
PLAIN = kernels._SOURCE.replace(kernels.CLUSTER_LAUNCH, "")
assert PLAIN != kernels._SOURCE and "__PIPE_LAUNCH__" in source.SOURCE


class Plain(kernels.CudaOps):
    """The library's operations with the chunk kernel compiled without the cluster launch."""

    def __init__(self, backend, v):
        super().__init__(backend)
        self.f = cupy.RawModule(code=PLAIN, options=("--std=c++14",), name_expressions=(v.name,)).get_function(v.name)
        self.f.max_dynamic_shared_size_bytes = v.shared

    def _launch(self, A, B, out, strides, plan, alpha, atomic):
        v = kernels.variant(A.dtype, plan.m, plan.n)
        grid = (-(-plan.n // v.cols), -(-plan.m // v.rows), plan.chunks)
        args = (A, *kernels._strides(A), B, *kernels._strides(B), out, *strides, np.int32(plan.m), np.int32(plan.n),
                np.int64(plan.base), np.int64(plan.extra), np.int64(plan.unit), A.dtype.type(alpha),
                np.int32(kernels.flags(v, A, B, plan, atomic)))
        self.f(grid, v.block, args, shared_mem=v.shared)

    def partials(self, A, B, P, plan, alpha):
        self._launch(A, B, P, (np.int64(plan.n), np.int64(1), np.int64(plan.m * plan.n)), plan, alpha, False)

    def accumulate(self, A, B, C, plan, alpha):
        self._launch(A, B, C, (*kernels._strides(C), np.int64(0)), plan, alpha, True)


def point(m: int, k: int) -> dict:
    ops = SplitOperands.draw(be, m, k)
    v = kernels.variant(np.float64, m, m)
    per_wave = chunks(m, m, limits, kernels.resources(v))
    plans = {name: SplitPlan(m, m, k, p, int(np.sqrt(p - 1)) + 1, False, -(-p // per_wave), ALIGN)
             for name, p in {"1wave": per_wave, "w1k": k // 1024}.items()}
    plans["det"] = plan(m, m, k, limits, kernels.resources(v))
    works = {"gemm": partial(be.gemm, ops.A, ops.B, ops.C), "copy": ops.copy}
    for label, impl in {"plain": Plain(be, v), "cluster": kernels.CudaOps(be)}.items():
        for name, split in plans.items():
            works[f"{label}-{name}"] = partial(run, be, impl, split, ops.A, ops.B, ops.C, 1.0, 0.0)
    timings = measure_interleaved(works, be, regime="sustained", hide_launch=True)
    copy_bw = 2 * ops.shared.nbytes / timings["copy"].median
    roof = {n: 16 * m * k / t.median / copy_bw for n, t in timings.items() if n != "copy"}
    print(f"m={m} k={k} " + " ".join(f"{n} {r * 100:.1f}" for n, r in roof.items()), flush=True)
    return {"m": m, "k": k, "per_wave": per_wave, "plans": {n: p.as_dict() for n, p in plans.items()},
            "us": {n: t.median * 1e6 for n, t in timings.items()}, "roof": roof}


if __name__ == "__main__":
    results = []
    for m, e in ((8, 20), (16, 20), (16, 21), (16, 22), (16, 24), (32, 20), (32, 22), (64, 20), (64, 24)):
        results.append(point(m, 2**e))
        cupy.get_default_memory_pool().free_all_blocks()
        with open(os.path.join(os.environ.get("OUT", "."), "splitk_cluster_launch.json"), "w") as fh:
            json.dump(results, fh, indent=1)
