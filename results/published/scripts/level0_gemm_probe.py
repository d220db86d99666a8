"""One DGEMM at level 0, called every way the toolkit and CuPy can, by device time.

At each N: ``cupy.matmul(A, B, out=C)``; the level-0 plan's ``GemmCall`` (``cublasDgemm_v2`` on the backend's
handle); ``gpu.strassen.matmul(A, B, out=C)`` at its defaults; CuPy's ``cublas.dgemm`` and ``cublas.gemmEx``
(``CUBLAS_COMPUTE_64F``, algorithm 99 and -1) on CuPy's handle with the plan's arguments; ``gemmEx`` on the backend's
handle. CUDA events around loops of back-to-back calls, 15 interleaved rounds, medians. Writes
``$OUT/gemm-probe.json``; ``NS`` overrides the sizes. Run on the device from the repository root:
``PYTHONPATH=$PWD:$PWD/results/published/scripts OUT=dir python3
results/published/scripts/level0_gemm_probe.py``. The cuBLAS log of the first two
(``CUBLAS_LOGINFO_DBG=1 CUBLAS_LOGDEST_DBG=stdout``) shows what each call issues.
"""

import json
import os

import cupy as cp
import numpy as np
from cupy_backends.cuda.libs import cublas
from rounds import event_rounds, summary

from gpu.backend import get_backend
from gpu.strassen import matmul

NS = [int(x) for x in os.environ.get("NS", "3072,3584,4096,5120,6144,8192").split(",")]
ROUNDS, R_64F, COMPUTE_64F = 15, 1, 70
ONE, ZERO = np.array(1.0), np.array(0.0)


def calls(be, n: int) -> dict:
    """The calls compared at N = n, by name (see the module)."""
    A, B, C = cp.random.rand(n, n), cp.random.rand(n, n), cp.empty((n, n))
    plan_call, ours, theirs = be.gemm_call(A, B, C), be._handle(), cp.cuda.device.get_cublas_handle()

    def ex(handle, fn, algo):
        return lambda: fn(handle, 0, 0, n, n, n, ONE.ctypes.data, B.data.ptr, R_64F, n, A.data.ptr, R_64F, n,
                          ZERO.ctypes.data, C.data.ptr, R_64F, n, COMPUTE_64F, algo)
    return {"cupy.matmul": lambda: cp.matmul(A, B, out=C), "gemm_call": lambda: plan_call(A, B, C),
            "strassen": lambda: matmul(A, B, out=C),
            "dgemm_cupy_handle": lambda: cublas.dgemm(theirs, 0, 0, n, n, n, ONE.ctypes.data, B.data.ptr, n,
                                                      A.data.ptr, n, ZERO.ctypes.data, C.data.ptr, n),
            "gemmEx_cupy_handle_99": ex(theirs, cublas.gemmEx, 99),
            "gemmEx_cupy_handle_-1": ex(theirs, cublas.gemmEx, -1),
            "gemmEx_ours_99": ex(ours, be._gemm_ex_fn, 99)}


def per_call(fns: dict, loop: int) -> dict:
    """Median milliseconds per call of each, ``loop`` calls a sample, interleaved round by round."""
    loops = {k: (lambda fn=fn: [fn() for _ in range(loop)]) for k, fn in fns.items()}
    return {k: v["median_ms"] / loop for k, v in summary(event_rounds(loops, ROUNDS)).items()}


def main() -> None:
    be, out = get_backend("cupy"), {}
    for n in NS:
        fns = calls(be, n)
        for fn in (*fns.values(), *fns.values()):
            fn()
        cp.cuda.Device().synchronize()
        med = per_call(fns, max(2, min(20, int(0.03 / (2 * n**3 / 50e12)))))
        out[n] = {"median_ms": med, "x_cupy_matmul": {k: med["cupy.matmul"] / v for k, v in med.items()}}
        print(n, {k: round(v, 4) for k, v in out[n]["x_cupy_matmul"].items()}, flush=True)
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "gemm-probe.json"), "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
