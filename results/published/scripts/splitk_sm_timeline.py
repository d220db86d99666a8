"""When each block of split-K's bulk kernel ends, per SM, launch after launch: the plain split against the balanced
wave (``gpu.splitk.kernels.BALANCE``).

The script compiles the library's kernel source with two reads of ``%globaltimer`` and one of ``%smid`` added to
``splitk_bulk`` (nothing else changes), runs the public call's plan ``LAUNCHES`` times per point and mode, and
reports per point: the kernel's span (first start to last end), the mean block end over the last (1.0: every SM
busy to the end), each SM's mean end and its spread from launch to launch, and the SM classes the library found
(``gpu.splitk.sm_probe.classes``). On the H200 the plain split ended 24 SMs' equal chunks at 376 us and the other
108 SMs' at 488 us (m = n = 32, k = 2^22), each SM within 1.6 us of itself: the pattern the balanced wave uses.

    OUT=dir PYTHONPATH=$PWD python3 results/published/scripts/splitk_sm_timeline.py

``POINTS`` (m:log2 k, comma-separated; default 16:24,32:22,32:24,64:20,64:22,64:24), ``LAUNCHES`` (24).
JSON to ``$OUT/splitk-sm-timeline.json``.
"""
import json
import os
import statistics

import cupy
import numpy as np

from gpu.splitk import compiled

_HEAD = ("template <int TM, int TN, int WMS, int WNS, int R, int S>\n__global__ void __launch_bounds__((4 + 1) * 32)\n"
         "splitk_bulk")
_START = "    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;\n    const int row0 = blockIdx.y * BM"
_END = "    emit_sums<KW, BM, BN>(stages, m, n, out, so0, so1, so2, alpha, flags, chunk);\n}\n"
_TIMER = "    unsigned long long t_begin; asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(t_begin));\n"
_RECORD = ("    if (threadIdx.x == 0) { unsigned long long t_end; asm volatile(\"mov.u64 %0, %%globaltimer;\" : "
           "\"=l\"(t_end)); unsigned sm; asm volatile(\"mov.u32 %0, %%smid;\" : \"=r\"(sm)); const long long q = "
           "(static_cast<long long>(blockIdx.z) * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x; "
           "probe_rec[3 * q] = sm; probe_rec[3 * q + 1] = t_begin; probe_rec[3 * q + 2] = t_end; }\n")
POINTS = [tuple(int(x) for x in p.split(":")) for p in os.environ.get(
    "POINTS", "16:24,32:22,32:24,64:20,64:22,64:24").split(",")]
LAUNCHES = int(os.environ.get("LAUNCHES", "24"))
_MODULES = []


def instrument() -> None:
    """The kernel source with the timers, and the compiled modules kept (to read ``probe_rec``)."""
    src = compiled._SOURCE
    for part in (_HEAD, _START, _END):
        assert src.count(part) == 1, f"the kernel source changed: {part[:40]!r}"
    src = src.replace(_HEAD, "__device__ unsigned long long probe_rec[3 * 16384];\n" + _HEAD)
    src = src.replace(_START, _TIMER + _START).replace(_END, _END[:-2] + _RECORD + "}\n")
    compiled._SOURCE = src
    original = compiled._compile

    def keep(names):
        module = original(names)
        _MODULES.append((names, module))
        return module

    compiled._compile = keep


def timeline(plan, A, B, C) -> dict:
    """Per launch of ``plan``: each block's SM, start and end (ns); summarised."""
    mod = [m for names, m in _MODULES if any(n.startswith("splitk_bulk") for n in names)][-1]
    rec = cupy.ndarray((3 * 16384,), dtype=cupy.uint64, memptr=mod.get_global("probe_rec"))
    per_sm, spans, fill = {}, [], []
    for _ in range(LAUNCHES):
        rec.fill(0)
        plan.execute(A, B, C)
        cupy.cuda.Device().synchronize()
        r = rec.get().reshape(-1, 3).astype(np.float64)
        r = r[r[:, 2] > 0]
        end = (r[:, 2] - r[:, 1].min()) / 1e3
        spans.append(end.max())
        fill.append(end.mean() / end.max())
        for sm, e in zip(r[:, 0].astype(int), end):
            per_sm.setdefault(int(sm), []).append(float(e))
    return {"split": plan.split.as_dict(), "blocks": len(r), "span_us": statistics.median(spans),
            "mean_end_over_span": statistics.median(fill),
            "sm_end_us": {sm: round(statistics.mean(v), 2) for sm, v in sorted(per_sm.items())},
            "sm_spread_us": statistics.median(float(np.std(v)) for v in per_sm.values())}


def main() -> None:
    instrument()
    from gpu.splitk import Plan, kernels, sm_probe

    found = sm_probe.classes(cupy.cuda.Device().id)
    out = {"script": "results/published/scripts/splitk_sm_timeline.py", "launches": LAUNCHES,
           "device": cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(),
           "classes": None if found is None else {"fast": found.fast, "ratio": found.ratio, "sms": len(found.sms)},
           "points": []}
    for m, e in POINTS:
        rng = cupy.random.default_rng(e * 7 + m)
        A, B, C = rng.random((m, 2**e)), rng.random((2**e, m)), cupy.empty((m, m))
        point = {"m": m, "k": 2**e}
        for mode in (False, True):
            kernels.BALANCE = mode
            plan = Plan(A, B, out=C)
            plan.execute(A, B, C)
            point["balanced" if mode else "plain"] = got = timeline(plan, A, B, C)
            print(m, e, "balanced" if mode else "plain", got["split"]["chunks"], f"span {got['span_us']:.1f} us,",
                  f"mean end / span {got['mean_end_over_span']:.3f}, SM spread {got['sm_spread_us']:.2f} us",
                  flush=True)
            plan.free()
        out["points"].append(point)
        del A, B, C
        cupy.get_default_memory_pool().free_all_blocks()
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "splitk-sm-timeline.json"), "w") as fh:
        json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
