"""Why a kept level-1 scheme II plan at N = 32768 can hold the host for hundreds of milliseconds a call.

The benchmark stored 323 ms of host time a call for ``ozaki2-fast-15-w1`` at N = 32768, in a run that held 20 GiB
beside the operands (DGEMM's C and SGEMM's float32 copies); ``ozaki2_level_host_probe.py``, holding at most 6 GiB,
measured 0.7-1.8 ms a replayed call. With less free memory the fused level's layout takes more, shorter spans of
the top half's rows (:func:`gpu.ozaki2.fused_level.span_rows`), and each span launches its own 7 INT8 GEMMs per
modulus: the graph grows. The question: does the host time follow the spans (a graph larger than the device's
launch queue holds the host in ``graph.launch()`` until the device drains it)?

For each ``EXTRAS`` (GiB held beside A, B and C; default 0, 20, 27, 33), ``moduli=COUNTS`` (default 15) at
``level=LEVEL`` (default 1): seven calls, each issued to an idle device and timed by the host's clock to its
return, then to its end; the spans the plan took, the graph's nodes by kind (its DOT text, kept as
``dot-COUNT-EXTRA-MIB.txt`` with ``DOT=1``) and a checksum of C. ``CUDA_SCALE_LAUNCH_QUEUES`` (CUDA's own: ``2x``
or ``4x`` the launch queues, read when the context is made) is recorded. ``WORKSPACE_MIB``: the workspace of the
library's cuBLAS handles (default 32; cuBLAS issues a 4-byte memset before each INT8 GEMM it runs with one);
``ROUTE=lt`` (:func:`route_through_lt`). Writes ``$OUT/span-host-probe-MIB[ROUTE]-wLEVEL.json``.
Run from the repository root with ``PYTHONPATH=$PWD:$PWD/results/published/scripts`` (nvmath-python for graphs).
"""

import json
import os
import re
import time
from collections import Counter

import cupy as cp
from ozaki2_as_called import fresh_inputs  # this folder's script: the same inputs

from experiments.core.environment import environment
from gpu import ozaki2
from gpu.backend import get_backend, stream_blas

if "WORKSPACE_MIB" in os.environ:                   # before any cuBLAS handle is made
    stream_blas.WORKSPACE_BYTES = int(os.environ["WORKSPACE_MIB"]) * 2**20

N = 32768
EXTRAS = [int(x) for x in os.environ.get("EXTRAS", "0,20,27,33").split(",")]
COUNTS = [int(x) for x in os.environ.get("COUNTS", "15").split(",")]
LEVEL = int(os.environ.get("LEVEL", "1"))
CALLS = 7


def route_through_lt() -> None:
    """``ROUTE=lt``: the plans' INT8 GEMMs through cublasLt's heuristic choice ``CHOICE`` (default 0) with ``LT_MIB``
    of workspace (default 32), routed by ``ozaki2_int8_lt.lt_route`` instead of ``cublasGemmEx``."""
    from ozaki2_int8_lt import lt_route, pick  # this folder's script

    from gpu.backend.cupy_backend import CupyBackend
    offered = int(os.environ.get("LT_MIB", "32")) << 20
    ws = cp.empty(max(offered, 256), dtype=cp.uint8)
    CupyBackend._gemm_ex = lt_route(CupyBackend._gemm_ex, pick(os.environ.get("CHOICE", "0")), ws, offered, {})


def graph_nodes(plan, tag: str) -> dict:
    """The nodes of the plan's one captured graph by kind, from CuPy's DOT text (empty where none is kept)."""
    graphs = list(plan._graphs.captured._entries.values())
    if not graphs:
        return {}
    try:
        dot = graphs[0].debug_dot_str()
        if os.environ.get("DOT"):
            with open(os.path.join(os.environ["OUT"], f"dot-{tag}.txt"), "w") as fh:
                fh.write(dot)
    except Exception as exc:                         # noqa: BLE001 - a probe records what it could not read
        return {"error": repr(exc)}
    labels = Counter(name[:60] for name in re.findall(r'label="\d+\n([^\n"(]+)', dot))
    return {"nodes": sum(labels.values()), "by_label": dict(labels.most_common(12)), "dot_chars": len(dot)}


def checksum(C) -> str:
    """A sum of C's bits as integers: equal products give equal sums."""
    return hex(int((C.view(cp.uint64) >> 16).sum(dtype=cp.uint64)))


def probe(A, B, out, count: int, extra_gib: int) -> dict:
    ozaki2.PLANS.clear()
    cp.get_default_memory_pool().free_all_blocks()
    held = cp.empty((extra_gib * 2**30 // 8,), dtype=cp.float64) if extra_gib else None
    calls = []
    for _ in range(CALLS):
        cp.cuda.Device().synchronize()
        t0 = time.perf_counter()
        ozaki2.matmul(A, B, moduli=count, level=LEVEL, out=out, backend=get_backend("cupy"))
        host = time.perf_counter() - t0
        cp.cuda.Device().synchronize()
        calls.append({"host_ms": 1e3 * host, "wall_ms": 1e3 * (time.perf_counter() - t0)})
        print(count, extra_gib, calls[-1], flush=True)
    plan = next(iter(ozaki2.PLANS._plans.values()))
    part = plan.part(count)
    record = {"count": count, "level": LEVEL, "extra_gib": extra_gib, "calls": calls, "checksum": checksum(out),
              "scale_launch_queues": os.environ.get("CUDA_SCALE_LAUNCH_QUEUES"),
              "spans": len(part.spans), "span_rows": part.spans[0].stop - part.spans[0].start,
              "fused": part.half is not None, "graph_mode": str(plan._graphs.mode),
              "graphs": len(plan._graphs.captured), "nodes": graph_nodes(plan, f"{count}-{extra_gib}"),
              "free_gib": cp.cuda.runtime.memGetInfo()[0] / 2**30}
    print({k: v for k, v in record.items() if k != "calls"}, flush=True)
    del held
    return record


def main() -> None:
    if os.environ.get("ROUTE") == "lt":
        route_through_lt()
    A, B = fresh_inputs(N)
    out = cp.empty((N, N))
    records = [probe(A, B, out, count, extra) for count in COUNTS for extra in EXTRAS]
    result = {"script": "results/published/scripts/ozaki2_span_host_probe.py", "n": N,
              "environment": environment(get_backend("cupy")), "workspace_bytes": stream_blas.WORKSPACE_BYTES,
              "records": records}
    name = f"span-host-probe-{stream_blas.WORKSPACE_BYTES >> 20}{os.environ.get('ROUTE', '')}-w{LEVEL}.json"
    with open(os.path.join(os.environ["OUT"], name), "w") as fh:
        json.dump(result, fh, indent=1)


if __name__ == "__main__":
    main()
