"""Is split-K's 95% of the read roof its access pattern or its arithmetic?

The library's bulk kernel compiled with one change: flag 64 skips its products. Its stages are still copied by the
tensor-map boxes, waited for and handed back, and its partials written. Per point, back to back
(``splitk_as_called.turning_rounds``): a kernel that only reads A and B in order (``splitk_roof.read16``, 16 blocks
per SM), cuBLAS, the default call, and the bulk kernel in shapes of 1, 2 and 4 slices by 2, 3, 4 and 6 stages,
each with its automatic split and (where that has several waves) with one wave, with (``mma-``) and without
(``nomma-``) its products. Reports the TB/s of A and B read per call.

    OUT=dir PYTHONPATH=$PWD:$PWD/results/published/scripts python3 results/published/scripts/splitk_read_pattern.py

``ROUNDS`` (8). JSON to ``$OUT/splitk-read-pattern.json``.
"""
import json
import os
import statistics

import cupy
import numpy as np

from gpu.splitk import compiled

_PRODUCTS = ("            if (len == KS) bulk_products<TM, TN, R, KW, LA, LB, false>(As, Bs, acc, wk, r0, c0, g, t, "
             "len);\n")
SKIP = 64
ROUNDS = int(os.environ.get("ROUNDS", "8"))
POINTS = ((32, 22), (32, 24), (64, 20), (16, 24))


def instrument() -> None:
    """The kernel source with the products skipped where ``flags & SKIP``."""
    src = compiled._SOURCE
    assert src.count(_PRODUCTS) == 1, "the kernel source changed"
    compiled._SOURCE = src.replace(_PRODUCTS, f"            if (flags & {SKIP}) {{}}\n            else "
                                   + _PRODUCTS.lstrip())


def launches(m: int, k: int, A, B) -> dict:
    """The bulk kernel's launches by shape, split and mode."""
    from gpu.splitk import kernels
    from gpu.splitk.plan import _split
    from gpu.splitk.plan import plan as split_plan

    limits, into, named = kernels.CudaOps(None).limits(), (np.int64(m), np.int64(1), np.int64(m * m)), {}
    for slices in (1, 2, 4):
        for stages in (2, 3, 4, 6):
            v = kernels.Variant.bulk(m, m, slices, stages)
            try:
                auto = split_plan(m, m, k, limits, kernels.resources(v))
            except ValueError:                   # more shared memory than a block may have
                continue
            splits = {"auto": auto}
            if auto.waves > 1:
                per = auto.chunks // auto.waves
                splits["one"] = _split(m, m, k, per, per, True, True)
            for label, split in splits.items():
                P = cupy.empty((split.chunks, m, m))
                for mode in ("nomma", "mma"):
                    launch = kernels.ChunkLaunch(v, split, A, B, into, False)
                    if launch.boxes is None:
                        continue
                    launch.atomic = SKIP if mode == "nomma" else 0
                    named[f"{mode}-sl{slices}-st{stages}-{label}{split.chunks}"] = (
                        lambda launch=launch, P=P: launch(A, B, P, 1.0))
    return named


def point(be, tel, m: int, e: int) -> dict:
    from splitk_as_called import turning_rounds
    from splitk_roof import _READ

    from gpu import splitk

    k = 2**e
    rng = cupy.random.default_rng(e)
    A, B = rng.random((m, k)), rng.random((k, m))
    blocks = 16 * cupy.cuda.Device().attributes["MultiProcessorCount"]
    sink = cupy.zeros(blocks)
    named = {"read": lambda: _READ((blocks,), (256,), (A, np.int64(A.size // 2), B, np.int64(B.size // 2), sink)),
             "cublas": lambda: cupy.matmul(A, B), "default": lambda: splitk.matmul(A, B), **launches(m, k, A, B)}
    samples = turning_rounds(be, tel, named, ROUNDS)
    return {"m": m, "k": k, "tb_s": {name: 16.0 * m * k / statistics.median(s["wall_s"] for s in runs) / 1e12
                                     for name, runs in samples.items()}}


def main() -> None:
    instrument()
    from gpu.backend import get_backend

    be = get_backend("cupy")
    tel = be.telemetry()
    out = {"script": "results/published/scripts/splitk_read_pattern.py", "rounds": ROUNDS, "points": []}
    for m, e in POINTS:
        got = point(be, tel, m, e)
        out["points"].append(got)
        top = sorted(got["tb_s"].items(), key=lambda item: -item[1])[:14]
        print(m, e, [(name, round(v, 3)) for name, v in top], flush=True)
        cupy.get_default_memory_pool().free_all_blocks()
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "splitk-read-pattern.json"), "w") as fh:
        json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
