"""What ``moduli="auto"`` costs Ozaki II's level 1, phase by phase: ``ozaki2.matmul(A, B, level=1)`` against the
same call with ``moduli=15`` (the count "auto" picks on phi = 1 operands), at N = ``N`` (default 16384).

In ``ROUNDS`` interleaved rounds (turning order, after a warm-up call of each): one call with ``phases=`` (each
phase synchronized: ``scaling``, ``residues``, ``gemm``, ``crt``, ...), then the CUDA-event time of a loop of
``LOOP`` back-to-back calls on the stream (device time per call, any idle gap a read of the count leaves
included). The medians per phase and per run, and the paired ratio of the loops (fixed over auto, round by
round), say whether the count read's synchronisation shows in the device's time. Writes
``$OUT/ozaki2-auto-phases.json``. Run on the device from the repository root:
``PYTHONPATH=$PWD:$PWD/results/published/scripts python3 results/published/scripts/ozaki2_auto_phases.py``
(about 40 s on an H200).
"""

import os
import statistics
from functools import partial

from ozaki2_as_called import inputs  # this folder's scripts
from rounds import device_ms, turning, write_json

from experiments.core.environment import environment
from gpu import ozaki2
from gpu.backend import get_backend

N, ROUNDS, LOOP = (int(os.environ.get(k, d)) for k, d in (("N", 16384), ("ROUNDS", 10), ("LOOP", 3)))
RUNS = {"auto-w1": {"level": 1}, "fast-15-w1": {"level": 1, "moduli": 15, "scaling": "fast"}}


def sample(be, A, B, options: dict) -> dict:
    """One call's phases (seconds, each synchronized), then the device ms per call of a loop of calls."""
    phases: dict[str, float] = {}
    ozaki2.matmul(A, B, backend=be, phases=phases, **options)
    loop_ms = device_ms(lambda: [ozaki2.matmul(A, B, backend=be, **options) for _ in range(LOOP)]) / LOOP
    return {"phases_ms": {k: 1e3 * v for k, v in phases.items()}, "loop_ms": loop_ms}


def main() -> None:
    be = get_backend("cupy")
    A, B = inputs(N)
    for options in RUNS.values():
        sample(be, A, B, options)
        sample(be, A, B, options)
    calls = {name: partial(sample, be, A, B, options) for name, options in RUNS.items()}
    samples = turning(calls, ROUNDS, lambda call: call())
    out = {"script": "results/published/scripts/ozaki2_auto_phases.py", "environment": environment(be), "n": N,
           "loop": LOOP, "rounds": ROUNDS, "runs": {}}
    for name, rows in samples.items():
        phases = {k: statistics.median(r["phases_ms"][k] for r in rows) for k in rows[0]["phases_ms"]}
        out["runs"][name] = {"phases_median_ms": phases, "phases_sum_ms": sum(phases.values()),
                             "loop_ms_per_call": statistics.median(r["loop_ms"] for r in rows), "samples": rows}
    loops = [r["loop_ms"] for r in samples["auto-w1"]], [r["loop_ms"] for r in samples["fast-15-w1"]]
    out["auto_over_fixed_paired"] = statistics.median(a / f for a, f in zip(*loops, strict=True))
    write_json(out, "ozaki2-auto-phases.json")
    print({k: (round(v["phases_sum_ms"], 2), round(v["loop_ms_per_call"], 3)) for k, v in out["runs"].items()},
          "auto/fixed", round(out["auto_over_fixed_paired"], 4), flush=True)


if __name__ == "__main__":
    main()
