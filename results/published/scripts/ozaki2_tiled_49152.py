"""Ozaki scheme II at N = 49152 on one H200, where its whole plan does not fit: ``h200-ozaki2-49152-tiled.json``.

``ozaki2.matmul(A, B)`` with its defaults (``moduli="auto"``, DGEMM's accuracy) sizes its plan for the 20 moduli
"auto" may take: 162 GiB with output and scratch at N = 49152, against about 103 GiB free beside A, B and C. It
then runs as a kept :class:`gpu.ozaki2.TiledPlan` within the free memory (tiles of C, each a scheme II product).
Timed against ``cupy.matmul(A, B)``: 3 interleaved rounds of one call each, wall time around the call and a
synchronise (a call lasts seconds), the median reported; the error of the first product on 16 rows against
``exact_matmul``: max |C - exact| over max |exact| on those rows. Operands phi = 1 ((u - 0.5) exp(r), drawn on the
device). Run from the repository root with ``PYTHONPATH=$PWD``; writes ``$OUT/ozaki2-49152-tiled.json`` with the
environment record (SM clock, power and throttle reasons by NVML before and after).
"""

import json
import os
import time

import cupy as cp

from accuracy.reference import exact_matmul
from experiments.core.environment import environment
from gpu import ozaki2
from gpu.backend import get_backend

N, ROUNDS = 49152, 3


def main() -> None:
    be = get_backend("cupy")
    rng = cp.random.default_rng(1)
    A = (rng.random((N, N)) - 0.5) * cp.exp(rng.standard_normal((N, N)))
    B = (rng.random((N, N)) - 0.5) * cp.exp(rng.standard_normal((N, N)))
    tel = be.telemetry()
    before = None if tel is None else tel.read().as_dict()
    rows, err = {"ozaki2": [], "dgemm": []}, None
    for r in range(ROUNDS):
        for name, call in (("ozaki2", lambda: ozaki2.matmul(A, B)), ("dgemm", lambda: cp.matmul(A, B))):
            be.synchronize()
            start = time.perf_counter()
            C = call()
            be.synchronize()
            rows[name].append(time.perf_counter() - start)
            if r == 0 and name == "ozaki2":
                R = exact_matmul(A[:16], B)
                err = float(abs(C[:16] - R).max() / abs(R).max())
            del C
            cp.get_default_memory_pool().free_all_blocks()
        print(r, {k: v[-1] for k, v in rows.items()}, flush=True)
    med = {k: sorted(v)[len(v) // 2] for k, v in rows.items()}
    out = {"script": "results/published/scripts/ozaki2_tiled_49152.py", "environment": environment(be),
           "telemetry": {"before": before, "after": None if tel is None else tel.read().as_dict()},
           "n": N, "seconds": rows, "median": med, "ratio": med["dgemm"] / med["ozaki2"], "max_rel_err_16_rows": err}
    print(out)
    with open(os.path.join(os.environ.get("OUT", "."), "ozaki2-49152-tiled.json"), "w") as fh:
        json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
