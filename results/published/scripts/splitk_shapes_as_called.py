"""Split-K's bulk-kernel shapes timed as a user calls them: the whole default call (chunk kernel, reduction, a new C)
for each candidate shape of each output class, beside cuBLAS, back to back.

The shapes in ``gpu.splitk.variants.BULK_TUNED`` were chosen by device time with the cache flushed before every
sample (``splitk_bulk_tune.py``); the targets are judged on calls made back to back, where one call's tail meets the
next one's start. Per class m = n in ``SIZES`` and k in ``KS``: a kept plan (``gpu.splitk.Plan``, its defaults) per
candidate, built with ``BULK_TUNED`` set to that shape (so its chunk count follows the shape's occupancy as the
default's does), and ``cupy.matmul``; ``ROUNDS`` rounds in turning order, each sample ``CALLS`` calls and one
synchronisation (``splitk_as_called.turning_rounds``); each plan's product checked against cuBLAS first.

    OUT=dir PYTHONPATH=$PWD:$PWD/results/published/scripts python3 results/published/scripts/splitk_shapes_as_called.py

``SHAPES``: per m, ``slices:stages`` pairs (default below); JSON to ``$OUT/splitk-shapes-as-called.json``.
"""
import json
import os
import statistics
import time

import cupy
from splitk_as_called import CALLS, KS, ROUNDS, SIZES, check, turning_rounds, versions

from gpu import splitk
from gpu.backend import get_backend
from gpu.splitk import variants

DEFAULT_SHAPES = {16: "2:4,1:6,1:3,2:6,1:4", 32: "1:4,1:3,1:6,2:3", 64: "2:3,4:3,4:2,2:4,2:6"}


def candidates(m: int) -> list[tuple[int, int]]:
    text = os.environ.get(f"SHAPES_{m}", DEFAULT_SHAPES.get(m, "1:4"))
    return [tuple(int(x) for x in pair.split(":")) for pair in text.split(",")]


def plan_for(A, B, m: int, shape: tuple[int, int]):
    """A kept plan of the default call with the bulk kernel in ``shape`` (slices, stages) for this class."""
    key = variants._warp_grid(m, m, 16, variants.WARP_TILE)
    saved = dict(variants.BULK_TUNED)
    variants.BULK_TUNED[key] = {"slices": shape[0], "stages": shape[1]}
    try:
        return splitk.Plan(A, B)
    finally:
        variants.BULK_TUNED.clear()
        variants.BULK_TUNED.update(saved)


def point(be, tel, m: int, k: int) -> dict:
    rng = cupy.random.default_rng(m * 7 + k)
    A, B, C = rng.random((m, k)), rng.random((k, m)), cupy.empty((m, m))
    plans = {f"sl{s}-st{t}": plan_for(A, B, m, (s, t)) for s, t in candidates(m)}
    named = {"cupy_matmul": lambda: cupy.matmul(A, B)}
    named.update({name: (lambda p=p: p.execute(A, B)) for name, p in plans.items()})
    errors = check(be, named, A, B, C)
    samples = {name: [s["wall_s"] for s in runs] for name, runs in turning_rounds(be, tel, named, ROUNDS).items()}
    base = samples["cupy_matmul"]
    ratio = {name: statistics.median(b / s for b, s in zip(base, runs)) for name, runs in samples.items()}
    out = {"m": m, "k": k, "check_error": errors, "as_called": ratio,
           "wall_s": {name: statistics.median(runs) for name, runs in samples.items()},
           "splits": {name: p.split.as_dict() for name, p in plans.items()}}
    for p in plans.values():
        p.free()
    return out


def main() -> None:
    be = get_backend("cupy")
    tel = be.telemetry()
    started = time.perf_counter()
    out = {"script": "results/published/scripts/splitk_shapes_as_called.py", "calls": CALLS, "rounds": ROUNDS,
           "environment": versions(be), "current": {str(k): v for k, v in variants.BULK_TUNED.items()}, "points": []}
    for m in SIZES:
        for k in KS:
            p = point(be, tel, m, k)
            out["points"].append(p)
            print(m, k.bit_length() - 1, {n: round(r, 4) for n, r in p["as_called"].items()}, flush=True)
            cupy.get_default_memory_pool().free_all_blocks()
    out["seconds"] = time.perf_counter() - started
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "splitk-shapes-as-called.json"), "w") as fh:
        json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
