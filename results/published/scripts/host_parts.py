"""Where a repeated default call's host time goes at N = 512, against ``cupy.matmul``'s (CuPy, FP64).

At N = 512 a DGEMM takes about 10 us on the H200 and its dispatch about 20 us of the host's, so a loop of calls runs
at the host's pace and a microsecond of dispatch is several per cent of the call. For each call and each part of the
per-call path (the backend lookup, the operand signature, the kept plan's lookup, the profile watch, the GEMM call,
the new output), the host time per call: ``timeit`` loops of ``NUMBER`` back-to-back calls (no synchronise inside a
loop; a DGEMM's device time is shorter than its dispatch, so the queue stays short), ``REPEAT`` loops, the median and
the least reported, the device synchronised between loops. Writes ``$OUT/host-parts.json`` (stdout without ``$OUT``).
Run from the repository root with ``PYTHONPATH=$PWD``; a few seconds.
"""

import json
import os
import statistics
import timeit

import cupy

from experiments.core.environment import environment
from gpu import matmul as front
from gpu import strassen
from gpu.backend import get_backend
from gpu.backend.plans import operand_signature
from gpu.frontdoor.api import PLANS as FRONT_PLANS
from gpu.frontdoor.contract import as_accuracy
from gpu.strassen.api import PLANS
from gpu.strassen.options import DEFAULT

N = int(os.environ.get("N", 512))
NUMBER, REPEAT = int(os.environ.get("NUMBER", 2000)), int(os.environ.get("REPEAT", 9))


def per_call(be, fn) -> dict:
    times = []
    for _ in range(REPEAT):
        be.synchronize()
        times.append(timeit.timeit(fn, number=NUMBER) / NUMBER)
    be.synchronize()
    return {"median_us": 1e6 * statistics.median(times), "least_us": 1e6 * min(times)}


def main() -> None:
    be = get_backend("cupy")
    rng = cupy.random.default_rng(0)
    A, B, C = rng.random((N, N)), rng.random((N, N)), cupy.empty((N, N))
    strassen.matmul(A, B), strassen.matmul(A, B, out=C), front(A, B), front(A, B, out=C)
    key = operand_signature(be, A, B, None)
    plan = PLANS.get((key, DEFAULT), None)
    want = as_accuracy("dgemm")
    door = FRONT_PLANS.get((key, want, False), None)
    stream = cupy.cuda.get_current_stream()
    parts = {
        "cupy.matmul(A, B)": lambda: cupy.matmul(A, B),
        "cupy.matmul(A, B, out=C)": lambda: cupy.matmul(A, B, out=C),
        "strassen.matmul(A, B)": lambda: strassen.matmul(A, B),
        "strassen.matmul(A, B, out=C)": lambda: strassen.matmul(A, B, out=C),
        "gpu.matmul(A, B)": lambda: front(A, B),
        "gpu.matmul(A, B, out=C)": lambda: front(A, B, out=C),
        "strassen plan._execute(A, B, None)": lambda: plan._execute(A, B, None),
        "strassen plan._gemm(A, B, None)": lambda: plan._gemm(A, B, None),
        "front door plan._execute(A, B, None)": lambda: door._execute(A, B, None),
        "get_backend('auto')": lambda: get_backend("auto"),
        "operand_signature(A, B)": lambda: operand_signature(be, A, B, None),
        "PLANS.get (strassen, a hit)": lambda: PLANS.get((key, DEFAULT), None),
        "FRONT_PLANS.get (a hit)": lambda: FRONT_PLANS.get((key, want, False), None),
        "as_accuracy('dgemm')": lambda: as_accuracy("dgemm"),
        "profile watch changed()": (lambda: plan._watch.changed()) if plan._watch is not None else (lambda: None),
        "hash(DEFAULT)": lambda: hash(DEFAULT),
        "cupy.ndarray((N, N), float64)": lambda: cupy.ndarray((N, N), "float64"),
        "cupy.cuda.get_current_stream()": lambda: cupy.cuda.get_current_stream(),
        "stream.ptr": lambda: stream.ptr,
        "A.shape, A.strides, A.dtype": lambda: (A.shape, A.strides, A.dtype),
        "A.data.device_id": lambda: A.data.device_id,
    }
    out = {"script": "results/published/scripts/host_parts.py", "environment": environment(be), "n": N,
           "number": NUMBER, "repeat": REPEAT, "host_us": {}}
    for _ in range(2):                                       # the second pass is kept: caches and clocks warm
        out["host_us"] = {name: per_call(be, fn) for name, fn in parts.items()}
    for name, t in out["host_us"].items():
        print(f"{name:40s} {t['median_us']:8.3f} us (least {t['least_us']:.3f})", flush=True)
    text = json.dumps(out, indent=1, default=str)
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "host-parts.json"), "w") as fh:
            fh.write(text)
    else:
        print(text)


if __name__ == "__main__":
    main()
