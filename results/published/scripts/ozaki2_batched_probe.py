"""Scheme II's INT8 GEMMs over the moduli as called now (one ``gemm_ex`` per modulus and panel, the direct layout's
planned calls) against one strided-batched call over the moduli (CuPy with nvmath-python), by the device's clock.

At each N of ``NS`` (default 4096, 8192, 16384) and ``COUNT`` moduli (default 15), on random symmetric residues
modulo 256 laid out as scheme II lays them (``(count, m, ldk)`` and ``(count, n_pad, ldk)`` INT8, products
``(count, m, n_pad)`` INT32): the planned per-modulus calls (:func:`gpu.ozaki2.gemms.planned`, in panels from
``PANEL_FROM``) and ``cublasGemmStridedBatchedEx`` over the moduli (whole products). Products are checked equal
bit for bit; each variant timed by CUDA events, medians of ``ROUNDS`` interleaved rounds, with the INT8 rate.
Writes ``$OUT/ozaki2-batched-probe.json``. Run from the repository root with ``PYTHONPATH=$PWD``.
"""

import functools
import json
import os
import statistics

import cupy as cp
import numpy as np
from nvmath.bindings import cublas as nvcublas

from experiments.core.environment import environment
from gpu.backend import blas, get_backend
from gpu.ozaki2.gemms import panels, planned, run_planned

COUNT, ROUNDS = int(os.environ.get("COUNT", 15)), int(os.environ.get("ROUNDS", 10))


def batched(be, res_a, res_b, products) -> None:
    """products[t] = res_a[t] @ res_b[t].T for every modulus t, in one strided-batched call (column-major view:
    C^T = B A^T, each plane contiguous)."""
    count, m, ldk = res_a.shape
    n_pad = res_b.shape[1]
    recipe = blas.gemm_recipe("int8")
    one, zero = np.array(1, recipe.scalar), np.array(0, recipe.scalar)
    nvcublas.gemm_strided_batched_ex(
        be._streams.handle(), 1, 0, n_pad, m, ldk, one.ctypes.data, res_b.data.ptr, recipe.cuda_operands, ldk,
        n_pad * ldk, res_a.data.ptr, recipe.cuda_operands, ldk, m * ldk, zero.ctypes.data, products.data.ptr,
        recipe.cuda_output, n_pad, m * n_pad, count, recipe.compute, -1)


def timed(be, work) -> float:
    with be.timer() as t:
        work()
    return t.seconds


def measure(be, n: int) -> dict:
    """One size: both variants checked equal, then timed in interleaved rounds."""
    rng = cp.random.default_rng(n)
    res_a = rng.integers(-128, 128, (COUNT, n, n), dtype=np.int8)
    res_b = rng.integers(-128, 128, (COUNT, n, n), dtype=np.int8)
    P1, P2 = (cp.empty((COUNT, n, n), dtype=np.int32) for _ in range(2))
    calls = [c for t in range(COUNT) for c in planned(be, res_a[t], res_b[t], P1[t], panels(n, n))]
    works = {"per-modulus": functools.partial(run_planned, be, calls),
             "strided-batched": functools.partial(batched, be, res_a, res_b, P2)}
    for work in works.values():
        work()
    same = bool(cp.array_equal(P1, P2))
    samples = {name: [] for name in works}
    names = list(works)
    for r in range(ROUNDS):
        for name in names[r % 2:] + names[:r % 2]:
            samples[name].append(timed(be, works[name]))
    ops = 2.0 * COUNT * n**3
    return {"n": n, "bitwise_equal": same, "calls_per_modulus": len(calls) // COUNT,
            "median_s": {k: statistics.median(v) for k, v in samples.items()},
            "tops": {k: ops / statistics.median(v) / 1e12 for k, v in samples.items()}, "samples": samples}


def main() -> None:
    be = get_backend("cupy")
    out = {"script": "results/published/scripts/ozaki2_batched_probe.py", "environment": environment(be),
           "count": COUNT, "points": []}
    for n in (int(x) for x in os.environ.get("NS", "4096,8192,16384").split(",")):
        point = measure(be, n)
        out["points"].append(point)
        print(n, point["bitwise_equal"], {k: round(v, 1) for k, v in point["tops"].items()}, flush=True)
        cp.get_default_memory_pool().free_all_blocks()
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "ozaki2-batched-probe.json"), "w") as fh:
        json.dump(out, fh, indent=1, default=str)


if __name__ == "__main__":
    main()
