"""Does the INT8 GEMMs' rate under the 700 W cap depend on the size of the integers they multiply?

At N = 32768 scheme II's level 1 spends 663 ms of a 730 ms call in INT8 GEMMs at about 1394 TOP/s, held by the power
cap, not by the tensor cores' peak. A tensor core's power grows with how many bits of its operands toggle, so
smaller integers might run faster at the same cap. If they ran much faster, smaller moduli (more of them, each
with smaller residues) could pay: moduli of at most 128 keep residues within [-64, 64], but about 8/7 as many
are needed for the same range (17 for 15). This probe measures that rate before any such scheme is built.

Setup: ``GEMMS`` residue GEMMs of N x N x N (:meth:`gpu.backend.Backend.residue_gemm` in the plans' panels, a
level-1 sub-product at N = 32768 each), one stream, on operands drawn uniformly from [-R, R] for each R of
``RANGES`` (127: the residues of moduli near 256; 63: moduli of at most 128; then smaller; 0: all zeros). Each
sample is the whole set of GEMMs timed by events; ``ROUNDS`` rounds, the ranges turning; a warm-up of
``WARM_S`` seconds of GEMMs first, so that every sample runs at the cap. Medians, TOP/s, and the NVML reading
after each sample (power, SM clock, throttle reasons). JSON to ``$OUT/ozaki2-data-power-probe.json``.

    OUT=dir PYTHONPATH=/tmp/site:$PWD:$PWD/results/published/scripts \\
        python3 results/published/scripts/ozaki2_data_power_probe.py
"""

import os
import statistics
import time

import cupy as cp
from rounds import device_ms, turning, write_json

from experiments.core.environment import environment
from gpu.backend import get_backend
from gpu.ozaki2.gemms import panels, planned, run_planned

N = int(os.environ.get("N", 16384))
GEMMS, ROUNDS = int(os.environ.get("GEMMS", 15)), int(os.environ.get("ROUNDS", 10))
RANGES = os.environ.get("RANGES", "127,63,31,7,0").split(",")
WARM_S = float(os.environ.get("WARM_S", 20))
MODULI = (256, 255, 253, 251, 247, 241, 239, 233, 229, 227, 223, 217, 211, 199, 197, 193)


def gemm_set(be, a, b, r, tiles):
    """The GEMMS residue GEMMs of a @ b.T into r, one modulus each, as one callable that keeps a, b and r alive.

    The planned issuers hold the arrays' addresses only. Until 2026-12-02 (gemmlab 8872fce) this callable did not
    hold the arrays: a caller that drew a new pair into the same names freed the last one, the pool gave its
    memory to later arrays, and the GEMMs read whatever was written there last. The runs of that date before the
    fix (``h200-ozaki2-data-power-probe.json``, ``h200-ozaki2-gemm-clock-probe-1.json``, ``-2.json``) measured
    other data than their ranges say."""
    calls = [planned(be, a, b, r, tiles, MODULI[t % len(MODULI)]) for t in range(GEMMS)]
    if any(c is None for c in calls):
        raise SystemExit("the residue GEMM is not built (GEMMLAB_KERNEL_DIR)")
    gemms = [c for group in calls for c in group]
    return lambda held=(a, b, r): run_planned(be, gemms)


def main() -> None:
    be = get_backend("cupy")
    rng = cp.random.default_rng(1)
    tiles, r = panels(N, N), cp.empty((N, N), dtype=cp.int8)
    runs = {}
    for R in map(int, RANGES):
        a = rng.integers(-R, R + 1, (N, N), dtype=cp.int8)
        b = rng.integers(-R, R + 1, (N, N), dtype=cp.int8)
        runs[f"R{R}"] = gemm_set(be, a, b, r, tiles)
    telemetry = be.telemetry()
    start = time.perf_counter()
    while time.perf_counter() - start < WARM_S:
        device_ms(runs[f"R{RANGES[0]}"])
    readings = {k: [] for k in runs}

    def sample(run):
        ms = device_ms(run)
        if telemetry is not None:
            name = next(k for k, v in runs.items() if v is run)
            readings[name].append(telemetry.read().as_dict())
        return ms
    samples = turning(runs, ROUNDS, sample)
    ops = 2.0 * N**3 * GEMMS
    med = {k: statistics.median(v) for k, v in samples.items()}
    base = med[f"R{RANGES[0]}"]
    out = {"script": "results/published/scripts/ozaki2_data_power_probe.py", "environment": environment(be),
           "command": f"N={N} GEMMS={GEMMS} ROUNDS={ROUNDS} RANGES={','.join(RANGES)} WARM_S={WARM_S} "
                      "OUT=dir python3 results/published/scripts/ozaki2_data_power_probe.py",
           "gemm_tiles": len(tiles), "ms": med, "samples_ms": samples,
           "tops": {k: ops / v / 1e9 for k, v in med.items()},
           "speed_over_first": {k: base / v for k, v in med.items()}, "telemetry": readings}
    for k in runs:
        watts = [x["power_w"] for x in readings[k]]
        mhz = [x["sm_mhz"] for x in readings[k]]
        print(k, round(med[k], 2), "ms", round(out["tops"][k]), "TOP/s", round(out["speed_over_first"][k], 4), "x",
              "W", statistics.median(watts) if watts else None, "MHz", statistics.median(mhz) if mhz else None,
              flush=True)
    write_json(out, "ozaki2-data-power-probe.json")


if __name__ == "__main__":
    main()
