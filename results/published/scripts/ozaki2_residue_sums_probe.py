"""A fused Winograd level's residues and operand sums in one pass (:mod:`gpu.ozaki2.residue_sums`) against the two
passes it replaces (the residue kernel, then a sums pass per modulus and operand).

``PASSES=1`` (default): at each N of ``NS`` (default 16384), fast scaling at 15 moduli on phi = 1 operands drawn on
the device, both operands' residues and sums each way, checked equal bit for bit, timed by CUDA events in ``ROUNDS``
interleaved rounds (default 12), beside the residue kernel alone; with the one-pass kernels' registers and local
memory; ``BLOCKS=2,4``: the one pass also built for those blocks an SM. ``PRODUCT=1`` (default): ``ozaki2.matmul(A,
B, moduli=15, level=1)`` as called with the one pass (``w1``) and with the two passes (``w1-two``, the one pass
turned off while its plan is made and run), level 0 (``w0``) and ``cupy.matmul``, 2 calls a sample in turning
rounds, every C checked equal to level 0's; at N of ``SEPARATE_FROM`` and up (default 32768) the level-1 plans run
one at a time, each beside DGEMM and level 0 is left out (two level-1 plans do not fit beside each other there).
``VARIANTS`` picks the plans (``w1-p<rows>``: level 1 with its INT8 GEMMs in panels of that many rows). JSON to
``$OUT/ozaki2-residue-sums-probe.json``.

    NS=16384 OUT=dir PYTHONPATH=/tmp/site:$PWD:$PWD/results/published/scripts \\
        python3 results/published/scripts/ozaki2_residue_sums_probe.py
"""

import os
import statistics
from contextlib import contextmanager

import cupy as cp
import numpy as np
from ozaki2_as_called import fresh_inputs
from rounds import device_ms, loop_seconds, paired_ratios, turning, write_json

from experiments.core.environment import environment
from gpu import ozaki2
from gpu.backend import get_backend
from gpu.ozaki2 import fused_level, gemms, residue_sums
from gpu.ozaki2.kernels import CudaOps
from gpu.ozaki2.moduli import moduli_table

ROUNDS = int(os.environ.get("ROUNDS", 12))


@contextmanager
def two_passes(on: bool):
    """The one pass turned off (``CudaOps.residues_and_sums`` declines) while the block runs, where ``on``."""
    kept = CudaOps.residues_and_sums
    if on:
        CudaOps.residues_and_sums = lambda self, *a: False
    try:
        yield
    finally:
        CudaOps.residues_and_sums = kept


@contextmanager
def panel_rows(name: str):
    """A ``w1-p<rows>`` variant: level 1 with its INT8 GEMMs in panels of that many rows while it is planned."""
    kept = gemms.PANEL, fused_level.SHORT_K_PANEL
    if name.startswith("w1-p"):
        gemms.PANEL = fused_level.SHORT_K_PANEL = (int(name[4:]), kept[0][1])
    try:
        yield
    finally:
        gemms.PANEL, fused_level.SHORT_K_PANEL = kept


def passes(be, n: int) -> dict:
    A, B = fresh_inputs(n)
    family, table = be.ops("ozaki2"), moduli_table(15)
    sides = []
    for X, side in ((A, "a"), (B.T, "b")):
        stats = family.line_stats(X)
        sides.append((X, family.shifts(stats, table), stats.e, side))
    bufs = {way: [(cp.empty((15, n, n), np.int8), cp.empty((15, 4, n // 2, n // 2), np.int8)) for _ in sides]
            for way in ("one", "two")}

    def run(way):
        def go():
            for (X, shifts, exps, side), (res, sums) in zip(sides, bufs[way], strict=True):
                if way == "one":
                    assert family.residues_and_sums(X, shifts, exps, table, n, n, res, sums, side)
                elif way == "two":
                    family.residues(X, shifts, exps, table, n, n, out=res)
                    fused_level.form_sums(be, res, sums, table.moduli, side)
                else:
                    family.residues(X, shifts, exps, table, n, n, out=res)
        return go
    calls = {"one-pass": run("one"), "two-passes": run("two"), "residues-only": run("residues")}
    bufs["residues"] = bufs["two"]
    for blocks in (int(b) for b in os.environ.get("BLOCKS", "").split(",") if b):
        def built(blocks=blocks):
            for (X, shifts, exps, side), (res, sums) in zip(sides, bufs["one"], strict=True):
                residue_sums.residues_and_sums(X, shifts, exps, table, n, n, res, sums, side, blocks)
        calls[f"one-pass-blocks{blocks}"] = built
    for call in calls.values():
        call()
    equal = all(bool((x == y).all()) for o, t in zip(bufs["one"], bufs["two"], strict=True) for x, y in zip(o, t))
    ms = turning(calls, ROUNDS, device_ms)
    built = [residue_sums.BLOCKS] + [int(b) for b in os.environ.get("BLOCKS", "").split(",") if b]
    attrs = {f"{side}-blocks{b}": {k: v for k, v in residue_sums._kernel(table.moduli, side, b).attributes.items()
                                   if k in ("num_regs", "local_size_bytes", "shared_size_bytes")}
             for side in ("a", "b") for b in built}
    return {"bitwise_equal": equal, "ms": {k: statistics.median(v) for k, v in ms.items()},
            "samples_ms": ms, "kernel": attrs}


def product(be, n: int, separate: bool) -> dict:
    A, B = fresh_inputs(n)
    outs, plans = {}, {}
    names = os.environ.get("VARIANTS", "w1,w1-two" if separate else "w0,w1,w1-two").split(",")
    results = {"ms": {}, "x_dgemm": {}, "bitwise_vs_first": {}, "samples_ms": {}}
    groups = [[name] for name in names] if separate else [names]
    first = None
    for group in groups:
        calls = {}
        for name in group:
            outs[name] = cp.empty((n, n))
            with two_passes(name == "w1-two"), panel_rows(name):
                plans[name] = ozaki2.Plan(A, B, out=outs[name], backend=be,
                                          options=ozaki2.Options(moduli=15, level=0 if name == "w0" else 1))

            def call(p=plans[name], C=outs[name], name=name):
                with two_passes(name == "w1-two"):
                    p.execute(A, B, C)
            calls[name] = call
            for _ in range(3):
                call()
        calls["dgemm"] = lambda: cp.matmul(A, B)
        samples = {k: [t * 1e3 for t in v] for k, v in turning(calls, ROUNDS, lambda c: loop_seconds(c, 2)).items()}
        ratios = paired_ratios(samples, "dgemm")
        for name in group:
            first = outs[name] if first is None else first
            results["ms"][name] = statistics.median(samples[name])
            results["x_dgemm"][name] = ratios[name]
            results["samples_ms"][name] = samples[name]
            results["bitwise_vs_first"][name] = bool((outs[name] == first).all())
            results["samples_ms"][f"dgemm-{name}" if separate else "dgemm"] = samples["dgemm"]
            if separate:
                plans.pop(name).free()
                first = first.copy() if outs[name] is first else first
                del outs[name]
                cp.get_default_memory_pool().free_all_blocks()
    if not separate:
        results["paired"] = paired_ratios({k: results["samples_ms"][k] for k in names},
                                          "w1-two" if "w1-two" in names else names[0])
    for p in plans.values():
        p.free()
    return results


def main() -> None:
    be = get_backend("cupy")
    names = ("NS", "ROUNDS", "PASSES", "PRODUCT", "SEPARATE_FROM", "BLOCKS", "VARIANTS")
    settings = " ".join(f"{k}={os.environ[k]}" for k in names if k in os.environ)
    out = {"script": "results/published/scripts/ozaki2_residue_sums_probe.py", "environment": environment(be),
           "command": f"{settings} OUT=dir python3 results/published/scripts/ozaki2_residue_sums_probe.py".strip(),
           "points": {}}
    separate_from = int(os.environ.get("SEPARATE_FROM", 32768))
    for n in (int(x) for x in os.environ.get("NS", "16384").split(",")):
        point = out["points"][n] = {}
        if os.environ.get("PASSES", "1") == "1":
            point["passes"] = passes(be, n)
            print(n, {k: point["passes"][k] for k in ("bitwise_equal", "ms", "kernel")}, flush=True)
        if os.environ.get("PRODUCT", "1") == "1":
            point["product"] = product(be, n, n >= separate_from)
            print(n, {k: v for k, v in point["product"].items() if k != "samples_ms"}, flush=True)
        write_json(out, "ozaki2-residue-sums-probe.json")


if __name__ == "__main__":
    main()
