"""One process: the out-of-core engine's first call, then REPEATS more, on host operands in anonymous memory
(touched by this process), with staging=MODE; a CUDA context and cuBLAS handle made first. Prints one JSON line.

``PYTHONPATH=$PWD python3 results/published/scripts/outofcore_first_call.py N MODE [REPEATS [VARIANT]]``: MODE a
``staging`` of ``gpu.outofcore.matmul``; VARIANT ``default``, ``nopop`` (no madvise populate before locking),
``piece4g`` / ``piece256m`` (piece size), ``dm<GiB>`` (``device_memory``: a product of several blocks) or
``keep`` (``out`` given and ``keep_locked=True``). Run each line in a new
process (``results/published/h200/h200-outofcore-first-call.json`` holds the runs)."""
import json
import sys
import time

import numpy as np

from gpu.backend import get_backend
from gpu.outofcore import PLANS, Timeline, ahead, matmul

n, mode, repeats = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 3
variant = sys.argv[4] if len(sys.argv) > 4 else "default"
if variant == "nopop":
    ahead.populate = lambda *a: False
if variant == "piece4g":
    ahead.PIECE = 2**32
if variant == "piece256m":
    ahead.PIECE = 2**28
be = get_backend("cupy")
x = be.asarray(np.ones((256, 256)))
be.gemm(x, x, be.xp.empty_like(x))
be.synchronize()
rng = np.random.default_rng(1)


def fill(rows, cols):
    out = np.empty((rows, cols))
    out.reshape(-1, 64, cols)[:] = rng.random((64, cols))
    out[:, 0] = rng.random(rows)
    return out


A, B = fill(n, n), fill(n, n)
out = np.empty((n, n)) if variant == "keep" else None
extra = {"keep_locked": True, "out": out} if variant == "keep" else {}
if variant.startswith("dm"):
    extra = {"device_memory": int(variant[2:]) * 2**30}
times, lines, first_spans = [], [], None
for i in range(1 + repeats):
    line = Timeline() if i < 2 else None
    t0 = time.perf_counter()
    C = matmul(A, B, staging=mode, backend=be, timeline=line, **extra)
    times.append(time.perf_counter() - t0)
    if line is not None:
        busy = {}
        spans = line.spans()
        for s in spans:
            busy[s.lane] = busy.get(s.lane, 0.0) + s.end - s.start
        lines.append({k: round(v, 4) for k, v in busy.items()})
        if i == 0:
            first_spans = [[s.lane, s.tag, round(s.start, 4), round(s.end, 4)] for s in spans]
rows = [0, n // 3, n - 1]
want = A[rows] @ B
err = float(np.max(np.abs(C[rows] - want) / np.abs(want).max()))
print(json.dumps({"n": n, "mode": mode, "variant": variant, "spans": first_spans, "first_s": times[0],
                  "later_s": times[1:], "busy_first": lines[0],
                  "busy_second": lines[1] if len(lines) > 1 else None, "costs": ahead.costs(), "err": err,
                  "grid": [list(p.schedule.grid) for p in PLANS._plans.values()]}),
      flush=True)
