"""Does the INT8 GEMMs' state flip with each DGEMM phase before them, on the same operands?

In the first runs of ``ozaki2_gemm_clock_probe.py`` each range R had its own operand pair, and every second phase
after DGEMM ran fast (1980 MHz, 490-690 W) while the others ran capped (about 1600 MHz, 692 W). With no DGEMM
between phases (``ozaki2_placement_probe.py``) every pair ran capped, whatever its content or place. This probe
keeps one pair (drawn from [-127, 127]) and runs the phases of ``SEQUENCE``: ``G<s>`` is s seconds of the set of
``GEMMS`` residue GEMMs (N x N x N each), ``D<s>`` s seconds of DGEMM (``cupy.matmul`` of N x N float64), ``I<s>``
s seconds idle. If the state follows the phases' order on the same operands, it flips after each DGEMM phase. The
short DGEMM phases ask how little DGEMM does it. Samples and their NVML readings as in that probe (its
:func:`phase`). JSON to ``$OUT/ozaki2-toggle-probe.json``.

    OUT=dir PYTHONPATH=/tmp/site:$PWD:$PWD/results/published/scripts \\
        python3 results/published/scripts/ozaki2_toggle_probe.py
"""

import os
import time

import cupy as cp
import pynvml
from ozaki2_data_power_probe import gemm_set
from ozaki2_gemm_clock_probe import board, phase, second_half
from rounds import device_ms, write_json

from experiments.core.environment import environment
from gpu.backend import get_backend
from gpu.ozaki2.gemms import panels

N = int(os.environ.get("N", 16384))
SEQUENCE = os.environ.get("SEQUENCE", "I3,G8,D5,G8,D5,G8,D5,G8,D5,G8,D1,G8,D1,G8,D0.2,G8,D0.2,G8").split(",")


def main() -> None:
    be = get_backend("cupy")
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    settings = board(handle)
    rng = cp.random.default_rng(1)
    a, b = (rng.integers(-127, 128, (N, N), dtype=cp.int8) for _ in range(2))
    gemms = gemm_set(be, a, b, cp.empty((N, N), dtype=cp.int8), panels(N, N))
    A, B, D = rng.standard_normal((N, N)), rng.standard_normal((N, N)), cp.empty((N, N))
    runs = {"G": gemms, "D": lambda: cp.matmul(A, B, out=D)}
    for run in runs.values():
        device_ms(run)
    phases = []
    for i, step in enumerate(SEQUENCE):
        kind, seconds = step[0], float(step[1:])
        if kind == "I":
            time.sleep(seconds)
            continue
        samples = phase(runs[kind], seconds, handle)
        summary = second_half(samples)
        phases.append({"phase": f"{i} {step}", "second_half_median": summary, "samples": samples})
        print(i, step, len(samples), "first", [(round(s["ms"], 1), s["sm_mhz"], round(s["power_w"]))
                                               for s in samples[:3]], "second half", summary, flush=True)
    write_json({"script": "results/published/scripts/ozaki2_toggle_probe.py", "environment": environment(be),
                "board": settings, "command": f"N={N} SEQUENCE={','.join(SEQUENCE)} OUT=dir python3 "
                                              "results/published/scripts/ozaki2_toggle_probe.py",
                "phases": phases}, "ozaki2-toggle-probe.json")


if __name__ == "__main__":
    main()
