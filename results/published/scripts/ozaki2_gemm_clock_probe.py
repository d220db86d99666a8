"""What sets the INT8 GEMMs' clock under the 700 W cap: the board's history, or the integers they multiply?

Samples are back-to-back runs of the set of ``GEMMS`` residue GEMMs of a level-1 sub-product at N = 32768
(16384 x 16384 x 16384 each) timed by events, with NVML read after each (SM clock, power, GPU temperature, throttle
reasons). Until gemm_set (``ozaki2_data_power_probe.py``) held its operands, each range's set read memory that the
pool had given to later arrays: ``-1.json`` and ``-2.json`` saw every second range run at 1980 MHz, and those sets
most likely read the statistics' boolean temporaries (nearly all zeros). With the operands held (``-held.json``),
every range from 127 down to 31 runs at the cap's 1560-1575 MHz, and only all-zero operands hold 1980 MHz.

``R127`` from an idle device, then ``DGEMM`` (``cupy.matmul`` of N x N float64, to reach the cap), then the GEMMs
on operands drawn from [-R, R] for R = 127 (residues of moduli near 256), 63 (moduli of at most 128), 31 and 0
(an entry ``lo:hi`` draws from [lo, hi]), each after its own DGEMM phase; last, ``IDLE_S`` seconds of nothing
and ``R127`` again. Each phase runs ``PHASE_S`` seconds (``HEAT_S`` for DGEMM; ``HEAT_S=0`` leaves the DGEMM
phases out). JSON to ``$OUT/ozaki2-gemm-clock-probe.json``. Since the placement probe
(``ozaki2_placement_probe.py``), each sample also reads the memory clock, the performance state, NVML's
instantaneous power, the power limit in force, the memory's temperature and power, and the file keeps the
operands' device pointers, the board's power-smoothing fields and ``nvidia-smi -q``'s power sections as read at
the start (the runs of ``h200-ozaki2-gemm-clock-probe-1.json`` and ``-2.json`` predate them).

    OUT=dir PYTHONPATH=/tmp/site:$PWD:$PWD/results/published/scripts \\
        python3 results/published/scripts/ozaki2_gemm_clock_probe.py
"""

import os
import statistics
import subprocess
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
RANGES = os.environ.get("RANGES", "127,63,31,0").split(",")


def bounds(entry: str) -> tuple[int, int]:
    """The integers a range entry draws: ``R`` is [-R, R], ``lo:hi`` is [lo, hi]."""
    lo, _, hi = entry.partition(":")
    return (int(lo), int(hi)) if hi else (-int(lo), int(lo))


#: NVML field ids read after each sample (by number: the device's ``pynvml`` may predate the names):
#: instantaneous power, the power limit in force, memory temperature, and the memory's averaged power (the field
#: of averaged power in the memory's scope, 2).
SAMPLE_FIELDS = {"power_instant_mw": 186, "power_limit_w": 190, "memory_temp_c": 82, "memory_power_mw": (185, 2)}
#: Read once: NVML's power-smoothing fields (enabled, privilege, immediate ramp-down, applied ceiling and floor,
#: preset profile, primary and secondary floors), where the board reports them.
BOARD_FIELDS = {"smoothing_enabled": 251, "smoothing_priv_level": 252, "smoothing_imm_ramp_down": 253,
                "smoothing_tmp_ceil": 254, "smoothing_tmp_floor": 255, "smoothing_active_profile": 264,
                "smoothing_primary_floor_w": 275, "smoothing_secondary_floor_w": 276}


def fields(handle, ids: dict[str, int | tuple[int, int]]) -> dict:
    """NVML field values by name; None where the board does not report one."""
    out = {}
    for name, fid in ids.items():
        try:
            v = pynvml.nvmlDeviceGetFieldValues(handle, [fid])[0]
            kind = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")[v.valueType]
            out[name] = getattr(v.value, kind) if v.nvmlReturn == 0 else None
        except (pynvml.NVMLError, IndexError, AttributeError):
            out[name] = None
    return out


def board(handle) -> dict:
    """The board's power settings as read, once: the smoothing fields and ``nvidia-smi -q``'s power sections."""
    smi = subprocess.run(["nvidia-smi", "-q", "-d", "POWER,PERFORMANCE,CLOCK,TEMPERATURE"], capture_output=True,
                         text=True, check=False).stdout
    return {"fields": fields(handle, BOARD_FIELDS), "nvidia_smi_q": smi}


#: What a phase's summary gives: the median of each reading that every sample of its second half has.
SUMMARY_KEYS = ("ms", "sm_mhz", "power_w", "temp_c", "mem_mhz", "power_instant_mw", "memory_power_mw")


def second_half(samples: list[dict]) -> dict:
    """The medians of a phase's second half (its first samples carry the last phase's clock and power)."""
    tail = samples[len(samples) // 2:]
    return {k: statistics.median(s[k] for s in tail) for k in SUMMARY_KEYS if all(s.get(k) is not None for s in tail)}


def phase(run, seconds: float, handle) -> list[dict]:
    """Samples of ``run`` for ``seconds``: ms by events, then NVML's SM and memory clocks, power (averaged and
    instantaneous), temperatures, performance state and reasons."""
    out, start = [], time.perf_counter()
    while time.perf_counter() - start < seconds:
        ms = device_ms(run)
        out.append({"t": time.perf_counter() - start, "ms": ms,
                    "sm_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
                    "mem_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM),
                    "power_w": pynvml.nvmlDeviceGetPowerUsage(handle) / 1e3,
                    "temp_c": pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU),
                    "pstate": pynvml.nvmlDeviceGetPerformanceState(handle),
                    "reasons": pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle),
                    **fields(handle, SAMPLE_FIELDS)})
    return out


def main() -> None:
    be = get_backend("cupy")
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    settings = board(handle)
    print("board", settings["fields"], flush=True)
    rng = cp.random.default_rng(1)
    tiles, r = panels(N, N), cp.empty((N, N), dtype=cp.int8)
    gemms, data = {}, {}
    for R in RANGES:
        lo, hi = bounds(R)
        a, b = (rng.integers(lo, hi + 1, (N, N), dtype=cp.int8) for _ in range(2))
        data[R] = {"min": int(a.min()), "max": int(a.max()), "mean_abs": float(cp.abs(a.astype(cp.float32)).mean()),
                   "zeros": float((a == 0).mean()), "distinct": int(cp.unique(a).size),
                   "a_ptr": a.data.ptr, "b_ptr": b.data.ptr}
        print("R", R, data[R], flush=True)
        gemms[R] = gemm_set(be, a, b, r, tiles)
    A, B, D = rng.standard_normal((N, N)), rng.standard_normal((N, N)), cp.empty((N, N))
    dgemm = lambda: cp.matmul(A, B, out=D)  # noqa: E731
    for run in (*gemms.values(), dgemm):
        device_ms(run)
    time.sleep(IDLE_S)
    plan = [(f"R{RANGES[0]} from idle", gemms[RANGES[0]], PHASE_S)]
    for R in RANGES:
        after = " after DGEMM" if HEAT_S else ""
        plan += [(f"DGEMM before R{R}", dgemm, HEAT_S), (f"R{R}{after}", gemms[R], PHASE_S)]
    plan += [("idle", None, IDLE_S), (f"R{RANGES[0]} after idle", gemms[RANGES[0]], PHASE_S)]
    phases = []
    for name, run, seconds in plan:
        if run is None or seconds == 0:
            time.sleep(seconds)
            continue
        samples = phase(run, seconds, handle)
        summary = second_half(samples)
        phases.append({"phase": name, "second_half_median": summary, "samples": samples})
        print(name, len(samples), "first", [(round(s["ms"], 1), s["sm_mhz"], round(s["power_w"]), s["temp_c"])
                                            for s in samples[:3]], "second half", summary, flush=True)
    write_json({"script": "results/published/scripts/ozaki2_gemm_clock_probe.py", "environment": environment(be),
                "board": settings,
                "command": f"N={N} RANGES={','.join(RANGES)} PHASE_S={PHASE_S} HEAT_S={HEAT_S} "
                           f"IDLE_S={IDLE_S} OUT=dir python3 "
                           "results/published/scripts/ozaki2_gemm_clock_probe.py",
                "gemm_ops": 2.0 * N**3 * 15, "data": data, "phases": phases}, "ozaki2-gemm-clock-probe.json")


if __name__ == "__main__":
    main()
