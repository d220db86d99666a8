"""Where the out-of-core engine's first call in a new process spends its time (CuPy; host operands).

On the H200 the first ``outofcore.matmul(A, B)`` on 4096 x 4096 host arrays took 0.76 s with CuPy's kernel cache
filled (0.05 s repeated), against at most 0.5 s wanted; it compiles nothing. This probe runs the first call and
one repeat in a NEW process under ``cProfile`` (the context and the cuBLAS handle of the current stream made
before, as a user's earlier GPU work would have), and writes the functions with the largest cumulative and own
times of each call, so that the first call's extra work (pinned staging from CuPy's pinned pool, the engine's
streams and their cuBLAS handles, the device profile's rates, the host output's first touch) can be told apart.
Run from the repository root with ``PYTHONPATH=$PWD``; writes ``$OUT/outofcore-first-call.json``; about 10 s.
"""

import json
import os
import subprocess
import sys

CHILD = r"""
import cProfile, io, json, pstats, sys, time
import cupy, numpy as np
from gpu import outofcore
from gpu.backend import get_backend
be = get_backend("cupy")
n = int(sys.argv[1])
rng = np.random.default_rng(0)
A, B = rng.standard_normal((n, n)), rng.standard_normal((n, n))
cupy.matmul(cupy.ones((8, 8)), cupy.ones((8, 8)))
cupy.cuda.Device().synchronize()
out = {}
for name in ("first", "repeat"):
    profile = cProfile.Profile()
    start = time.perf_counter()
    profile.enable()
    outofcore.matmul(A, B)
    profile.disable()
    seconds = time.perf_counter() - start
    stats = pstats.Stats(profile)
    rows = [{"function": f"{path}:{line}({fn})", "calls": nc, "own_s": tt, "cumulative_s": ct}
            for (path, line, fn), (cc, nc, tt, ct, _) in stats.stats.items()]
    out[name] = {"seconds": seconds,
                 "by_cumulative": sorted(rows, key=lambda r: -r["cumulative_s"])[:40],
                 "by_own": sorted(rows, key=lambda r: -r["own_s"])[:25]}
print(json.dumps(out))
"""


def main() -> None:
    n = int(os.environ.get("N", 4096))
    done = subprocess.run([sys.executable, "-c", CHILD, str(n)], capture_output=True, text=True, check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result.update(script="results/published/scripts/outofcore_first_call.py", n=n)
    for name in ("first", "repeat"):
        print(f"{name}: {result[name]['seconds']:.3f} s; own time:", flush=True)
        for row in result[name]["by_own"][:12]:
            print(f"  {row['own_s']:.4f} s  {row['calls']:6d} calls  {row['function']}")
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "outofcore-first-call.json"), "w") as fh:
        json.dump(result, fh, indent=1)


if __name__ == "__main__":
    main()
