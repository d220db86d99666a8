"""Split-K's bulk-copy kernel (``splitk_bulk``: a producer warp's ``cp.async.bulk`` rows, mbarrier stages) tuned
against the pipelined kernel that the default runs and cuBLAS.

Per m = n and k, one interleaved group (device time, sustained, cache flushed before every sample, launch
overhead held out) of cuBLAS (``cupy.matmul``), a device copy, the public call at its defaults
(``splitk.matmul(A, B, out=C)``) and, for each bulk-kernel shape of :data:`GRID`, the auto split a plan makes
with that kernel's resources, run by the library's executor in the deterministic and the atomic mode. Every
product is checked before it is timed; a shape whose product is wrong is reported and left out. Environment:
MS, ES (k = 2**e), MODES (det,atom). Writes ``$OUT/splitk-bulk-tune.json``. Run from the repository root with
``PYTHONPATH=$PWD``.
"""

import itertools
import json
import os
import time
from dataclasses import replace

import cupy

from experiments.core.environment import environment
from experiments.core.lab import check_product
from experiments.core.timing import measure_interleaved
from experiments.splitk.bench import SplitOperands
from gpu import splitk
from gpu.backend import get_backend
from gpu.splitk import kernels, occupancy, tensormap
from gpu.splitk.executor import run
from gpu.splitk.plan import _split
from gpu.splitk.plan import plan as split_plan

if os.environ.get("L2"):                       # the tensor maps' L2 promotion (0: none, 1-3: 64, 128, 256 B)
    tensormap.L2_256B = int(os.environ["L2"])
be = get_backend("cupy")
limits = be.ops("splitk").limits()
MS = [int(x) for x in os.environ.get("MS", "16,32,64").split(",")]
ES = [int(x) for x in os.environ.get("ES", "20,22,24").split(",")]
MODES = os.environ.get("MODES", "det,atom").split(",")
WAVES = [int(x) for x in os.environ.get("WAVES", "1,2").split(",") if x]
#: Kernel shapes per m as "slices:stages:warp_tile" (all of GRID where not given).
CHOSEN = {int(m): [tuple(int(x) for x in shape.split(":")) for shape in shapes.split("/")]
          for m, shapes in (item.split("=") for item in os.environ.get("SHAPES", "").split(";") if item)}
GRID = {"slices": tuple(int(x) for x in os.environ.get("SLICES", "1,2").split(",")),
        "stages": tuple(int(x) for x in os.environ.get("STAGES", "2,3,4").split(",")), "warp_tile": (32, 16)}
LIMIT = 227 * 1024


def variants(m):
    seen = {}
    for slices, stages, tile in CHOSEN.get(m) or itertools.product(*GRID.values()):
        v = kernels.Variant.bulk(m, m, slices=slices, stages=stages, warp_tile=tile)
        fits = tile <= m and v.shared <= LIMIT
        if fits and v.name not in {x.name for x in seen.values()}:
            seen[f"sl{slices}-st{stages}-wt{tile}"] = v
    t0 = time.time()
    out, refused = kernels.resources_of(seen)
    print(f"m={m}: {len(seen)} bulk shapes compiled in {time.time() - t0:.1f} s", flush=True)
    for name, err in refused.items():
        print("skip", name, err, flush=True)
    return out


def plans(m, k, kernel, det):
    """The auto split of this kernel, and splits of whole 64-element units in WAVES waves of its occupancy."""
    found = {"auto": split_plan(m, m, k, limits, replace(kernel, wide=None), deterministic=det)}
    per_wave = occupancy.chunks(m, m, limits, kernel)
    for w in WAVES:
        found[f"{w}w"] = _split(m, m, k, per_wave * w, per_wave, det, True)
    return found


def works_for(ops, m, k):
    A, B, C = ops.A, ops.B, ops.C
    works = {"cublas": lambda: cupy.matmul(A, B, out=C), "copy": ops.copy,
             "public": lambda: splitk.matmul(A, B, out=C),
             "public_atomic": lambda: splitk.matmul(A, B, out=C, deterministic=False)}
    info = {}
    for name, (v, kernel) in variants(m).items():
        for mode in MODES:
            det = mode == "det"
            for how, split in plans(m, k, kernel, det).items():
                P = cupy.empty((split.chunks, m, m)) if det else None
                bound = kernels.Launcher(split, A, B, kernels._strides(C), True, v=v)
                if not bound.chunks.boxes:
                    print("no tensor maps for", name, how, flush=True)
                    continue
                key = f"{mode}-{how}-{name}"
                works[key] = (lambda b=bound, s=split, P=P: run(be, b, s, A, B, C, 1.0, 0.0, P))
                info[key] = {"variant": v.name, "regs": kernel.registers_per_thread, "shared": v.shared,
                             **split.as_dict()}
    return works, info


def point(m, k):
    ops = SplitOperands.draw(be, m, k)
    works, info = works_for(ops, m, k)
    errors, wrong = {}, {}
    for name, f in list(works.items()):
        if name == "copy":
            continue
        try:
            errors[name] = check_product(ops, f, name)
        except RuntimeError as err:
            wrong[name] = str(err)
            del works[name]
    with be.allocation_policy("pooled"):
        timings = measure_interleaved(works, be, regime="sustained", hide_launch=True, flush=True, max_attempts=2)
    least, copy_bw = 8 * (2 * m) * k, 2 * ops.shared.nbytes / timings["copy"].median
    row = {"m": m, "k": k, "info": info, "errors": errors, "wrong": wrong,
           "us": {n: t.median * 1e6 for n, t in timings.items()},
           "roof": {n: least / t.median / copy_bw for n, t in timings.items() if n != "copy"},
           "x_cublas": {n: timings["cublas"].median / t.median for n, t in timings.items()},
           "copy_tb_s": copy_bw / 1e12, "stable": {n: t.stable for n, t in timings.items()}}
    ranked = sorted((n for n in row["x_cublas"] if n.startswith(("det-", "atom-"))), key=row["x_cublas"].get)[::-1]
    print(f"m={m} k=2^{k.bit_length() - 1}: copy {row['copy_tb_s']:.2f} TB/s, cublas {row['roof']['cublas']:.3f} roof; "
          f"public {row['x_cublas']['public']:.3f}x, atomic {row['x_cublas']['public_atomic']:.3f}x; "
          f"wrong {list(wrong)}; "
          "top " + ", ".join(f"{n} {row['x_cublas'][n]:.3f}" for n in ranked[:3]), flush=True)
    groups = sorted({n.rsplit("-", 3)[0] for n in ranked})
    print("   best per plan: " + ", ".join(f"{g} {max(row['x_cublas'][n] for n in ranked if n.startswith(g + '-')):.3f}"
                                           for g in groups), flush=True)
    del ops
    cupy.get_default_memory_pool().free_all_blocks()
    return row


if __name__ == "__main__":
    start = time.time()
    results = {"script": "results/published/scripts/splitk_bulk_tune.py", "environment": environment(be),
               "grid": GRID, "points": []}
    for m in MS:
        for e in ES:
            results["points"].append(point(m, 2**e))
            with open(os.path.join(os.environ.get("OUT", "."), "splitk-bulk-tune.json"), "w") as fh:
                json.dump(results, fh, indent=1, default=str)
    print(f"{time.time() - start:.0f} s", flush=True)
