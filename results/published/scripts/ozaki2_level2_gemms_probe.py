"""Would a second Winograd level pay at N = 32768? The INT8 GEMMs of each level, timed under the 700 W cap.

Scheme II's level 1 at N = 32768 spends about 654 ms of a 717 ms call in its 105 INT8 GEMMs (7 sub-products of
16384 x 16384 over 16384, 15 moduli), held by the power cap. Level 2 would run 735 GEMMs of 8192 x 8192 over 8192:
49/56 of the multiply-adds, but in smaller GEMMs, which ran 4-6% slower per multiply-add at 16384's level 1. This
probe measures the GEMM phase of each level before a second fused level is built, so that the gap to 2.0x DGEMM
can be stated from a measurement, not an estimate.

Each sample is one level's whole GEMM phase, back to back on one stream, timed by CUDA events, with an NVML reading
after it: ``L0`` 15 GEMMs of N x N x N; ``L1`` 7 sets of 15 GEMMs of N/2; ``L2`` 49 sets of 15 GEMMs of N/4, in
the fused level's short-k panels (``gpu.ozaki2.fused_level.SHORT_K_PANEL``, 2048 rows) and, as ``L2-3072``, in
level 0's panels of 3072 rows. Operands are drawn from [-127, 127] (the residues of moduli near 256), one pair per
shape, each product written as residues (:meth:`gpu.backend.Backend.residue_gemm`, the CUTLASS kernel), as the
fused level's GEMMs write them. ``WARM_S`` seconds of ``L1`` first, so that every sample runs at the cap; then
``ROUNDS`` rounds in turning order. JSON to ``$OUT/ozaki2-level2-gemms-probe.json``.

    OUT=dir GEMMLAB_KERNEL_DIR=... PYTHONPATH=/tmp/site:$PWD:$PWD/results/published/scripts \\
        python3 results/published/scripts/ozaki2_level2_gemms_probe.py
"""

import os
import statistics
import time
from collections.abc import Callable

import cupy as cp
from ozaki2_data_power_probe import gemm_set
from rounds import device_ms, turning, write_json

from experiments.core.environment import environment
from gpu.backend import get_backend
from gpu.ozaki2.fused_level import SHORT_K_PANEL
from gpu.ozaki2.gemms import panels

N = int(os.environ.get("N", 32768))
ROUNDS, WARM_S = int(os.environ.get("ROUNDS", 8)), float(os.environ.get("WARM_S", 20))
LEVELS = os.environ.get("LEVELS", "L0,L1,L2,L2-3072").split(",")
GEMMS = 15


def phase(be, rng, side: int, repeats: int, panel) -> Callable[[], None]:
    """``repeats`` sets of the 15 residue GEMMs of side x side over side, in ``panel``'s output panels."""
    a, b = (rng.integers(-127, 128, (side, side), dtype=cp.int8) for _ in range(2))
    r = cp.empty((side, side), dtype=cp.int8)
    one = gemm_set(be, a, b, r, panels(side, side, side, panel))

    def run(held=(a, b, r)):
        for _ in range(repeats):
            one()
    return run


def main() -> None:
    be = get_backend("cupy")
    rng = cp.random.default_rng(1)
    shapes = {"L0": (N, 1, None), "L1": (N // 2, 7, None), "L2": (N // 4, 49, SHORT_K_PANEL),
              "L2-3072": (N // 4, 49, None)}
    runs = {k: phase(be, rng, *shapes[k]) for k in LEVELS}
    ops = {k: 2.0 * shapes[k][0] ** 3 * GEMMS * shapes[k][1] for k in LEVELS}
    for run in runs.values():
        device_ms(run)
    warm = runs["L1"] if "L1" in runs else next(iter(runs.values()))
    start = time.perf_counter()
    while time.perf_counter() - start < WARM_S:
        device_ms(warm)
    telemetry = be.telemetry()
    readings = {k: [] for k in runs}

    def sample(run):
        ms = device_ms(run)
        if telemetry is not None:
            readings[next(k for k, v in runs.items() if v is run)].append(telemetry.read().as_dict())
        return ms
    samples = turning(runs, ROUNDS, sample)
    med = {k: statistics.median(v) for k, v in samples.items()}
    out = {"script": "results/published/scripts/ozaki2_level2_gemms_probe.py", "environment": environment(be),
           "command": f"N={N} ROUNDS={ROUNDS} WARM_S={WARM_S} LEVELS={','.join(LEVELS)} OUT=dir python3 "
                      "results/published/scripts/ozaki2_level2_gemms_probe.py",
           "shapes": {k: {"side": v[0], "sets": v[1], "panel": v[2]} for k, v in shapes.items() if k in runs},
           "ms": med, "samples_ms": samples, "tops": {k: ops[k] / med[k] / 1e9 for k in runs},
           "telemetry": readings}
    for k in runs:
        watts = [x["power_w"] for x in readings[k]]
        mhz = [x["sm_mhz"] for x in readings[k]]
        print(k, round(med[k], 2), "ms", round(out["tops"][k]), "TOP/s", "W",
              statistics.median(watts) if watts else None, "MHz", statistics.median(mhz) if mhz else None,
              flush=True)
    write_json(out, "ozaki2-level2-gemms-probe.json")


if __name__ == "__main__":
    main()
