"""Probe: split-K's deterministic reduction fused into the chunk kernel, against the unfused plan and cuBLAS.

Runs only at commit d1f5127 (its parent f02d7b3 for the first batch run), where the chunk kernels had the
``FUSED`` flag (``gpu/splitk/reduce_source.py``: the last block of a group of chunks to arrive adds the group's
partials in chunk order, the last group adds the group sums into C) and ``Launcher(fused=...)``; the next
commit took the fused reduction out again (results/published/README.md says why). Per point m = n, k: a kept
``splitk.Plan`` per variant, each compiled from the source with its edits (``compiled._SOURCE`` patched, the
kernel caches cleared), checked for the unfused plan's bits, then timed as called (``plan.execute(A, B)``,
``splitk_as_called.turning_rounds``: 40 calls back to back, 12 rounds in turning order) beside
``cupy.matmul(A, B)``. ``MODE=batches``: the reduction's batch shape (E outputs per thread at a time, D slots'
loads in flight); ``MODE=parts`` (E = 2, D = 8): the whole reduction, plain loads for ``__ldcg``, the arrivals
alone (nothing added) and the group sums alone. ``POINTS`` (``MxK,...``) overrides the points. Run on the GPU
from the repository root::

    PYTHONPATH=$PWD:$PWD/results/published/scripts MODE=parts OUT=dir \
        python3 results/published/scripts/splitk_fused_probe.py
"""
import json
import os
import statistics

import cupy
import numpy as np
from splitk_as_called import turning_rounds, versions

from gpu import splitk
from gpu.backend import get_backend
from gpu.splitk import compiled, kernels

MODE = os.environ.get("MODE", "parts")
SETTINGS = [(2, 8), (4, 4), (8, 2), (4, 8)]
GROUP = "add_slots<T, BM, BN, THREADS, E>(P, so0, so1, so2, m, n, o0, first, count, 1, s);"
FINAL = "add_slots<T, BM, BN, THREADS, E>(P, so0, so1, so2, m, n, o0, 0, groups, group, s);"
EDITS = {"full": [], "plain": [("__ldcg(P + at[e] + (h + q) * step * so2)", "P[at[e] + (h + q) * step * so2]"),
                               ("__ldcg(P + at[e])", "P[at[e]]")],
         "arrive_only": [(GROUP, "s[0] = 0;"), (FINAL, "s[0] = 0;")], "group_only": [(FINAL, "s[0] = 0;")]}
ALL = [(m, k) for m in (16, 32, 64) for k in (2**20, 2**22, 2**24)]
PARTS = [(32, 2**22), (64, 2**20), (16, 2**24)]
POINTS = ([tuple(int(x) for x in p.split("x")) for p in os.environ["POINTS"].split(",")] if os.environ.get("POINTS")
          else PARTS if MODE == "parts" else ALL)
BASE = compiled._SOURCE


def patched(e: int, d: int, edit: str = "full") -> str:
    src = BASE
    for name, value in (("FINISH_BATCH", e), ("FINISH_DEPTH", d)):
        i = src.index(f"#define {name} ")
        src = src[:i] + f"#define {name} {value}" + src[src.index("\n", i):]
    for a, b in EDITS[edit]:
        src = src.replace(a, b)
    return src


def plan_with(A, B, e: int, d: int, fused: bool = True, edit: str = "full"):
    compiled._SOURCE = patched(e, d, edit)
    compiled._FUNCTIONS.clear()
    compiled._CHUNK_FUNCTIONS.clear()
    kernels._LAUNCHES.clear()
    p = splitk.Plan(A, B)
    p._ops = kernels.Launcher(p.split, A, B, (np.int64(B.shape[1]), np.int64(1)), True, fused=fused)
    return p


def point(be, tel, m: int, k: int) -> dict:
    rng = cupy.random.default_rng(m * 7 + k)
    A, B = rng.random((m, k)), rng.random((k, m))
    want = cupy.matmul(A, B)
    plans = ({f"E{e}D{d}": plan_with(A, B, e, d) for e, d in SETTINGS} if MODE == "batches"
             else {edit: plan_with(A, B, 2, 8, edit=edit) for edit in EDITS})
    plans["unfused"] = plan_with(A, B, 2, 8, fused=False)
    ref = plans["unfused"].execute(A, B)
    bits = {name: bool(cupy.array_equal(p.execute(A, B), ref)) for name, p in plans.items()
            if name not in ("arrive_only", "group_only")}
    err = float(cupy.abs(ref - want).max() / cupy.abs(want).max())
    named = {"cupy_matmul": lambda: cupy.matmul(A, B)}
    named.update({name: (lambda p=p: p.execute(A, B)) for name, p in plans.items()})
    samples = turning_rounds(be, tel, named, 12)
    base = samples["cupy_matmul"]
    ratio = {name: statistics.median(b["wall_s"] / s["wall_s"] for b, s in zip(base, runs))
             for name, runs in samples.items()}
    dev = {name: statistics.median(s["device_s"] for s in runs) for name, runs in samples.items()}
    print(m, k, "same bits" if all(bits.values()) else bits, f"err {err:.1e}",
          " ".join(f"{n}:{1e6 * dev[n]:.1f}us/{ratio[n]:.3f}" for n in named), flush=True)
    for p in plans.values():
        p.free()
    return {"m": m, "k": k, "split": plans["unfused"].split.as_dict(), "bits": bits, "ratio": ratio,
            "device_s": dev, "samples": samples}


def main() -> None:
    be = get_backend("cupy")
    tel = be.telemetry()
    out = {"environment": versions(be), "mode": MODE, "settings": SETTINGS, "edits": EDITS, "points": []}
    for m, k in POINTS:
        out["points"].append(point(be, tel, m, k))
        cupy.get_default_memory_pool().free_all_blocks()
    with open(os.path.join(os.environ.get("OUT", "."), "finish-probe.json"), "w") as fh:
        json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
