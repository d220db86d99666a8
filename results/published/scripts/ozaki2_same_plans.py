"""How far apart kept Ozaki II plans of one configuration read, as called in one run: the noise floor of a plan
comparison at the power cap.

At N (default 16384), phi = 1 operands, fast-15: ``PLANS`` (default 4) kept plans built one after another, each
with its own C, beside DGEMM, timed as the other Ozaki II probes time them (2 back-to-back ``execute`` calls, one
synchronise; ``ROUNDS`` rounds in turning order, default 12). Prints each plan's median and samples.

    OUT=dir PYTHONPATH=$PWD:$PWD/results/published/scripts python3 results/published/scripts/ozaki2_same_plans.py

JSON to ``$OUT/ozaki2-same-plans.json``.
"""

import json
import os
import statistics

import cupy as cp
from ozaki2_as_called import fresh_inputs
from rounds import loop_seconds, turning

from experiments.core.environment import environment
from gpu.backend import get_backend
from gpu.ozaki2.options import Options
from gpu.ozaki2.plan import Plan

N, PLANS, ROUNDS = int(os.environ.get("N", 16384)), int(os.environ.get("PLANS", 4)), int(os.environ.get("ROUNDS", 12))


def main() -> None:
    be = get_backend("cupy")
    A, B = fresh_inputs(N)
    outs = {f"p{i}": cp.empty((N, N)) for i in range(PLANS)}
    plans = {k: Plan(A, B, out=C, options=Options(moduli=15), backend=be) for k, C in outs.items()}
    calls = {k: (lambda p=p, C=outs[k]: p.execute(A, B, C)) for k, p in plans.items()}
    calls["dgemm"] = lambda: cp.matmul(A, B)
    for call in calls.values():
        call()
        call()
    samples = turning(calls, ROUNDS, lambda call: loop_seconds(call, 2))
    ms = {k: statistics.median(v) * 1e3 for k, v in samples.items()}
    for k, v in samples.items():
        print(k, round(ms[k], 2), [round(x * 1e3, 1) for x in v], flush=True)
    result = {"script": "results/published/scripts/ozaki2_same_plans.py", "environment": environment(be), "n": N,
              "rounds": ROUNDS, "ms": ms, "samples_s": samples}
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "ozaki2-same-plans.json"), "w") as fh:
        json.dump(result, fh, indent=1, default=str)


if __name__ == "__main__":
    main()
