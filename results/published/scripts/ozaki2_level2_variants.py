"""Probe: forms of the fused second level's passes as called, on one board: ``ozaki2.matmul(A, B, moduli=15,
level=2, out=C)`` at N = 32768 with each form's operand pass and CRT, in turning rounds beside DGEMM.

The passes' kernels alone (``ozaki2_level2_lanes_probe.py``) run at the full clock; a call runs at the 700 W cap,
where a kernel bound by memory latency weighs differently. So each form is timed as called: its kernels patched
into ``gpu.ozaki2.level2_kernels`` (``operand_kernel`` and ``crt_kernel``, which the plan's passes look up when
they launch), its plan built anew (the kept plans freed), two calls (the plan, its graph), one DGEMM so that the
board is at the cap, then ``LOOP`` calls back to back and one synchronise, host time included; ``ROUNDS`` rounds,
the forms' order turning. ``VARIANTS``: ``name=folder`` pairs, each folder holding ``level2_kernels.py`` and
``residue_cuda.py`` (and ``rows_source.py``, where it differs from the library's) as at some commit (``git show
<commit>:gpu/ozaki2/level2_kernels.py``), and ``library``, the code run. Writes ``$OUT/ozaki2-level2-variants.json``.

    VARIANTS=base=dir,library OUT=dir PYTHONPATH=$PWD:$PWD/results/published/scripts \\
        python3 results/published/scripts/ozaki2_level2_variants.py
"""

import os
from functools import cache

import cupy as cp
from ozaki2_as_called import fresh_inputs
from ozaki2_level2_lanes_probe import baseline_crt, baseline_kernel, nvml_now, patched
from rounds import beside_dgemm, beside_summary, write_json

from experiments.core.environment import environment
from gpu import ozaki2
from gpu.backend import get_backend

N, LOOP, ROUNDS = int(os.environ.get("N", 32768)), int(os.environ.get("LOOP", 3)), int(os.environ.get("ROUNDS", 5))
VARIANTS = os.environ.get("VARIANTS", "library").split(",")


@cache
def kernels(variant: str):
    """The (operand_kernel, crt_kernel) makers of ``variant``: the library's (None, None), or ``name=folder``'s."""
    if variant == "library":
        return None, None
    folder = variant.split("=", 1)[1]
    ops = {side: baseline_kernel(side, folder) for side in "ab"}
    crts = {}

    def crt(table, staged: bool):
        if not staged:
            raise RuntimeError("the variants are timed at N = 32768, whose quarters take the staged CRT")
        return crts.setdefault(table, baseline_crt(table, folder))
    return (lambda side: ops[side]), crt


def timed(variant: str, A, B, C, D) -> dict:
    """One round's sample of ``variant`` as called (see the module)."""
    with patched(*kernels(variant)):
        ozaki2.PLANS.clear()
        cp.get_default_memory_pool().free_all_blocks()
        sample = beside_dgemm(lambda: ozaki2.matmul(A, B, moduli=15, level=2, out=C),
                              lambda: cp.matmul(A, B, out=D), LOOP)
        return {**sample, **nvml_now()}


def main() -> None:
    A, B = fresh_inputs(N)
    C, D = cp.empty((N, N)), cp.empty((N, N))
    names = [v.split("=", 1)[0] for v in VARIANTS]
    samples = {name: [] for name in names}
    for r in range(ROUNDS):
        order = list(zip(names, VARIANTS, strict=True))
        for name, variant in order[r % len(order):] + order[:r % len(order)]:
            samples[name].append(timed(variant, A, B, C, D))
            print(r, name, {k: round(v, 1) for k, v in samples[name][-1].items()}, flush=True)
        ozaki2.PLANS.clear()
    result = {"environment": environment(get_backend("cupy")), "n": N, "loop": LOOP, "variants": VARIANTS,
              **beside_summary(samples, names[0])}
    print({k: v for k, v in result.items() if k.startswith(("median", "paired"))}, flush=True)
    write_json(result, "ozaki2-level2-variants.json")


if __name__ == "__main__":
    main()
