"""Scheme II's INT8 GEMM tiles under the 700 W cap: does a span's GEMM cut into narrower column tiles run faster?

Under Nsight Compute (clocks free, one kernel at a time) cuBLAS's 128 x 256 INT8 kernel, which it takes for a
direct-layout span of 3072 x 16384 (output rows x columns, k = 16384), ran 8% faster than the 128 x 128 one it
takes for the capped product's 2048 x 4096 spans. But fifteen GEMMs back to back at the power cap ranked the
other way: 128 x 128 on outputs of 4096-16384 rows by 2048-4096 columns at 1380-1410 TOP/s, 128 x 256 on 3072
x 16384 at 1357. The INT8 GEMMs are exact, so any tiling gives the same bits; this probe asks what the whole
product gets. At each N of ``NS`` (default 16384), phi = 1 operands, 15 moduli, fast scaling, it builds one kept
:class:`gpu.ozaki2.plan.Plan` per GEMM tile shape (``gpu.ozaki2.gemms.PANEL`` set before the plan is built;
``PANELS``, default 3072:16384 (the library's), 3072:8192, 3072:4096, 3072:2048), and times each as called: a
loop of ``LOOP`` back-to-back ``Plan.execute`` calls (graphs replayed), one synchronise, rounds in turning order
(``ROUNDS``, default 10), beside DGEMM; a plan per Winograd level of ``LEVELS`` (default 0) and panel. Each plan's C is
checked equal, bit for bit, to the library's.

    OUT=dir PYTHONPATH=$PWD:$PWD/results/published/scripts python3 results/published/scripts/ozaki2_gemm_tiles_probe.py

JSON to ``$OUT/ozaki2-gemm-tiles-probe.json``.
"""

import os
import statistics

import cupy as cp
from ozaki2_as_called import fresh_inputs
from rounds import loop_seconds, paired_ratios, turning, write_json

from experiments.core.environment import environment
from gpu.backend import get_backend
from gpu.ozaki2 import gemms
from gpu.ozaki2.options import Options
from gpu.ozaki2.plan import Plan

NS = [int(x) for x in os.environ.get("NS", "16384").split(",")]
PANELS = [tuple(int(v) for v in p.split(":")) for p in
          os.environ.get("PANELS", "3072:16384,3072:8192,3072:4096,3072:2048").split(",")]
ROUNDS = int(os.environ.get("ROUNDS", "10"))
#: The Winograd levels of the plans (``LEVELS``, comma-separated; 1: the fused level's 7 half-size products per
#: modulus, each tiled by the panels asked for): a plan per level and panel.
LEVELS = [int(x) for x in os.environ.get("LEVELS", "0").split(",")]
LOOP = int(os.environ.get("LOOP", "3"))


def sample(be, tel, run) -> dict:
    """Seconds per call of LOOP back-to-back calls and one synchronise, with NVML's state after it."""
    return {"s": loop_seconds(run, LOOP), "state": tel.read().as_dict() if tel is not None else None}


def probe(be, tel, n: int) -> dict:
    A, B = fresh_inputs(n)
    default, plans, outs = gemms.PANEL, {}, {}
    try:
        for level in LEVELS:
            for rows, cols in PANELS:
                gemms.PANEL = (rows, cols)
                name = f"panel-{rows}x{cols}" + (f"-level-{level}" if LEVELS != [0] else "")
                outs[name] = cp.empty((n, n))
                options = Options(moduli=15, scaling="fast", level=level)
                plans[name] = Plan(A, B, out=outs[name], options=options, backend=be)
    finally:
        gemms.PANEL = default
    calls = {name: (lambda p=p, C=outs[name]: p.execute(A, B, C)) for name, p in plans.items()}
    calls["dgemm"] = lambda: cp.matmul(A, B)
    for run in calls.values():
        run()
    first = next(iter(outs.values()))
    bitwise = {name: bool((C == first).all()) for name, C in outs.items()}
    samples = turning(calls, ROUNDS, lambda call: sample(be, tel, call))
    med = {name: statistics.median(s["s"] for s in got) for name, got in samples.items()}
    point = {"n": n, "bitwise_equal_to_first": bitwise,
             "gemms_per_modulus": {name: len(p.part(15).gemms[0]) // 15 for name, p in plans.items()},
             "ms": {k: v * 1e3 for k, v in med.items()},
             "x_dgemm": paired_ratios({k: [s["s"] for s in got] for k, got in samples.items()}, "dgemm"),
             "samples": samples}
    print(n, bitwise, {k: round(v, 2) for k, v in point["ms"].items()},
          {k: round(v, 4) for k, v in point["x_dgemm"].items()}, flush=True)
    for p in plans.values():
        p.free()
    return point


def main() -> None:
    be = get_backend("cupy")
    tel = be.telemetry()
    result = {"script": "results/published/scripts/ozaki2_gemm_tiles_probe.py", "environment": environment(be),
              "levels": LEVELS, "rounds": ROUNDS, "loop": LOOP, "points": [probe(be, tel, n) for n in NS]}
    write_json(result, "ozaki2-gemm-tiles-probe.json")


if __name__ == "__main__":
    main()
