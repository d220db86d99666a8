"""Where the fused second level's span of A's quarters' rows pays (``gpu.ozaki2.fused_level2.MAX_SPAN``), CuPy.

At N (default 32768), phi = 1 operands drawn on the device (``ozaki2_as_called.inputs``), for each span cap of
``SPANS`` (default 2048, 4096): ``MAX_SPAN`` set to it, the kept plans freed, then
a kept ``ozaki2.Plan`` of ``moduli=COUNT, level=2`` executed twice (its graph captured), then ``CALLS`` calls
with ``phases=`` (each phase synchronized: scaling, residues (the operand passes), gemm, crt) and
their medians, the span the plan took, its workspace, and whether C is the first cap's bit for bit. Writes
``$OUT/ozaki2-level2-spans.json``. Run from the repository root with ``PYTHONPATH=$PWD:$PWD/results/published/scripts``.
"""

import json
import os
import statistics

import cupy as cp
import numpy as np
from ozaki2_as_called import fresh_inputs  # this folder's script: the same inputs

from experiments.core.environment import environment
from gpu import ozaki2
from gpu.backend import get_backend
from gpu.ozaki2 import fused_level2

N, COUNT, CALLS = int(os.environ.get("N", 32768)), int(os.environ.get("COUNT", 15)), int(os.environ.get("CALLS", 3))
SPANS = [int(x) for x in os.environ.get("SPANS", "2048,4096").split(",")]


def main() -> None:
    be = get_backend("cupy")
    A, B = fresh_inputs(N)
    C = cp.empty((N, N))
    result = {"script": "results/published/scripts/ozaki2_level2_spans.py", "environment": environment(be),
              "n": N, "count": COUNT, "spans": {}}
    first = None
    for cap in SPANS:
        fused_level2.MAX_SPAN = cap
        ozaki2.PLANS.clear()
        cp.get_default_memory_pool().free_all_blocks()
        plan = ozaki2.Plan(A, B, out=C, options={"moduli": COUNT, "level": 2}, backend=be)
        for _ in range(2):
            plan.execute(A, B, C)
        phases = []
        for _ in range(CALLS):
            got: dict = {}
            plan.run(A, B, C, phases=got)
            phases.append(got)
        host = cp.asnumpy(C)
        first = host if first is None else first
        layout = plan.work.layout
        result["spans"][cap] = {
            "span_rows": layout.rows, "levels": layout.levels, "workspace_bytes": layout.nbytes,
            "phases_ms": {k: 1e3 * statistics.median(p[k] for p in phases) for k in phases[0]},
            "samples_ms": [{k: 1e3 * v for k, v in p.items()} for p in phases],
            "bitwise_first_cap": bool(np.array_equal(host, first)),
            "telemetry": be.telemetry().read().as_dict() if be.telemetry() else None}
        print(cap, result["spans"][cap]["span_rows"], {k: round(v, 2) for k, v in
                                                       result["spans"][cap]["phases_ms"].items()},
              result["spans"][cap]["bitwise_first_cap"], flush=True)
        plan.free()
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "ozaki2-level2-spans.json"), "w") as fh:
        json.dump(result, fh, indent=1, default=str)


if __name__ == "__main__":
    main()
