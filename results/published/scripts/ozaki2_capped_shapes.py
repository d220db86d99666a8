"""Which tiles a capped scheme II product should cut at 2 FP64 matrices: the library's choice against forced ones.

At N = ``NS`` (default 16384), phi = 1 operands drawn on the device, fast scaling and ``COUNT`` moduli (default 15),
capped at ``CAPS`` FP64 matrices (default 2): a kept :class:`gpu.ozaki2.tiled.TiledPlan` per tile shape of
``SHAPES`` (comma-separated; ``lib``: the library's own cut; ``RxC``: row panels of R rows keeping A's residues and
column tiles of C columns, cut by hand before the first call; a suffix ``:whole`` builds the tile plan with
``gpu.ozaki2.gemms.PANEL`` at the span's rows, so that each span's INT8 GEMM is one call, not panels of 3072 rows),
each called as users call a plan (a new C per call), beside the uncapped ``ozaki2.matmul`` and ``cupy.matmul``,
interleaved (``ozaki2_as_called.interleaved``: loops of ``LOOP`` back-to-back calls, ``ROUNDS`` rounds). Every C must
equal the uncapped C bit for bit (the fast scaling's shifts depend on each line alone). Per shape: its tiles, its
spans' GEMM panels, and one call's phases summed over its tiles (each phase synchronized).

    OUT=dir PYTHONPATH=$PWD:$PWD/results/published/scripts python3 results/published/scripts/ozaki2_capped_shapes.py

Writes ``$OUT/ozaki2-capped-shapes.json``.
"""

import os
import statistics

import cupy as cp
from ozaki2_as_called import fresh_inputs, interleaved
from rounds import write_json

from experiments.core.environment import environment
from gpu import ozaki2
from gpu.backend import get_backend
from gpu.ozaki2 import gemms
from gpu.ozaki2.tiled import TiledPlan

NS = [int(x) for x in os.environ.get("NS", "16384").split(",")]
COUNT = int(os.environ.get("COUNT", "15"))
CAPS = float(os.environ.get("CAPS", "2"))
SHAPES = os.environ.get("SHAPES", "lib,8192x2048,8192x2048:whole").split(",")
ROUNDS = int(os.environ.get("ROUNDS", "10"))
LOOP = int(os.environ.get("LOOP", "2"))


def shaped(be, A, B, n: int, shape: str) -> TiledPlan:
    """A capped plan cut as ``shape`` says, its tile plan built (and its graphs captured) by a first call."""
    plan = TiledPlan(A, B, options={"moduli": COUNT, "workspace": int(8 * CAPS * n * n)}, backend=be)
    cut, _, whole = shape.partition(":")
    if cut != "lib":
        rows, cols = (int(v) for v in cut.split("x"))
        plan._cut(rows, cols)
    default = gemms.PANEL
    try:
        if whole:
            gemms.PANEL = (plan.rows, default[1])
        plan.execute(A, B)
    finally:
        gemms.PANEL = default
    return plan


def described(plan: TiledPlan) -> dict:
    held = plan._held
    spans = None if held is None else [len(g) // COUNT for g in held.part(COUNT).gemms]
    return {"rows": plan.rows, "cols": plan.cols, "tiles": plan.tiles, "reuse_a": plan.reuse, "note": plan.note,
            "gemms_per_span": spans}


def probe(be, tel, n: int) -> dict:
    A, B = fresh_inputs(n)
    base = ozaki2.matmul(A, B, moduli=COUNT, backend=be)
    plans = {shape: shaped(be, A, B, n, shape) for shape in SHAPES}
    point = {"n": n, "cap_matrices": CAPS,
             "bitwise": {s: bool(cp.array_equal(p.execute(A, B), base)) for s, p in plans.items()},
             "cuts": {s: described(p) for s, p in plans.items()}, "phases_ms": {}}
    del base
    for s, p in plans.items():
        phases: dict = {}
        p.run(A, B, None, phases)
        point["phases_ms"][s] = {k: 1e3 * v for k, v in phases.items()}
    calls = {"uncapped": lambda: ozaki2.matmul(A, B, moduli=COUNT, backend=be)}
    calls.update({s: (lambda p=p: p.execute(A, B)) for s, p in plans.items()})
    calls["dgemm"] = lambda: cp.matmul(A, B)
    samples, clocks = interleaved(calls, LOOP, ROUNDS, tel)
    whole, dgemm = statistics.median(samples["uncapped"]), statistics.median(samples["dgemm"])
    point["runs"] = {name: {"ms_per_call": 1e3 * statistics.median(v), "x_dgemm": dgemm / statistics.median(v),
                            "of_uncapped": whole / statistics.median(v), "samples_ms": [1e3 * x for x in v],
                            "telemetry": clocks[name]} for name, v in samples.items()}
    print(n, point["bitwise"], {k: (round(v["ms_per_call"], 2), round(v["of_uncapped"], 4))
                                for k, v in point["runs"].items()}, flush=True)
    for s, ph in point["phases_ms"].items():
        print("   ", s, point["cuts"][s]["rows"], point["cuts"][s]["cols"], point["cuts"][s]["gemms_per_span"],
              {k: round(v, 2) for k, v in ph.items()}, flush=True)
    for p in plans.values():
        p.free()
    return point


def main() -> None:
    be = get_backend("cupy")
    tel = be.telemetry()
    result = {"script": "results/published/scripts/ozaki2_capped_shapes.py", "environment": environment(be),
              "count": COUNT, "rounds": ROUNDS, "loop": LOOP, "points": [probe(be, tel, n) for n in NS]}
    write_json(result, "ozaki2-capped-shapes.json")


if __name__ == "__main__":
    main()
