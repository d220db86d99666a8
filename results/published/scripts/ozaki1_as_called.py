"""Ozaki scheme I as a user calls it: ``ozaki.matmul(A, B)`` with its defaults (``target="dgemm"``: the slice
count chosen on the device, one 4-byte read per call), beside the fixed-count call the default resolves to and
``cupy.matmul``.

Per N in 2048, 4096, 8192 (phi = 1 operands drawn on the device), interleaved rounds of

* ``as_called``: a loop of back-to-back ``ozaki.matmul(A, B)`` calls, then one synchronize; wall time per call
  (host time included, as a user's loop pays it);
* ``fixed``: ``ozaki.matmul(A, B, slices=S)`` with the S the default chose (``ozaki.configure``), device time by
  CUDA events around one call;
* ``dgemm``: ``cupy.matmul(A, B)``, device time by CUDA events, and as called (``dgemm_as_called``: the same
  loop as ``as_called``);

at least 10 rounds (medians reported), with NVML telemetry (SM clock, power, throttle reasons) around each N and
the versions. ``--slice-format int8`` times ``slice_format="int8"`` instead of the default FP32 slices. Run from
the repository root with ``PYTHONPATH=$PWD``; writes $OUT/ozaki1-as-called.json (with ``records`` of the shape
``as_called_tables.py`` renders) (under 60 s on an H200 with the
defaults: FP32 slices at N = 8192 take about a second a call).
"""

import argparse
import json
import os
import statistics
import time

import cupy
import numpy as np
from rounds import device_ms  # this folder's script

from experiments.core.environment import environment
from experiments.papers.as_called_formats import written
from gpu import ozaki
from gpu.backend import get_backend

be = get_backend("cupy")
ROUNDS, LOOP_SECONDS = 10, 0.05


def operands(n: int, seed: int) -> tuple:
    """phi = 1 operands (a = (u - 0.5) exp(r), u uniform, r normal), drawn on the device."""
    rng = cupy.random.default_rng(seed)
    return tuple((rng.random((n, n)) - 0.5) * cupy.exp(rng.standard_normal((n, n))) for _ in range(2))


def wall_ms(work, calls: int) -> float:
    cupy.cuda.get_current_stream().synchronize()
    begin = time.perf_counter()
    for _ in range(calls):
        work()
    cupy.cuda.get_current_stream().synchronize()
    return (time.perf_counter() - begin) * 1e3 / calls


def reading() -> dict | None:
    tel = be.telemetry()
    return None if tel is None else tel.read().as_dict()


def point(n: int, fmt: str) -> dict:
    A, B = operands(n, n)
    kw = {} if fmt == "fp32" else {"slice_format": fmt}
    default = lambda: ozaki.matmul(A, B, **kw)                          # noqa: E731
    first = wall_ms(default, 1)                                         # plan, kernels, pool
    config = ozaki.configure(A, B, **kw)
    fixed = lambda: ozaki.matmul(A, B, slices=config.slices, **kw)      # noqa: E731
    dgemm = lambda: cupy.matmul(A, B)                                   # noqa: E731
    fixed(), dgemm()
    calls = max(1, round(LOOP_SECONDS / max(device_ms(fixed) / 1e3, 1e-6)))
    before = reading()
    samples = {"as_called": [], "fixed": [], "dgemm": [], "dgemm_as_called": []}
    for _ in range(ROUNDS):
        samples["as_called"].append(wall_ms(default, calls))
        samples["fixed"].append(device_ms(fixed))
        samples["dgemm"].append(device_ms(dgemm))
        samples["dgemm_as_called"].append(wall_ms(dgemm, calls))
    median = {name: statistics.median(v) for name, v in samples.items()}
    row = {"n": n, "slice_format": fmt, "slices": config.slices, "bound": config.bound, "calls_per_loop": calls,
           "first_call_ms": first, "median_ms": median, "samples_ms": samples,
           "as_called_over_fixed": median["as_called"] / median["fixed"],
           "dgemm_over_as_called": median["dgemm"] / median["as_called"],
           "telemetry": {"before": before, "after": reading()}}
    print(f"N={n} {fmt} S={config.slices}: as called {median['as_called']:.3f} ms, fixed {median['fixed']:.3f} ms "
          f"(x{row['as_called_over_fixed']:.3f}), DGEMM {median['dgemm']:.3f} ms", flush=True)
    return row


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slice-format", default="fp32", choices=sorted(ozaki.FORMATS))
    parser.add_argument("--sizes", default="2048,4096,8192")
    args = parser.parse_args()
    started = time.perf_counter()
    rows = [point(int(n), args.slice_format) for n in args.sizes.split(",")]
    doc = {"script": "results/published/scripts/ozaki1_as_called.py", "device": be.device_info(),
           "numpy": np.__version__,
           "environment": environment(be), "rounds": ROUNDS, "seconds": time.perf_counter() - started, "points": rows}
    doc.update(written(doc, "ozaki1_as_called.py"))
    out = os.path.join(os.environ.get("OUT", "."), "ozaki1-as-called.json")
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)
    print(f"wrote {out} in {doc['seconds']:.1f} s")
