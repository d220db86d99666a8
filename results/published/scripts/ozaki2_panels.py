"""Scheme II's INT8 GEMMs in output panels: 15 N x N x N INT8 products (INT32 results) per configuration.

Measures the panel shapes behind ``gpu.ozaki2.api.PANEL``: at each N, every (panel rows, panel columns) pair is
timed in interleaved rounds (CUDA events, median of ROUNDS), random INT8 operands over the full range.
Writes ``$OUT/tiles.json`` ({N: {"rowsxcols": ms}}); ``results/published/h100-ozaki2-panels.json`` is its
output on the H100 (cuBLAS 13.1, CuPy 14.2) at commit 38b3dfd.

Run on the device: ``PYTHONPATH=$PWD NS=4096,6144,8192,12288,16384 ROUNDS=5 python3 <this file>``.
"""

import json
import os
import statistics

import cupy as cp
import numpy as np
from rounds import event_rounds

from gpu.backend import get_backend

COUNT = 15


def panels(n: int, rows: int, cols: int):
    """(row, column) slices of an n x n output in rows x cols panels."""
    return [(slice(r, r + rows), slice(c, c + cols)) for r in range(0, n, rows) for c in range(0, n, cols)]


def products(be, ra, rb, P, rows: int, cols: int):
    """The COUNT INT8 products P[i] = ra[i] @ rb[i].T, panel by panel."""
    n = P.shape[1]

    def run() -> None:
        for i in range(COUNT):
            for r, c in panels(n, rows, cols):
                be.gemm_ex(ra[i, r], rb[i, c].T, P[i, r, c], recipe="int8")
    return run


def main() -> None:
    be, out, res = get_backend("cupy"), os.environ.get("OUT", "/tmp"), {}
    for n in (int(x) for x in os.environ.get("NS", "4096,6144,8192,12288,16384").split(",")):
        rng = cp.random.default_rng(0)
        ra, rb = (rng.integers(-128, 128, size=(COUNT, n, n), dtype=np.int8) for _ in range(2))
        P = cp.empty((COUNT, n, n), dtype=np.int32)
        shapes = sorted({(min(r, n), min(c, n)) for r in (1024, 2048, 3072, 4096, 6144, 8192, n)
                         for c in (4096, 8192, n)})
        runs = {f"{r}x{c}": products(be, ra, rb, P, r, c) for r, c in shapes}
        for run in runs.values():
            run()
        cp.cuda.Device().synchronize()
        samples = event_rounds(runs, int(os.environ.get("ROUNDS", 5)))
        res[n] = {k: statistics.median(v) for k, v in samples.items()}
        print(n, {k: round(v, 2) for k, v in res[n].items()}, flush=True)
        del ra, rb, P
        cp.get_default_memory_pool().free_all_blocks()
    with open(f"{out}/tiles.json", "w") as fh:
        json.dump(res, fh, indent=1)


if __name__ == "__main__":
    main()
