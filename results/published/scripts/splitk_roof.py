"""How close split-K and cuBLAS come to the H200's read bandwidth on a tiny output over a huge k.

Per (m, k) with m = n: ``cupy.matmul(A, B)``, ``gpu.splitk.matmul(A, B)`` in both modes, and three kernels that
read the same bytes (A and B once each) and do nothing else: ``read16``, a grid-stride loop of 16-byte loads
(``BLOCKS`` blocks per SM of 256 threads, each summing what it reads so the loads stay), ``cupy.sum`` of A and of
B, and a device copy of A and B (counting read and written bytes). Device time by CUDA events, interleaved round
by round, median of ``ROUNDS``; bandwidth = 16 m k bytes / time (2 x that for the copy). Each operand is 0.5-8.6 GB
(with the copy's targets at most 34 GB in all), far beyond the 60 MiB L2, so no flush is needed.

Run on the device from the repository root: ``OUT=<dir> PYTHONPATH=$PWD:$PWD/results/published/scripts python3
results/published/scripts/splitk_roof.py`` (``MS``, ``ES``: m and log2 k).
"""

import json
import os

import cupy as cp
import numpy as np
from rounds import event_rounds, summary

from experiments.core.environment import environment
from gpu import splitk
from gpu.backend import get_backend

MS = [int(x) for x in os.environ.get("MS", "16,32,64").split(",")]
ES = [int(x) for x in os.environ.get("ES", "22,24").split(",")]
ROUNDS = int(os.environ.get("ROUNDS", "15"))
BLOCKS = [int(x) for x in os.environ.get("BLOCKS", "2,4,8").split(",")]

_READ = cp.RawKernel(r"""
extern "C" __global__ void read16(const double2* __restrict__ a, long long na, const double2* __restrict__ b,
                                  long long nb, double* __restrict__ sink)
{
    double s = 0.0;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < na; i += stride) {
        const double2 v = a[i];
        s += v.x + v.y;
    }
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < nb; i += stride) {
        const double2 v = b[i];
        s += v.x + v.y;
    }
    if (s == 12345.678) sink[blockIdx.x] = s;
}
""", "read16")


def runs(m: int, k: int) -> tuple[dict, float]:
    """The calls compared at (m, k), by name, and split-K's largest difference from cuBLAS relative to its largest
    entry (a check that the call timed computes the product)."""
    A, B = cp.random.rand(m, k), cp.random.rand(k, m)
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    sink = cp.zeros(sms * max(BLOCKS), dtype=np.float64)
    A2, B2 = cp.empty_like(A), cp.empty_like(B)
    out = {"cublas": lambda: cp.matmul(A, B),
           "splitk": lambda: splitk.matmul(A, B),
           "splitk_atomic": lambda: splitk.matmul(A, B, deterministic=False),
           "sum": lambda: (cp.sum(A), cp.sum(B)),
           "copy": lambda: (A2.__setitem__(Ellipsis, A), B2.__setitem__(Ellipsis, B))}
    for per in BLOCKS:
        out[f"read16_x{per}"] = (lambda g=sms * per: _READ((g,), (256,), (A, np.int64(A.size // 2), B,
                                                                          np.int64(B.size // 2), sink)))
    ref = cp.matmul(A, B)
    err = float(cp.abs(splitk.matmul(A, B) - ref).max() / cp.abs(ref).max())
    return out, err


def main() -> None:
    be = get_backend("cupy")
    result = {"script": "results/published/scripts/splitk_roof.py", "environment": environment(be),
              "rounds": ROUNDS, "unit": "device ms (median), TB/s", "points": []}
    for e in ES:
        for m in MS:
            k = 2**e
            fns, err = runs(m, k)
            for fn in fns.values():
                fn()
            cp.cuda.Device().synchronize()
            times = summary(event_rounds(fns, ROUNDS))
            nbytes = 16.0 * m * k
            tbs = {name: (2 if name == "copy" else 1) * nbytes / (t["median_ms"] * 1e-3) / 1e12
                   for name, t in times.items()}
            point = {"m": m, "n": m, "k": k, "bytes_read": nbytes, "max_rel_diff_vs_cublas": err,
                     "times": times, "tb_s": tbs,
                     "splitk_x_cublas": times["cublas"]["median_ms"] / times["splitk"]["median_ms"]}
            result["points"].append(point)
            print(m, e, {n: round(v, 3) for n, v in tbs.items()}, f"x{point['splitk_x_cublas']:.3f}", flush=True)
            del fns
            be.release_memory()
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "splitk-roof.json"), "w") as f:
        json.dump(result, f, indent=1, default=str)


if __name__ == "__main__":
    main()
