"""Probe: the level-2 passes with more loads in flight (``ozaki2_level2_staged_forms.py``) against the library's.

Checks byte for byte the staged operand pass against the library's on B whole and A's span (at ``CHECK``:
``N:COUNT:SPAN0``), and the ring CRT's C against the library's staged CRT on one span's random INT8 products at
N = 32768; times both operand passes (B whole, A's four spans of 2048 rows) and both CRTs alone by CUDA events,
10 interleaved samples; then ``ozaki2.matmul(A, B, moduli=15, level=2, out=C)`` at N = 32768 as called with each
combination patched in (``ozaki2_level2_variants.timed``: its plan built anew, one DGEMM before a loop of
``LOOP`` calls, host time included), ``ROUNDS`` turning rounds. Writes ``$OUT/ozaki2-level2-staged-probe.json``.

    OUT=dir PYTHONPATH=$PWD:$PWD/results/published/scripts \\
        python3 results/published/scripts/ozaki2_level2_staged_probe.py
"""

import os
import statistics
from contextlib import contextmanager

import cupy as cp
import ozaki2_level2_lanes_probe as P
import ozaki2_level2_staged_forms as S
import ozaki2_level2_variants as V
from ozaki2_as_called import fresh_inputs
from rounds import beside_summary, event_rounds, write_json

from experiments.core.environment import environment
from gpu.backend import get_backend
from gpu.ozaki2 import level2_kernels as L

CHECK = [tuple(int(v) for v in c.split(":")) for c in os.environ.get(
    "CHECK", "4096:15:0,4096:20:0,8192:15:0,16384:15:2048").split(",")]
ROUNDS, N, SPAN = int(os.environ.get("ROUNDS", 5)), 32768, 2048
FORMS = {"library": L.operands, "staged": S.operands}


def free() -> None:
    """The pool's cached blocks given back, so that the next arrays fit."""
    cp.get_default_memory_pool().free_all_blocks()


def check(n: int, count: int, span0_a: int) -> list[dict]:
    """Both operand passes on B whole and A's span from ``span0_a``, byte for byte."""
    A, B, table, ((sa, ea), (sb, eb)) = P.operands(n, count, 0)
    q, span, found = n // 4, min(SPAN, n // 4), []
    for side, X, s, e, rows, s0 in (("b", B.T, sb, eb, q, 0), ("a", A, sa, ea, span, span0_a)):
        got = {}
        for name, fn in FORMS.items():
            got[name] = cp.zeros((count, 49, rows, q), dtype=cp.int8)
            fn(X, s, e, table, got[name], side, s0, rows, q)
        found.append({"n": n, "count": count, "side": side, "span0": s0, "equal": bool(cp.array_equal(*got.values()))})
        print("check", found[-1], flush=True)
        del got
        free()
    return found


def alone() -> dict:
    """Operand passes and CRTs alone at N = 32768, 15 moduli, interleaved; the ring CRT's C against the library's."""
    A, B, table, ((sa, ea), (sb, eb)) = P.operands(N, 15, 0)
    q = N // 4
    ob, oa = cp.empty((15, 49, q, q), dtype=cp.int8), cp.empty((15, 49, SPAN, q), dtype=cp.int8)
    work = {}
    for name, fn in FORMS.items():
        work[f"b_{name}"] = (lambda fn=fn: fn(B.T, sb, eb, table, ob, "b", 0, q, q))
        work[f"a_{name}"] = (lambda fn=fn: [fn(A, sa, ea, table, oa, "a", s0, SPAN, q) for s0 in range(0, q, SPAN)])
    for run in work.values():
        run()
    samples = event_rounds(work, 10)
    result = {"operands_ms": {k: statistics.median(v) for k, v in samples.items()}}
    work.clear()
    A = B = ob = oa = None
    free()
    products = cp.random.default_rng(1).integers(-128, 128, (15, 49, SPAN, q), dtype=cp.int8)
    crts = {"library": L.crt_kernel(table, True), "ring": S.crt_kernel(table, True)}
    cs = {name: cp.zeros((N, N)) for name in crts}
    runs = {name: (lambda k=k, c=cs[name]: P.crt_launch(k, products, table, sa, sb, c, 0, SPAN, q))
            for name, k in crts.items()}
    for run in runs.values():
        run()
    result["crt_equal"] = bool(cp.array_equal(*cs.values()))
    crt_samples = event_rounds(runs, 10)
    result["crt_ms"] = {k: statistics.median(v) for k, v in crt_samples.items()}
    print("alone", result, flush=True)
    return result


@contextmanager
def variant(operands, crt_kernel):
    """The library's launchers run ``operands`` (an operand launcher) and ``crt_kernel`` (None: the library's)."""
    L.operands = operands
    try:
        with P.patched(crt_kernel=crt_kernel):
            yield
    finally:
        L.operands = FORMS["library"]


def called(with_ring: bool) -> dict:
    """Each combination as called at N = 32768 in turning rounds."""
    variants = {"library": (L.operands, None), "staged": (S.operands, None)}
    if with_ring:
        variants |= {"ring": (L.operands, S.crt_kernel), "staged+ring": (S.operands, S.crt_kernel)}
    A, B = fresh_inputs(N)
    C, D = cp.empty((N, N)), cp.empty((N, N))
    names, samples = list(variants), {name: [] for name in variants}
    for r in range(ROUNDS):
        for name in names[r % len(names):] + names[:r % len(names)]:
            with variant(*variants[name]):
                samples[name].append(V.timed("library", A, B, C, D))
            print(r, name, {k: round(v, 1) for k, v in samples[name][-1].items()}, flush=True)
    return beside_summary(samples, "library")


def main() -> None:
    result = {"environment": environment(get_backend("cupy")), "checks": [c for n in CHECK for c in check(*n)]}
    if not all(c["equal"] for c in result["checks"]):
        raise SystemExit("the staged operand pass is not bitwise the library's: not timed")
    result["alone"] = alone()
    result["called"] = called(result["alone"]["crt_equal"])
    print({k: v for k, v in result["called"].items() if k != "samples"}, flush=True)
    write_json(result, "ozaki2-level2-staged-probe.json")


if __name__ == "__main__":
    main()
