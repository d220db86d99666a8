"""What sets the INT8 GEMMs' clock under the 700 W cap: the board's history, or the integers they multiply?

On one H200, the 15 residue GEMMs of a level-1 sub-product at N = 32768 (16384 x 16384 x 16384 each) ran at
1980 MHz and 1764 TOP/s after a minute of nothing but those GEMMs, drawing about 690 W, just under the cap; right
after scheme II's calls and DGEMMs at the cap the same GEMMs ran at 1605 MHz and 1421 TOP/s, drawing 692 W
(``ozaki2_data_power_probe.py``, ``ozaki2_cap_probe.py``). This probe runs phases of back-to-back samples, each
sample the set of ``GEMMS`` GEMMs timed by events, and reads NVML after each (SM clock, power, GPU temperature,
throttle reasons):

``R127`` from an idle device, then ``DGEMM`` (``cupy.matmul`` of N x N float64, to reach the cap), then the
GEMMs on operands drawn from [-R, R] for R = 127 (residues of moduli near 256), 63 (moduli of at most 128),
31 and 0, each after its own DGEMM phase; last, ``IDLE_S`` seconds of nothing and ``R127`` again. Each phase
runs ``PHASE_S`` seconds (``HEAT_S`` for DGEMM). JSON to ``$OUT/ozaki2-gemm-clock-probe.json``.

    OUT=dir PYTHONPATH=/tmp/site:$PWD:$PWD/results/published/scripts \\
        python3 results/published/scripts/ozaki2_gemm_clock_probe.py
"""

import os
import statistics
import time

import cupy as cp
import pynvml
from ozaki2_data_power_probe import gemm_set
from rounds import device_ms, write_json

from experiments.core.environment import environment
from gpu.backend import get_backend
from gpu.ozaki2.gemms import panels

N = int(os.environ.get("N", 16384))
PHASE_S, HEAT_S, IDLE_S = (float(os.environ.get(k, d)) for k, d in (("PHASE_S", 15), ("HEAT_S", 10),
                                                                      ("IDLE_S", 20)))
RANGES = [int(x) for x in os.environ.get("RANGES", "127,63,31,0").split(",")]


def phase(run, seconds: float, handle) -> list[dict]:
    """Samples of ``run`` for ``seconds``: ms by events, then NVML's SM clock, power, temperature and reasons."""
    out, start = [], time.perf_counter()
    while time.perf_counter() - start < seconds:
        ms = device_ms(run)
        out.append({"t": time.perf_counter() - start, "ms": ms,
                    "sm_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
                    "power_w": pynvml.nvmlDeviceGetPowerUsage(handle) / 1e3,
                    "temp_c": pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU),
                    "reasons": pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle)})
    return out


def main() -> None:
    be = get_backend("cupy")
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    rng = cp.random.default_rng(1)
    tiles, r = panels(N, N), cp.empty((N, N), dtype=cp.int8)
    gemms, data = {}, {}
    for R in RANGES:
        a, b = (rng.integers(-R, R + 1, (N, N), dtype=cp.int8) for _ in range(2))
        data[R] = {"min": int(a.min()), "max": int(a.max()), "mean_abs": float(cp.abs(a.astype(cp.float32)).mean()),
                   "zeros": float((a == 0).mean()), "distinct": int(cp.unique(a).size)}
        print("R", R, data[R], flush=True)
        gemms[R] = gemm_set(be, a, b, r, tiles)
    A, B, D = rng.standard_normal((N, N)), rng.standard_normal((N, N)), cp.empty((N, N))
    dgemm = lambda: cp.matmul(A, B, out=D)  # noqa: E731
    for run in (*gemms.values(), dgemm):
        device_ms(run)
    time.sleep(IDLE_S)
    plan = [(f"R{RANGES[0]} from idle", gemms[RANGES[0]], PHASE_S)]
    for R in RANGES:
        plan += [(f"DGEMM before R{R}", dgemm, HEAT_S), (f"R{R} after DGEMM", gemms[R], PHASE_S)]
    plan += [("idle", None, IDLE_S), (f"R{RANGES[0]} after idle", gemms[RANGES[0]], PHASE_S)]
    phases = []
    for name, run, seconds in plan:
        if run is None:
            time.sleep(seconds)
            continue
        samples = phase(run, seconds, handle)
        tail = samples[len(samples) // 2:]
        summary = {k: statistics.median(s[k] for s in tail) for k in ("ms", "sm_mhz", "power_w", "temp_c")}
        phases.append({"phase": name, "second_half_median": summary, "samples": samples})
        print(name, len(samples), "first", [(round(s["ms"], 1), s["sm_mhz"], round(s["power_w"]), s["temp_c"])
                                            for s in samples[:3]], "second half", summary, flush=True)
    write_json({"script": "results/published/scripts/ozaki2_gemm_clock_probe.py", "environment": environment(be),
                "command": f"N={N} RANGES={','.join(map(str, RANGES))} PHASE_S={PHASE_S} HEAT_S={HEAT_S} "
                           f"IDLE_S={IDLE_S} OUT=dir python3 "
                           "results/published/scripts/ozaki2_gemm_clock_probe.py",
                "gemm_ops": 2.0 * N**3 * 15, "data": data, "phases": phases}, "ozaki2-gemm-clock-probe.json")


if __name__ == "__main__":
    main()
