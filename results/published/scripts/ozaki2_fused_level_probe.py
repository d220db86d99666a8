"""Probe: one Winograd level over the residues in its fused form, against level 0, as called, on the H200.

The level passes (``gpu.ozaki2.winograd``, which ``ozaki2.matmul(..., level=1)`` ran on every shape before
``gpu.ozaki2.fused_level``) make three passes of their own per modulus (A's sums, B's sums, the output blocks from
the 7 products) and reduce every modulus's output to INT8 planes. The fused form, built here by hand before the
library had it, keeps no planes: the 7 INT32 products of every modulus stay whole, and the CRT reads them
and combines each output block as it reads (C11 = M1 + M2, C12 = M1 + M6 + M5 + M3, C21 = M1 + M6 + M7 - M4,
C22 = M1 + M6 + M7 + M5, exact in float64, each reduced by ``residue_word``), so each modulus costs its 7 GEMMs,
one sums pass per operand and 7/4 of the CRT's reads. This script builds that form from a level-0 plan's own
scaling and residues (the sums into buffers kept between calls, the 7 products by planned INT8 GEMMs whole or in
panels, the CRT with 2 or 4 columns a thread; since the library took this form, its own pieces:
``gpu.ozaki2.fused_level.form_sums`` and ``operands``, ``gpu.ozaki2.crt_kernels.crt_level``) and times it beside
the level-0 plan and DGEMM:

* as called: ``LOOP`` back-to-back calls, one synchronise, ``ROUNDS`` rounds in turning order (kept buffers,
  eager launches: its host time stays far below its device time);
* its passes alone by CUDA events (median of 3), beside the level-0 plan's phases;
* C bitwise the level-0 plan's C (the same residues modulo every modulus feed the same CRT).

Variants (``VARIANTS``): the 7 GEMMs in the library's panels (3072 rows) or whole; the CRT with 2 or 4 columns
a thread. ``SPAN``: the products' rows held at once (default all N/2; as the direct layout's row panels, each
span's GEMMs then its CRT). ``N`` (default 16384), ``COUNTS`` (default 14,15). At N = 16384 and 15 moduli the
products take 28 GB, the sums 8 GB.

    OUT=dir PYTHONPATH=$PWD:$PWD/results/published/scripts python3 results/published/scripts/ozaki2_fused_level_probe.py

JSON to ``$OUT/ozaki2-fused-level-probe.json``.
"""

import json
import os
import statistics

import cupy as cp
from ozaki2_as_called import fresh_inputs
from rounds import loop_seconds, turning

from experiments.core.environment import environment
from gpu.backend import get_backend
from gpu.ozaki2.crt_kernels import crt_level
from gpu.ozaki2.fused_level import form_sums, operands
from gpu.ozaki2.gemms import panels, planned, run_planned
from gpu.ozaki2.ops import ops
from gpu.ozaki2.options import Options
from gpu.ozaki2.plan import Plan

N = int(os.environ.get("N", 16384))
COUNTS = tuple(int(c) for c in os.environ.get("COUNTS", "14,15").split(","))
ROUNDS, LOOP = int(os.environ.get("ROUNDS", 10)), int(os.environ.get("LOOP", 2))
VARIANTS = os.environ.get("VARIANTS", "panels-vec2,panels-vec4,whole-vec2,whole-vec4").split(",")
SPAN = int(os.environ.get("SPAN", N // 2))


class Fused:
    """Level 1 in its fused form on a level-0 plan's scaling and residues, into kept buffers."""

    def __init__(self, be, plan: Plan, A, B, C, prod, sums_a, sums_b, whole: bool, vec: int) -> None:
        self.be, self.plan, self.A, self.B, self.C, self.vec = be, plan, A, B, C, vec
        count = plan.fixed
        self.part = part = plan.part(count)
        self.family = ops(be)
        self.h, w = plan.m // 2, plan.n // 2
        self.prod, self.sums_a, self.sums_b = prod[:count], sums_a[:count], sums_b[:count]
        self.spans = [(r, min(r + SPAN, self.h)) for r in range(0, self.h, SPAN)]
        self.gemms = [[] for _ in self.spans]
        for t in range(count):
            _, _, pairs = operands(part.res_a[t], part.res_b[t], self.sums_a[t], self.sums_b[t])
            for number, (r0, r1) in enumerate(self.spans):
                tiles = [(slice(0, r1 - r0), slice(0, w))] if whole else panels(r1 - r0, w, plan.m)
                for p, (x, y) in enumerate(pairs):
                    self.gemms[number] += planned(be, x[r0:r1], y, self.prod[t, p, :r1 - r0], tiles)

    def __call__(self, events: dict | None = None):
        plan, family, part, A, B, C = self.plan, self.family, self.part, self.A, self.B, self.C
        mark = _marker(events)
        _, sa, sb, rows, cols = plan._scaling(family, A, B)
        family.residues(A, sa, rows.e, part.table, plan.m, plan.ldk, out=part.res_a)
        family.residues(B.T, sb, cols.e, part.table, plan.n_pad, plan.ldk, out=part.res_b)
        mark("scaling+residues")
        form_sums(self.be, part.res_a, self.sums_a, part.table.moduli, "a")
        form_sums(self.be, part.res_b, self.sums_b, part.table.moduli, "b")
        mark("sums")
        for (r0, r1), gemms in zip(self.spans, self.gemms, strict=True):
            run_planned(self.be, gemms)
            mark("gemms")
            crt_level(self.prod[:, :, :r1 - r0], part.table, sa, sb, C, slice(r0, r1), self.h, self.vec)
            mark("crt")
        family.fix_nonfinite(A, B, C, rows, cols)
        mark("crt")
        return C


def _marker(events):
    if events is None:
        return lambda name: None
    start = cp.cuda.Event()
    start.record()
    last = [start]

    def mark(name):
        e = cp.cuda.Event()
        e.record()
        e.synchronize()
        events.setdefault(name, [0.0])[-1] += cp.cuda.get_elapsed_time(last[0], e)
        last[0] = e
    return mark


def main() -> None:
    be = get_backend("cupy")
    A, B = fresh_inputs(N)
    h = N // 2
    prod = sums_a = sums_b = None
    result = {"script": "results/published/scripts/ozaki2_fused_level_probe.py", "environment": environment(be),
              "n": N, "span": SPAN, "rounds": ROUNDS, "loop": LOOP, "counts": {}}
    for count in COUNTS:
        C0 = cp.empty((N, N))
        plan = Plan(A, B, out=C0, options=Options(moduli=count), backend=be)
        if prod is None:                       # after the first plan, which takes its workspace first
            prod = cp.empty((max(COUNTS), 7, SPAN, h), dtype=cp.int32)
            sums_a = cp.empty((max(COUNTS), 4, h, h), dtype=cp.int8)
            sums_b = cp.empty((max(COUNTS), 4, h, h), dtype=cp.int8)
        result.setdefault("layout", {})[str(count)] = {"direct": plan.work.direct, "rows": plan.work.layout.rows,
                                                       "bytes": plan.work.layout.nbytes}
        outs, calls, fused = {}, {"level-0": lambda p=plan, C=C0: p.execute(A, B, C)}, {}
        for variant in VARIANTS:
            tiling, vec = variant.split("-vec")
            name = f"fused-{variant}"
            outs[name] = cp.empty((N, N))
            fused[name] = Fused(be, plan, A, B, outs[name], prod, sums_a, sums_b, tiling == "whole", int(vec))
            calls[name] = fused[name]
        D = cp.empty((N, N))
        calls["dgemm"] = lambda D=D: cp.matmul(A, B, out=D)
        for call in calls.values():
            call()
            call()
        cp.cuda.Device().synchronize()
        equal = {k: bool(cp.array_equal(outs[k], C0)) for k in outs}
        print(count, "bitwise level 0:", equal, flush=True)
        samples = turning(calls, ROUNDS, lambda call: loop_seconds(call, LOOP))
        ms = {k: statistics.median(v) * 1e3 for k, v in samples.items()}
        x = {k: ms["dgemm"] / v for k, v in ms.items()}
        phases0: dict = {}
        for _ in range(3):
            once: dict = {}
            plan.run(A, B, C0, phases=once)
            for k, v in once.items():
                phases0.setdefault(k, []).append(v * 1e3)
        passes = {}
        for name, f in fused.items():
            ev: dict = {}
            for _ in range(3):
                for v in ev.values():
                    v.append(0.0)
                f(ev)
            passes[name] = {k: statistics.median(v) for k, v in ev.items()}
        work = 2.0 * 7 * h * h * h * count
        tops = {k: work / (v["gemms"] * 1e-3) / 1e12 for k, v in passes.items()}
        result["counts"][str(count)] = {
            "bitwise_level_0": equal, "ms": ms, "x_dgemm": x, "samples_s": samples,
            "level0_phases_ms": {k: statistics.median(v) for k, v in phases0.items()},
            "fused_passes_ms": passes, "fused_int8_tops": tops}
        for k in ms:
            print(count, k, round(ms[k], 2), "ms", round(x[k], 3), "x dgemm", flush=True)
        print(count, "level-0 phases", result["counts"][str(count)]["level0_phases_ms"], flush=True)
        for k, v in passes.items():
            print(count, k, {p: round(t, 2) for p, t in v.items()}, round(tops[k]), "TOP/s", flush=True)
        plan.free()
        del fused, outs, calls, D
        cp.get_default_memory_pool().free_all_blocks()
        with open(os.path.join(os.environ.get("OUT", "/tmp"), "ozaki2-fused-level-probe.json"), "w") as fh:
            json.dump(result, fh, indent=1, default=str)


if __name__ == "__main__":
    main()
