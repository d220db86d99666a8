"""Scheme II's direct layouts holding INT8 residues (``narrow``) against INT32-sized products, speed and bytes.

Where the INT8 GEMMs write residues (the CUTLASS kernel built), a plan's direct layout now holds its products as
INT8 (:func:`gpu.ozaki2.memory.narrow_products`): a quarter of the products' bytes, so the fused level takes its
whole span where it took spans of a quarter, and level 0 its whole direct layout where it took row panels. Each
run of ``RUNS`` is a kept plan (``ozaki2.Plan``, fast scaling, ``COUNT`` moduli, default 15) at a level:
``L<level>-narrow`` as the library builds it, ``L<level>-wide`` built with :func:`narrow_products` answering
False (the products' INT32 bytes, the residues written into their first quarter: the layout before this change),
``L1-narrow-<rows>`` with the fused level's spans held to ``rows`` rows (as the INT32 layout took at 32768).

``MODE=interleaved`` (default): every plan held at once, ``ROUNDS`` turning rounds of a loop of ``LOOP``
back-to-back ``plan.execute`` calls each beside DGEMM (``cupy.matmul``), paired ratios against the first run.
``MODE=blocks`` (for N = 32768, where one plan's block is 86 GiB): ``CYCLES`` cycles of the runs, each run built,
warmed, timed for ``ROUNDS`` rounds beside DGEMM and freed in turn; each block's ratio to its own DGEMM. Every C is
checked bitwise against the first run's (sampled rows, and the sums of the whole C's bit patterns). Also each
plan's workspace bytes, its span rows and one call's phases (each synchronised). JSON to
``$OUT/ozaki2-narrow-probe.json``.

    NS=16384 OUT=dir PYTHONPATH=/tmp/site:$PWD:$PWD/results/published/scripts \\
        python3 results/published/scripts/ozaki2_narrow_probe.py
    NS=32768 MODE=blocks RUNS=L1-narrow,L1-wide,L1-narrow-4096 ROUNDS=4 LOOP=2 ...
"""

import os
import statistics
from contextlib import ExitStack
from unittest import mock

import cupy as cp
from ozaki2_as_called import inputs, interleaved
from rounds import write_json

from experiments.core.environment import environment
from gpu import ozaki2
from gpu.backend import get_backend
from gpu.ozaki2 import memory

COUNT = int(os.environ.get("COUNT", 15))
RUNS = os.environ.get("RUNS", "L0-wide,L0-narrow,L1-wide,L1-narrow").split(",")
MODE, CYCLES = os.environ.get("MODE", "interleaved"), int(os.environ.get("CYCLES", 2))
ROUNDS, LOOP = int(os.environ.get("ROUNDS", 10)), int(os.environ.get("LOOP", 3))


def build(be, A, B, C, run: str):
    """The kept plan of ``run`` (see the module)."""
    level, kind, *rows = run[1:].split("-")
    with ExitStack() as patches:
        if kind == "wide":
            patches.enter_context(mock.patch.object(memory, "narrow_products", lambda *args: False))
        if rows:
            patches.enter_context(mock.patch.object(memory, "span_rows", lambda half: [int(rows[0])]))
        return ozaki2.Plan(A, B, out=C, options={"moduli": COUNT, "scaling": "fast", "level": int(level)},
                           backend=be)


def fingerprint(C, picks) -> dict:
    """What the bitwise check compares: the sampled rows, and two wrapping sums of every entry's bits (a row block
    at a time, so that no temporary of C's size is made)."""
    sums = [0, 0]
    for lo in range(0, C.shape[0], 4096):
        bits = C[lo:lo + 4096].view(cp.uint64)
        sums[0] += int(bits.sum())
        sums[1] += int((bits * cp.uint64(0x9E3779B97F4A7C15)).sum())
    return {"rows": C[picks].get(), "sums": [s % 2**64 for s in sums]}


def same(x: dict, y: dict) -> bool:
    return x["sums"] == y["sums"] and bool((x["rows"] == y["rows"]).all())


def describe(plan, be, A, B, C) -> dict:
    part, phases = plan.part(COUNT), {}
    plan.run(A, B, C, phases=phases)
    return {"workspace_bytes": plan.work.layout.nbytes, "workspace_matrices": plan.work.layout.nbytes / C.nbytes,
            "span_rows": plan.work.layout.rows, "spans": len(part.spans), "products_dtype": str(part.planes[0].dtype),
            "phases_ms": {k: 1e3 * s for k, s in phases.items()}}


def record(samples, clocks, name, dgemm_name="dgemm") -> dict:
    dgemm = statistics.median(samples[dgemm_name])
    return {"ms_per_call": 1e3 * statistics.median(samples[name]),
            "x_dgemm": dgemm / statistics.median(samples[name]), "dgemm_ms": 1e3 * dgemm,
            "samples_ms": [1e3 * x for x in samples[name]], "telemetry": clocks[name]}


def interleaved_point(be, n, A, B, picks, telemetry) -> dict:
    calls, plans, outs = {"dgemm": lambda: cp.matmul(A, B)}, {}, {}
    for run in RUNS:
        C = outs[run] = cp.empty_like(A)
        p = plans[run] = build(be, A, B, C, run)
        calls[run] = (lambda p=p, C=C: p.execute(A, B, out=C))
    for call in calls.values():
        call()
        call()
    cp.cuda.Device().synchronize()
    samples, clocks = interleaved(calls, LOOP, ROUNDS, telemetry)
    first = fingerprint(outs[RUNS[0]], picks)
    out = {}
    for run in RUNS:
        out[run] = record(samples, clocks, run) | describe(plans[run], be, A, B, outs[run])
        out[run]["bitwise_first"] = same(fingerprint(outs[run], picks), first)
        out[run]["over_first_paired"] = statistics.median(
            f / r for f, r in zip(samples[RUNS[0]], samples[run], strict=True))
    for p in plans.values():
        p.free()
    return out


def blocks_point(be, n, A, B, picks, telemetry) -> dict:
    C, out, first = cp.empty_like(A), {run: [] for run in RUNS}, None
    for _ in range(CYCLES):
        for run in RUNS:
            plan = build(be, A, B, C, run)
            calls = {"dgemm": lambda: cp.matmul(A, B), run: (lambda p=plan: p.execute(A, B, out=C))}
            for call in calls.values():
                call()
            cp.cuda.Device().synchronize()
            samples, clocks = interleaved(calls, LOOP, ROUNDS, telemetry)
            rec = record(samples, clocks, run) | describe(plan, be, A, B, C)
            mark = fingerprint(C, picks)
            first = first or mark
            rec["bitwise_first"] = same(mark, first)
            out[run].append(rec)
            print(n, run, round(rec["ms_per_call"], 2), round(rec["x_dgemm"], 4), rec["span_rows"],
                  round(rec["workspace_matrices"], 2), rec["bitwise_first"],
                  {k: round(v, 1) for k, v in rec["phases_ms"].items()}, flush=True)
            plan.free()
            del plan, calls
            cp.get_default_memory_pool().free_all_blocks()
    return out


def main() -> None:
    be = get_backend("cupy")
    keys = ("NS", "COUNT", "RUNS", "MODE", "CYCLES", "ROUNDS", "LOOP")
    settings = " ".join(f"{k}={os.environ[k]}" for k in keys if k in os.environ)
    out = {"script": "results/published/scripts/ozaki2_narrow_probe.py", "environment": environment(be),
           "command": f"{settings} OUT=dir python3 results/published/scripts/ozaki2_narrow_probe.py".strip(),
           "residue_min_k": be.residue_min_k, "points": []}
    for n in (int(x) for x in os.environ.get("NS", "16384").split(",")):
        ozaki2.PLANS.clear()
        cp.get_default_memory_pool().free_all_blocks()
        A, B = inputs(n)
        picks = cp.arange(0, n, max(1, n // 256))
        point = (blocks_point if MODE == "blocks" else interleaved_point)(be, n, A, B, picks, be.telemetry())
        out["points"].append({"n": n, "mode": MODE, "loop": LOOP, "rounds": ROUNDS, "runs": point})
        if MODE != "blocks":
            print(n, {r: (round(v["ms_per_call"], 2), round(v["x_dgemm"], 4), round(v["over_first_paired"], 4),
                          v["span_rows"], round(v["workspace_matrices"], 2), v["bitwise_first"],
                          {k: round(s, 1) for k, s in v["phases_ms"].items()}) for r, v in point.items()},
                  flush=True)
        write_json(out, "ozaki2-narrow-probe.json")
        del A, B


if __name__ == "__main__":
    main()
