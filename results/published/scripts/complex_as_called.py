"""Complex products as called against ZGEMM (CuPy): the front door, Ozaki II over both parts, 3M and 4M over real
methods, each with its error on phi inputs against the exact complex reference.

At each N of ``NS`` (default 1024, 4096, 8192, 16384), on complex phi = 1 operands drawn on the device (real and
imaginary parts from two draws), the calls are: ``cupy.matmul`` (ZGEMM, the reference), ``gpu.matmul`` at
``"zgemm"`` and at ``"dgemm"`` (a new output each), ``gpu.ozaki2.complex.matmul`` (2M over the Gaussian moduli, 3M
and 4M over GEMMul8's, ``moduli="auto"``; and 3M with 15 moduli given, ``ozaki2c-3m-15``), and ``gpu.zgemm.matmul``
3M over DGEMM and over Strassen at its defaults (``CALLS``: a comma list of the calls to time, ZGEMM always). One
sample is a loop of ``LOOP`` back-to-back calls and one synchronize; runs interleaved over ``ROUNDS`` rounds (at
least 10) after a warm-up round; medians and ratios to ZGEMM's, and each call's host time (``host_ms``: until the
last call of a loop returns, the median of three loops). Then, per phi of ``PHIS`` (default 0.1, 1, 2, 4), each
call's largest error over 16 sampled rows against ``exact_matmul`` of those rows, relative to each part's own
componentwise scale (:func:`accuracy.metrics.error_report`'s ``max_comp``), and ZGEMM's beside it. Writes
``$OUT/complex-as-called.json`` after each N; prints a line per N. Run from the repository root with
``PYTHONPATH=$PWD``.
"""

import functools
import json
import os
import statistics
import time

import cupy as cp
from ozaki2_as_called import interleaved  # this folder's script: the same rounds

import gpu
from accuracy.metrics import error_report
from accuracy.reference import exact_matmul
from experiments.core.environment import environment
from experiments.core.lab import sample_rows
from experiments.frontdoor.errors import draw_phi
from gpu import strassen, zgemm
from gpu.backend import get_backend
from gpu.ozaki2 import complex as complex_ii

ROWS = 16


def inputs(be, n: int, phi: float, seed: int = 0):
    """Complex phi operands, each part drawn on the device as the front door's errors draw them."""
    rng = cp.random.default_rng(seed)
    A = draw_phi(be, n, n, phi, rng) + 1j * draw_phi(be, n, n, phi, rng)
    return A, draw_phi(be, n, n, phi, rng) + 1j * draw_phi(be, n, n, phi, rng)


def calls(be, A, B) -> dict:
    """The calls timed, those ``CALLS`` names where given (a comma list; ZGEMM always)."""
    every = {"zgemm": lambda: cp.matmul(A, B),
            "frontdoor-zgemm": lambda: gpu.matmul(A, B, accuracy="zgemm", backend=be),
            "frontdoor-dgemm": lambda: gpu.matmul(A, B, backend=be),
            "ozaki2c-2m": lambda: complex_ii.matmul(A, B, scheme="2m", backend=be),
            "ozaki2c-3m": lambda: complex_ii.matmul(A, B, scheme="3m", backend=be),
            "ozaki2c-3m-15": lambda: complex_ii.matmul(A, B, moduli=15, backend=be),
            "ozaki2c-4m": lambda: complex_ii.matmul(A, B, scheme="4m", backend=be),
            "3m-dgemm": lambda: zgemm.matmul(A, B, scheme="3m", real=cp.matmul, backend=be),
            "3m-strassen": lambda: zgemm.matmul(A, B, scheme="3m",
                                                real=functools.partial(strassen.matmul, backend=be), backend=be)}
    names = os.environ.get("CALLS")
    return every if not names else {k: v for k, v in every.items() if k == "zgemm" or k in names.split(",")}


def host_seconds(run, loop: int) -> float:
    """Host seconds per call of ``loop`` back-to-back calls, until the last one returns (then a synchronize)."""
    cp.cuda.Device().synchronize()
    start = time.perf_counter()
    for _ in range(loop):
        C = run()
    took = time.perf_counter() - start
    cp.cuda.Device().synchronize()
    del C
    return took / loop


def errors(be, n: int, phis) -> dict:
    out = {}
    picks = cp.asarray(sample_rows(n, ROWS, 0))
    for phi in phis:
        A, B = inputs(be, n, phi, 1)
        R = exact_matmul(A[picks], B, backend=be)
        out[phi] = {name: error_report(run()[picks], R, A[picks], B).max_comp for name, run in calls(be, A, B).items()}
        del A, B, R
        cp.get_default_memory_pool().free_all_blocks()
    return out


def main() -> None:
    be = get_backend("cupy")
    telemetry = be.telemetry()
    result = {"script": "results/published/scripts/complex_as_called.py", "environment": environment(be),
              "points": []}
    rounds = max(10, int(os.environ.get("ROUNDS", 10)))
    phis = [float(p) for p in os.environ.get("PHIS", "0.1,1,2,4").split(",")]
    for n in (int(x) for x in os.environ.get("NS", "1024,4096,8192,16384").split(",")):
        A, B = inputs(be, n, 1.0)
        runs = calls(be, A, B)
        for run in runs.values():
            run()
        loop = int(os.environ.get("LOOP", {1024: 40, 4096: 10, 8192: 3}.get(n, 2)))
        samples, clocks = interleaved(runs, loop, rounds, telemetry)
        hosts = {name: statistics.median(host_seconds(run, loop) for _ in range(3)) for name, run in runs.items()}
        ref = statistics.median(samples["zgemm"])
        point = {"n": n, "loop": loop, "chosen": {level: gpu.plan(A, B, accuracy=level, backend=be).chosen.name
                                                  for level in ("zgemm", "dgemm")},
                 "runs": {name: {"ms_per_call": 1e3 * statistics.median(v), "x_zgemm": ref / statistics.median(v),
                                 "host_ms": 1e3 * hosts[name], "samples_ms": [1e3 * x for x in v],
                                 "telemetry": clocks[name]}
                          for name, v in samples.items()}}
        del A, B, runs
        cp.get_default_memory_pool().free_all_blocks()
        point["max_comp"] = errors(be, n, phis)
        result["points"].append(point)
        print(n, point["chosen"], {k: round(v["x_zgemm"], 3) for k, v in point["runs"].items()}, flush=True)
        with open(os.path.join(os.environ.get("OUT", "/tmp"), "complex-as-called.json"), "w") as fh:
            json.dump(result, fh, indent=1, default=str)


if __name__ == "__main__":
    main()
