"""The ``level="auto"`` validation: where its 0.3% below DGEMM at level 0 goes (sweep of gemmlab 9e91dbd).

At level 0 ``matmul(level="auto", out=C)`` dispatches the same cuBLAS call as DGEMM, and the group's control
(the executor at level 0, DGEMM under another name) reads 0.998-1.002; auto read 0.994-1.001 at 13 sizes.
Per size this probe records:

* the host time of one call issued to an idle device (what :func:`experiments.levels.auto.host_seconds`
  stores), for DGEMM, auto, auto with ``level=0`` given, and the executor, as a distribution (41 calls);
* the host time of the stages of auto's kept call (the signature, the kept plan's checks, the GEMM);
* whether the kept plan is hit (a miss runs the full call);
* two interleaved groups as the sweep times them (launch counted), and two with the launch hidden
  (:mod:`gpu.backend.hold`): where the deficit is host latency before the first launch, it goes away there;
* the time of ``os.stat`` on the profile in ``$GEMMLAB_PROFILES`` (read once a second by a kept auto call).

Writes ``$OUT/auto-latency.json``. Run with ``GEMMLAB_PROFILES`` at a profile that puts these sizes at level 0.
"""
import contextlib
import json
import os
import statistics
import time

from experiments.core.lab import Operands, time_group
from experiments.core.timing import call_seconds
from experiments.levels import auto
from gpu import strassen
from gpu.backend import get_backend
from gpu.profile import device_name, profile_path
from gpu.strassen import Config, shortcut

SIZES = tuple(int(n) for n in os.environ.get("PROBE_SIZES", "1024,4096,8192").split(","))
HOST_CALLS, REPEATS = 41, 60


def first_call_us(be, work) -> dict:
    """Host time of ``work`` issued to an idle device, over HOST_CALLS calls: median, quartiles."""
    times = []
    for _ in range(HOST_CALLS):
        be.synchronize()
        t0 = time.perf_counter()
        work()
        times.append(1e6 * (time.perf_counter() - t0))
    be.synchronize()
    q = statistics.quantiles(times, n=4)
    return {"median": statistics.median(times), "q1": q[0], "q3": q[2], "max": max(times)}


def stages_us(be, ops, cfg) -> dict:
    """Host time of the stages of a kept ``level="auto"`` call, each after a synchronisation (medians)."""
    options = ("auto", cfg.schedule, cfg.parallel, cfg.fused, "peel", cfg.graph, None, "sustained", True, True)
    out = {"signature": [], "kept": [], "gemm": []}
    for _ in range(HOST_CALLS):
        be.synchronize()
        t0 = time.perf_counter()
        key = shortcut.signature(be, ops.A, ops.B, ops.C, options)
        t1 = time.perf_counter()
        plan = shortcut.kept(be, key, "auto", ops.A, ops.B, ops.C, False, "")
        t2 = time.perf_counter()
        be.gemm(ops.A, ops.B, ops.C)
        t3 = time.perf_counter()
        for name, dt in (("signature", t1 - t0), ("kept", t2 - t1), ("gemm", t3 - t2)):
            out[name].append(1e6 * dt)
    be.synchronize()
    return {**{k: statistics.median(v) for k, v in out.items()}, "plan_kept": plan is not None}


def misses(be, work, calls: int = 200) -> int:
    """Calls of ``work`` whose kept plan was not found (each then ran the full call)."""
    found, real = [], shortcut.kept

    def counting(*args, **kwargs):
        plan = real(*args, **kwargs)
        found.append(plan is not None)
        return plan

    shortcut.kept = counting
    try:
        for _ in range(calls):
            work()
    finally:
        shortcut.kept = real
    be.synchronize()
    return found.count(False)


def stat_us(path) -> float:
    t0 = time.perf_counter()
    for _ in range(1000):
        with contextlib.suppress(FileNotFoundError):
            os.stat(path)
    return 1e3 * (time.perf_counter() - t0)


def main() -> None:
    be, cfg, out = get_backend(os.environ.get("PROBE_BACKEND", "cupy")), Config("rum", fused=True), {}
    prof = profile_path(be.name, device_name(be))
    out["profile"] = {"path": str(prof), "exists": prof.exists(), "stat_us": stat_us(prof),
                      "stat_us_tmp": stat_us("/tmp")}
    for n in SIZES:
        ops = Operands.uniform(be, n, seed=7)
        works = auto.group_works(ops, cfg, 0, "sustained")
        works["auto-level0"] = lambda o=ops: strassen.matmul(o.A, o.B, level=0, schedule=cfg.schedule,
                                                            fused=cfg.fused, overwrite_a=True, overwrite_b=True,
                                                            out=o.C, backend=be, check_finite=False,
                                                            regime="sustained")
        for w in works.values():
            w()
        row = {"host_first_call_us": {k: first_call_us(be, w) for k, w in works.items()},
               "stages_us": stages_us(be, ops, cfg), "auto_misses_of_200": misses(be, works[auto.AUTO])}
        calls = auto.calls_for(call_seconds(be, works["gemm"]))
        row["calls"] = calls
        for hide in (False, True, False, True):
            res = time_group(ops, works, "gemm", regime="sustained", calls=calls, repeats=REPEATS, hide_launch=hide)
            row.setdefault("hidden" if hide else "counted", []).append(
                {k: {"speedup": res.ratio(k), "stable": t.stable, "median_us": 1e6 * t.median}
                 for k, t in res.timings.items()})
        out[n] = row
        print(n, json.dumps(row), flush=True)
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "auto-latency.json"), "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
