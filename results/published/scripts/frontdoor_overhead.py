"""Where ``gpu.matmul(A, B)`` loses to ``cupy.matmul(A, B)`` when the front door runs the library GEMM (CuPy).

In the H200 grid the front door chose the library GEMM at N = 512 and 2048, and ran at 0.83-0.94x and 0.945x of
``cupy.matmul`` as called. This probe times, interleaved in rounds at each size of ``SIZES`` on one set of
uniform [0, 1) FP64 operands, every call making a new C:

* ``cupy.matmul``: ``cupy.matmul(A, B)``;
* ``product_call``: the backend's checked library call into a new C (:meth:`Backend.product_call`), what the front
  door's library plan runs;
* ``plan.execute``: ``gpu.plan(A, B)`` kept, ``execute(A, B)``;
* ``gpu.matmul``: ``gpu.matmul(A, B)`` (the cached plan);
* ``strassen``: ``gpu.strassen.matmul(A, B)`` at its defaults (level 0 at these sizes);
* ``gemmEx``: the backend's cuBLAS call made as ``cupy.matmul`` makes it (``cublasGemmEx``, ``CUBLAS_COMPUTE_64F``,
  ``CUBLAS_GEMM_DEFAULT_TENSOR_OP``) into a new C, where the backend calls ``cublasDgemm``: whether cuBLAS picks a
  different kernel for the two at 2048 (the front door's library route ran at 0.945x there, device-bound).

For each: **wall**, a loop of ``CALLS`` back-to-back calls then one synchronise, per call; **device**, the same loop
behind a stream hold timed by CUDA events; **host**, one call on an idle device; and the host microseconds of the
front door's pieces at the first size. Medians of :data:`ROUNDS` rounds. Writes ``$OUT/frontdoor-overhead.json``.
"""

import json
import os

import cupy as cp
import numpy as np
from cupy_backends.cuda.libs import cublas
from level0_probe import CALLS, ROUNDS, host_us, measured  # this folder's probe: the same clocks

import gpu
from experiments.core.environment import environment
from gpu.backend import get_backend
from gpu.backend.plans import operand_signature
from gpu.frontdoor import as_accuracy
from gpu.frontdoor.api import PLANS
from gpu.strassen import matmul as strassen

R_64F = cp.cuda.runtime.CUDA_R_64F
SIZES = tuple(int(n) for n in os.environ.get("SIZES", "512,1024,2048,4096").split(","))


def calls(be, A, B) -> dict:
    product = be.product_call(A, B, lambda: None)
    kept = gpu.plan(A, B, backend=be)
    return {"cupy.matmul": lambda: cp.matmul(A, B), "product_call": lambda: product(A, B),
            "plan.execute": lambda: kept.execute(A, B), "gpu.matmul": lambda: gpu.matmul(A, B),
            "strassen": lambda: strassen(A, B), "gemmEx": gemm_ex(A, B)}, kept


def gemm_ex(A, B):
    """C = A B (C-ordered, new each call) by ``cublasGemmEx`` as ``cupy.matmul`` calls it: C^T = B^T A^T."""
    n, k, m = A.shape[0], A.shape[1], B.shape[1]
    one, zero = np.ones(1), np.zeros(1)

    def call():
        C = cp.empty((n, m))
        handle = cp.cuda.device.get_cublas_handle()
        cublas.setStream(handle, cp.cuda.get_current_stream().ptr)
        cublas.gemmEx(handle, cublas.CUBLAS_OP_N, cublas.CUBLAS_OP_N, m, n, k,
                      one.ctypes.data, B.data.ptr, R_64F, m, A.data.ptr, R_64F, k, zero.ctypes.data, C.data.ptr,
                      R_64F, m, cublas.CUBLAS_COMPUTE_64F, cublas.CUBLAS_GEMM_DEFAULT_TENSOR_OP)
        return C
    return call


def pieces(be, A, B) -> dict:
    """Host microseconds per call of the front door's pieces (one synchronise per 200 calls)."""
    want = as_accuracy("dgemm")
    key = operand_signature(be, A, B, None)
    plan = PLANS.get((key, want, False), None)
    parts = {"as_accuracy": lambda: as_accuracy("dgemm"), "get_backend": lambda: get_backend("auto"),
             "signature": lambda: operand_signature(be, A, B, None), "cache_get": lambda: PLANS.get(
                 (key, want, False), None), "plan._execute": lambda: plan._execute(A, B, None),
             "gpu.matmul": lambda: gpu.matmul(A, B), "cupy.matmul": lambda: cp.matmul(A, B)}
    return host_us(parts)


def main() -> None:
    be = get_backend("cupy")
    out = {"script": "results/published/scripts/frontdoor_overhead.py", "environment": environment(be),
           "calls_per_sample": CALLS, "rounds": ROUNDS, "points": []}
    for n in SIZES:
        rng = cp.random.default_rng(n)
        A, B = rng.random((n, n)), rng.random((n, n))
        works, kept = calls(be, A, B)
        assert bool(cp.allclose(works["gemmEx"](), cp.matmul(A, B), rtol=1e-12)), "gemmEx's C"
        point = {"n": n, "chosen": kept.chosen.name, **measured(be, works)}
        if n == SIZES[0]:
            point["pieces_us"] = pieces(be, A, B)
            print("pieces (us)", {k: round(v, 2) for k, v in point["pieces_us"].items()}, flush=True)
        out["points"].append(point)
        print(n, kept.chosen.name, {name: (round(x["wall"], 3), round(x["device"], 3),
                                           round(1e6 * point["host_s"][name], 1))
                                    for name, x in point["x_cupy_matmul"].items()}, flush=True)
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "frontdoor-overhead.json"), "w") as fh:
        json.dump(out, fh, indent=1, default=str)


if __name__ == "__main__":
    main()
