"""Scheme II's INT8 GEMMs through cublasLt's own algorithms instead of ``cublasGemmEx``'s choice.

``MODE=gemms``: per output shape of ``SHAPES`` (rows x columns, k = 16384; P = a @ b.T, int8 to int32, as a span of
the direct layout computes it), every algorithm cublasLt's heuristic offers (up to 32, with a 64 MiB workspace),
each checked equal to ``cublasGemmEx``'s result and timed beside it: samples of 15 GEMMs back to back, CUDA events,
8 rounds in turning order; TOP/s, median. ``MODE=product``: whole products at each N of ``NS`` (``VARIANTS``,
default ``uncapped,capped2``: fast-15 ``uncapped``; ``capped2`` at 2 FP64 matrices of workspace; ``auto``, the
defaults' ``moduli="auto"``; ``f14``, fast-14; ``w1``, fast-15 at Winograd level 1; ``ozaki1``, ``gpu.ozaki.matmul``
with 7 INT8 slices; ``panel<c>``, fast-15 with its GEMMs in panels of 3072 x c; ``c2m`` and ``c3m``, the complex
plans' defaults on A + iB and B - iA), each on every route of ``ROUTES`` (default ``gemmex,lib``): ``gemmex`` sends
every INT8 GEMM to ``cublasGemmEx``; ``lib`` is the library's route (:mod:`gpu.backend.lt_int8`);
``tiles:<a>/<b>[@<k>]`` the library's route preferring those CTA tiles (from an inner dimension of k on); ``lt:<i>``
every INT8 GEMM through cublasLt's heuristic algorithm ``i`` for its shape, ``lt:<m>x<n>`` through its first
algorithm of that CTA tile (else algorithm 0), 32 MiB of workspace. The backend's route is set before each call
(plans, graphs and eager paths alike). Beside DGEMM, as called (2 calls a sample, ``ROUNDS`` rounds in turning
order, default 10), each C checked equal to the first route's, with the energy of each sample (NVML's total energy
counter, joules a call) beside its time: at the 700 W cap time follows energy.

    MODE=gemms OUT=dir PYTHONPATH=$PWD:$PWD/results/published/scripts \
        python3 results/published/scripts/ozaki2_int8_lt.py

JSON to ``$OUT/ozaki2-int8-lt-<mode>.json``. Needs nvmath-python.
"""

import json
import os
import statistics
from contextlib import contextmanager

import cupy as cp
import numpy as np
from nvmath.bindings import cublas
from nvmath.bindings import cublasLt as lt
from nvmath.linalg._internal.algo_config_ifc import AlgoConfigInterface
from nvmath.linalg._internal.matmul_desc_ifc import MatmulDescInterface
from nvmath.linalg._internal.matmul_pref_ifc import MatmulPreferenceInterface
from ozaki2_as_called import fresh_inputs
from rounds import loop_seconds, paired_ratios, turning

from experiments.core.environment import environment
from gpu import ozaki
from gpu.backend import get_backend
from gpu.backend.cupy_backend import CupyBackend
from gpu.backend.lt_int8 import Int8Routes, Preference
from gpu.ozaki2 import gemms as int8_gemms
from gpu.ozaki2.complex_plan import Plan as ComplexPlan
from gpu.ozaki2.options import Options
from gpu.ozaki2.plan import Plan
from gpu.ozaki2.tiled import TiledPlan

K, R_8I, R_32I = 16384, 3, 10
HANDLE = lt.create()
TILES = {int(t): t.name for t in lt.MatmulTile}


def algorithms(transa, transb, m, n, k, lda, ldb, ldc, workspace: int, limit: int):
    """(descriptor, layouts of A, B and C, heuristic results, count) of an int8 x int8 -> int32 column-major call."""
    desc = lt.matmul_desc_create(cublas.ComputeType.COMPUTE_32I, R_32I)
    d = MatmulDescInterface(desc)
    d.transa, d.transb = transa, transb
    la = lt.matrix_layout_create(R_8I, *((k, m) if transa else (m, k)), lda)
    lb = lt.matrix_layout_create(R_8I, *((n, k) if transb else (k, n)), ldb)
    lc = lt.matrix_layout_create(R_32I, m, n, ldc)
    pref = lt.matmul_preference_create()
    MatmulPreferenceInterface(pref).max_workspace_bytes = workspace
    res, count = lt.MatmulHeuristicResult(limit), np.zeros(1, dtype=np.int32)
    lt.matmul_algo_get_heuristic(HANDLE, desc, la, lb, lc, lc, pref, limit, res.ptr, count.ctypes.data)
    return desc, la, lb, lc, res, int(count[0])


def issue(plan, i: int, a: int, b: int, c: int, beta: int, ws) -> None:
    desc, la, lb, lc, res, _ = plan
    al, bt = np.array(1, np.int32), np.array(beta, np.int32)
    lt.matmul(HANDLE, desc, al.ctypes.data, a, la, b, lb, bt.ctypes.data, c, lc, c, lc, res[i]["algo"].ctypes.data,
              ws.data.ptr, ws.nbytes, cp.cuda.get_current_stream().ptr)


def label(res, i: int) -> str:
    cfg = AlgoConfigInterface(res[i])
    return (f"h{i}-{TILES.get(int(cfg.tile_id), cfg.tile_id)}-stages{cfg.stages_id}-splitk{cfg.splitk_num}"
            f"-cluster{cfg.cluster_shape_id}")


def gemms(be) -> dict:
    ws, out = cp.empty(64 << 20, dtype=np.uint8), {}
    for s, c in (tuple(int(v) for v in p.split("x")) for p in
                 os.environ.get("SHAPES", "3072x4096,3072x16384,1024x4096,2048x4096,1024x16384").split(",")):
        rng = cp.random.default_rng(1)
        a, b = (rng.integers(-127, 128, size=(r, K), dtype=np.int8) for r in (s, c))
        want, got = cp.empty((s, c), dtype=np.int32), cp.empty((s, c), dtype=np.int32)
        plan = algorithms(1, 0, c, s, K, K, K, c, ws.nbytes, 32)
        calls = {"gemm_ex": lambda a=a, b=b, want=want: be.gemm_ex(a, b.T, want, recipe="int8")}
        calls.update({label(plan[4], i): (lambda i=i, a=a, b=b, got=got, p=plan: issue(p, i, b.data.ptr, a.data.ptr,
                                                                                       got.data.ptr, 0, ws))
                      for i in range(plan[5])})
        equal = {}
        for name, call in calls.items():
            got.fill(0)
            call()
            equal[name] = name == "gemm_ex" or bool((got == want).all())

        def sample(call, s=s, c=c) -> float:
            e0, e1 = cp.cuda.Event(), cp.cuda.Event()
            e0.record()
            for _ in range(15):
                call()
            e1.record()
            e1.synchronize()
            return 2.0 * s * c * K * 15 / (cp.cuda.get_elapsed_time(e0, e1) * 1e-3) / 1e12
        tops = {k: statistics.median(v) for k, v in turning(calls, 8, sample).items()}
        out[f"{s}x{c}"] = {"tops": tops, "equal": equal}
        print(f"{s}x{c}", {k: round(v, 1) for k, v in sorted(tops.items(), key=lambda x: -x[1])}, flush=True)
    return out


def pick(spec: str):
    """The heuristic index a route's ``spec`` takes from a shape's results: an index, or the first of a CTA tile."""
    if spec.isdigit():
        return lambda res, count: min(int(spec), count - 1)
    return lambda res, count: next((i for i in range(count) if TILES.get(int(AlgoConfigInterface(res[i]).tile_id))
                                    == f"TILE_{spec}"), 0)


def lt_route(real, choose, ws, offered: int, chosen: dict):
    """A ``CupyBackend._gemm_ex`` whose INT8 GEMMs run through the cublasLt algorithm ``choose`` picks for their
    shape (the heuristic offered ``offered`` bytes of workspace, each call given ``ws``), planned once per
    shape and named in ``chosen``; other recipes go to ``real``."""
    kept = {}

    def through_lt(self, recipe, call, beta, arrays):
        if recipe.name != "int8":
            return real(self, recipe, call, beta, arrays)
        key = (call.transa, call.transb, call.m, call.n, call.k, call.lda, call.ldb, call.ldc)
        if key not in kept:
            plan = algorithms(*key, offered, 16)
            kept[key] = (plan, choose(plan[4], plan[5]))
            chosen["x".join(map(str, key[2:5]))] = label(plan[4], kept[key][1])
        issue(kept[key][0], kept[key][1], call.a, call.b, call.c, int(beta), ws)
    return through_lt


def routed(be, route: str, ws, chosen: dict):
    """(the backend's INT8 route object, its ``_gemm_ex``) for a route of ``ROUTES`` (see the module)."""
    real = CupyBackend._gemm_ex
    if route.startswith("lt:"):
        return None, lt_route(real, pick(route[3:]), ws, ws.nbytes, chosen)
    if route == "gemmex":
        return None, real
    tiles, _, min_k = route.removeprefix("tiles:").partition("@")
    table = None if route == "lib" else {"9.0": Preference(tuple(tiles.split("/")), int(min_k or 0))}
    return Int8Routes(be.xp, be._streams, table), real


@contextmanager
def using(be, lt_obj, gemm_ex):
    """The backend's INT8 route and ``_gemm_ex`` set to a route's while the block runs."""
    real, be._lt, CupyBackend._gemm_ex = CupyBackend._gemm_ex, lt_obj, gemm_ex
    try:
        yield
    finally:
        CupyBackend._gemm_ex = real


@contextmanager
def panel_columns(name: str):
    """A ``panel<c>`` variant: fast-15 uncapped with its INT8 GEMMs cut into panels of 3072 x c while it is planned."""
    kept = int8_gemms.PANEL
    if name.startswith("panel"):
        int8_gemms.PANEL = (kept[0], int(name[5:]))
    try:
        yield
    finally:
        int8_gemms.PANEL = kept


VARIANTS = {"uncapped": {"moduli": 15}, "f14": {"moduli": 14}, "capped2": {"moduli": 15, "workspace": 16}, "auto": {},
            "w1": {"moduli": 15, "level": 1}}


def energy_meter():
    """Joules the device has used so far (NVML's total energy counter), or None without NVML."""
    try:
        import pynvml
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(cp.cuda.Device().id)
        return lambda: pynvml.nvmlDeviceGetTotalEnergyConsumption(h) / 1e3
    except Exception:  # noqa: BLE001 - a probe without NVML keeps its times
        return None


def timed(meter, loop: int):
    """A sample: (seconds a call, joules a call) of ``loop`` calls back to back, as called."""
    def sample(call):
        cp.cuda.Device().synchronize()
        e0 = meter() if meter else 0.0
        s = loop_seconds(call, loop)
        return s, ((meter() - e0) / loop if meter else float("nan"))
    return sample


def product(be) -> dict:
    ws, meter = cp.empty(32 << 20, dtype=np.uint8), energy_meter()
    routes, names = os.environ.get("ROUTES", "gemmex,lib").split(","), os.environ.get("VARIANTS", "uncapped,capped2")
    out = {}
    for n in (int(x) for x in os.environ.get("NS", "16384,8192").split(",")):
        A, B = fresh_inputs(n)
        chosen = {r: {} for r in routes}
        setups = {r: routed(be, r, ws, chosen[r]) for r in routes}
        plans, outs, calls, Ac, Bc = {}, {}, {}, None, None
        for name in names.split(","):
            kw = dict(VARIANTS.get(name, {"moduli": 15}))
            for route, (lt_obj, gemm_ex) in setups.items():
                key = f"{name}-{route}"
                outs[key] = cp.empty((n, n))
                with using(be, lt_obj, gemm_ex), panel_columns(name):
                    if name in ("c2m", "c3m"):
                        if Ac is None:
                            Ac, Bc = A + 1j * B, B - 1j * A
                        outs[key] = cp.empty((n, n), dtype=np.complex128)
                        plans[key] = ComplexPlan(Ac, Bc, out=outs[key], scheme=name[1:], backend=be)
                    elif name == "ozaki1":
                        plans[key] = ozaki.Plan(A, B, out=outs[key], backend=be,
                                                options=ozaki.Options(slice_format="int8", slices=7))
                    else:
                        if "workspace" in kw:
                            kw["workspace"] = 16 * n * n
                        plans[key] = (TiledPlan if "workspace" in kw else Plan)(A, B, out=outs[key],
                                                                               options=Options(**kw), backend=be)

                complex_ = name in ("c2m", "c3m")

                def call(p=plans[key], C=outs[key], A=Ac if complex_ else A, B=Bc if complex_ else B,
                         lt_obj=lt_obj, gemm_ex=gemm_ex):
                    with using(be, lt_obj, gemm_ex):
                        p.execute(A, B, C)
                calls[key] = call
                for _ in range(3):
                    call()
        for route, (lt_obj, _) in setups.items():
            for device_route in (lt_obj._routes.values() if lt_obj is not None else ()):
                chosen[route].update({"x".join(map(str, key[2:5])): plan.tile if plan else "gemmex"
                                      for key, plan in (device_route._plans if device_route else {}).items()})
        calls["dgemm"] = lambda A=A, B=B: cp.matmul(A, B)
        pairs = turning(calls, int(os.environ.get("ROUNDS", 10)), timed(meter, 2))
        samples = {k: [t for t, _ in v] for k, v in pairs.items()}
        out[n] = {"ms": {k: statistics.median(v) * 1e3 for k, v in samples.items()},
                  "joules": {k: statistics.median(e for _, e in v) for k, v in pairs.items()},
                  "x_dgemm": paired_ratios(samples, "dgemm"),
                  "bitwise": {k: bool((C == outs[f"{k.rsplit('-', 1)[0]}-{routes[0]}"]).all())
                              for k, C in outs.items()},
                  "chosen": chosen, "counts": {k: getattr(p, "last_count", None) for k, p in plans.items()},
                  "samples_ms": {k: [t * 1e3 for t in v] for k, v in samples.items()}}
        print(n, {k: out[n][k] for k in ("ms", "joules", "x_dgemm", "bitwise", "chosen", "counts")}, flush=True)
        for p in plans.values():
            p.free()
        del plans, outs, calls
    return out


def main() -> None:
    be, mode = get_backend("cupy"), os.environ.get("MODE", "gemms")
    result = {"script": "results/published/scripts/ozaki2_int8_lt.py", "mode": mode, "environment": environment(be),
              "points": gemms(be) if mode == "gemms" else product(be)}
    with open(os.path.join(os.environ.get("OUT", "/tmp"), f"ozaki2-int8-lt-{mode}.json"), "w") as fh:
        json.dump(result, fh, indent=1, default=str)


if __name__ == "__main__":
    main()
