"""Would an INT8 GEMM that writes its products modulo m (INT8) run at cuBLAS's INT8 rate under the power cap?

Scheme II's INT8 GEMMs write INT32 products, and the CRT pass reads them all back: at N = 16384 and one Winograd
level, 28 GB of INT32 against 7 GB were each product reduced modulo its modulus as the GEMM writes it. cuBLAS
and cublasLt have no such epilogue. This probe writes one in Triton (on the device image, not a gemmlab
dependency) and times it beside the library's INT8 GEMM (``be.gemm_ex(..., recipe="int8")``, INT32 out) on
random residues laid out as scheme II lays them (A ``(rows, k)`` and B ``(cols, k)`` INT8, both k-contiguous).

Variants per shape ``rows x cols x k`` (``SHAPES``): ``lib`` (the library's call, INT32), ``triton-i32:<cfg>``
(the Triton kernel storing INT32, its GEMM quality alone) and ``triton-mod:<cfg>`` (the same kernel storing the
symmetric residue modulo m as INT8). Configurations ``BMxBNxBK/warps/stages`` (``CONFIGS``) are screened first
on one call per modulus (``SCREEN`` reps, cold); then ``lib`` and the best two of each Triton kind are timed
sustained: a sample is ``REPEAT`` passes over ``COUNT`` moduli (default 7 x 15 = level 1's 105 GEMMs), after a
warm-up of ``WARM_S`` seconds that brings the board to its power cap, ``ROUNDS`` rounds in turning order, with
NVML's energy, SM clock and throttle reasons per sample. Every Triton product is checked against the library's
(INT32 equal; residues equal to the library's product reduced by CuPy). JSON to
``$OUT/ozaki2-modular-epilogue.json``.

    OUT=dir PYTHONPATH=$PWD:$PWD/results/published/scripts python3 results/published/scripts/ozaki2_modular_epilogue.py
"""

import ctypes
import os
import statistics
import time

import cupy as cp
import numpy as np
import torch
import triton
import triton.language as tl
from rounds import turning, write_json
from triton.tools.tensor_descriptor import TensorDescriptor

from experiments.core.environment import environment
from gpu.backend import get_backend

COUNT, REPEAT = int(os.environ.get("COUNT", 15)), int(os.environ.get("REPEAT", 7))
ROUNDS, SCREEN = int(os.environ.get("ROUNDS", 10)), int(os.environ.get("SCREEN", 3))
WARM_S = float(os.environ.get("WARM_S", 4))
LIB = os.environ.get("LIB", "")
KERNELS = os.environ.get("KERNELS", "mod_128x256_c21,mod_256x128_c12,mod_128x256_c11,i32_128x256_c21,"
                         "i32_128x256_c11,i32_256x128_c12")
CONFIGS = os.environ.get("CONFIGS", "128x256x128/8/3,tmap:128x256x128/8/4,tmap:256x128x128/8/3")
MODULI = (256, 255, 253, 251, 247, 241, 239, 233, 229, 227, 223, 217, 211, 199, 197, 193)


@triton.jit
def _gemm(a_ptr, b_ptr, c_ptr, M, N, K, lda, ldb, ldc, modulus,
          BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr, MOD: tl.constexpr):
    """C = A B^T over k-contiguous INT8 rows, INT32 accumulation; MOD: C's symmetric residues modulo ``modulus``
    as INT8. Sides are whole tiles (the probe's shapes)."""
    pid = tl.program_id(0)
    num_m, num_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
    width = GROUP * num_n
    first = (pid // width) * GROUP
    size = tl.minimum(num_m - first, GROUP)
    pid_m = first + (pid % width) % size
    pid_n = (pid % width) // size
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    pa = a_ptr + rm[:, None].to(tl.int64) * lda + rk[None, :]
    pb = b_ptr + rn[:, None].to(tl.int64) * ldb + rk[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.int32)
    for _ in range(0, K, BK):
        acc = tl.dot(tl.load(pa), tl.trans(tl.load(pb)), acc, out_dtype=tl.int32)
        pa += BK
        pb += BK
    pc = c_ptr + rm[:, None].to(tl.int64) * ldc + rn[None, :]
    if MOD:
        r = acc % modulus
        r = tl.where(r > (modulus - 1) // 2, r - modulus, r)
        r = tl.where(r < -(modulus // 2), r + modulus, r)
        tl.store(pc, r.to(tl.int8))
    else:
        tl.store(pc, acc)


@triton.jit
def _tile(tile, num_m, num_n, GROUP: tl.constexpr):
    width = GROUP * num_n
    first = (tile // width) * GROUP
    size = tl.minimum(num_m - first, GROUP)
    return first + (tile % width) % size, (tile % width) // size


@triton.jit
def _gemm_tma(a_desc, b_desc, c_desc, M, N, K, modulus, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
              GROUP: tl.constexpr, MOD: tl.constexpr, PROGRAMS: tl.constexpr, WS: tl.constexpr):
    """The same product through TMA descriptors, persistent over ``PROGRAMS`` programs (one a tile where
    ``PROGRAMS`` covers them all), with Triton's warp specialization where ``WS``."""
    num_m, num_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
    for tile in tl.range(tl.program_id(0), num_m * num_n, PROGRAMS, flatten=True, warp_specialize=WS):
        pid_m, pid_n = _tile(tile, num_m, num_n, GROUP)
        acc = tl.zeros((BM, BN), dtype=tl.int32)
        for k in range(0, K, BK):
            acc = tl.dot(a_desc.load([pid_m * BM, k]), b_desc.load([pid_n * BN, k]).T, acc, out_dtype=tl.int32)
        if MOD:
            r = acc % modulus
            r = tl.where(r > (modulus - 1) // 2, r - modulus, r)
            r = tl.where(r < -(modulus // 2), r + modulus, r)
            c_desc.store([pid_m * BM, pid_n * BN], r.to(tl.int8))
        else:
            c_desc.store([pid_m * BM, pid_n * BN], acc)


def parse(cfg: str) -> tuple[str, int, int, int, int, int]:
    """``[tma|tmap|tmaws:]BMxBNxBK/warps/stages``: the pointer kernel, or the TMA one per tile (tma), persistent
    (tmap) or persistent and warp-specialized (tmaws)."""
    form, _, rest = cfg.rpartition(":")
    tile, warps, stages = rest.split("/")
    bm, bn, bk = (int(v) for v in tile.split("x"))
    return form or "ptr", bm, bn, bk, int(warps), int(stages)


def triton_call(cfg: str, a, b, out, mod: bool):
    """A run of one Triton GEMM per modulus (torch views of CuPy arrays, on the legacy default stream)."""
    form, bm, bn, bk, warps, stages = parse(cfg)
    ta, tb, to = (torch.from_dlpack(x) for x in (a, b, out))
    count, r, k = a.shape
    c = b.shape[1]
    tiles = triton.cdiv(r, bm) * triton.cdiv(c, bn)
    if form == "ptr":
        def run():
            for t in range(count):
                _gemm[(tiles,)](ta[t], tb[t], to[t], r, c, k, k, k, c, MODULI[t % len(MODULI)], BM=bm, BN=bn,
                                BK=bk, GROUP=8, MOD=mod, num_warps=warps, num_stages=stages)
        return run
    programs = tiles if form == "tma" else min(tiles, torch.cuda.get_device_properties(0).multi_processor_count)
    descs = [(TensorDescriptor.from_tensor(ta[t], [bm, bk]), TensorDescriptor.from_tensor(tb[t], [bn, bk]),
              TensorDescriptor.from_tensor(to[t], [bm, bn])) for t in range(count)]

    def run_tma():
        for t, (da, db, dc) in enumerate(descs):
            _gemm_tma[(programs,)](da, db, dc, r, c, k, MODULI[t % len(MODULI)], BM=bm, BN=bn, BK=bk, GROUP=8,
                                   MOD=mod, PROGRAMS=programs, WS=form == "tmaws", num_warps=warps,
                                   num_stages=stages)
    return run_tma


def cutlass_call(lib, name: str, a, b, out, ws):
    """A run of one CUTLASS GEMM per modulus (``ozaki2_modular_gemm.cu``'s variant ``name``) on CuPy's stream."""
    fn = getattr(lib, name)
    fn.restype = ctypes.c_int
    fn.argtypes = ([ctypes.c_void_p] * 3 + [ctypes.c_int] * 3 + [ctypes.c_int64] * 3 + [ctypes.c_int]
                   + [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p])
    count, r, k = a.shape
    c = b.shape[1]

    def run():
        stream = cp.cuda.get_current_stream().ptr
        for t in range(count):
            rc = fn(a[t].data.ptr, b[t].data.ptr, out[t].data.ptr, r, c, k, k, k, c, MODULI[t % len(MODULI)],
                    ws.data.ptr, ws.nbytes, stream)
            if rc:
                raise RuntimeError(f"{name}: CUTLASS status {rc}")
    return run


def lib_call(be, a, b, P):
    def run():
        for t in range(a.shape[0]):
            be.gemm_ex(a[t], b[t].T, P[t], recipe="int8")
    return run


def residues(P, count: int):
    """The library's products reduced to symmetric residues, as the Triton kernel writes them."""
    m = cp.asarray([MODULI[t % len(MODULI)] for t in range(count)], dtype=np.int64)[:, None, None]
    r = P.astype(np.int64) % m
    return cp.where(r > (m - 1) // 2, r - m, r).astype(np.int8)


def nvml():
    import pynvml
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)

    def read():
        return {"mj": pynvml.nvmlDeviceGetTotalEnergyConsumption(h),
                "mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                "watts": pynvml.nvmlDeviceGetPowerUsage(h) / 1e3,
                "reasons": pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(h)}
    return read


def timed(call, read, repeat: int) -> dict:
    cp.cuda.Device().synchronize()
    e0 = read()
    t0, t1 = cp.cuda.Event(), cp.cuda.Event()
    t0.record()
    for _ in range(repeat):
        call()
    t1.record()
    t1.synchronize()
    e1 = read()
    return {"ms": cp.cuda.get_elapsed_time(t0, t1), "joules": (e1["mj"] - e0["mj"]) / 1e3, "mhz": e1["mhz"],
            "watts": e1["watts"], "reasons": e1["reasons"]}


def candidates(a, b, Q, R, R16, ws) -> dict:
    """Every variant's (run, output): the Triton configurations, then the CUTLASS library's kernels."""
    out = {}
    for cfg in (c for c in CONFIGS.split(",") if c):
        for kind, dest, mod in (("triton-i32", Q, False), ("triton-mod", R, True)):
            if mod or not cfg.startswith("tma"):
                out[f"{kind}:{cfg}"] = (triton_call(cfg, a, b, dest, mod), dest)
    if LIB:
        lib = ctypes.CDLL(LIB)
        for name in (n for n in KERNELS.split(",") if n):
            kind, dest = (("cutlass-w16", R16) if name.startswith("w16") else ("cutlass-mod", R)
                          if name.startswith("mod") else ("cutlass-i32", Q))
            out[f"{kind}:{name}"] = (cutlass_call(lib, name, a, b, dest, ws), dest)
    return out


def sustained_record(samples: dict, ops: float) -> dict:
    return {n: {"tops": ops / (statistics.median(s["ms"] for s in v) * 1e-3) / 1e12,
                "ms": statistics.median(s["ms"] for s in v),
                "joules": statistics.median(s["joules"] for s in v),
                "mhz": statistics.median(s["mhz"] for s in v),
                "watts": statistics.median(s["watts"] for s in v),
                "reasons": sorted({s["reasons"] for s in v}),
                "vs_lib": statistics.median(b["ms"] / s["ms"] for b, s in zip(samples["lib"], v, strict=True))}
            for n, v in samples.items()}


def measure(be, read, r: int, c: int, k: int) -> dict:
    rng = cp.random.default_rng(r + c + k)
    a = rng.integers(-128, 128, (COUNT, r, k), dtype=np.int8)
    b = rng.integers(-128, 128, (COUNT, c, k), dtype=np.int8)
    P = cp.empty((COUNT, r, c), dtype=np.int32)
    Q = cp.empty((COUNT, r, c), dtype=np.int32)
    R = cp.empty((COUNT, r, c), dtype=np.int8)
    R16 = cp.empty((COUNT, r, c), dtype=np.uint16) if "w16" in KERNELS else R
    ws = cp.empty(64 << 20, dtype=np.uint8)
    lib = lib_call(be, a, b, P)
    lib()
    want = residues(P, COUNT)
    ops = 2.0 * COUNT * r * c * k
    screen, equal, first_s = {}, {}, {}
    runs = candidates(a, b, Q, R, R16, ws)
    for name, (run, dest) in runs.items():
        dest.fill(0)
        t0 = time.perf_counter()
        try:
            run()
            cp.cuda.Device().synchronize()
        except Exception as exc:  # a configuration that cannot build or launch (shared memory, registers)
            screen[name] = f"failed: {type(exc).__name__}: {str(exc)[-400:]}"
            continue
        first_s[name] = time.perf_counter() - t0
        equal[name] = bool(((dest.view(np.int16) if dest.dtype == np.uint16 else dest)
                            == (P if dest.dtype == np.int32 else want)).all())
        screen[name] = statistics.median(timed(run, read, 1)["ms"] for _ in range(SCREEN))
    screen["lib"] = statistics.median(timed(lib, read, 1)["ms"] for _ in range(SCREEN))
    tops = {n: ops / (v * 1e-3) / 1e12 for n, v in screen.items() if isinstance(v, float)}
    print(f"{r}x{c}x{k} screen TOP/s", {n: round(v) for n, v in tops.items()}, equal, flush=True)
    calls = {"lib": lib}
    for kind, keep in (("triton-mod", 1), ("cutlass-i32", 1), ("cutlass-mod", 3), ("cutlass-w16", 2)):
        best = sorted((n for n in tops if n.startswith(kind + ":") and equal.get(n)), key=lambda n: -tops[n])
        calls.update({n: runs[n][0] for n in best[:keep]})
    t_end = time.perf_counter() + WARM_S
    while time.perf_counter() < t_end:
        lib()
    cp.cuda.Device().synchronize()
    samples = turning(calls, ROUNDS, lambda call: timed(call, read, REPEAT))
    sustained = sustained_record(samples, ops * REPEAT)
    print(f"{r}x{c}x{k} sustained", {n: (round(v["tops"]), round(v["vs_lib"], 3), round(v["mhz"]))
                                       for n, v in sustained.items()}, flush=True)
    return {"screen_ms": screen, "screen_tops": tops, "equal": equal, "first_call_s": first_s,
            "sustained": sustained, "samples": samples}


def main() -> None:
    be, read = get_backend("cupy"), nvml()
    settings = " ".join(f"{k}={os.environ[k]}" for k in ("SHAPES", "COUNT", "REPEAT", "ROUNDS", "CONFIGS", "KERNELS")
                        if k in os.environ)
    out = {"script": "results/published/scripts/ozaki2_modular_epilogue.py", "environment": environment(be),
           "triton": triton.__version__, "torch": torch.__version__,
           "command": f"{settings} OUT=dir python3 results/published/scripts/ozaki2_modular_epilogue.py".strip(),
           "count": COUNT, "repeat": REPEAT, "rounds": ROUNDS, "points": {}}
    for shape in os.environ.get("SHAPES", "8192x8192x8192,3072x16384x16384").split(","):
        r, c, k = (int(v) for v in shape.split("x"))
        out["points"][shape] = measure(be, read, r, c, k)
        cp.get_default_memory_pool().free_all_blocks()
        write_json(out, "ozaki2-modular-epilogue.json")


if __name__ == "__main__":
    main()
