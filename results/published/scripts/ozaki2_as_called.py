"""Ozaki scheme II as a user calls it: ``gpu.ozaki2.matmul(A, B)`` with its defaults, beside fixed counts and DGEMM.

At each N (``NS``, default 4096, 8192, 16384), phi = 1 operands drawn on the device (as the Ozaki benchmarks draw
them above 4096), the runs are: the public call with defaults (``moduli="auto"``, fast scaling, normwise bound:
the count decided on the device, read back only by a call the plan has not seen the addresses of), the public
call with fast scaling and 14, 15 or 16 moduli, and
``cupy.matmul`` (DGEMM). One sample of a run is a loop of ``LOOP`` back-to-back calls, then one synchronize: the
wall time per call, host time included, as a user's loop makes them. The runs are interleaved round by round
(``ROUNDS`` rounds, at least 10) after two warm-up rounds (plans built, graphs captured), and each run's median
and ratio to DGEMM's are kept, with NVML's SM clock and power read after each sample. Then each run's max
relative error on 256 sampled rows against ``accuracy.reference.exact_matmul`` of those rows (DGEMM's too), and
the count the defaults choose (``Plan.last_count``). Also the first call's time of the first run of ``RUNS`` (the
default, unless ``RUNS`` leaves it out: ``first_call_of`` names it) in this process at the first N: cold where
CuPy's kernel cache starts empty (``CUPY_CACHE_DIR=$(mktemp -d)``; the files the cache held at the start are
recorded), warm otherwise; only the default's is kept as a first-call record.

``RUNS`` picks the runs by name (default: default, fast-14, fast-15, fast-16; also ``default-w1``, the public call
with ``level=1``: one Winograd level over the residues at ``moduli="auto"``, and ``fast-<count>-w1`` likewise at a
fixed count; ``-w2`` the same with ``level=2``; any of them with ``-ws<G>``: with ``workspace=`` G GiB; ``-span<R>``:
its plan built with the fused second level's spans of at most R rows, ``gpu.ozaki2.fused_level2.MAX_SPAN``). From
``SEPARATE_FROM`` rows up (default none) each run is timed in a group of its own beside DGEMM, the kept plans of
the last freed first (at N = 32768 the level-1 plan's fused layout and level 0's do not fit beside each other on
the H200); its ratio is to its own group's DGEMM (``dgemm_ms`` of the run).

Writes ``$OUT/ozaki2-as-called.json`` (with ``records`` of the shape ``as_called_tables.py`` renders) and prints
a summary. Run on the device from the repository root:
``PYTHONPATH=$PWD python3 results/published/scripts/ozaki2_as_called.py`` (about 100 s on an H200).
"""

import functools
import json
import os
import statistics
import time

import cupy as cp
import numpy as np
from rounds import loop_seconds  # this folder's script: a loop of calls, host time included

from accuracy.metrics import error_report
from accuracy.reference import exact_matmul
from experiments.core.ascalled import host_seconds
from experiments.core.environment import environment
from experiments.ozaki.bench import sample_rows
from experiments.papers.as_called_formats import ozaki2_run, written
from gpu import ozaki2
from gpu.backend import get_backend
from gpu.ozaki2 import fused_level2

SEED, ROWS = 0, 256


def fresh_inputs(n: int, seed: int = SEED):
    """The inputs of a new size, the kept plans of the last one freed first (their workspaces, and the pool's
    cached blocks), so that each size plans as a new process would."""
    ozaki2.PLANS.clear()
    cp.get_default_memory_pool().free_all_blocks()
    return inputs(n, seed)


def inputs(n: int, seed: int = SEED):
    """phi = 1 operands, as the Ozaki benchmarks draw them on the device (``experiments.ozaki.bench``)."""
    rng = cp.random.default_rng(seed)

    def draw():
        ru, rn = rng.random((n, n)), rng.standard_normal((n, n))
        ru -= 0.5
        cp.exp(rn, out=rn)
        ru *= rn
        return ru
    return draw(), draw()


RUNS = os.environ.get("RUNS", "default,fast-14,fast-15,fast-16").split(",")
SEPARATE_FROM = int(os.environ.get("SEPARATE_FROM", 0)) or None


def runs(be, A, B):
    """The calls timed, by name (:data:`RUNS`, read by ``experiments.papers.as_called_formats.ozaki2_run``, then
    DGEMM)."""
    out = {}
    for name in RUNS:
        options, span = ozaki2_run(name)
        call = functools.partial(ozaki2.matmul, A, B, backend=be, **options)
        out[name] = call if span is None else functools.partial(spanned, call, span)
    out["dgemm"] = lambda: cp.matmul(A, B)
    return out


def spanned(call, most: int):
    """``call()`` with the fused second level's spans capped at ``most`` rows while it runs (the cap is read when
    its plan is built: the first call of a signature)."""
    kept, fused_level2.MAX_SPAN = fused_level2.MAX_SPAN, most
    try:
        return call()
    finally:
        fused_level2.MAX_SPAN = kept


def groups(calls: dict, separate: bool) -> list[dict]:
    """The interleaved groups: every call in one, or (``separate``) each beside DGEMM."""
    if not separate:
        return [calls]
    return [{name: run, "dgemm": calls["dgemm"]} for name, run in calls.items() if name != "dgemm"]


def timed(be, calls: dict, separate: bool, loop: int, rounds: int, telemetry, host: bool = True) -> dict:
    """Each run's record: its median, spread and samples per call, its ratio to its group's DGEMM, NVML's readings
    and (``host``) the host time of one call; each group (:func:`groups`) after the kept plans of the last are
    freed and two warm-up calls of each of its calls, the plan built, then its graph captured (a separate group's
    DGEMM as ``"dgemm beside <run>"``)."""
    out = {}
    for group in groups(calls, separate):
        ozaki2.PLANS.clear()
        cp.get_default_memory_pool().free_all_blocks()
        for run in group.values():
            loop_seconds(run, 2)
        samples, clocks = interleaved(group, loop, rounds, telemetry)
        dgemm = statistics.median(samples["dgemm"])
        beside = next(k for k in group if k != "dgemm") if separate else None
        for name, v in samples.items():
            key = f"dgemm beside {beside}" if beside and name == "dgemm" else name
            out[key] = {"ms_per_call": 1e3 * statistics.median(v), "min_ms": 1e3 * min(v), "max_ms": 1e3 * max(v),
                        "x_dgemm": dgemm / statistics.median(v), "dgemm_ms": 1e3 * dgemm,
                        "samples_ms": [1e3 * x for x in v], "telemetry": clocks[name],
                        **({"host_ms": 1e3 * host_seconds(be, group[name])} if host else {})}
    return out


def interleaved(calls: dict, loop: int, rounds: int, telemetry) -> tuple[dict, dict]:
    """``rounds`` rounds of one :func:`rounds.loop_seconds` of every call in turn: each call's seconds per call, and
    the NVML reading after each sample (none without telemetry)."""
    samples, clocks = {name: [] for name in calls}, {name: [] for name in calls}
    for _ in range(rounds):
        for name, run in calls.items():
            samples[name].append(loop_seconds(run, loop))
            if telemetry is not None:
                clocks[name].append(telemetry.read().as_dict())
    return samples, clocks


def chosen_count(be, A, B) -> int:
    """The count a default plan reads on these operands (a plan of its own, freed after)."""
    with ozaki2.Plan(A, B, backend=be) as plan:
        plan.execute(A, B)
        return plan.last_count


def errors(calls, picks, ref) -> dict:
    """Max relative error of every run on the sampled rows, against their exact product ``ref``."""
    out = {}
    for name, run in calls.items():
        C = run()[picks]
        report = error_report(C, ref)
        out[name] = {"max_rel": report.max_rel, "nrm": report.nrm, "correctly_rounded": report.correctly_rounded}
        del C
    return out


def main() -> None:
    be = get_backend("cupy")
    telemetry = be.telemetry()
    cache = os.environ.get("CUPY_CACHE_DIR", os.path.expanduser("~/.cupy/kernel_cache"))
    result = {"script": "results/published/scripts/ozaki2_as_called.py", "environment": environment(be),
              "seed": SEED, "rows": ROWS, "points": [],
              "kernel_cache_files_at_start": len(os.listdir(cache)) if os.path.isdir(cache) else 0}
    rounds, first = max(10, int(os.environ.get("ROUNDS", 10))), True
    for n in (int(x) for x in os.environ.get("NS", "4096,8192,16384").split(",")):
        ozaki2.PLANS.clear()
        cp.get_default_memory_pool().free_all_blocks()
        A, B = inputs(n)
        picks = cp.asarray(sample_rows(n, ROWS, SEED))
        start = time.perf_counter()
        ref = exact_matmul(A[picks], B, backend=be)
        point = {"n": n, "reference_s": time.perf_counter() - start}
        cp.get_default_memory_pool().free_all_blocks()
        calls = runs(be, A, B)
        if first:
            start = time.perf_counter()
            calls[RUNS[0]]()
            cp.cuda.Device().synchronize()
            point["first_call_s"], point["first_call_of"], first = time.perf_counter() - start, RUNS[0], False
        loop = int(os.environ.get("LOOP", {4096: 40, 8192: 10}.get(n, 3)))
        point["loop"] = loop
        point["runs"] = timed(be, calls, SEPARATE_FROM is not None and n >= SEPARATE_FROM, loop, rounds, telemetry)
        if SEPARATE_FROM is not None and n >= SEPARATE_FROM:
            ozaki2.PLANS.clear()
        point["errors"] = errors(calls, picks, ref)
        ozaki2.PLANS.clear()
        point["default_count"] = chosen_count(be, A, B)
        result["points"].append(point)
        print(n, "count", point["default_count"], {k: (round(v["ms_per_call"], 3), round(v["x_dgemm"], 3),
                                                       f"{point['errors'][k.split(' beside ')[0]]['max_rel']:.2e}")
                                                   for k, v in point["runs"].items()}, flush=True)
        del A, B, calls, ref
    result.update(written(result, "ozaki2_as_called.py"))
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "ozaki2-as-called.json"), "w") as fh:
        json.dump(result, fh, indent=1, default=lambda x: x.item() if isinstance(x, np.generic) else str(x))


if __name__ == "__main__":
    main()
