"""Where Ozaki I's default call spends its host time, step by step: ``h200-ozaki1-steps-probe.json``.

At N = 2048 (FP32 slices, ``target="dgemm"``, the device's verdict), the steps of one call issued eagerly as
:meth:`gpu.ozaki.deferred.DeviceVerdict.run` issues them on an address set's first call (and on every call before
8e75c85): the output, the lines' exponents and nonzeros, the magnitude GEMM, the ratio, the workspace, the verdict,
the slicing, the graph's lookup, its launch, the last fold and the word's copy. Host microseconds per step
(perf_counter), medians of 15 calls, on an idle device (``idle``) and behind an 80 ms kernel (``busy``), each mode
twice; then ``ozaki.matmul(A, B)`` as a whole the same way (``matmul_us``). Run from the repository root with
``PYTHONPATH=$PWD``; writes ``$OUT/oz1steps.json`` with the environment record.
"""

import json
import os
import statistics
import time

import cupy as cp

from experiments.core.environment import environment
from gpu import ozaki
from gpu.backend import get_backend
from gpu.ozaki.api import PLANS
from gpu.ozaki.bound import lower_factor, magnitude_product
from gpu.ozaki.execution import _output
from gpu.ozaki.ops import ops
from tests.gpu.busy import busy

be = get_backend("cupy")


def steps(plan, A, B) -> dict[str, float]:
    t = [("start", time.perf_counter())]

    def mark(name: str) -> None:
        t.append((name, time.perf_counter()))
    m, k, n = plan.shape
    C = _output(be, m, n)
    mark("output")
    family, fmt = ops(be), plan.format
    erow, nnz_rows = family.line_exponents(A, 1, True, fmt)
    ecol, nnz_cols = family.line_exponents(B, 0, True, fmt)
    mark("lines")
    P = magnitude_product(be, A, B, erow, ecol, fmt)
    mark("magnitude_gemm")
    ratio = family.ratio(P, nnz_rows, nnz_cols, lower_factor(k), A, B, erow, ecol, fmt)
    mark("ratio")
    d = plan._deferred
    work = plan._workspace(d.layout)
    mark("workspace")
    p, word = d.schedule.plan, work["word"]
    family.verdict(ratio, erow, ecol, plan.alpha, plan.budget, p.format, out=word)
    mark("verdict")
    family.split(A, erow, p, p.m, d.layout.a_layout, False, work["a"], ecol, limit=word)
    family.split(B.T, ecol, p, p.n_pad, d.layout.b_layout, False, work["b"], erow, limit=word)
    mark("split")
    graph = d.ready(work)
    mark("ready")
    graph.launch(be.current_stream())
    mark("graph_launch")
    last = d.schedule.steps[-1][1][-1]
    family.fold(work["buffers"], len(last.chunks), last.diagonals, last.closes, p.alpha, work["acc"], work["comp"],
                work["open"], erow, ecol, last.flags, A, B, p.format, dst=C, limit=word, most=d.most)
    mark("fold")
    word.copy()
    mark("copy")
    return {name: (b - a) * 1e6 for (_, a), (name, b) in zip(t, t[1:])}


def timed(fn, mode: str, calls: int = 15) -> list:
    out = []
    for _ in range(calls):
        be.synchronize()
        if mode.startswith("busy"):
            busy(80)
        start = time.perf_counter()
        got = fn()
        out.append((got, (time.perf_counter() - start) * 1e6))
    be.synchronize()
    return out


def main() -> None:
    rng = cp.random.default_rng(0)
    A, B = ((rng.random((2048, 2048)) - 0.5) * cp.exp(rng.standard_normal((2048, 2048))) for _ in range(2))
    for _ in range(3):
        ozaki.matmul(A, B)
    be.synchronize()
    plan = list(PLANS._plans.values())[0]
    res = {"script": "results/published/scripts/ozaki1_steps_probe.py", "environment": environment(be)}
    for mode in ("idle", "busy", "idle2", "busy2"):
        rows = timed(lambda: steps(plan, A, B), mode)
        whole = timed(lambda: ozaki.matmul(A, B), mode)
        res[mode] = {"steps_us": {k: round(statistics.median(r[0][k] for r in rows), 1) for k in rows[0][0]},
                     "steps_total_us": round(statistics.median(r[1] for r in rows), 1),
                     "matmul_us": round(statistics.median(r[1] for r in whole), 1)}
        print(mode, json.dumps(res[mode]), flush=True)
    with open(os.path.join(os.environ.get("OUT", "."), "oz1steps.json"), "w") as fh:
        json.dump(res, fh, indent=1)


if __name__ == "__main__":
    main()
