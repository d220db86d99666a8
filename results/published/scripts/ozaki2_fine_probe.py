"""Fine scaling against fast scaling and DGEMM, error per seed: the benchmark's error points (``gemmlab ozaki2``'s
``measure_errors``: phi inputs drawn on the device, the whole product, 512 sampled rows against ``exact_matmul``) at
several seeds, so that a verdict on "at most DGEMM's error" does not rest on one draw of the max relative error.

Run on a device from the repository root: ``SIZES=16384,32768 SEEDS=1,2,3,4,5 OUT=dir python3
results/published/scripts/ozaki2_fine_probe.py``; writes ``$OUT/ozaki2-fine-probe.json``.
"""

from __future__ import annotations

import json
import os
import sys
import time

from experiments.core.environment import environment
from experiments.ozaki2.errors import error_params, measure_errors
from gpu.backend import get_backend

METHODS = ("fp64", "ozaki2-fast-14", "ozaki2-fine-14", "ozaki2-fast-15", "ozaki2-fine-15")
FIELDS = ("max_rel", "median_rel", "nrm", "max_comp")


def main() -> None:
    be = get_backend("cupy")
    sizes = [int(s) for s in os.environ.get("SIZES", "16384,32768").split(",")]
    seeds = [int(s) for s in os.environ.get("SEEDS", "1,2,3,4,5").split(",")]
    out = {"script": "results/published/scripts/ozaki2_fine_probe.py", "environment": environment(be),
           "methods": METHODS, "rows": 512, "phi": 1.0, "points": []}
    for n in sizes:
        for seed in seeds:
            start = time.perf_counter()
            records = measure_errors(be, error_params((n, n, n), 1.0, seed, 512), METHODS)
            point = {"n": n, "seed": seed, "errors": {name: {f: rec.meta[f] for f in FIELDS}
                                                      for name, rec in records.items()}}
            out["points"].append(point)
            print(n, seed, f"{time.perf_counter() - start:.1f} s",
                  {name: f"{e['max_rel']:.2e}/{e['median_rel']:.2e}" for name, e in point["errors"].items()},
                  flush=True)
    path = os.path.join(os.environ.get("OUT", "."), "ozaki2-fine-probe.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    print("wrote", path, file=sys.stderr)


if __name__ == "__main__":
    main()
