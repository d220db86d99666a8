"""Whether scheme II's memory-bound passes could hide under its INT8 GEMMs, on two streams, at the power cap.

At N = 32768 (level 1, fast-15) the INT8 GEMMs take 663 ms of a 730 ms call and the passes around them (scaling,
residues and sums, CRT) 67 ms, one after the other on one stream. The passes read and write memory; the GEMMs are
held by the 700 W cap. This probe asks the device what running both at once gives, before any executor is built
for it: ``GEMMS`` residue GEMMs of N x N x N (:meth:`gpu.backend.Backend.residue_gemm` in the plans' panels, as a
level-1 sub-product at N = 32768 runs) on one stream, and ``COPIES`` copies of ``COPY_GIB`` GiB of INT8 (a pass's
reads and writes) on another, timed by events from one start to both ends:

* ``gemms``: the GEMMs alone; ``copies``: the copies alone; ``serial``: both on one stream, one after the other;
* ``overlap``: both at once, streams of the same priority; ``overlap-low``: the copies on a stream of lower
  priority (the GEMMs' blocks are scheduled first).

``ROUNDS`` rounds, the runs turning; medians, the NVML reading after each sample, and the share of the copies'
time each overlap hid: (serial - overlap) / copies. JSON to ``$OUT/ozaki2-overlap-probe.json``.

    OUT=dir PYTHONPATH=/tmp/site:$PWD:$PWD/results/published/scripts \\
        python3 results/published/scripts/ozaki2_overlap_probe.py
"""

import os
import statistics

import cupy as cp
from rounds import turning, write_json

from experiments.core.environment import environment
from gpu.backend import get_backend
from gpu.ozaki2.gemms import panels, planned, run_planned

N = int(os.environ.get("N", 16384))
GEMMS, COPIES = int(os.environ.get("GEMMS", 15)), os.environ.get("COPIES", "5,15")
COPY_GIB, ROUNDS = float(os.environ.get("COPY_GIB", 4)), int(os.environ.get("ROUNDS", 10))
MODULI = (256, 255, 253, 251, 247, 241, 239, 233, 229, 227, 223, 217, 211, 199, 197, 193)


def timed(first, second, s1, s2, together: bool) -> float:
    """Milliseconds from one start to both ends: ``first`` on s1, ``second`` on s2 (together) or after ``first`` on
    s1."""
    start, end1, end2 = cp.cuda.Event(), cp.cuda.Event(), cp.cuda.Event()
    start.record(s1)
    if together:
        s2.wait_event(start)
    with s1:
        first()
    with s2 if together else s1:
        second()
    (s2 if together else s1).record(end2)
    end1.record(s1)
    end1.synchronize()
    end2.synchronize()
    return max(cp.cuda.get_elapsed_time(start, end1), cp.cuda.get_elapsed_time(start, end2))


def main() -> None:
    be = get_backend("cupy")
    rng = cp.random.default_rng(1)
    a = rng.integers(-127, 128, (N, N), dtype=cp.int8)
    b = rng.integers(-127, 128, (N, N), dtype=cp.int8)
    r = cp.empty((N, N), dtype=cp.int8)
    tiles = panels(N, N)
    calls = [planned(be, a, b, r, tiles, MODULI[t % len(MODULI)]) for t in range(GEMMS)]
    if any(c is None for c in calls):
        raise SystemExit("the residue GEMM is not built (GEMMLAB_KERNEL_DIR)")
    gemms = [c for group in calls for c in group]
    nbytes = int(COPY_GIB * 2**30)
    src, dst = cp.ones(nbytes, dtype=cp.int8), cp.empty(nbytes, dtype=cp.int8)
    lo, hi = 0, -5
    s1 = cp.cuda.Stream(non_blocking=True, priority=hi)
    s_same = cp.cuda.Stream(non_blocking=True, priority=hi)
    s_low = cp.cuda.Stream(non_blocking=True, priority=lo)
    telemetry = be.telemetry()
    out = {"script": "results/published/scripts/ozaki2_overlap_probe.py", "environment": environment(be),
           "command": f"N={N} GEMMS={GEMMS} COPIES={COPIES} COPY_GIB={COPY_GIB} ROUNDS={ROUNDS} OUT=dir python3 "
                      "results/published/scripts/ozaki2_overlap_probe.py",
           "gemm_tiles": len(tiles), "stream_priorities": [lo, hi], "points": []}
    run_gemms = lambda: run_planned(be, gemms)  # noqa: E731
    for copies in (int(x) for x in COPIES.split(",")):
        def run_copies(copies=copies):
            for _ in range(copies):
                cp.copyto(dst, src)
        runs = {"gemms": lambda: timed(run_gemms, lambda: None, s1, s_same, False),
                "copies": lambda: timed(run_copies, lambda: None, s1, s_same, False),
                "serial": lambda: timed(run_gemms, run_copies, s1, s_same, False),
                "overlap": lambda: timed(run_gemms, run_copies, s1, s_same, True),
                "overlap-low": lambda: timed(run_gemms, run_copies, s1, s_low, True)}
        for run in runs.values():
            run()
        readings = []

        def sample(run, readings=readings):
            ms = run()
            if telemetry is not None:
                readings.append(telemetry.read().as_dict())
            return ms
        samples = turning(runs, ROUNDS, sample)
        med = {k: statistics.median(v) for k, v in samples.items()}
        ops = 2.0 * N**3 * GEMMS
        point = {"copies": copies, "copy_bytes": nbytes, "ms": med, "samples_ms": samples,
                 "gemm_tops": ops / med["gemms"] / 1e9,
                 "copy_tb_s": 2 * nbytes * copies / med["copies"] / 1e9,
                 "hidden_share": {k: (med["serial"] - med[k]) / med["copies"] for k in ("overlap", "overlap-low")},
                 "telemetry": readings}
        print(copies, {k: round(v, 2) for k, v in med.items()}, round(point["gemm_tops"]),
              {k: round(v, 3) for k, v in point["hidden_share"].items()}, flush=True)
        out["points"].append(point)
    write_json(out, "ozaki2-overlap-probe.json")


if __name__ == "__main__":
    main()
