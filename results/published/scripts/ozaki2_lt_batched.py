"""Scheme II's INT8 GEMMs over the moduli: one call per modulus against one strided-batched cublasLt call.

A product's GEMMs at one output shape run once per modulus. Each call's CTA tiles fill the GPU in waves, and a
shape whose tiles are not a whole number of waves leaves SMs idle in its last one (at 3072 x 16384 a 256 x 128 tile
gives 1536 CTAs, 11.6 waves of 132 SMs). One call over all the moduli has the tail once. cuBLAS's own
strided-batched choice ran slower (``ozaki2_batched_probe.py``); here cublasLt's algorithm is picked by its CTA
tile, as the library's route (:mod:`gpu.backend.lt_int8`) picks it.

Per shape ``rows x cols x k`` of ``SHAPES`` and ``COUNT`` moduli (default 15), on random residues laid out as scheme
II lays them (``(count, rows, k)``, ``(count, cols, k)`` INT8, products ``(count, rows, cols)`` INT32), variants:
``gemmex`` (one ``cublasGemmEx`` a modulus), ``lib`` (one library call a modulus: its cublasLt route where it
takes the shape), ``batched-gemmex`` (``cublasGemmStridedBatchedEx``) and ``batched:<tile>`` (one cublasLt call
with the batch in its layouts, the heuristic's first algorithm of that CTA tile, or its first at all for ``h0``;
``TILES``, default ``h0,256x128,128x256``). With ``PANELS=1`` also ``lib-panels`` (one library call a modulus and
output panel, :func:`gpu.ozaki2.gemms.panels`, as the plans tile a product) and ``batched-panels:<tile>`` (one
batched call a row panel); ``PANEL_ROWS=2048,4096``: ``lib-rows<h>``, one library call a modulus and panel of
``h`` rows (the last one shorter). Every product checked equal to ``gemmex``'s bit for bit; samples of all
the moduli's GEMMs by CUDA events with NVML's energy counter, ``ROUNDS`` rounds in turning order; median TOP/s and
joules. JSON to ``$OUT/ozaki2-lt-batched.json``.

    SHAPES=3072x16384x16384 OUT=dir PYTHONPATH=/tmp/site:$PWD:$PWD/results/published/scripts \
        python3 results/published/scripts/ozaki2_lt_batched.py
"""

import os
import statistics

import cupy as cp
import numpy as np
from nvmath.bindings import cublas
from nvmath.bindings import cublasLt as lt
from nvmath.linalg._internal.algo_config_ifc import AlgoConfigInterface
from nvmath.linalg._internal.matmul_desc_ifc import MatmulDescInterface
from nvmath.linalg._internal.matmul_pref_ifc import MatmulPreferenceInterface
from nvmath.linalg._internal.matrix_layout_ifc import MatrixLayoutInterface
from ozaki2_int8_lt import HANDLE, R_8I, R_32I, TILES, energy_meter, label
from rounds import turning, write_json

from experiments.core.environment import environment
from gpu.backend import blas, get_backend
from gpu.ozaki2.gemms import panels

COUNT, ROUNDS = int(os.environ.get("COUNT", 15)), int(os.environ.get("ROUNDS", 10))
PANELS = os.environ.get("PANELS", "") == "1"


def _layout(dtype: int, rows: int, cols: int, ld: int, stride: int) -> int:
    """A column-major layout of ``COUNT`` matrices ``stride`` elements apart."""
    layout = lt.matrix_layout_create(dtype, rows, cols, ld)
    ifc = MatrixLayoutInterface(layout)
    ifc.batch_count, ifc.strided_batch_offset = COUNT, stride
    return layout


def batched_plan(r: int, c: int, k: int, workspace: int, full: int | None = None):
    """(descriptor, layouts, heuristic results, count) of P^T = b a^T over the batch, column-major; ``full``: the
    rows of the whole operand and product whose ``r`` rows a panel takes (the batch strides)."""
    full = full or r
    desc = lt.matmul_desc_create(cublas.ComputeType.COMPUTE_32I, R_32I)
    MatmulDescInterface(desc).transa = 1
    la, lb, lc = _layout(R_8I, k, c, k, c * k), _layout(R_8I, k, r, k, full * k), _layout(R_32I, c, r, c, full * c)
    pref = lt.matmul_preference_create()
    MatmulPreferenceInterface(pref).max_workspace_bytes = workspace
    res, count = lt.MatmulHeuristicResult(16), np.zeros(1, dtype=np.int32)
    lt.matmul_algo_get_heuristic(HANDLE, desc, la, lb, lc, lc, pref, 16, res.ptr, count.ctypes.data)
    return desc, (la, lb, lc), res, int(count[0])


def pick(res, count: int, tile: str) -> int | None:
    if tile == "h0":
        return 0 if count else None
    tiles = (TILES.get(int(AlgoConfigInterface(res[i]).tile_id)) for i in range(count))
    return next((i for i, name in enumerate(tiles) if name == f"TILE_{tile}"), None)


def variants(be, a, b, P, ws) -> tuple[dict, dict]:
    """The calls of every variant on ``P`` and the algorithm each batched one took."""
    count, r, k = a.shape
    c = b.shape[1]
    recipe = blas.gemm_recipe("int8")
    one, zero = np.array(1, np.int32), np.array(0, np.int32)
    routes = be._lt

    def per_modulus(route):
        def run():
            be._lt = route
            for t in range(count):
                be.gemm_ex(a[t], b[t].T, P[t], recipe="int8")
            be._lt = routes
        return run

    def batched_gemmex():
        cublas.gemm_strided_batched_ex(
            be._streams.handle(), 1, 0, c, r, k, one.ctypes.data, b.data.ptr, recipe.cuda_operands, k, c * k,
            a.data.ptr, recipe.cuda_operands, k, r * k, zero.ctypes.data, P.data.ptr, recipe.cuda_output, c, r * c,
            count, recipe.compute, -1)

    def lib_panels():
        for t in range(count):
            for rows, cols in tiles:
                be.gemm_ex(a[t][rows], b[t][cols].T, P[t][rows, cols], recipe="int8")

    calls, taken = {"gemmex": per_modulus(None), "lib": per_modulus(routes), "batched-gemmex": batched_gemmex}, {}
    tiles = panels(r, c) if PANELS else []
    if PANELS:
        calls["lib-panels"] = lib_panels
    for height in (int(h) for h in os.environ.get("PANEL_ROWS", "").split(",") if h):
        def in_rows(height=height):
            for t in range(count):
                for lo in range(0, r, height):
                    rows = slice(lo, min(lo + height, r))
                    be.gemm_ex(a[t][rows], b[t].T, P[t][rows], recipe="int8")
        calls[f"lib-rows{height}"] = in_rows
    groups = {"": [slice(0, r)]}
    if PANELS and all(cols == slice(0, c) for _, cols in tiles):
        groups["-panels"] = [rows for rows, _ in tiles]
    for tile in os.environ.get("TILES", "h0,256x128,128x256").split(","):
        for suffix, spans in groups.items():
            runs = []
            for rows in spans:
                desc, (la, lb, lc), res, n_algo = batched_plan(rows.stop - rows.start, c, k, ws.nbytes, r)
                i = pick(res, n_algo, tile)
                if i is None:
                    break
                taken[f"{tile}{suffix}"] = label(res, i)
                runs.append((desc, la, lb, lc, res[i]["algo"], a[0, rows].data.ptr, P[0, rows].data.ptr))
            if len(runs) < len(spans):
                taken[f"{tile}{suffix}"] = "not offered"
                continue

            def run(runs=runs):
                for desc, la, lb, lc, algo, pa, pc in runs:
                    lt.matmul(HANDLE, desc, one.ctypes.data, b.data.ptr, la, pa, lb, zero.ctypes.data, pc, lc, pc,
                              lc, algo.ctypes.data, ws.data.ptr, ws.nbytes, cp.cuda.get_current_stream().ptr)
            calls[f"batched{suffix}:{tile}"] = run
    return calls, taken


def measure(be, r: int, c: int, k: int, ws, meter) -> dict:
    rng = cp.random.default_rng(r + c + k)
    a = rng.integers(-128, 128, (COUNT, r, k), dtype=np.int8)
    b = rng.integers(-128, 128, (COUNT, c, k), dtype=np.int8)
    want, P = cp.empty((COUNT, r, c), dtype=np.int32), cp.empty((COUNT, r, c), dtype=np.int32)
    calls, taken = variants(be, a, b, P, ws)
    equal = {}
    for name, call in calls.items():
        P.fill(0)
        call()
        if name == "gemmex":
            want[...] = P
        equal[name] = bool((P == want).all())

    def sample(call):
        cp.cuda.Device().synchronize()
        e0 = meter() if meter else 0.0
        t0, t1 = cp.cuda.Event(), cp.cuda.Event()
        t0.record()
        call()
        t1.record()
        t1.synchronize()
        return cp.cuda.get_elapsed_time(t0, t1) * 1e-3, (meter() - e0) if meter else float("nan")
    pairs = turning(calls, ROUNDS, sample)
    ops = 2.0 * COUNT * r * c * k
    secs = {n: [s for s, _ in v] for n, v in pairs.items()}
    return {"tops": {n: ops / statistics.median(v) / 1e12 for n, v in secs.items()},
            "ms": {n: statistics.median(v) * 1e3 for n, v in secs.items()},
            "joules": {n: statistics.median(e for _, e in v) for n, v in pairs.items()},
            "vs_lib": {n: statistics.median(b / s for b, s in zip(secs["lib"], v, strict=True))
                       for n, v in secs.items()},
            "equal": equal, "taken": taken, "samples_ms": {n: [s * 1e3 for s in v] for n, v in secs.items()}}


def main() -> None:
    be, meter = get_backend("cupy"), energy_meter()
    ws = cp.empty(32 << 20, dtype=np.uint8)
    settings = " ".join(f"{k}={os.environ[k]}" for k in ("SHAPES", "COUNT", "ROUNDS", "PANELS", "TILES", "PANEL_ROWS")
                        if k in os.environ)
    out = {"script": "results/published/scripts/ozaki2_lt_batched.py", "environment": environment(be),
           "command": f"{settings} OUT=dir python3 results/published/scripts/ozaki2_lt_batched.py".strip(),
           "count": COUNT, "rounds": ROUNDS, "points": {}}
    for shape in os.environ.get("SHAPES", "3072x16384x16384,16384x16384x16384,8192x2048x16384").split(","):
        r, c, k = (int(v) for v in shape.split("x"))
        point = out["points"][shape] = measure(be, r, c, k, ws, meter)
        print(shape, {n: round(v, 1) for n, v in point["tops"].items()},
              {n: round(v, 3) for n, v in point["vs_lib"].items()}, point["equal"], point["taken"], flush=True)
        cp.get_default_memory_pool().free_all_blocks()
    write_json(out, "ozaki2-lt-batched.json")


if __name__ == "__main__":
    main()
