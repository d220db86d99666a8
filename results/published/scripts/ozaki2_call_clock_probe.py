"""Does scheme II's whole call at N = 32768 run faster in the phases where the board holds 1980 MHz?

``ozaki2_gemm_clock_probe.py`` found the INT8 GEMMs in one of two states under sustained load: 1980 MHz at 490-690 W
or 1545-1620 MHz at 692 W with the power cap as the reason, alternating from one phase after DGEMM to the next.
This probe runs the same phases with the public call (``ozaki2.matmul(A, B, moduli=15, level=1, out=C)``, phi = 1
operands, the plan built and its graph captured first) in place of the GEMMs: ``ROUNDS`` rounds of ``HEAT_S``
seconds of DGEMM (``cupy.matmul(A, B, out=D)``) and ``PHASE_S`` seconds of calls, each sample one call by events
with NVML read after it. JSON to ``$OUT/ozaki2-call-clock-probe.json``. (The two states were an artefact of that
probe: its fast sets read nearly all-zero memory. The call's residues are real, and its GEMMs run at the cap.)

    OUT=dir PYTHONPATH=/tmp/site:$PWD:$PWD/results/published/scripts \\
        python3 results/published/scripts/ozaki2_call_clock_probe.py
"""

import os
import statistics

import cupy as cp
import pynvml
from ozaki2_gemm_clock_probe import phase
from rounds import write_json

from experiments.core.environment import environment
from gpu import ozaki2
from gpu.backend import get_backend

N, ROUNDS = int(os.environ.get("N", 32768)), int(os.environ.get("ROUNDS", 4))
PHASE_S, HEAT_S = float(os.environ.get("PHASE_S", 10)), float(os.environ.get("HEAT_S", 5))


def main() -> None:
    be = get_backend("cupy")
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    rng = cp.random.default_rng(0)
    A, B = rng.standard_normal((N, N)), rng.standard_normal((N, N))
    C, D = cp.empty((N, N)), cp.empty((N, N))
    call = lambda: ozaki2.matmul(A, B, moduli=15, level=1, out=C)  # noqa: E731
    dgemm = lambda: cp.matmul(A, B, out=D)  # noqa: E731
    for run in (call, call, call, dgemm):
        run()
    phases = []
    for r in range(ROUNDS):
        for name, run, seconds in ((f"DGEMM {r}", dgemm, HEAT_S), (f"call {r}", call, PHASE_S)):
            samples = phase(run, seconds, handle)
            summary = {k: statistics.median(s[k] for s in samples[1:] or samples)
                       for k in ("ms", "sm_mhz", "power_w", "temp_c")}
            phases.append({"phase": name, "median_after_first": summary, "samples": samples})
            print(name, len(samples), [(round(s["ms"], 1), s["sm_mhz"], round(s["power_w"])) for s in samples],
                  flush=True)
    write_json({"script": "results/published/scripts/ozaki2_call_clock_probe.py", "environment": environment(be),
                "command": f"N={N} ROUNDS={ROUNDS} PHASE_S={PHASE_S} HEAT_S={HEAT_S} OUT=dir python3 "
                           "results/published/scripts/ozaki2_call_clock_probe.py", "phases": phases},
               "ozaki2-call-clock-probe.json")


if __name__ == "__main__":
    main()
