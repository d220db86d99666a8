"""Scheme II's whole product as called, its INT8 GEMMs on cuBLAS (the library's route) or on a CUTLASS kernel.

``ozaki2_modular_epilogue.py`` found CUTLASS 3's Hopper INT8 kernels (``ozaki2_modular_gemm.cu``, built into a
shared library by ``ozaki2_modular_gemm.sh``; a probe's, not gemmlab's) at or above cuBLAS's INT8 rate under the
power cap. An integer product is exact, so the INT32 kernel (``i32_*``) gives cuBLAS's bits. Here the backend's
INT8 route (:class:`gpu.backend.lt_int8.Int8Routes`) is wrapped so that, while a run's flag is on, every INT8 GEMM
of the plan that the kernel takes (TN, beta 0, 16-byte aligned) goes to it; the rest go on as before.

Runs at each N of ``NS`` (default 16384): ``cupy.matmul`` (DGEMM), and ``ozaki2.matmul(A, B, out=C, moduli=15,
scaling="fast", level=L)`` for L in ``LEVELS`` (default 0,1) on the library's route and on each CUTLASS kernel of
``KERNELS``. Each run writes its own C, so each keeps its own CUDA graph (captured at its address set's second
call, with its route). ``LOOP`` back-to-back calls a sample (default 3), host time included, ``ROUNDS`` rounds
interleaved after a warm-up, NVML's readings after each sample; every run's C compared bit for bit with the
library route's at its level and with level 0's. JSON to ``$OUT/ozaki2-cutlass-product.json``.

    LIB=path/libozaki2_modgemm.so OUT=dir PYTHONPATH=/tmp/site:$PWD:$PWD/results/published/scripts \
        python3 results/published/scripts/ozaki2_cutlass_product.py
"""

import ctypes
import os
import statistics

import cupy as cp
from ozaki2_as_called import inputs, interleaved
from rounds import write_json

from experiments.core.environment import environment
from gpu import ozaki2
from gpu.backend import get_backend

LIB = os.environ["LIB"]
KERNELS = os.environ.get("KERNELS", "i32_128x256_c21").split(",")
LEVELS = [int(v) for v in os.environ.get("LEVELS", "0,1").split(",")]
ROUNDS, LOOP = max(10, int(os.environ.get("ROUNDS", 10))), int(os.environ.get("LOOP", 3))


class CutlassFirst:
    """The backend's INT8 route with one CUTLASS kernel tried first while :attr:`kernel` names one."""

    def __init__(self, routes, lib, workspace) -> None:
        self.routes, self.lib, self.ws = routes, lib, workspace
        self.kernel: str | None = None
        self.taken: dict[str, int] = {}
        self.declined: dict[str, int] = {}

    def _fn(self, name: str):
        fn = getattr(self.lib, name)
        fn.restype = ctypes.c_int
        fn.argtypes = ([ctypes.c_void_p] * 3 + [ctypes.c_int] * 3 + [ctypes.c_int64] * 3 + [ctypes.c_int]
                       + [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p])
        return fn

    def run(self, recipe, call, beta) -> bool:
        """Column-major C(m, n) = a^T b over k-contiguous a and b is row-major C(n, m) = b a^T: the kernel's
        D = A B^T with A = b, B = a."""
        name = self.kernel
        if name is not None and recipe.name == "int8" and beta == 0 and call.transa == 1 and call.transb == 0 \
                and all(v % 16 == 0 for v in (call.a, call.b, call.c, call.lda, call.ldb)) and call.ldc % 4 == 0:
            rc = self._fn(name)(call.b, call.a, call.c, call.n, call.m, call.k, call.ldb, call.lda, call.ldc, 256,
                                self.ws.data.ptr, self.ws.nbytes, cp.cuda.get_current_stream().ptr)
            if rc == 0:
                self.taken[name] = self.taken.get(name, 0) + 1
                return True
        if name is not None:
            self.declined[name] = self.declined.get(name, 0) + 1
        return self.routes.run(recipe, call, beta) if self.routes is not None else False


def runs(be, route: CutlassFirst, A, B) -> tuple[dict, dict]:
    """The calls timed by name, and the C each writes."""
    calls, outs = {"dgemm": lambda: cp.matmul(A, B)}, {}
    for level in LEVELS:
        for kernel in [None, *KERNELS]:
            name = f"L{level}-{kernel or 'lib'}"
            C = outs[name] = cp.empty_like(A)

            def call(C=C, kernel=kernel, level=level):
                route.kernel = kernel
                try:
                    return ozaki2.matmul(A, B, out=C, moduli=15, scaling="fast", level=level, backend=be)
                finally:
                    route.kernel = None
            calls[name] = call
    return calls, outs


def point(be, route: CutlassFirst, n: int, telemetry) -> dict:
    ozaki2.PLANS.clear()
    cp.get_default_memory_pool().free_all_blocks()
    A, B = inputs(n)
    calls, outs = runs(be, route, A, B)
    for call in calls.values():
        call()
        call()
        cp.cuda.Device().synchronize()
    taken, declined = dict(route.taken), dict(route.declined)
    samples, clocks = interleaved(calls, LOOP, ROUNDS, telemetry)
    dgemm = statistics.median(samples["dgemm"])
    base = {name: outs[f"L{name.split('-')[0][1:]}-lib"] for name in outs}
    level0 = outs.get("L0-lib")
    out = {"n": n, "loop": LOOP, "taken_in_warmup": taken, "declined_in_warmup": declined, "runs": {}}
    for name, v in samples.items():
        rec = {"ms_per_call": 1e3 * statistics.median(v), "x_dgemm": dgemm / statistics.median(v),
               "samples_ms": [1e3 * x for x in v], "telemetry": clocks[name]}
        if name != "dgemm":
            lib = samples[f"{name.split('-')[0]}-lib"]
            rec["vs_lib_paired"] = statistics.median(b / s for b, s in zip(lib, v, strict=True))
            rec["equal_lib_route"] = bool((outs[name] == base[name]).all())
            rec["equal_level0"] = bool((outs[name] == level0).all()) if level0 is not None else None
        out["runs"][name] = rec
    print(n, {k: (round(v["ms_per_call"], 2), round(v["x_dgemm"], 3), round(v.get("vs_lib_paired", 1), 4),
                  v.get("equal_lib_route"), v.get("equal_level0")) for k, v in out["runs"].items()}, flush=True)
    return out


def main() -> None:
    be = get_backend("cupy")
    route = CutlassFirst(be._lt, ctypes.CDLL(LIB), cp.empty(64 << 20, dtype=cp.uint8))
    be._lt = route
    settings = " ".join(f"{k}={os.environ[k]}" for k in ("NS", "KERNELS", "LEVELS", "ROUNDS", "LOOP")
                        if k in os.environ)
    out = {"script": "results/published/scripts/ozaki2_cutlass_product.py", "environment": environment(be),
           "command": f"LIB=lib {settings} OUT=dir python3 results/published/scripts/ozaki2_cutlass_product.py",
           "rounds": ROUNDS, "points": []}
    for n in (int(x) for x in os.environ.get("NS", "16384").split(",")):
        out["points"].append(point(be, route, n, be.telemetry()))
        write_json(out, "ozaki2-cutlass-product.json")


if __name__ == "__main__":
    main()
