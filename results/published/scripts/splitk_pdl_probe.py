"""Probe: split-K's two launches with programmatic dependent launch (PDL), as called back to back.

Per point m = n, k (``POINTS``, ``MxK,...``): the default plan's chunk kernel and reduction, launched with their
arguments fixed once, in turning order beside ``cupy.matmul(A, B)`` and ``plan.execute(A, B)``
(``splitk_as_called.turning_rounds``: 40 calls back to back, 12 rounds), all on one non-blocking stream:

* ``chunk_cupy``, ``chunk_ex``: the chunk kernel alone, by CuPy and by ``cuLaunchKernelEx`` (cuda.bindings);
* ``chunk_pdl_nowait``: the same with the programmatic-stream-serialization attribute and no wait in the kernel
  (so the next call's blocks may start as soon as SMs free up: the most PDL could give, not a safe launch);
* ``chunk_pdl_wait``: the kernel compiled with ``griddepcontrol.launch_dependents`` and ``griddepcontrol.wait``
  as its first statements, launched with the attribute (the safe form: the blocks of a call are placed early
  but read nothing before the call before has finished);
* ``both_ex``, ``both_gated_nopdl``, ``both_pdl_wait``: the chunk kernel and the reduction, plain, compiled with
  the gates but launched without the attribute, and gated with the attribute; each checked for the plan's bits.

Run on the GPU from the repository root (cuda.bindings, an nvmath-python dependency, must be importable)::

    PYTHONPATH=$PWD:$PWD/results/published/scripts OUT=dir python3 results/published/scripts/splitk_pdl_probe.py
"""
import ctypes
import json
import os
import statistics

import cupy
import numpy as np
from cuda.bindings import driver as cu
from splitk_as_called import turning_rounds, versions

from gpu import splitk
from gpu.backend import get_backend
from gpu.splitk import compiled, kernels
from gpu.splitk.kernels import A_PAIRS, B_PAIRS

POINTS = [tuple(int(x) for x in p.split("x")) for p in os.environ.get(
    "POINTS", "32x4194304,64x1048576,16x16777216,32x16777216,16x1048576").split(",")]
WAIT = 'asm volatile("griddepcontrol.wait;" ::: "memory");'
TRIGGER = 'asm volatile("griddepcontrol.launch_dependents;" ::: "memory");'


def patched_source(where):
    """Each kernel named gets TRIGGER and WAIT as its first statements."""
    src = compiled._SOURCE
    for name in where:
        i = src.index(name + "(")
        j = src.index("{\n", i) + 2
        src = src[:j] + "    " + TRIGGER + "\n    " + WAIT + "\n" + src[j:]
    return src


def to_c(x):
    if isinstance(x, cupy.ndarray):
        return ctypes.c_void_p(x.data.ptr)
    if isinstance(x, np.int64):
        return ctypes.c_int64(int(x))
    if isinstance(x, np.int32):
        return ctypes.c_int32(int(x))
    if isinstance(x, np.float64):
        return ctypes.c_double(float(x))
    raise TypeError(type(x))


class Ex:
    """One kernel launched by cuLaunchKernelEx with fixed arguments, with or without the PDL attribute."""

    def __init__(self, func, grid, block, shared, args, maps, stream, pdl):
        self.held = [to_c(a) for a in args]
        ptrs = [ctypes.addressof(h) for h in self.held] + [m.ctypes.data for m in maps]
        self.maps = maps
        self.params = (ctypes.c_void_p * len(ptrs))(*ptrs)
        cfg = cu.CUlaunchConfig()
        grid = tuple(grid) + (1,) * (3 - len(grid))
        block = tuple(block) + (1,) * (3 - len(block))
        cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = grid
        cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = block
        cfg.sharedMemBytes = shared
        cfg.hStream = cu.CUstream(stream.ptr)
        if pdl:
            attr = cu.CUlaunchAttribute()
            attr.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
            attr.value.programmaticStreamSerializationAllowed = 1
            cfg.attrs = [attr]
            cfg.numAttrs = 1
        else:
            cfg.numAttrs = 0
        self.cfg, self.func = cfg, cu.CUfunction(func.kernel.ptr)
        self.addr = ctypes.addressof(self.params)

    def __call__(self):
        err, = cu.cuLaunchKernelEx(self.cfg, self.func, self.addr, 0)
        if err != cu.CUresult.CUDA_SUCCESS:
            raise RuntimeError(err)


def functions(source, names, shared):
    mod = cupy.RawModule(code=source, options=("--std=c++14",), name_expressions=names)
    fs = [mod.get_function(n) for n in names]
    if shared:
        fs[0].max_dynamic_shared_size_bytes = shared
    return fs


def point(be, tel, stream, m, k):
    rng = cupy.random.default_rng(m * 7 + k)
    A, B = rng.random((m, k)), rng.random((k, m))
    plan = splitk.Plan(A, B)
    launcher, split = plan._ops, plan.split
    cl, red = launcher.chunks, launcher.reduction
    v = kernels.variant(A.dtype, m, m, split.wide)
    P = plan.workspace
    C = cupy.empty((m, m))
    a, b = A.data.ptr, B.data.ptr
    cl._maps(a, b)
    maps = list(cl.maps.get((a, b))[2])
    flag = cl.atomic | (A_PAIRS if cl.a_pairs and a % 16 == 0 else 0) | (B_PAIRS if cl.b_pairs and b % 16 == 0 else 0)
    chunk_args = (A, *cl.a_strides, B, *cl.b_strides, P, *cl.sizes, np.float64(1.0), np.int32(flag))
    red_args = (P, *red.sizes, C, *red.c_args, np.float64(1.0), np.float64(0.0))
    rname = "splitk_reduce<double>"
    plain = functions(compiled._SOURCE, [v.name, rname], v.shared)
    gated = functions(patched_source(["splitk_bulk", "splitk_reduce"]), [v.name, rname], v.shared)

    def mk(fs, pdl):
        return (Ex(fs[0], cl.grid, cl.block, cl.shared, chunk_args, maps, stream, pdl),
                Ex(fs[1], red.grid, red.block, red.shared, red_args, [], stream, pdl))

    ex_plain, ex_pdl_nowait, ex_pdl = mk(plain, False), mk(plain, True), mk(gated, True)
    ex_gated_nopdl = mk(gated, False)
    named = {"cupy_matmul": lambda: cupy.matmul(A, B),
             "plan": lambda: plan.execute(A, B),
             "chunk_cupy": lambda: cl(A, B, P, 1.0),
             "chunk_ex": ex_plain[0], "chunk_pdl_nowait": ex_pdl_nowait[0], "chunk_pdl_wait": ex_pdl[0],
             "both_ex": lambda: (ex_plain[0](), ex_plain[1]()),
             "both_gated_nopdl": lambda: (ex_gated_nopdl[0](), ex_gated_nopdl[1]()),
             "both_pdl_wait": lambda: (ex_pdl[0](), ex_pdl[1]())}
    ref = plan.execute(A, B)
    check = {}
    for name in ("both_ex", "both_gated_nopdl", "both_pdl_wait"):
        C.fill(cupy.nan)
        for _ in range(3):
            named[name]()
        check[name] = bool(cupy.array_equal(C, ref))
    samples = turning_rounds(be, tel, named, 12)
    base = samples["cupy_matmul"]
    ratio = {n: statistics.median(b["wall_s"] / s["wall_s"] for b, s in zip(base, r)) for n, r in samples.items()}
    dev = {n: statistics.median(s["device_s"] for s in r) for n, r in samples.items()}
    host = {n: statistics.median(s["host_s"] for s in r) for n, r in samples.items()}
    print(m, k, check, " ".join(f"{n}:{1e6 * dev[n]:.1f}/{ratio[n]:.3f}" for n in named), flush=True)
    plan.free()
    return {"m": m, "k": k, "split": split.as_dict(), "variant": v.name, "bits": check, "ratio": ratio,
            "device_s": dev, "host_s": host, "samples": samples}


def main():
    be = get_backend("cupy")
    tel = be.telemetry()
    stream = cupy.cuda.Stream(non_blocking=True)
    out = {"environment": versions(be), "points": []}
    with stream:
        for m, k in POINTS:
            out["points"].append(point(be, tel, stream, m, k))
            cupy.get_default_memory_pool().free_all_blocks()
    with open(os.path.join(os.environ.get("OUT", "."), "pdl-probe.json"), "w") as fh:
        json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
