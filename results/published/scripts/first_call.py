"""The first call of each method in a new process, cold (empty kernel cache) and warm (the cache the cold run filled),
against the calls after it in the same process.

Methods, at N x N (``N``, default 4096) unless given: DGEMM (``cupy.matmul``), ``strassen.matmul``, ``ozaki.matmul``
and ``ozaki2.matmul`` (defaults), ``splitk.matmul`` (defaults, 16 x 2^20 x 16), ``exact_matmul`` (1024),
``outofcore.matmul`` on host arrays (4096) and, asked for by name, the front door ``gpu.matmul`` (defaults).
``METHODS`` picks some (comma-separated; all but the front door by default). Each runs in a NEW
Python process (``python -c``) with ``CUPY_CACHE_DIR`` set to a folder of its own: first with the folder empty
(cold), then again with the folder the cold run filled (warm). The child times its imports, its operands (drawn on
the device, or on the host for the out-of-core engine), the first call and the :data:`REPEATS` calls after it, each
synchronised, and prints them as JSON; the files the kernel cache holds after each run are counted (what compiled).
Run from the repository root with ``PYTHONPATH=$PWD``; writes $OUT/first-call.json (with ``records`` of the shape
``as_called_tables.py`` renders as its first-call table).
"""

import json
import os
import subprocess
import sys
import tempfile
import time

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import cupy, numpy as np
import gpu
from accuracy.reference import exact_matmul
from gpu import outofcore, ozaki, ozaki2, splitk, strassen
from gpu.backend import get_backend
be = get_backend("cupy")
t1 = time.perf_counter()
name, n = sys.argv[1], int(sys.argv[2])
rng = cupy.random.default_rng(0)
dev = lambda m, k: (rng.random((m, k)) - 0.5) * cupy.exp(rng.standard_normal((m, k)))
if name == "outofcore":
    host = np.random.default_rng(0)
    A, B = host.standard_normal((4096, 4096)), host.standard_normal((4096, 4096))
elif name == "splitk":
    A, B = dev(16, 2**20), dev(2**20, 16)
elif name == "exact":
    A, B = dev(1024, 1024), dev(1024, 1024)
else:
    A, B = dev(n, n), dev(n, n)
call = {"frontdoor": lambda: gpu.matmul(A, B), "dgemm": lambda: cupy.matmul(A, B),
        "strassen": lambda: strassen.matmul(A, B),
        "ozaki": lambda: ozaki.matmul(A, B), "ozaki2": lambda: ozaki2.matmul(A, B),
        "splitk": lambda: splitk.matmul(A, B), "exact": lambda: exact_matmul(A, B),
        "outofcore": lambda: outofcore.matmul(A, B)}[name]
cupy.cuda.Device().synchronize()
t2, calls = time.perf_counter(), []
for _ in range(1 + REPEATS):
    cupy.cuda.Device().synchronize()
    start = time.perf_counter()
    call()
    cupy.cuda.Device().synchronize()
    calls.append(time.perf_counter() - start)
print(json.dumps({"imports_s": t1 - t0, "operands_s": t2 - t1, "first_s": calls[0],
                  "repeat_s": calls[1], "later_s": calls[1:]}))
"""

#: Calls after the first that the child times: a plan may do once-only work on a later call than the first
#: (Ozaki II's ``moduli="auto"`` captures its graph on an address set's second call), which these show.
REPEATS = 4

#: Every method the child knows; a run without ``METHODS`` takes all but the front door.
KNOWN = ("dgemm", "strassen", "ozaki", "ozaki2", "frontdoor", "splitk", "exact", "outofcore")
METHODS = tuple(os.environ["METHODS"].split(",")) if os.environ.get("METHODS") else tuple(
    m for m in KNOWN if m != "frontdoor")
N = int(os.environ.get("N", 4096))


def cached_files(folder: str) -> list[str]:
    return sorted(os.path.relpath(os.path.join(root, f), folder) for root, _, files in os.walk(folder)
                  for f in files)


def run(method: str, cache: str) -> dict:
    env = {**os.environ, "CUPY_CACHE_DIR": cache}
    begin = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", f"REPEATS = {REPEATS}\n" + CHILD, method, str(N)], env=env,
                          capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - begin
    if done.returncode:
        return {"error": done.stderr[-4000:], "process_s": wall}
    row = json.loads(done.stdout.strip().splitlines()[-1])
    return {**row, "process_s": wall, "cache_files": len(cached_files(cache))}


if __name__ == "__main__":
    rows = {}
    with tempfile.TemporaryDirectory(prefix="gemmlab-first-call-") as top:
        for method in METHODS:
            cache = os.path.join(top, method)
            os.makedirs(cache)
            cold, warm = run(method, cache), run(method, cache)
            rows[method] = {"cold": cold, "warm": warm}
            later = {k: [round(x, 4) for x in v.get("later_s", [])] for k, v in rows[method].items()}
            print(f"{method}: cold first {cold.get('first_s', float('nan')):.3f} s (repeat "
                  f"{cold.get('repeat_s', float('nan')):.4f} s, {cold.get('cache_files')} cached kernels), "
                  f"warm first {warm.get('first_s', float('nan')):.3f} s; later calls {later}", flush=True)
    from experiments.core.environment import environment
    from experiments.papers.as_called_formats import written
    from gpu.backend import get_backend
    be = get_backend("cupy")
    doc = {"script": "results/published/scripts/first_call.py", "device": be.device_info(),
           "environment": environment(be), "python": sys.version.split()[0], "n": N, "methods": rows}
    doc.update(written(doc, "first_call.py"))
    out = os.path.join(os.environ.get("OUT", "."), "first-call.json")
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)
    print(f"wrote {out}")
