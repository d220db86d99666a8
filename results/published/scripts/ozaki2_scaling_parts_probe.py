"""Probe: where fast scaling's time goes at N = 32768 (the level-2 call's "scaling" phase, about 10 ms), CuPy.

phi = 1 operands (``ozaki2_as_called.fresh_inputs``); each part alone, 10 interleaved samples by CUDA events at the
full clock: the whole line statistics of A's rows and of B's columns (``gpu.ozaki2.device.line_stats``), their two
kernels apart (``ozaki2_tile_squares``: one read of the operand; ``ozaki2_line_squares``: the tiles' values per
line), the scale codes of 15 moduli, and two reads for reference: a row-wise absolute maximum of A and of B^T
(a CuPy reduction) and A's row sums. With ``NCU=1`` it only runs the line statistics twice, for Nsight Compute
(``ncu -k regex:tile_squares --launch-skip 2 --launch-count 2``). Writes ``$OUT/ozaki2-scaling-parts-probe.json``.

    OUT=dir PYTHONPATH=$PWD:$PWD/results/published/scripts \\
        python3 results/published/scripts/ozaki2_scaling_parts_probe.py
"""

import os
import statistics

import cupy as cp
import numpy as np
from ozaki2_as_called import fresh_inputs
from rounds import event_rounds, write_json

from experiments.core.environment import environment
from gpu.backend import get_backend
from gpu.ozaki2 import device, fused
from gpu.ozaki2.moduli import moduli_table
from gpu.ozaki2.ops import ops
from gpu.ozaki2.workspace import TILE_K, carve_tiles

N = 32768


def squares(X, tiles) -> None:
    """``ozaki2_tile_squares`` alone, launched as ``line_stats`` launches it."""
    rows, cols = X.shape
    count = -(-cols // TILE_K)
    tmax, sums, _ = carve_tiles(tiles, rows, cols)
    grid, block = (-(-count // fused.SQUARES_WARPS), -(-rows // 32)), (32, fused.SQUARES_WARPS)
    device.kernel("ozaki2_tile_squares")(grid, block, (X, np.int64(X.strides[0] // 8), np.int64(X.strides[1] // 8),
                                                       np.int64(rows), np.int64(cols), tmax, sums, np.uint64(0)))


def lines(X, tiles, out) -> None:
    """``ozaki2_line_squares`` alone, over the tiles' values the last ``squares`` of X left."""
    rows, cols = X.shape
    count = -(-cols // TILE_K)
    tmax, sums, _ = carve_tiles(tiles, rows, cols)
    null = np.uint64(0)
    device.kernel("ozaki2_line_squares")((-(-rows // 8),), (32, 8), (tmax, sums, null, np.int64(count),
                                                                     np.int64(rows), out.mx, out.e, out.R, null, null))


def main() -> None:
    A, B = fresh_inputs(N)
    tiles = cp.empty(fused.workspace_bytes(N, N), dtype=cp.uint8)
    la, lb = device.line_buffers(N, False), device.line_buffers(N, False)
    if os.environ.get("NCU") == "1":
        for _ in range(2):
            device.line_stats(A, tiles, False, la)
            device.line_stats(B.T, tiles, False, lb)
        cp.cuda.Device().synchronize()
        return
    family, table = ops(get_backend("cupy")), moduli_table(15)
    ra, rb = device.line_stats(A, tiles, False, la), device.line_stats(B.T, tiles, False, lb)
    sa, sb = cp.empty(N, dtype=cp.int32), cp.empty(N, dtype=cp.int32)
    absmax = cp.ReductionKernel("float64 x", "float64 y", "fabs(x)", "max(a, b)", "y = a", "0", "absmax")
    work = {"stats_a": lambda: device.line_stats(A, tiles, False, la),
            "stats_bT": lambda: device.line_stats(B.T, tiles, False, lb),
            "squares_a": lambda: squares(A, tiles), "squares_bT": lambda: squares(B.T, tiles),
            "lines_a": lambda: lines(A, tiles, la), "lines_bT": lambda: lines(B.T, tiles, lb),
            "shifts_a": lambda: family.shifts(ra, table, sa), "shifts_b": lambda: family.shifts(rb, table, sb),
            "absmax_rows_a": lambda: absmax(A, axis=1), "absmax_rows_bT": lambda: absmax(B.T, axis=1),
            "sum_rows_a": lambda: A.sum(axis=1)}
    for run in work.values():
        run()
    samples = event_rounds(work, 10)
    result = {"environment": environment(get_backend("cupy")), "n": N,
              "median_ms": {k: statistics.median(v) for k, v in samples.items()}, "samples_ms": samples,
              "tile_bytes": fused.workspace_bytes(N, N)}
    print(result["median_ms"], flush=True)
    write_json(result, "ozaki2-scaling-parts-probe.json")


if __name__ == "__main__":
    main()
