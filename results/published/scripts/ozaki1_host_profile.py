"""Where Ozaki I's default call spends its host time at N = 2048 (FP32 slices, device verdict), idle and behind a
busy kernel: cProfile and wall time of ten calls each, written to $OUT/oz1prof.json.

Run on the device: ``OUT=dir PYTHONPATH=$PWD python3 results/published/scripts/ozaki1_host_profile.py``.
"""

import cProfile
import io
import json
import os
import pstats
import statistics
import time
from pathlib import Path

import cupy as cp

from gpu import ozaki
from gpu.backend import get_backend
from tests.gpu.busy import busy


def profile(be, A, B, mode: str) -> dict:
    """Ten calls, each timed on the host and profiled; ``mode`` "busy": each behind a 60 ms kernel."""
    walls, prof = [], cProfile.Profile()
    for _ in range(10):
        be.synchronize()
        if mode == "busy":
            busy(60)
        prof.enable()
        t = time.perf_counter()
        ozaki.matmul(A, B)
        walls.append(time.perf_counter() - t)
        prof.disable()
        be.synchronize()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(30)
    return {"wall_us": [w * 1e6 for w in walls], "median_us": statistics.median(walls) * 1e6,
            "profile": text.getvalue()}


def main() -> None:
    be = get_backend("cupy")
    rng = cp.random.default_rng(0)
    A, B = ((rng.random((2048, 2048)) - 0.5) * cp.exp(rng.standard_normal((2048, 2048))) for _ in range(2))
    for _ in range(3):
        ozaki.matmul(A, B)
    be.synchronize()
    result = {mode: profile(be, A, B, mode) for mode in ("idle", "busy")}
    for mode, r in result.items():
        print(mode, round(r["median_us"], 1), "us")
    Path(os.environ.get("OUT", "."), "oz1prof.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
