"""Is scheme II's call at N = 32768 held by the power cap on its own, or after the DGEMM beside it?

``ozaki2_data_power_probe.py`` ran the 15 residue GEMMs of one level-1 sub-product at 1980 MHz and about 570-600 W,
below the 700 W cap, while the whole call, timed beside DGEMM in the same rounds, ran at 1605-1635 MHz with the
cap as the throttle reason. This probe times each call on its own by CUDA events, with NVML read every
``EVERY_MS`` ms by a thread, in three phases on one plan (``ozaki2.matmul(A, B, moduli=15, level=1, out=C)``,
phi = 1 operands, the plan built and its graph captured first):

* ``alone``: ``CALLS`` calls back to back, nothing else on the device;
* ``after-dgemm``: ``CALLS`` DGEMMs (``cupy.matmul(A, B, out=D)``), then ``CALLS`` calls;
* ``alone-again``: as ``alone``, after the DGEMMs;

then one call with ``phases=`` (each phase synchronised: the GEMMs' own time inside the call).

Per call: milliseconds, and the median SM clock and power NVML read while it ran. JSON to
``$OUT/ozaki2-cap-probe.json``.

    OUT=dir PYTHONPATH=/tmp/site:$PWD:$PWD/results/published/scripts \\
        python3 results/published/scripts/ozaki2_cap_probe.py
"""

import os
import statistics
import threading
import time

import cupy as cp
from rounds import write_json

from experiments.core.environment import environment
from gpu import ozaki2
from gpu.backend import get_backend

N, CALLS = int(os.environ.get("N", 32768)), int(os.environ.get("CALLS", 5))
EVERY_MS = float(os.environ.get("EVERY_MS", 20))


class Sampler(threading.Thread):
    """NVML readings (seconds since its start, SM MHz, W) every EVERY_MS ms until stopped."""

    def __init__(self, telemetry) -> None:
        super().__init__(daemon=True)
        self.telemetry, self.readings, self.stop, self.t0 = telemetry, [], threading.Event(), time.perf_counter()

    def run(self) -> None:
        while not self.stop.is_set():
            r = self.telemetry.read()
            self.readings.append((time.perf_counter() - self.t0, r.sm_mhz, r.power_w, r.reasons))
            time.sleep(EVERY_MS / 1e3)


def timed(call, sampler: Sampler) -> dict:
    """One call by events, with the NVML readings taken while it ran."""
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    t0 = time.perf_counter() - sampler.t0
    start.record()
    call()
    stop.record()
    stop.synchronize()
    t1 = time.perf_counter() - sampler.t0
    inside = [r for r in sampler.readings if t0 <= r[0] <= t1]
    return {"ms": cp.cuda.get_elapsed_time(start, stop), "readings": len(inside),
            "sm_mhz": statistics.median(r[1] for r in inside) if inside else None,
            "power_w": statistics.median(r[2] for r in inside) if inside else None}


def main() -> None:
    be = get_backend("cupy")
    rng = cp.random.default_rng(0)
    A, B = rng.standard_normal((N, N)), rng.standard_normal((N, N))
    C, D = cp.empty((N, N)), cp.empty((N, N))
    call = lambda: ozaki2.matmul(A, B, moduli=15, level=1, out=C)  # noqa: E731
    dgemm = lambda: cp.matmul(A, B, out=D)  # noqa: E731
    for _ in range(3):
        call()
    dgemm()
    cp.cuda.Device().synchronize()
    sampler = Sampler(be.telemetry())
    sampler.start()
    phases = {"alone": [timed(call, sampler) for _ in range(CALLS)]}
    phases["dgemm"] = [timed(dgemm, sampler) for _ in range(CALLS)]
    phases["after-dgemm"] = [timed(call, sampler) for _ in range(CALLS)]
    phases["alone-again"] = [timed(call, sampler) for _ in range(CALLS)]
    parts = {}
    ozaki2.matmul(A, B, moduli=15, level=1, out=C, phases=parts)
    sampler.stop.set()
    sampler.join()
    out = {"script": "results/published/scripts/ozaki2_cap_probe.py", "environment": environment(be),
           "command": f"N={N} CALLS={CALLS} EVERY_MS={EVERY_MS} OUT=dir python3 "
                      "results/published/scripts/ozaki2_cap_probe.py",
           "phases": phases, "phase_ms": {k: 1e3 * v for k, v in parts.items()}, "readings": sampler.readings}
    print("phases (each synchronised):", {k: round(v, 1) for k, v in out["phase_ms"].items()})
    for name, calls in phases.items():
        print(name, [(round(c["ms"], 1), c["sm_mhz"], round(c["power_w"] or 0)) for c in calls], flush=True)
    write_json(out, "ozaki2-cap-probe.json")


if __name__ == "__main__":
    main()
