"""The out-of-core engine's first call and repeats on host operands, by how pageable operands reach the device.

For each N of ``SIZES`` (default 4096, 8192, 16384) and each ``staging`` of ``gpu.outofcore.Options``
(``"pinned"``: through pinned staging buffers from CuPy's pinned pool, allocated by the first call;
``"direct"``: straight from and to the pageable arrays, staged by the driver; ``"auto"``: the default), a NEW
process draws uniform [0, 1) FP64 operands in host memory, makes the CUDA context and CuPy's cuBLAS handle (as
a user's earlier GPU work would have), then times ``outofcore.matmul(A, B, staging=...)``: its first call, and
:data:`REPEATS` repeats (each returns C complete in host memory). The first call is the one-shot time; the repeats
the steady one. Run from the repository root with ``PYTHONPATH=$PWD``; writes
``$OUT/outofcore-staging.json``.
"""

import json
import os
import subprocess
import sys

REPEATS = 3
CHILD = r"""
import json, sys, time
import cupy, numpy as np
from gpu import outofcore
n, staging, repeats = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
rng = np.random.default_rng(n)
A, B = rng.random((n, n)), rng.random((n, n))
cupy.matmul(cupy.ones((8, 8)), cupy.ones((8, 8)))
cupy.cuda.Device().synchronize()
times = []
for _ in range(1 + repeats):
    t0 = time.perf_counter()
    C = outofcore.matmul(A, B, staging=staging)
    times.append(time.perf_counter() - t0)
plan = list(outofcore.api.PLANS._plans.values())[-1]
rows = rng.choice(n, 8, replace=False)
err = float(np.abs(C[rows] - A[rows] @ B).max() / np.abs(A[rows] @ B).max())
print(json.dumps({"first_s": times[0], "repeats_s": times[1:], "grid": plan.schedule.grid,
                  "block": plan.schedule.block, "panel": plan.schedule.panel,
                  "direct": plan._direct(), "sampled_rows_max_relative_difference": err}))
"""


def main() -> None:
    sizes = [int(x) for x in os.environ.get("SIZES", "4096,8192,16384").split(",")]
    records = []
    for n in sizes:
        for staging in ("pinned", "direct", "auto"):
            done = subprocess.run([sys.executable, "-c", CHILD, str(n), staging, str(REPEATS)],
                                  capture_output=True, text=True, timeout=300)
            if done.returncode:
                records.append({"n": n, "staging": staging, "error": done.stderr[-2000:]})
                print(n, staging, "failed:", done.stderr[-300:], flush=True)
                continue
            rec = {"n": n, "staging": staging, **json.loads(done.stdout.strip().splitlines()[-1])}
            records.append(rec)
            print(f"N = {n} {staging:6}: first {rec['first_s']:.3f} s, repeats "
                  f"{', '.join(f'{t:.3f}' for t in rec['repeats_s'])} s, grid {rec['grid']}, direct {rec['direct']}",
                  flush=True)
    doc = {"script": "results/published/scripts/outofcore_staging.py", "repeats": REPEATS, "records": records}
    with open(os.path.join(os.environ.get("OUT", "."), "outofcore-staging.json"), "w") as fh:
        json.dump(doc, fh, indent=1)


if __name__ == "__main__":
    main()
