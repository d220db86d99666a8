"""Probe: ``ozaki2_tile_squares`` (fast scaling's one read) in other grid orders and block sizes, at N = 32768.

Why: alone at full clock the kernel reads A's rows in about 5.2 ms and B's columns (B^T's rows) in about 3.2, where
a row-wise maximum reads either in about 2.1 (``ozaki2_scaling_parts_probe.py``): the same per-warp pattern (32
lines, 256 contiguous bytes a load), yet under Nsight Compute A's warps wait 11.3 cycles an instruction on the long
scoreboard against 5.1. Variants, built from the library's source text (``gpu.ozaki2.fused.SOURCE``): the grid
transposed (lines fastest, ``T``) and 2 or 1 warps a block (``w2``, ``w1``) against the library's 4, each checked
byte for byte (tile maxima and sums) against the library's on A and B^T, then timed alone, 10 interleaved samples by
CUDA events, beside the row-wise maxima. Writes ``$OUT/ozaki2-squares-order-probe.json``.

    OUT=dir PYTHONPATH=$PWD:$PWD/results/published/scripts \\
        python3 results/published/scripts/ozaki2_squares_order_probe.py
"""

import statistics

import cupy as cp
import numpy as np
from ozaki2_as_called import fresh_inputs
from rounds import event_rounds, write_json

from experiments.core.environment import environment
from gpu.backend import get_backend
from gpu.ozaki2 import fused
from gpu.ozaki2.workspace import TILE_K, carve_tiles

N = 32768
ORDER = ("const long long r0 = (long long)blockIdx.{} * 32, count = (cols + 31) / 32; \\\n"
         "    const long long t = (long long)blockIdx.{} * SQUARES_WARPS + threadIdx.y, c0 = t * 32; \\")


def variant(warps: int, transposed: bool):
    """The kernel with ``warps`` warps a block, its grid transposed where asked, and how to launch it."""
    source = fused.SOURCE.replace(f"#define SQUARES_WARPS {fused.SQUARES_WARPS}", f"#define SQUARES_WARPS {warps}")
    assert ORDER.format("y", "x") in source, "the library's kernel changed: rebuild the variants"
    if transposed:
        source = source.replace(ORDER.format("y", "x"), ORDER.format("x", "y"))
    return cp.RawModule(code=source).get_function("ozaki2_tile_squares"), warps, transposed


VARIANTS = {"lib": (fused.SQUARES_WARPS, False), "T": (4, True), "w2": (2, False), "T_w2": (2, True),
            "w1": (1, False), "T_w1": (1, True)}


def run(kernel, X, region):
    """One launch of a variant over X into ``region``'s tile values; returns them."""
    function, warps, transposed = kernel
    rows, cols = X.shape
    tmax, sums, _ = carve_tiles(region, rows, cols)
    count = -(-cols // TILE_K)
    gx, gy = -(-count // warps), -(-rows // 32)
    function((gy, gx) if transposed else (gx, gy), (32, warps), (
        X, np.int64(X.strides[0] // 8), np.int64(X.strides[1] // 8), np.int64(rows), np.int64(cols), tmax, sums,
        np.uint64(0)))
    return tmax, sums


def main() -> None:
    A, B = fresh_inputs(N)
    kernels = {name: variant(*v) for name, v in VARIANTS.items()}
    ref_region, region = (cp.zeros(fused.workspace_bytes(N, N), dtype=cp.uint8) for _ in range(2))
    checks = {}
    for side, X in (("a", A), ("bT", B.T)):
        ref = [t.copy() for t in run(kernels["lib"], X, ref_region)]
        for name, kernel in kernels.items():
            got = run(kernel, X, region)
            checks[f"{side}_{name}"] = all(bool(cp.array_equal(r, g)) for r, g in zip(ref, got, strict=True))
    print(checks, flush=True)
    absmax = cp.ReductionKernel("float64 x", "float64 y", "fabs(x)", "max(a, b)", "y = a", "0", "absmax")
    work = {f"{side}_{name}": (lambda k=kernel, X=X: run(k, X, region))
            for side, X in (("a", A), ("bT", B.T)) for name, kernel in kernels.items()}
    work |= {"absmax_rows_a": lambda: absmax(A, axis=1), "absmax_rows_bT": lambda: absmax(B.T, axis=1)}
    samples = event_rounds(work, 10)
    result = {"environment": environment(get_backend("cupy")), "n": N, "checks": checks,
              "median_ms": {k: statistics.median(v) for k, v in samples.items()}, "samples_ms": samples}
    print(result["median_ms"], flush=True)
    write_json(result, "ozaki2-squares-order-probe.json")


if __name__ == "__main__":
    main()
