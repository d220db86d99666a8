"""The front door at N on the bundled H200 profile: what it picks, and ``gpu.matmul(A, B)`` as called beside DGEMM.

phi = 1 operands drawn on the device (``ozaki2_as_called.inputs``); ``explain()`` of the front door's plan printed;
then ``gpu.matmul(A, B)`` and ``cupy.matmul(A, B)`` in ``ROUNDS`` rounds in turning order (default 8), ``LOOP``
back-to-back calls and one synchronise per sample (default 1 from N = 32768, where a call lasts about 0.75 s, else
3); below 32768 (where the two plans fit side by side) also ``ozaki2.matmul(A, B)``, level 0 under the same
defaults, so that the front door's pick of a level is judged against the call it replaced. Each call is made twice
before the rounds: the second call of an address set builds the graph of ``moduli="auto"`` (15-25 s at 32768 with
the kernel cache empty), which the published runs at 571e0dc and 141a482 timed as their first sample. C compared bit
for bit with ``ozaki2.matmul(A, B, level=1)``. ``N`` default 32768. JSON to ``$OUT/frontdoor-<N>.json``.

    OUT=dir PYTHONPATH=$PWD:$PWD/results/published/scripts python3 results/published/scripts/frontdoor_ozaki2_level.py
"""

import json
import os
import statistics

import cupy as cp
from ozaki2_as_called import fresh_inputs
from rounds import loop_seconds, turning

import gpu
from experiments.core.environment import environment
from gpu import ozaki2
from gpu.backend import get_backend

N, ROUNDS = int(os.environ.get("N", 32768)), int(os.environ.get("ROUNDS", 8))
LOOP = int(os.environ.get("LOOP", 1 if N >= 32768 else 3))


def main() -> None:
    A, B = fresh_inputs(N)
    with gpu.frontdoor.plan(A, B) as plan:
        print(plan.explain()[:1500], flush=True)
    calls = {"gpu.matmul": lambda: gpu.matmul(A, B), "dgemm": lambda: cp.matmul(A, B)}
    if N < 32768:
        calls["ozaki2.matmul level 0"] = lambda: ozaki2.matmul(A, B)
    for call in calls.values():
        call()
        call()
    samples = turning(calls, ROUNDS, lambda call: loop_seconds(call, LOOP))
    ms = {k: statistics.median(v) * 1e3 for k, v in samples.items()}
    paired = {k: statistics.median(d / s for d, s in zip(samples["dgemm"], v, strict=True)) for k, v in samples.items()}
    C = cp.asnumpy(gpu.matmul(A, B))
    gpu.frontdoor.PLANS.clear()
    ozaki2.PLANS.clear()
    cp.get_default_memory_pool().free_all_blocks()
    same = bool((cp.asnumpy(ozaki2.matmul(A, B, level=1)) == C).all())
    out = {"script": "results/published/scripts/frontdoor_ozaki2_level.py",
           "environment": environment(get_backend("cupy")), "n": N, "loop": LOOP, "ms": ms,
           "x_dgemm": ms["dgemm"] / ms["gpu.matmul"], "x_dgemm_paired": paired, "bitwise_ozaki2_level1": same,
           "samples_s": samples}
    print(json.dumps({k: out[k] for k in ("ms", "x_dgemm", "x_dgemm_paired", "bitwise_ozaki2_level1")}), flush=True)
    with open(os.path.join(os.environ.get("OUT", "/tmp"), f"frontdoor-{N}.json"), "w") as fh:
        json.dump(out, fh, indent=1, default=str)


if __name__ == "__main__":
    main()
