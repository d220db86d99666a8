"""``matmul(A, B)`` (``level="auto"``, every other argument at its default) against ``A @ B`` on this device.

The check a user makes after ``make run`` (which calibrates the device and writes its profile): does the
default call ever run slower than the plain product? Per size, one operand pair of uniform [0, 1) FP64
matrices; then ``SAMPLES`` rounds, each timing one sample of both in alternating order (ABBA: drift and the
second call's warm cache fall on both alike). A sample makes one untimed call, then issues calls back
to back until at least ``SAMPLE_S`` seconds have passed (one call at the large sizes), synchronised at its
end, and records the time per call. The untimed call is there because the two run different BLAS
libraries on the CPU (NumPy's OpenBLAS and SciPy's): after its last call one library's threads keep
spinning for a while, and on two cores the first call of the other after a switch runs up to 15%
slower (a 1024 GEMM: 45 against 39 ms), which measures the switch, not the method (``WARM=0`` keeps it).
Reports per size the level auto resolves, both medians and ``A @ B`` over ``matmul``
(1: as fast; above 1: auto faster), with the median and range of the per-round ratios (each round's two
samples are neighbours in time, so its ratio is the least disturbed by a loaded machine's drift).

At level 0 ``matmul`` runs the same GEMM through SciPy's BLAS (``gpu.backend.cpu_blas``) where ``A @ B``
runs NumPy's, after its host work (the finite scan, the memory check, the level lookup), so the ratio
there is those differences, not the level.

Run from the repository root, with the profile directory the calibration wrote::

    GEMMLAB_PROFILES=results/profiles PYTHONPATH=$PWD python results/published/scripts/auto_vs_matmul.py

``SIZES`` (default 256,512,1024,2048,4096), ``SAMPLES`` (default 15), ``SAMPLE_S`` (default 0.2) and
``BACKEND`` (default numpy) override; the JSON goes to stdout, or to ``$OUT/auto-vs-matmul.json``.
"""
import json
import os
import statistics
import time

import numpy as np

from gpu.backend import get_backend
from gpu.profile import backend_profile, device_name, profile_path, regime_levels
from gpu.strassen import matmul, resolve_auto_level

SIZES = tuple(int(n) for n in os.environ.get("SIZES", "256,512,1024,2048,4096").split(","))
SAMPLES = int(os.environ.get("SAMPLES", "15"))
SAMPLE_S = float(os.environ.get("SAMPLE_S", "0.2"))


WARM = os.environ.get("WARM", "1") != "0"


def sample(be, work, calls: int, warm: bool = False) -> float:
    """Seconds per call of ``calls`` back-to-back calls (after one untimed call where ``warm``), synchronised
    at the end."""
    if warm:
        work()
    be.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        work()
    be.synchronize()
    return (time.perf_counter() - start) / calls


def measure(be, n: int) -> dict:
    rng = np.random.default_rng(n)
    A, B = (be.xp.asarray(rng.random((n, n))) for _ in range(2))
    works = {"A @ B": lambda: A @ B, "matmul": lambda: matmul(A, B, backend=be)}
    for work in works.values():
        work()
    calls = max(1, round(SAMPLE_S / sample(be, works["A @ B"], 1)))
    times = {name: [] for name in works}
    for i in range(SAMPLES):
        order = list(works) if i % 2 == 0 else list(works)[::-1]
        for name in order:
            times[name].append(sample(be, works[name], calls, WARM))
    ratios = [a / m for a, m in zip(times["A @ B"], times["matmul"])]
    med = {name: statistics.median(t) for name, t in times.items()}
    return {"size": n, "auto_level": resolve_auto_level(n, n, n, be), "calls_per_sample": calls,
            "samples": SAMPLES, "a_at_b_s": med["A @ B"], "matmul_s": med["matmul"],
            "a_at_b_over_matmul": med["A @ B"] / med["matmul"], "per_round_ratio_median": statistics.median(ratios),
            "per_round_ratio_range": [min(ratios), max(ratios)],
            "samples_s": times}


def main() -> None:
    be = get_backend(os.environ.get("BACKEND", "numpy"))
    profile = backend_profile(be)
    out = {"device": device_name(be), "backend": be.name, "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
           "warm_call_per_sample": WARM,
           "profile": str(profile_path(be.name, device_name(be))),
           "profile_env_key": (profile or {}).get("env_key"), "profile_table_rum": regime_levels(profile)[0].get("rum"),
           "points": []}
    for n in SIZES:
        point = measure(be, n)
        out["points"].append(point)
        print(f"N = {n}: level {point['auto_level']}, A @ B {1e3 * point['a_at_b_s']:.2f} ms, matmul "
              f"{1e3 * point['matmul_s']:.2f} ms, A @ B / matmul {point['a_at_b_over_matmul']:.3f} "
              f"(per round: median {point['per_round_ratio_median']:.3f}, "
              f"{point['per_round_ratio_range'][0]:.3f}-{point['per_round_ratio_range'][1]:.3f})",
              flush=True)
    text = json.dumps(out, indent=1)
    if os.environ.get("OUT"):
        os.makedirs(os.environ["OUT"], exist_ok=True)
        with open(os.path.join(os.environ["OUT"], "auto-vs-matmul.json"), "w") as fh:
            fh.write(text)
    else:
        print(text)


if __name__ == "__main__":
    main()
