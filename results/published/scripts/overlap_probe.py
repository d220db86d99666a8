"""The Strassen speed-up at N = 16384: do Winograd's additions hide behind its products on a second stream?

At N = 16384 (sustained) winograd+fused ran at 1.168x DGEMM against a products-alone bound of 1.306x:
14.5 ms of its 138 ms were additions, run between the products. ``winograd2`` puts the sums and the
output additions on a second stream. Per level (2, 3), one interleaved sustained group of DGEMM,
winograd+fused, winograd2-parallel+fused with the side streams at default and at the highest priority
(CUDA's block scheduler then takes an addition's blocks first as the GEMM's retire), and both replayed
as graphs; each checked against DGEMM first. Writes ``$OUT/overlap.json``.
"""
import json
import os
import sys

import numpy as np
from rounds import group_record

from experiments.core.lab import Operands, time_group
from experiments.strassen.bench import strassen_work
from gpu.backend import get_backend
from gpu.strassen import Config
from gpu.strassen import executor as ex

N = int(os.environ.get("N", 16384))
LEVELS = tuple(int(x) for x in os.environ.get("LEVELS", "2,3").split(","))


def side_streams(be, levels: int, priority: int | None) -> dict:
    """Side stream 2 at every depth, at ``priority`` (None: CuPy's default)."""
    make = (lambda: be.xp.cuda.Stream(non_blocking=True)) if priority is None else (
        lambda: be.xp.cuda.Stream(non_blocking=True, priority=priority))
    return {(id(be), lv, 2): make() for lv in range(1, levels + 1)}


def on_streams(streams: dict, work):
    def run() -> None:
        ex._SIDE_STREAMS.update(streams)
        work()
    return run


def main() -> None:
    be = get_backend("cupy")
    greatest = -100                      # CUDA clamps a priority to the device's range (-5 .. 0 on the H100)
    ops, out = Operands.uniform(be, N, seed=7), {"n": N, "priority": greatest}
    for level in LEVELS:
        plain, high = side_streams(be, level, None), side_streams(be, level, greatest)
        works = {"gemm": lambda: be.gemm(ops.A, ops.B, ops.C)}
        for name, cfg, streams in (("winograd+fused", Config("winograd", fused=True), plain),
                                   ("winograd2", Config("winograd2", True, True), plain),
                                   ("winograd2-high", Config("winograd2", True, True), high),
                                   ("winograd+fused+graph", Config("winograd", fused=True, graph=True), plain),
                                   ("winograd2+graph", Config("winograd2", True, True, True), plain),
                                   ("winograd2-high+graph", Config("winograd2", True, True, True), high)):
            ex._SIDE_STREAMS.update(streams)
            works[name] = on_streams(streams, strassen_work(cfg, level, ops))
        ref = None
        for name, work in works.items():
            work()
            be.synchronize()
            got = be.to_numpy(ops.C[:64])
            if ref is None:
                ref = got
            err = float(np.max(np.abs(got - ref)) / np.max(np.abs(ref)))
            print(level, name, "err", err, flush=True)
            if err > 1e-10:
                sys.exit(f"{name} at level {level} is wrong: {err}")
        out[level] = group_record(time_group(ops, works, "gemm", regime="sustained"))
        print(level, json.dumps(out[level]), flush=True)
    with open(os.path.join(os.environ.get("OUT", "/tmp"), f"overlap{N}.json"), "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
