"""Probe: the fused level-1 CRT over INT8 residues with its 7 products combined and reduced in int, as called.

Where the residue GEMMs write INT8 residues (every fused level-1 call on the H200 at N = 16384 and 32768), the CRT
of :mod:`gpu.ozaki2.fused_level` (``crt_kernels.LEVEL_SOURCE``) combined each position's 7 residues in float64 and
reduced each sum by the float64 magic-number route; the library now combines them in int and reduces by
``small_residue`` (its sums are at most 512 in magnitude): 2712 SASS instructions against 3336, no int-to-float64
conversions (``cuobjdump -sass``, sm_90). The INT32 path compiles as before.

Checks C of ``ozaki2.matmul(A, B, moduli=c, level=1)`` byte for byte, the library's CRT against the one of
``BASELINE`` (a folder holding ``crt_kernels.py`` as at an older commit:
``git show 7cfebb2:gpu/ozaki2/crt_kernels.py``),
at ``CHECK`` shapes and counts (``m:k:n:c``), recording whether their products were INT8 residues; then times the
call as users make it at each of ``NS`` (``moduli=15, level=1, out=C``) with each form's kernel in the plan, in
``ROUNDS`` turning rounds: each form's plan built anew (two calls), one DGEMM so that the board is at the cap, then
``LOOP`` calls back to back and one synchronise, host time included, and one DGEMM after. Writes
``$OUT/ozaki2-level1-crt-probe.json``.

    BASELINE=dir OUT=dir PYTHONPATH=$PWD:$PWD/results/published/scripts \\
        python3 results/published/scripts/ozaki2_level1_crt_probe.py
"""

import os
from contextlib import contextmanager
from functools import cache, partial

import cupy as cp
from ozaki2_as_called import fresh_inputs
from ozaki2_level2_lanes_probe import _strings, nvml_now
from rounds import beside_dgemm, beside_summary, turning, write_json

from experiments.core.environment import environment
from gpu import ozaki2
from gpu.backend import get_backend
from gpu.ozaki2 import crt_kernels
from gpu.ozaki2.cuda_source import COMMON, constants, for_each_modulus

CHECK = [tuple(int(v) for v in c.split(":")) for c in os.environ.get(
    "CHECK", "4096:4096:4096:15,3001:2777:4099:15,8192:8192:8192:14,8192:5000:8192:16,16384:16384:16384:15").split(",")]
NS = [int(n) for n in os.environ.get("NS", "16384,32768").split(",")]
ROUNDS, LOOP = int(os.environ.get("ROUNDS", 6)), int(os.environ.get("LOOP", 4))
LIBRARY = crt_kernels.level_kernel


@cache
def baseline(table, vec: int, narrow: bool = False):
    """The fused level's CRT kernel of ``BASELINE``'s ``crt_kernels.py``, built as the library builds its own."""
    old = _strings(os.path.join(os.environ["BASELINE"], "crt_kernels.py"), ("LEVEL_SOURCE",))["LEVEL_SOURCE"]
    prod_t = "signed char" if narrow else "int"
    head = (f"#define VEC {vec}\n#define VEC_T {crt_kernels._VECTORS.get((not narrow, vec), prod_t)}\n"
            f"#define PROD_T {prod_t}\n#define CRT_THREADS {crt_kernels.CRT_THREADS}\n")
    return cp.RawKernel(head + constants(table) + for_each_modulus(table.moduli) + COMMON + crt_kernels.FINISH + old,
                        "ozaki2_crt_level")


FORMS, NARROW = {"library": LIBRARY, "baseline": baseline}, set()


@contextmanager
def form(name: str):
    """The plans built and run in the block launch ``name``'s CRT (the kept plans freed first)."""
    def kernel(table, vec, narrow=False):
        NARROW.add(narrow)
        return FORMS[name](table, vec, narrow)
    ozaki2.PLANS.clear()
    cp.get_default_memory_pool().free_all_blocks()
    crt_kernels.level_kernel = kernel
    try:
        yield
    finally:
        crt_kernels.level_kernel = LIBRARY


def check(m: int, k: int, n: int, count: int) -> dict:
    """C of both forms at one shape, byte for byte."""
    rng = cp.random.default_rng(3)
    A, B = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    NARROW.clear()
    out = {}
    for name in FORMS:
        with form(name):
            out[name] = ozaki2.matmul(A, B, moduli=count, level=1)
    result = {"shape": [m, k, n], "count": count, "equal": bool(cp.array_equal(*out.values())),
              "int8_products": sorted(NARROW)}
    print("check", result, flush=True)
    return result


def sample(name: str, A, B, C, D) -> dict:
    """One round's sample of ``name``'s form as called (see the module)."""
    with form(name):
        sample = beside_dgemm(lambda: ozaki2.matmul(A, B, moduli=15, level=1, out=C),
                              lambda: cp.matmul(A, B, out=D), LOOP)
    return {**sample, **nvml_now()}


def called(n: int) -> dict:
    """Both forms as called at N = ``n`` in turning rounds."""
    A, B = fresh_inputs(n)
    C, D = cp.empty((n, n)), cp.empty((n, n))
    samples = turning({name: partial(sample, name, A, B, C, D) for name in FORMS}, ROUNDS, lambda run: run())
    result = beside_summary(samples, "baseline")
    print(n, {k: v for k, v in result.items() if k != "samples"}, flush=True)
    ozaki2.PLANS.clear()
    return result


def main() -> None:
    result = {"environment": environment(get_backend("cupy")), "checks": [check(*c) for c in CHECK]}
    if not all(c["equal"] for c in result["checks"]):
        raise SystemExit("the two CRTs' products differ: not timed")
    result["called"] = {n: called(n) for n in NS}
    write_json(result, "ozaki2-level1-crt-probe.json")


if __name__ == "__main__":
    main()
