"""The ``level="auto"`` validation: where its 2% at N = 1024 goes (0.979x DGEMM in the H100 sweep).

Per size: the host's loop time of 64 calls with no synchronisation inside, and the wall time to the end of
their work, for DGEMM and for ``matmul(level="auto")`` as the sweep calls it; then three interleaved groups
of device time per call, as ``experiments.levels.auto`` times them. Where the wall time per call equals the
device time, the call is device-bound and the host's extra work is hidden. Writes ``$OUT/auto1024.json``.
At N = 1024 also the host's profile of each (cProfile). Run with ``GEMMLAB_PROFILES`` pointing at the
H100's device profile, so that auto reads the published table.
"""
import cProfile
import io
import json
import os
import pstats
import statistics
import time

from experiments.core.lab import Operands, time_group
from experiments.levels.auto import auto_work, operand_sets
from gpu.backend import get_backend
from gpu.strassen import Config

CALLS, LOOPS, GROUPS = 64, 7, 3


def host_and_wall(be, works) -> dict:
    """Median host time and wall time per call over LOOPS loops of CALLS calls, each loop synchronised once."""
    for w in works:
        w()
    loops = []
    for _ in range(LOOPS):
        be.synchronize()
        t0 = time.perf_counter()
        for i in range(CALLS):
            works[i % len(works)]()
        t1 = time.perf_counter()
        be.synchronize()
        loops.append(((t1 - t0) / CALLS * 1e6, (time.perf_counter() - t0) / CALLS * 1e6))
    return {"host_us_per_call": statistics.median(h for h, _ in loops),
            "wall_us_per_call": statistics.median(w for _, w in loops)}


def host_profile(be, work, calls: int = 3000) -> str:
    """The host's hottest functions over ``calls`` calls of ``work`` (cProfile, by own time)."""
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        work()
    prof.disable()
    be.synchronize()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(14)
    return text.getvalue()


def main() -> None:
    be, cfg, out = get_backend("cupy"), Config("rum", fused=True), {}
    for n in (1024, 1280):
        ops = Operands.uniform(be, n, seed=7)
        sets = operand_sets(ops, CALLS)
        works = {"gemm": [lambda o=o: be.gemm(o.A, o.B, o.C) for o in sets],
                 "auto": [auto_work(o, cfg, "sustained") for o in sets]}
        host = {name: host_and_wall(be, ws) for name, ws in works.items()}
        groups = [{k: t.median * 1e6 for k, t in time_group(ops, works, "gemm", regime="sustained",
                                                           calls=CALLS).timings.items()} for _ in range(GROUPS)]
        out[n] = {"sets": len(sets), "host": host, "groups_us": groups,
                  "profile": {name: host_profile(be, ws[0]) for name, ws in works.items()} if n == 1024 else {}}
        print(n, json.dumps(out[n]), flush=True)
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "auto1024.json"), "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
