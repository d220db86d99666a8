"""Probe: scheme II's passes of levels 0 and 1 with a thread's loads issued together, as called.

Two load patterns left threads waiting on one load after another (SASS, nvcc 13.0, sm_90):

* the tile the residue passes read (the level-0 kernel ``ozaki2_rows``, now through ``gpu.ozaki2.fused.FILL_TILE``,
  and the fused level's ``ozaki2_rows_sums``) was filled entry by entry: an entry, its row's scale code, its bar
  exponent, the value, the store, then the next entry;
* the CRTs (``ozaki2_crt``, ``ozaki2_crt_level``, and level 2's ``write16``) read each output column's scale code
  just before that output's store: 4 to 8 loads in turn at the end of every thread's work.

The draft issued each thread's loads before it used any of them, in all five. As called on the H200 (the
published run, ``h200-ozaki2-loads-probe.json``, with the whole draft over 141a482), level 0 ran 1.027x and 1.006x
its old kernels at 8192 and 16384, level 1 0.996x and 1.001x, and level 2's ``write16`` 0.996x at 32768. Only
level 0's two kernels (``ozaki2_rows``, ``ozaki2_crt``) were kept; ``ozaki2_rows_sums`` also spilled more. On
main, level 1's kernels are therefore the same in both forms.

Checks C of ``ozaki2.matmul(A, B, moduli=c, level=L)`` byte for byte, the library's passes against those of
``BASELINE`` (a folder holding ``fused.py``, ``rows_source.py``, ``residue_sums.py`` and ``crt_kernels.py`` as at
an older commit: ``git show <commit>:gpu/ozaki2/fused.py``, ...), at ``CHECK`` shapes (``m:k:n:c:L``); then times
the call as users make it at each of ``NS`` and levels ``LEVELS`` (``moduli=15, level=L, out=C``) with each form's
kernels in the plan, in ``ROUNDS`` turning rounds (``rounds.beside_dgemm``: each form's plan built anew, one DGEMM
so that the board is at the cap, then ``LOOP`` calls back to back, host time included). Level 2's ``write16`` is
timed by ``ozaki2_level2_variants.py`` (``VARIANTS=base=<folder with the older level2_kernels.py and
residue_cuda.py>,library``). Writes ``$OUT/ozaki2-loads-probe.json``.

    BASELINE=dir OUT=dir PYTHONPATH=$PWD:$PWD/results/published/scripts \\
        python3 results/published/scripts/ozaki2_loads_probe.py
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
from gpu.ozaki2 import crt_kernels, kernels, residue_sums
from gpu.ozaki2.cuda_source import COMMON, constants, for_each_modulus
from gpu.ozaki2.residue_cuda import DEVICE

CHECK = [tuple(int(v) for v in c.split(":")) for c in os.environ.get(
    "CHECK", "4096:4096:4096:15:0,3001:2777:4099:15:0,4096:4096:4096:15:1,8192:5000:8192:16:1,"
             "16384:16384:16384:15:1,2048:2048:2048:20:0").split(",")]
NS = [int(n) for n in os.environ.get("NS", "8192,16384").split(",")]
LEVELS = [int(v) for v in os.environ.get("LEVELS", "0,1").split(",")]
ROUNDS, LOOP = int(os.environ.get("ROUNDS", 6)), int(os.environ.get("LOOP", 6))
MAKERS = ((kernels, "_rows_kernel"), (residue_sums, "_kernel"), (crt_kernels, "kernel"), (crt_kernels, "level_kernel"))
LIBRARY = [getattr(module, name) for module, name in MAKERS]


def _old(module: str, *names: str) -> dict[str, str]:
    return _strings(os.path.join(os.environ["BASELINE"], f"{module}.py"), names)


@cache
def old_rows(mode: str, moduli: tuple[int, ...]):
    """The level-0 residue kernel of ``BASELINE``, built as the library builds its own."""
    source = (f"#define BARS {int(mode == 'bars')}\n" + for_each_modulus(moduli) + COMMON
              + _old("fused", "TILE_SOURCE")["TILE_SOURCE"] + _old("rows_source", "ROWS_SOURCE")["ROWS_SOURCE"])
    return cp.RawKernel(source, "ozaki2_rows")


@cache
def old_sums(moduli: tuple[int, ...], side: str, blocks: int = residue_sums.BLOCKS):
    """The fused level's residue and sums kernel of ``BASELINE``, built as the library builds its own."""
    source = (f"#define BARS 0\n#define SIDE {int(side != 'a')}\n#define COUNT {len(moduli)}\n"
              f"#define BLOCKS {blocks}\n" + for_each_modulus(moduli) + COMMON + DEVICE
              + _old("fused", "TILE_SOURCE")["TILE_SOURCE"] + _old("rows_source", "ROWS_SOURCE")["ROWS_SOURCE"]
              + _old("residue_sums", "_SOURCE")["_SOURCE"])
    kernel = cp.RawKernel(source, "ozaki2_rows_sums")
    kernel.max_dynamic_shared_size_bytes = residue_sums._kept_bytes(len(moduli))
    return kernel


@cache
def old_crt(table, reduce: bool, vec: int):
    """The plain CRT kernel of ``BASELINE``, built as the library builds its own."""
    old = _old("crt_kernels", "FINISH", "SOURCE")
    in_t = "int" if reduce else "signed char"
    head = (f"#define REDUCE {int(reduce)}\n#define IN_T {in_t}\n#define COUNT {table.count}\n#define VEC {vec}\n"
            f"#define VEC_T {crt_kernels._VECTORS.get((reduce, vec), in_t)}\n"
            f"#define CRT_THREADS {crt_kernels.CRT_THREADS}\n")
    return cp.RawKernel(head + constants(table) + for_each_modulus(table.moduli) + COMMON + old["FINISH"]
                        + old["SOURCE"], "ozaki2_crt")


@cache
def old_level_crt(table, vec: int, narrow: bool = False):
    """The fused level's CRT kernel of ``BASELINE``, built as the library builds its own."""
    old = _old("crt_kernels", "FINISH", "LEVEL_SOURCE")
    prod_t = "signed char" if narrow else "int"
    head = (f"#define VEC {vec}\n#define VEC_T {crt_kernels._VECTORS.get((not narrow, vec), prod_t)}\n"
            f"#define PROD_T {prod_t}\n#define CRT_THREADS {crt_kernels.CRT_THREADS}\n#define NARROW {int(narrow)}\n")
    return cp.RawKernel(head + constants(table) + for_each_modulus(table.moduli) + COMMON + old["FINISH"]
                        + old["LEVEL_SOURCE"], "ozaki2_crt_level")


FORMS = {"library": LIBRARY, "baseline": [old_rows, old_sums, old_crt, old_level_crt]}


@contextmanager
def form(name: str):
    """The plans built and run in the block launch ``name``'s residue passes and CRTs (the kept plans freed
    first)."""
    ozaki2.PLANS.clear()
    cp.get_default_memory_pool().free_all_blocks()
    for (module, attr), maker in zip(MAKERS, FORMS[name], strict=True):
        setattr(module, attr, maker)
    try:
        yield
    finally:
        for (module, attr), maker in zip(MAKERS, LIBRARY, strict=True):
            setattr(module, attr, maker)


def check(m: int, k: int, n: int, count: int, level: int) -> dict:
    """C of both forms at one shape and level, byte for byte."""
    rng = cp.random.default_rng(5)
    A, B = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    A[::7] *= 2.0 ** 70
    out = {}
    for name in FORMS:
        with form(name):
            out[name] = ozaki2.matmul(A, B, moduli=count, level=level)
    result = {"shape": [m, k, n], "count": count, "level": level, "equal": bool(cp.array_equal(*out.values()))}
    print("check", result, flush=True)
    return result


def sample(name: str, level: int, A, B, C, D) -> dict:
    """One round's sample of ``name``'s form as called (see the module)."""
    with form(name):
        sample = beside_dgemm(lambda: ozaki2.matmul(A, B, moduli=15, level=level, out=C),
                              lambda: cp.matmul(A, B, out=D), LOOP)
    return {**sample, **nvml_now()}


def called(n: int, level: int) -> dict:
    """Both forms as called at N = ``n`` and ``level`` in turning rounds."""
    A, B = fresh_inputs(n)
    C, D = cp.empty((n, n)), cp.empty((n, n))
    samples = turning({name: partial(sample, name, level, A, B, C, D) for name in FORMS}, ROUNDS, lambda run: run())
    result = beside_summary(samples, "baseline")
    print(n, level, {k: v for k, v in result.items() if k != "samples"}, flush=True)
    ozaki2.PLANS.clear()
    return result


def main() -> None:
    result = {"environment": environment(get_backend("cupy")), "checks": [check(*c) for c in CHECK]}
    if not all(c["equal"] for c in result["checks"]):
        raise SystemExit("the two forms' products differ: not timed")
    result["called"] = {f"{n}-w{level}": called(n, level) for n in NS for level in LEVELS}
    write_json(result, "ozaki2-loads-probe.json")


if __name__ == "__main__":
    main()
