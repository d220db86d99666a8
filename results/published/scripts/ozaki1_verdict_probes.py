"""Probes of Ozaki I's device-verdict call (``gpu.ozaki.deferred``): ``h200-ozaki1-device-verdict-probes.json``.

``WHAT=sync``: where a plan's first call per workspace waits: each step (plan build, first and second execution, a
graph's capture alone, its upload, its launches, ``matmul``'s first call and repeat, and ``exact_matmul``'s repeat)
behind a 200 ms busy kernel, with its host time and whether the busy kernel had ended when it returned; then, at
N = 4096 in FP32 and INT8 slices, the build, capture, instantiation and run times of a plan.
``WHAT=host``: the host time of ``ozaki.matmul(A, B)`` per ``max_slices`` (None, 32, 16) at N = 512 and 2048 in
FP32 and INT8 slices (``experiments.core.ascalled.host_seconds``), its graph's launch on an idle device and a loop
of 20 calls; and a cProfile of 200 default calls at N = 512.
``WHAT=launch``: at N = 2048, per ``max_slices`` (4, 8, 16, 32), the host time of the graph's launch and of a
plan's execution, on an idle device and behind a 200 ms busy kernel (medians of 5).
Operands: (ru - 0.5) exp(rn), drawn on the device. Run from the repository root with ``PYTHONPATH=$PWD``; writes
``$OUT/ozaki1-<what>-probe.json``.
"""

import cProfile
import io
import json
import os
import pstats
import statistics
import time

import cupy as cp

from experiments.core.ascalled import host_seconds
from gpu import ozaki
from gpu.backend import get_backend
from tests.gpu.busy import busy

BE = get_backend("cupy")


def operand(m: int, k: int, seed: int):
    rng = cp.random.default_rng(seed)
    return (rng.random((m, k)) - 0.5) * cp.exp(rng.standard_normal((m, k)))


def behind(fn) -> tuple[float, bool, object]:
    """Host seconds of ``fn()`` issued behind a 200 ms kernel, whether that kernel had ended, and the result."""
    BE.synchronize()
    busy(200)
    start = time.perf_counter()
    result = fn()
    seconds, done = time.perf_counter() - start, cp.cuda.get_current_stream().done
    BE.synchronize()
    return seconds, done, result


def graph_of(plan):
    return next(iter(plan._deferred.graphs._entries.values()))


def sync_probe() -> dict:
    out = {}
    A, B = operand(512, 512, 1), operand(512, 512, 2)

    def step(name, fn):
        seconds, done, result = behind(fn)
        out[name] = [seconds * 1e3, done]
        return result

    plan1 = step("plan1 build", lambda: ozaki.Plan(A, B, backend=BE))
    step("plan1 first exec", lambda: plan1.execute(A, B))
    step("plan1 second exec", lambda: plan1.execute(A, B))
    plan2 = step("plan2 build", lambda: ozaki.Plan(A, B, backend=BE))
    verdict, work = plan2._deferred, plan2._workspace(plan2._deferred.layout)
    graph = step("plan2 capture only", lambda: verdict.capturer.capture(lambda br: verdict._build(br, work)))
    stream = cp.cuda.get_current_stream()
    step("plan2 graph upload", lambda: graph.upload(stream))
    step("plan2 graph launch1", lambda: graph.launch(stream))
    step("plan2 graph launch2", lambda: graph.launch(stream))
    step("plan2 exec", lambda: plan2.execute(A, B))
    plan3 = ozaki.Plan(A, B, backend=BE, hold=False)
    step("plan3 first exec (capture+instantiate)", lambda: plan3.execute(A, B))
    step("matmul default first", lambda: ozaki.matmul(A, B, backend=BE))
    step("matmul default repeat", lambda: ozaki.matmul(A, B, backend=BE))
    for fmt in ("fp32", "int8"):
        A4, B4 = operand(4096, 4096, 3), operand(4096, 4096, 4)
        start = time.perf_counter()
        plan = ozaki.Plan(A4, B4, options={"slice_format": fmt}, backend=BE, hold=False)
        BE.synchronize()
        build = time.perf_counter() - start
        verdict, work = plan._deferred, plan._workspace(plan._deferred.layout)
        start = time.perf_counter()
        graph = verdict.capturer.capture(lambda br, v=verdict, w=work: v._build(br, w))
        capture = time.perf_counter() - start
        start = time.perf_counter()
        graph.upload()
        BE.synchronize()
        upload = time.perf_counter() - start
        runs = []
        for _ in range(2):
            start = time.perf_counter()
            plan.execute(A4, B4)
            BE.synchronize()
            runs.append(time.perf_counter() - start)
        out[f"4096 {fmt}"] = {"build": build, "capture": capture, "instantiate_upload": upload, "runs": runs,
                              "most": verdict.most, "gemm_calls": len(verdict.schedule.plan.chunks),
                              "verdict": plan.last_verdict()}
        cp.get_default_memory_pool().free_all_blocks()
    return out


def host_probe() -> dict:
    out = {}
    for n in (512, 2048):
        A, B = operand(n, n, 1), operand(n, n, 2)
        for fmt in ("fp32", "int8"):
            for cap in (None, 32, 16):
                def call(fmt=fmt, cap=cap, A=A, B=B):
                    return ozaki.matmul(A, B, slice_format=fmt, max_slices=cap, backend=BE)
                for _ in range(3):
                    call()
                BE.synchronize()
                host = host_seconds(BE, call)
                plan = ozaki.Plan(A, B, options={"slice_format": fmt, "max_slices": cap}, backend=BE)
                graph, stream = graph_of(plan), cp.cuda.get_current_stream()
                BE.synchronize()
                start = time.perf_counter()
                for _ in range(20):
                    graph.launch(stream)
                launch = (time.perf_counter() - start) / 20
                BE.synchronize()
                start = time.perf_counter()
                for _ in range(20):
                    call()
                BE.synchronize()
                out[f"{n} {fmt} {cap}"] = {"host_us": host * 1e6, "graph_launch_us": launch * 1e6,
                                           "loop_ms": (time.perf_counter() - start) / 20 * 1e3,
                                           "most": plan.max_slices}
    A, B = operand(512, 512, 1), operand(512, 512, 2)
    ozaki.matmul(A, B, backend=BE)
    BE.synchronize()
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(200):
        ozaki.matmul(A, B, backend=BE)
    profile.disable()
    BE.synchronize()
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(28)
    out["profile"] = text.getvalue()
    return out


def launch_probe() -> dict:
    out = {}
    A, B = operand(2048, 2048, 1), operand(2048, 2048, 2)
    for fmt in ("fp32", "int8"):
        for cap in (4, 8, 16, 32):
            plan = ozaki.Plan(A, B, options={"slice_format": fmt, "max_slices": cap}, backend=BE)
            plan.execute(A, B)
            BE.synchronize()
            graph, stream = graph_of(plan), cp.cuda.get_current_stream()
            row = {}
            for name, fn in (("launch", lambda g=graph, s=stream: g.launch(s)),
                             ("execute", lambda p=plan: p.execute(A, B))):
                idle, busy_s = [], []
                for _ in range(5):
                    BE.synchronize()
                    start = time.perf_counter()
                    fn()
                    idle.append(time.perf_counter() - start)
                    busy_s.append(behind(fn)[0])
                row[name] = {"idle_us": statistics.median(idle) * 1e6, "busy_us": statistics.median(busy_s) * 1e6}
            out[f"{fmt} {cap}"] = {**row, "verdict": plan.last_verdict()}
    return out


def main() -> None:
    what = os.environ.get("WHAT", "sync")
    out = {"sync": sync_probe, "host": host_probe, "launch": launch_probe}[what]()
    print(json.dumps(out, indent=1, default=str)[:8000])
    with open(os.path.join(os.environ.get("OUT", "/tmp"), f"ozaki1-{what}-probe.json"), "w") as fh:
        json.dump(out, fh, indent=1, default=str)


if __name__ == "__main__":
    main()
