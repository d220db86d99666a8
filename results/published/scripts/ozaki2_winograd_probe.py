"""Where a Winograd level over the residues spends its time (CuPy): one modulus, each piece timed alone.

At each N of ``NS`` (default 8192, 16384), on uniform INT8 residue planes a and b (N x N, symmetric residues of
m = 251), the pieces of :func:`gpu.ozaki2.winograd.residue_product` are timed by CUDA events (median of 5 after
one warm call), each with the host time of its launch: one INT8 GEMM of the full size, one and seven of half
the size (quadrant views, and contiguous), one residue sum of two quadrants, one reduction of a half-size INT32
product, the direct product (GEMM and reduction) at full and half size, and the whole product at level 1 and 2.
Writes ``$OUT/ozaki2-winograd-probe.json`` (per piece: [device ms, host ms]); prints a line per N. Run from the
repository root with ``PYTHONPATH=$PWD``.
"""

import json
import os
import statistics
import time

import cupy as cp

from experiments.core.environment import environment
from gpu.backend import get_backend
from gpu.ozaki2 import winograd

MODULUS = 251


def timed(fn, reps: int = 5) -> tuple[float, float]:
    """(device ms, host ms of the launch), medians over ``reps`` calls after a warm one."""
    fn()
    cp.cuda.Device().synchronize()
    out = []
    for _ in range(reps):
        start, end = cp.cuda.Event(), cp.cuda.Event()
        t0 = time.perf_counter()
        start.record()
        fn()
        host = time.perf_counter() - t0
        end.record()
        end.synchronize()
        out.append((cp.cuda.get_elapsed_time(start, end), 1e3 * host))
    return statistics.median(d for d, _ in out), statistics.median(h for _, h in out)


def pieces(be, n: int) -> dict:
    rng = cp.random.default_rng(1)
    a, b = (rng.integers(-125, 126, (n, n), dtype=cp.int8) for _ in range(2))
    h = n // 2
    P, Ph = cp.empty((n, n), cp.int32), cp.empty((h, h), cp.int32)
    ac, bc = cp.ascontiguousarray(a[:h, :h]), cp.ascontiguousarray(b[:h, :h])
    reduce = be.ops(winograd.FAMILY).reduce
    return {
        "gemm_full": timed(lambda: be.gemm_ex(a, b.T, P, recipe="int8")),
        "gemm_half_view": timed(lambda: be.gemm_ex(a[:h, :h], b[:h, :h].T, Ph, recipe="int8")),
        "gemm_half_view_x7": timed(lambda: [be.gemm_ex(a[:h, h:], b[h:, :h].T, Ph, recipe="int8") for _ in range(7)]),
        "gemm_half_contig": timed(lambda: be.gemm_ex(ac, bc.T, Ph, recipe="int8")),
        "sum_view": timed(lambda: winograd.add(a[h:, :h], a[h:, h:], MODULUS)),
        "sum_contig": timed(lambda: winograd.add(ac, bc, MODULUS)),
        "reduce_half": timed(lambda: reduce(Ph, MODULUS)),
        "direct_half": timed(lambda: winograd._direct(be, a[:h, :h], b[:h, :h], MODULUS)),
        "direct_full": timed(lambda: winograd._direct(be, a, b, MODULUS)),
        "level1": timed(lambda: winograd.residue_product(be, a, b, MODULUS, 1)),
        "level2": timed(lambda: winograd.residue_product(be, a, b, MODULUS, 2)),
    }


def main() -> None:
    be = get_backend("cupy")
    result = {"script": "results/published/scripts/ozaki2_winograd_probe.py", "environment": environment(be),
              "modulus": MODULUS, "unit": "[device ms, host ms]", "points": {}}
    for n in (int(x) for x in os.environ.get("NS", "8192,16384").split(",")):
        result["points"][n] = pieces(be, n)
        print(n, {k: (round(d, 3), round(h, 3)) for k, (d, h) in result["points"][n].items()}, flush=True)
        cp.get_default_memory_pool().free_all_blocks()
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "ozaki2-winograd-probe.json"), "w") as fh:
        json.dump(result, fh, indent=1)


if __name__ == "__main__":
    main()
