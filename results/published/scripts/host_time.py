"""Host time of each family's default call at its smallest benchmarked size, against ``cupy.matmul``'s.

The host-time rule of a plan's call: a repeated call's host time is at most 60 us more than ``cupy.matmul``'s on
the same operands, or at most a tenth of the call's device time, whichever is larger. For each family's public call
with its defaults: the **host** time of one repeated call on an idle device
(``experiments.core.ascalled.host_seconds``: median of 21, no synchronise after the call), ``cupy.matmul``'s on the
same operands (into a C of its own), and the **device** time of one call (a loop of calls issued behind a stream
hold, timed by CUDA events: the device alone); then, **busy**: the host time of one call issued while a 200 ms
kernel holds the stream (a call that waits for the device takes the kernel's time). The out-of-core engine hands
back host memory complete, so its host time is its whole time (its docstring says so); it is listed, not judged.
Run from the repository root with ``PYTHONPATH=$PWD``; writes ``$OUT/host-time.json``; about a minute on an H200.
"""

import json
import os
import statistics
import time

import cupy as cp

from accuracy.reference import exact_matmul
from experiments.core.ascalled import host_seconds
from experiments.core.environment import environment
from gpu import outofcore, ozaki, ozaki2, splitk, strassen
from gpu.backend import get_backend
from tests.gpu.busy import busy

CALLS = 20


def device_seconds(be, work, calls: int = CALLS) -> tuple[float, str]:
    """One call's device time and how it was taken: ``calls`` calls queued behind a stream hold
    (``Backend.timer(hide_launch=True)``); for a call that waits for the device itself (a count read back), which
    a hold would stall, the same events without one (its host work then counts where the device idles)."""
    def timed(hide: bool) -> float:
        with be.timer(hide_launch=hide) as t:
            for _ in range(calls):
                work()
        return t.seconds / calls

    try:
        return timed(True), "stream hold, CUDA events"
    except RuntimeError:                                  # the hold timed out: the call waited for the device
        be.synchronize()
    return timed(False), "CUDA events, no hold (the call waits for the device)"


def busy_seconds(be, work) -> float:
    be.synchronize()
    busy(200)
    start = time.perf_counter()
    work()
    seconds = time.perf_counter() - start
    be.synchronize()
    return seconds


def cases(rng):
    def dev(m, k):
        return (rng.random((m, k)) - 0.5) * cp.exp(rng.standard_normal((m, k)))

    s512 = dev(512, 512), dev(512, 512)
    return {
        "strassen.matmul(A, B)": (s512, lambda A, B: strassen.matmul(A, B), True),
        "strassen.matmul(A, B, out=C)": (s512, "out", True),
        "splitk.matmul(A, B)": ((dev(16, 2**20), dev(2**20, 16)), lambda A, B: splitk.matmul(A, B), True),
        "ozaki.matmul(A, B)": ((dev(2048, 2048), dev(2048, 2048)), lambda A, B: ozaki.matmul(A, B), True),
        "ozaki2.matmul(A, B)": ((dev(4096, 4096), dev(4096, 4096)), lambda A, B: ozaki2.matmul(A, B), True),
        "ozaki2.matmul(A, B, moduli=15)": ((dev(4096, 4096), dev(4096, 4096)),
                                           lambda A, B: ozaki2.matmul(A, B, moduli=15), True),
        "exact_matmul(A, B)": ((dev(1024, 1024), dev(1024, 1024)), lambda A, B: exact_matmul(A, B), True),
        "outofcore.matmul(A, B) (host arrays)": ((dev(4096, 4096), dev(4096, 4096)), "host", False),
    }


def main() -> None:
    be = get_backend("cupy")
    out = {"script": "results/published/scripts/host_time.py", "environment": environment(be), "rows": []}
    for name, ((A, B), call, judged) in cases(cp.random.default_rng(0)).items():
        C = cp.empty((A.shape[0], B.shape[1]))
        if call == "out":
            work = lambda A=A, B=B, C=C: strassen.matmul(A, B, out=C)          # noqa: E731
        elif call == "host":
            hA, hB = cp.asnumpy(A), cp.asnumpy(B)
            work = lambda hA=hA, hB=hB: outofcore.matmul(hA, hB)                # noqa: E731
        else:
            work = lambda A=A, B=B, call=call: call(A, B)                        # noqa: E731
        ref = lambda A=A, B=B, C=C: cp.matmul(A, B, out=C)                       # noqa: E731
        for _ in range(3):
            work(), ref()
        be.synchronize()
        host, host_ref = host_seconds(be, work), host_seconds(be, ref)
        device, clock = device_seconds(be, work) if judged else (None, None)
        row = {"call": name, "shape": [A.shape[0], A.shape[1], B.shape[1]], "host_s": host,
               "cupy_matmul_host_s": host_ref, "device_s": device, "device_clock": clock,
               "busy_return_s": statistics.median(busy_seconds(be, work) for _ in range(3)) if judged else None}
        if judged:
            allowed = max(host_ref + 60e-6, device / 10)
            row.update(allowed_s=allowed, met=host <= allowed)
        out["rows"].append(row)
        print(f"{name:40s} host {host * 1e6:8.1f} us  cupy.matmul {host_ref * 1e6:6.1f} us  device "
              f"{(device or 0) * 1e6:9.1f} us  busy-return {(row['busy_return_s'] or 0) * 1e3:6.2f} ms  "
              f"{'met' if row.get('met') else ('not judged' if not judged else 'MISSED')}", flush=True)
        del A, B, C
        cp.get_default_memory_pool().free_all_blocks()
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "host-time.json"), "w") as fh:
        json.dump(out, fh, indent=1, default=str)


if __name__ == "__main__":
    main()
