"""Ozaki II in a capped workspace: how tall a tile's row panels (spans) should be, as called.

A capped product's tile runs the direct layout in row panels ("spans": each span's INT8 GEMMs, then its CRT).
GEMMul8's bytes bound the spans of an uncapped product; a ``workspace=`` cap may hold taller ones
(:func:`gpu.ozaki2.memory.room_rows`, in steps of :data:`gpu.ozaki2.memory.ROOM_STEP`). At N (default 16384),
phi = 1 operands, 15 moduli, fast scaling, for each cap of ``CAPS`` FP64 matrices (default 2, 3), three tile plans
are built: the library's spans (``s1024``), spans in steps of 3072 rows (``s3072``), and GEMMul8's spans only
(``gemmul8``, the rule before the cap could lift them); beside the uncapped product and DGEMM. Each is timed as
called: ``LOOP`` back-to-back ``execute`` calls (graphs replayed) and one synchronise, rounds in turning order
(``ROUNDS``, default 10); each C is checked equal, bit for bit, to the uncapped C.

    OUT=dir PYTHONPATH=$PWD:$PWD/results/published/scripts python3 results/published/scripts/ozaki2_capped_spans.py

JSON to ``$OUT/ozaki2-capped-spans.json``.
"""

import json
import os
import statistics

import cupy as cp
from ozaki2_as_called import fresh_inputs
from rounds import loop_seconds, paired_ratios, turning

from experiments.core.environment import environment
from gpu.backend import get_backend
from gpu.ozaki2 import memory
from gpu.ozaki2.options import Options
from gpu.ozaki2.plan import Plan
from gpu.ozaki2.tiled import TiledPlan

N = int(os.environ.get("N", 16384))
CAPS = [float(c) for c in os.environ.get("CAPS", "2,3").split(",")]
LOOP, ROUNDS = int(os.environ.get("LOOP", 2)), int(os.environ.get("ROUNDS", 10))


def tile_plan(A, B, C, cap: float, variant: str) -> TiledPlan:
    """A capped plan whose tile plan (built by its first call) takes ``variant``'s spans."""
    rows, step = memory.room_rows, memory.ROOM_STEP
    try:
        if variant == "s3072":
            memory.ROOM_STEP = 3072
        elif variant == "gemmul8":
            memory.room_rows = lambda *a, **k: None
        plan = TiledPlan(A, B, out=C, options=Options(moduli=15, workspace=int(cap * 8 * N * N)), backend="cupy")
        plan.execute(A, B, C)
    finally:
        memory.room_rows, memory.ROOM_STEP = rows, step
    return plan


def main() -> None:
    be = get_backend("cupy")
    A, B = fresh_inputs(N)
    outs = {"uncapped": cp.empty((N, N))}
    plans = {"uncapped": Plan(A, B, out=outs["uncapped"], options=Options(moduli=15), backend=be)}
    for cap in CAPS:
        for variant in ("s1024", "s3072", "gemmul8"):
            name = f"capped-{cap:g}-{variant}"
            outs[name] = cp.empty((N, N))
            plans[name] = tile_plan(A, B, outs[name], cap, variant)
    calls = {k: (lambda p=p, C=outs[k]: p.execute(A, B, C)) for k, p in plans.items()}
    calls["dgemm"] = lambda: cp.matmul(A, B)
    for call in calls.values():
        call()
    cp.cuda.Device().synchronize()
    spans = {k: {"tiles": p.tiles, "rows": p.rows, "cols": p.cols, "span_rows": p._held.work.layout.rows,
                 "gemm_rows": sorted({g[2][0].shape[0] for g in p._held.part(15).gemms[0]}),
                 "workspace_gb": p._held.work.layout.nbytes / 1e9}
             for k, p in plans.items() if isinstance(p, TiledPlan)}
    bitwise = {k: bool((C == outs["uncapped"]).all()) for k, C in outs.items()}
    samples = turning(calls, ROUNDS, lambda call: loop_seconds(call, LOOP))
    ms = {k: statistics.median(v) * 1e3 for k, v in samples.items()}
    of = paired_ratios(samples, "uncapped")
    for k in calls:
        print(f"  {k:22s} {ms[k]:8.2f} ms  {of[k]:.4f} of uncapped  {spans.get(k, '')}", flush=True)
    result = {"script": "results/published/scripts/ozaki2_capped_spans.py", "environment": environment(be), "n": N,
              "count": 15, "loop": LOOP, "rounds": ROUNDS, "spans": spans, "bitwise_equal_to_uncapped": bitwise,
              "ms": ms, "of_uncapped": of, "samples_s": samples}
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "ozaki2-capped-spans.json"), "w") as fh:
        json.dump(result, fh, indent=1, default=str)


if __name__ == "__main__":
    main()
