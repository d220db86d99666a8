"""Which call of a loop waits for the device, and where: each family's default call issued ``CALLS`` times back to
back behind a 200 ms kernel.

``host_time.py`` finds the call's host time and its return behind a busy kernel for ONE call; a loop of calls
behind a stream hold (its device-time protocol) can still time out where some later call waits, as Ozaki I's did.
Here, after three warm-up calls, a 200 ms kernel is queued and the call is issued ``CALLS`` times: each call's
host time is kept, and a call still running after ``STACK_AFTER_S`` has every thread's stack written to
``$OUT/loop-wait-stacks.txt`` (``faulthandler``), which names the line that waits. Writes
``$OUT/loop-wait.json``. Run on the device from the repository root with ``PYTHONPATH=$PWD``.
"""

import faulthandler
import json
import os
import time

import cupy as cp

from experiments.core.environment import environment
from gpu import ozaki, ozaki2, splitk, strassen
from gpu.backend import get_backend
from tests.gpu.busy import busy

CALLS = 6
STACK_AFTER_S = 0.05


def cases(rng):
    def dev(m, k):
        return (rng.random((m, k)) - 0.5) * cp.exp(rng.standard_normal((m, k)))

    return {
        "strassen.matmul(A, B)": ((dev(512, 512), dev(512, 512)), strassen.matmul),
        "splitk.matmul(A, B)": ((dev(16, 2**20), dev(2**20, 16)), splitk.matmul),
        "ozaki.matmul(A, B)": ((dev(2048, 2048), dev(2048, 2048)), ozaki.matmul),
        "ozaki2.matmul(A, B)": ((dev(4096, 4096), dev(4096, 4096)), ozaki2.matmul),
    }


def main() -> None:
    be = get_backend("cupy")
    folder = os.environ.get("OUT", "/tmp")
    out = {"script": "results/published/scripts/loop_wait_probe.py", "environment": environment(be), "rows": []}
    with open(os.path.join(folder, "loop-wait-stacks.txt"), "w") as stacks:
        for name, ((A, B), call) in cases(cp.random.default_rng(0)).items():
            for _ in range(3):
                call(A, B)
            be.synchronize()
            busy(200)
            times = []
            for i in range(CALLS):
                stacks.write(f"\n=== {name}, call {i + 1} after the busy kernel\n")
                stacks.flush()
                faulthandler.dump_traceback_later(STACK_AFTER_S, file=stacks)
                start = time.perf_counter()
                call(A, B)
                times.append(time.perf_counter() - start)
                faulthandler.cancel_dump_traceback_later()
            be.synchronize()
            out["rows"].append({"call": name, "host_s": times})
            print(f"{name:28s} host per call (ms): {[round(t * 1e3, 2) for t in times]}", flush=True)
    with open(os.path.join(folder, "loop-wait.json"), "w") as fh:
        json.dump(out, fh, indent=1, default=str)


if __name__ == "__main__":
    main()
