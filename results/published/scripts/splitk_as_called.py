"""Split-K as a user calls it, beside its executor and cuBLAS, on this GPU (FP64).

Per point m = n in ``SIZES`` by k in ``KS``: uniform [0, 1) operands drawn on the device, then ``ROUNDS``
rounds (at least 10), each timing one sample of every method in an order that turns by one each round. A
sample issues ``CALLS`` back-to-back calls, then synchronises once, as a user's loop does; it records the
wall time per call (``time.perf_counter`` around the loop and the synchronisation), the host time per call
(until the loop has issued its last call), and the device time per call (CUDA events on the current stream
around the loop), with NVML's SM clock, power and throttle reasons at its start and end. The methods:

* ``matmul``: ``splitk.matmul(A, B)``, every argument at its default (a new C per call, the plan kept);
* ``matmul_atomic``: ``splitk.matmul(A, B, deterministic=False)``, the one default that could change;
* ``run``: the executor ``gpu.splitk.api.run`` on a split made beforehand, into one C (as the split-K
  benchmark times it: its workspace from the memory pool per call);
* ``cupy_matmul``: ``cupy.matmul(A, B)`` (cuBLAS, a new C per call): the baseline;
* with ``ROOF=1``, ``read``: a kernel that reads A and B once and does nothing else (``read16`` of
  ``splitk_roof.py``, 16 blocks of 256 threads per SM): the device's read roof, timed the same way.

Each point reports the medians and the per-round ratios of cuBLAS over each method, as called (wall) and on
the device (events); before any timing, each method's product is checked against cuBLAS's
(max |C - C_cublas| / max |C_cublas|). Run on the GPU from the repository root::

    PYTHONPATH=$PWD python results/published/scripts/splitk_as_called.py

``SIZES`` (default 16,32,64), ``KS`` (default 1048576,4194304,16777216), ``ROUNDS`` (default 10) and
``CALLS`` (default 40) override; the JSON goes to ``$OUT/splitk-as-called.json`` (stdout without ``$OUT``), with
``records`` of the shape ``as_called_tables.py`` renders (``experiments.papers.as_called_formats``).
About 30 s of timing on an H200 with the defaults (1760 calls per point), well under 90 s with compilation.
"""
import json
import os
import platform
import statistics
import subprocess
import time

import cupy
import numpy as np
from rounds import turning

from experiments.papers.as_called_formats import written
from gpu import splitk
from gpu.backend import get_backend
from gpu.backend.telemetry import reason_names
from gpu.splitk.api import run

SIZES = tuple(int(x) for x in os.environ.get("SIZES", "16,32,64").split(","))
KS = tuple(int(x) for x in os.environ.get("KS", f"{2**20},{2**22},{2**24}").split(","))
ROUNDS = max(10, int(os.environ.get("ROUNDS", "10")))
CALLS = int(os.environ.get("CALLS", "40"))
ROOF = os.environ.get("ROOF", "") == "1"


def reading(tel) -> dict | None:
    if tel is None:
        return None
    r = tel.read()
    return {"sm_mhz": r.sm_mhz, "power_w": r.power_w, "reasons": reason_names(r.reasons)}


def sample(be, tel, work) -> dict:
    """One sample: CALLS calls back to back, one synchronisation; seconds per call and the device's state."""
    be.synchronize()
    start_state = reading(tel)
    stream = be.current_stream()
    begin, end = cupy.cuda.Event(), cupy.cuda.Event()
    t0 = time.perf_counter()
    begin.record(stream)
    for _ in range(CALLS):
        work()
    end.record(stream)
    t1 = time.perf_counter()
    end.synchronize()
    t2 = time.perf_counter()
    return {"wall_s": (t2 - t0) / CALLS, "host_s": (t1 - t0) / CALLS,
            "device_s": cupy.cuda.get_elapsed_time(begin, end) / 1e3 / CALLS,
            "start": start_state, "end": reading(tel)}


def turning_rounds(be, tel, named: dict, rounds: int) -> dict[str, list[dict]]:
    """One untimed sample of each method (plans, kernels and the pool's blocks), then ``rounds`` rounds of one
    :func:`sample` each, in an order that turns by one each round."""
    for work in named.values():
        sample(be, tel, work)
    return turning(named, rounds, lambda work: sample(be, tel, work))


def works(be, A, B, C) -> dict:
    ops = be.ops("splitk")
    (m, k), n = A.shape, B.shape[1]
    split = ops.split(A.dtype, m, n, k)
    named = {"matmul": lambda: splitk.matmul(A, B),
             "matmul_atomic": lambda: splitk.matmul(A, B, deterministic=False),
             "run": lambda: run(be, ops, split, A, B, C, 1.0, 0.0),
             "cupy_matmul": lambda: cupy.matmul(A, B)}
    if ROOF:
        from splitk_roof import _READ

        blocks = 16 * cupy.cuda.Device().attributes["MultiProcessorCount"]
        sink = cupy.zeros(blocks)
        args = (A, np.int64(A.size // 2), B, np.int64(B.size // 2), sink)
        named["read"] = lambda: _READ((blocks,), (256,), args)
    return named, split


def check(be, named, A, B, C) -> dict[str, float]:
    """Each method's max |C - cuBLAS's| over max |cuBLAS's|, before anything is timed (the read roof has none)."""
    want = cupy.matmul(A, B)
    scale = float(cupy.abs(want).max())
    errors = {}
    for name, work in named.items():
        if name == "read":
            continue
        C.fill(cupy.nan)
        got = work()
        got = C if got is None else got
        errors[name] = float(cupy.abs(got - want).max()) / scale
    return errors


def point(be, tel, m: int, k: int) -> dict:
    rng = cupy.random.default_rng(m * 7 + k)
    A, B, C = rng.random((m, k)), rng.random((k, m)), cupy.empty((m, m))
    named, split = works(be, A, B, C)
    errors = check(be, named, A, B, C)
    samples = turning_rounds(be, tel, named, ROUNDS)
    med = {name: {key: statistics.median(s[key] for s in runs) for key in ("wall_s", "host_s", "device_s")}
           for name, runs in samples.items()}
    base = samples["cupy_matmul"]
    ratios = {name: {"as_called": statistics.median(b["wall_s"] / s["wall_s"] for b, s in zip(base, runs)),
                     "device": statistics.median(b["device_s"] / s["device_s"] for b, s in zip(base, runs))}
              for name, runs in samples.items()}
    del A, B, C, named
    cupy.get_default_memory_pool().free_all_blocks()
    return {"m": m, "n": m, "k": k, "split": split.as_dict(), "check_error": errors, "median": med,
            "cublas_over": ratios, "samples": samples}


def versions(be) -> dict:
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = None
    return {**be.device_info(), "numpy": np.__version__, "python": platform.python_version(), "commit": commit}


def main() -> None:
    be = get_backend("cupy")
    tel = be.telemetry()
    started = time.perf_counter()
    out = {"script": "results/published/scripts/splitk_as_called.py", "dtype": "float64", "calls": CALLS,
           "rounds": ROUNDS, "environment": versions(be), "points": []}
    for m in SIZES:
        for k in KS:
            p = point(be, tel, m, k)
            out["points"].append(p)
            r, med = p["cublas_over"], p["median"]
            print(f"m = n = {m:3d}, k = 2^{int(np.log2(k))}: matmul {1e3 * med['matmul']['wall_s']:.3f} ms "
                  f"({r['matmul']['as_called']:.3f}x, host {1e3 * med['matmul']['host_s']:.3f} ms), atomic "
                  f"{r['matmul_atomic']['as_called']:.3f}x, run {1e3 * med['run']['device_s']:.3f} ms "
                  f"({r['run']['device']:.3f}x device), cuBLAS {1e3 * med['cupy_matmul']['wall_s']:.3f} ms",
                  flush=True)
    out["seconds"] = time.perf_counter() - started
    out.update(written(out, "splitk_as_called.py"))
    text = json.dumps(out, indent=1)
    if os.environ.get("OUT"):
        os.makedirs(os.environ["OUT"], exist_ok=True)
        with open(os.path.join(os.environ["OUT"], "splitk-as-called.json"), "w") as fh:
            fh.write(text)
    else:
        print(text)


if __name__ == "__main__":
    main()
