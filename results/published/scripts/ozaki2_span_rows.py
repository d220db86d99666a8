"""Scheme II's row panels ("spans") of the direct layout: how many rows each should have, as called.

The default layout holds every modulus's INT32 product for one span of C's rows at a time, within GEMMul8's
bytes (:func:`gpu.ozaki2.memory.panel_rows`); each span runs its INT8 GEMMs (in :data:`gpu.ozaki2.gemms.PANEL`
panels), then its CRT. At each N of ``NS`` (default 16384, 32768), phi = 1 operands, 15 moduli, fast scaling,
one kept :class:`gpu.ozaki2.plan.Plan` per span height in ``SPANS`` (``library``: the library's rule; a number:
spans of that many rows, each span's GEMMs whole along its rows, the columns cut as the library cuts them; at
32768 only ``SPANS32``, default library and 2048, for memory), beside DGEMM, timed as called: ``LOOP``
back-to-back ``execute`` calls, one synchronise, rounds in turning order (``ROUNDS``, default 10). Each C is
checked equal, bit for bit, to the library plan's.

    OUT=dir PYTHONPATH=$PWD:$PWD/results/published/scripts python3 results/published/scripts/ozaki2_span_rows.py

JSON to ``$OUT/ozaki2-span-rows.json``.
"""

import json
import os
import statistics

import cupy as cp
from ozaki2_as_called import fresh_inputs
from rounds import loop_seconds, paired_ratios, turning

from experiments.core.environment import environment
from gpu.backend import get_backend
from gpu.ozaki2 import gemms, memory
from gpu.ozaki2.options import Options
from gpu.ozaki2.plan import Plan

NS = [int(x) for x in os.environ.get("NS", "16384,32768").split(",")]
SPANS = os.environ.get("SPANS", "library,1024,2048,3072,4096").split(",")
SPANS32 = os.environ.get("SPANS32", "library,2048").split(",")
ROUNDS = int(os.environ.get("ROUNDS", 10))


def plan(A, B, C, span: str) -> Plan:
    """A fast-15 plan whose spans have ``span`` rows (the library's where ``library``)."""
    rows, panel = memory.panel_rows, gemms.PANEL
    try:
        if span != "library":
            memory.panel_rows = lambda *a, r=int(span), **k: r
            gemms.PANEL = (int(span), panel[1])
        return Plan(A, B, out=C, options=Options(moduli=15), backend="cupy")
    finally:
        memory.panel_rows, gemms.PANEL = rows, panel


def point(be, n: int) -> dict:
    A, B = fresh_inputs(n)
    loop = int(os.environ.get("LOOP", 2 if n <= 16384 else 1))
    outs = {s: cp.empty((n, n)) for s in (SPANS if n <= 16384 else SPANS32)}
    plans = {s: plan(A, B, C, s) for s, C in outs.items()}
    calls = {s: (lambda p=p, C=outs[s]: p.execute(A, B, C)) for s, p in plans.items()}
    calls["dgemm"] = lambda: cp.matmul(A, B)
    for call in calls.values():
        call()
        call()
    cp.cuda.Device().synchronize()
    shapes = {s: {"span_rows": p.work.layout.rows, "spans": len(p.part(15).spans),
                  "gemms": sorted({tuple(g[2][2].shape) for span in p.part(15).gemms for g in span})}
              for s, p in plans.items()}
    bitwise = {s: bool((C == outs["library"]).all()) for s, C in outs.items()}
    samples = turning(calls, ROUNDS, lambda call: loop_seconds(call, loop))
    ms = {k: statistics.median(v) * 1e3 for k, v in samples.items()}
    x = paired_ratios(samples, "dgemm")
    for k in calls:
        print(f"  {n} {k:8s} {ms[k]:9.2f} ms  {x[k]:.4f}x DGEMM  {shapes.get(k, '')}", flush=True)
    for p in plans.values():
        p.free()
    return {"n": n, "loop": loop, "shapes": shapes, "bitwise_equal_to_library": bitwise, "ms": ms, "x_dgemm": x,
            "samples_s": samples}


def main() -> None:
    be = get_backend("cupy")
    result = {"script": "results/published/scripts/ozaki2_span_rows.py", "environment": environment(be),
              "rounds": ROUNDS, "points": [point(be, n) for n in NS]}
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "ozaki2-span-rows.json"), "w") as fh:
        json.dump(result, fh, indent=1, default=str)


if __name__ == "__main__":
    main()
