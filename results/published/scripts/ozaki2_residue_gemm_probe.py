"""Scheme II with its INT8 GEMMs writing residues modulo m (INT8) against writing INT32 products, in one process.

With the CUTLASS kernel built (``gemmlab kernels --build``), a plan's direct layout and fused Winograd level take
:meth:`gpu.backend.Backend.residue_gemm`: each GEMM reduces its products modulo its modulus as it writes them, and
the CRT reads a quarter of the bytes (:func:`gpu.ozaki2.gemms.direct_products`). Here each level of ``LEVELS``
(default 0,1) runs as two kept plans (``ozaki2.Plan``, fast scaling, ``COUNT`` moduli, default 15): one built as
the library builds it (``L<level>-res``), one built while the backend offers no residue GEMM
(``L<level>-i32``: INT32 products from the same kernel's INT32 entry point), beside ``cupy.matmul`` (DGEMM).

At each N of ``NS`` (default 16384): phi = 1 operands (``ozaki2_as_called.inputs``); two warm-up calls of every
run (plans built, graphs captured), then ``ROUNDS`` interleaved rounds (at least 10) of a loop of ``LOOP``
back-to-back ``plan.execute`` calls each (host time included), NVML's readings after each sample; each run's
median, its ratio to DGEMM and, paired by round, the residue plan's speed over the INT32 plan's. Every C is
compared bit for bit with the INT32 plan's at its level and with level 0's; each run's phases (each synchronised:
scaling, residues, sums, gemm, crt) from one call of ``Plan.run(..., phases=)``; the max relative error of the
residue runs on 128 sampled rows against ``exact_matmul`` (DGEMM's too). JSON to
``$OUT/ozaki2-residue-gemm-probe.json``.

    OUT=dir PYTHONPATH=/tmp/site:$PWD:$PWD/results/published/scripts \\
        python3 results/published/scripts/ozaki2_residue_gemm_probe.py
"""

import os
import statistics

import cupy as cp
from ozaki2_as_called import inputs, interleaved
from rounds import write_json

from accuracy.metrics import error_report
from accuracy.reference import exact_matmul
from experiments.core.environment import environment
from experiments.ozaki.bench import sample_rows
from gpu import ozaki2
from gpu.backend import get_backend

COUNT = int(os.environ.get("COUNT", 15))
LEVELS = [int(v) for v in os.environ.get("LEVELS", "0,1").split(",")]
ROUNDS, LOOP = max(10, int(os.environ.get("ROUNDS", 10))), int(os.environ.get("LOOP", 3))


def plan(be, A, B, C, level: int, residues: bool):
    """A kept plan at ``level``; built (its parts made) with the backend's residue GEMM offered or not."""
    options = {"moduli": COUNT, "scaling": "fast", "level": level}
    if residues:
        return ozaki2.Plan(A, B, out=C, options=options, backend=be)
    be.residue_gemm = lambda *args: None
    try:
        return ozaki2.Plan(A, B, out=C, options=options, backend=be)
    finally:
        del be.residue_gemm


def point(be, n: int, telemetry) -> dict:
    ozaki2.PLANS.clear()
    cp.get_default_memory_pool().free_all_blocks()
    A, B = inputs(n)
    calls, outs, plans = {"dgemm": lambda: cp.matmul(A, B)}, {}, {}
    for level in LEVELS:
        for kind in ("res", "i32"):
            name = f"L{level}-{kind}"
            C = outs[name] = cp.empty_like(A)
            p = plans[name] = plan(be, A, B, C, level, kind == "res")
            calls[name] = (lambda p=p, C=C: p.execute(A, B, out=C))
    for call in calls.values():
        call()
        call()
    cp.cuda.Device().synchronize()
    samples, clocks = interleaved(calls, LOOP, ROUNDS, telemetry)
    dgemm = statistics.median(samples["dgemm"])
    out = {"n": n, "loop": LOOP, "count": COUNT, "runs": {}}
    for name, v in samples.items():
        rec = {"ms_per_call": 1e3 * statistics.median(v), "x_dgemm": dgemm / statistics.median(v),
               "samples_ms": [1e3 * x for x in v], "telemetry": clocks[name]}
        if name != "dgemm":
            level, kind = name.split("-")
            rec["res_over_i32_paired"] = statistics.median(i / r for i, r in zip(
                samples[f"{level}-i32"], samples[f"{level}-res"], strict=True))
            rec["equal_i32"] = bool((outs[name] == outs[f"{level}-i32"]).all())
            rec["equal_level0"] = bool((outs[name] == outs[f"L{LEVELS[0]}-i32"]).all())
            rec["products_dtype"] = str(plans[name].part(COUNT).planes[0].dtype)
            phases: dict = {}
            plans[name].run(A, B, outs[name], phases=phases)
            rec["phases_ms"] = {k: 1e3 * s for k, s in phases.items()}
        out["runs"][name] = rec
    picks = cp.asarray(sample_rows(n, 128, 0))
    ref = exact_matmul(A[picks], B, backend=be)
    out["errors"] = {name: error_report(outs[name][picks], ref).max_rel for name in outs if name.endswith("res")}
    out["errors"]["dgemm"] = error_report(cp.matmul(A[picks], B), ref).max_rel
    for p in plans.values():
        p.free()
    print(n, {k: (round(v["ms_per_call"], 2), round(v["x_dgemm"], 4), round(v.get("res_over_i32_paired", 1), 4),
                  v.get("equal_i32"), v.get("equal_level0"), v.get("products_dtype"),
                  {p: round(s, 2) for p, s in v.get("phases_ms", {}).items()}) for k, v in out["runs"].items()},
          out["errors"], flush=True)
    return out


def main() -> None:
    be = get_backend("cupy")
    settings = " ".join(f"{k}={os.environ[k]}" for k in ("NS", "COUNT", "LEVELS", "ROUNDS", "LOOP")
                        if k in os.environ)
    out = {"script": "results/published/scripts/ozaki2_residue_gemm_probe.py", "environment": environment(be),
           "command": f"{settings} OUT=dir python3 results/published/scripts/ozaki2_residue_gemm_probe.py".strip(),
           "rounds": ROUNDS, "points": []}
    for n in (int(x) for x in os.environ.get("NS", "16384").split(",")):
        out["points"].append(point(be, n, be.telemetry()))
        write_json(out, "ozaki2-residue-gemm-probe.json")


if __name__ == "__main__":
    main()
