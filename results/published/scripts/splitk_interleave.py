"""Split-K's bulk kernel with its stages dealt round-robin along k (the ``INTERLEAVE`` flag) against chunks.

With contiguous chunks, each of the 132 blocks streams its own stretch of every row of A: m x 132 sequential
streams at once. Dealt round-robin, block z takes stages z, z + Z, z + 2Z, ... so that at any moment the blocks
read neighbouring stages of each row. Per point m = n in ``SIZES`` by k in ``KS``, as ``splitk_as_called.py``
times them (back-to-back calls, one synchronisation, wall, host and device time, rounds in turning order):
cuBLAS, the default call in both modes, and kept plans with the flag set in both modes and with twice the
chunks. Each product is checked against cuBLAS before timing. JSON to ``$OUT/splitk-interleave.json``.

    PYTHONPATH=$PWD:$PWD/results/published/scripts python3 results/published/scripts/splitk_interleave.py
"""
import json
import os
import statistics
import time

import cupy
import numpy as np
from splitk_as_called import CALLS, KS, ROUNDS, SIZES, check, sample, versions

from gpu import splitk
from gpu.backend import get_backend
from gpu.splitk.kernels import INTERLEAVE


def interleaved(A, B, **options):
    plan = splitk.Plan(A, B, options=options)
    plan._ops.chunks.interleave = INTERLEAVE
    return plan


def works(A, B) -> dict:
    det, atom = interleaved(A, B), interleaved(A, B, deterministic=False)
    det2 = interleaved(A, B, chunks=2 * det.split.chunks)
    return {"cupy_matmul": lambda: cupy.matmul(A, B),
            "matmul": lambda: splitk.matmul(A, B),
            "matmul_atomic": lambda: splitk.matmul(A, B, deterministic=False),
            "il_det": lambda: det.execute(A, B),
            "il_atomic": lambda: atom.execute(A, B),
            "il_det_2x": lambda: det2.execute(A, B)}, det.split


def point(be, tel, m: int, k: int) -> dict:
    rng = cupy.random.default_rng(m * 7 + k)
    A, B, C = rng.random((m, k)), rng.random((k, m)), cupy.empty((m, m))
    named, split = works(A, B)
    errors = check(be, named, A, B, C)
    for work in named.values():
        sample(be, tel, work)
    samples = {name: [] for name in named}
    order = list(named)
    for r in range(ROUNDS):
        for name in order[r % len(order):] + order[:r % len(order)]:
            samples[name].append(sample(be, tel, named[name]))
    med = {name: {key: statistics.median(s[key] for s in runs) for key in ("wall_s", "host_s", "device_s")}
           for name, runs in samples.items()}
    base = samples["cupy_matmul"]
    ratios = {name: {"as_called": statistics.median(b["wall_s"] / s["wall_s"] for b, s in zip(base, runs)),
                     "device": statistics.median(b["device_s"] / s["device_s"] for b, s in zip(base, runs))}
              for name, runs in samples.items()}
    del A, B, C, named
    cupy.get_default_memory_pool().free_all_blocks()
    return {"m": m, "n": m, "k": k, "split": split.as_dict(), "check_error": errors, "median": med,
            "cublas_over": ratios}


def main() -> None:
    be = get_backend("cupy")
    tel = be.telemetry()
    started = time.perf_counter()
    out = {"script": "results/published/scripts/splitk_interleave.py", "calls": CALLS, "rounds": ROUNDS,
           "environment": versions(be), "points": []}
    for m in SIZES:
        for k in KS:
            p = point(be, tel, m, k)
            out["points"].append(p)
            print(m, int(np.log2(k)), {n: round(r["as_called"], 4) for n, r in p["cublas_over"].items()},
                  {n: f"{e:.1e}" for n, e in p["check_error"].items()}, flush=True)
    out["seconds"] = time.perf_counter() - started
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "splitk-interleave.json"), "w") as fh:
        json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
