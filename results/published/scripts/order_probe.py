"""What the order of an interleaved round does under the power cap, and the headline points timed in rotation.

A sample starts at the SM clock its predecessor left: with a fixed order (DGEMM first, then the Strassen
configurations, every round) the first configuration always follows DGEMM's full-power run and DGEMM always
follows a lighter one. Per (N, level) of ``POINTS``: groups of DGEMM, ``matmul(level="auto")`` (where asked)
and the configurations, alternately in a fixed and in a rotated order (``ROUNDS`` groups each), sustained,
inputs re-drawn before every sample; per method and group the median, its speed-up over the group's DGEMM,
and the median SM clock at the samples' start. Writes ``$OUT/order.json``. Run with ``GEMMLAB_PROFILES`` at
the H100's device profile so that auto reads the published table.
"""
import json
import os

from rounds import group_record

from experiments.core.lab import Operands, time_group
from experiments.levels.auto import auto_work
from experiments.strassen.bench import strassen_work
from gpu.backend import get_backend
from gpu.strassen import Config

POINTS = os.environ.get("POINTS", "16384:2:auto,rum+fused,winograd+fused+graph")
GROUPS = int(os.environ.get("GROUPS", 2))
CONFIGS = {"rum+fused": Config("rum", fused=True), "winograd+fused": Config("winograd", fused=True),
           "winograd+fused+graph": Config("winograd", fused=True, graph=True),
           "rum/rum/winograd+fused": Config("rum/rum/winograd", fused=True)}


def works_at(ops: Operands, level: int, names: list[str]) -> dict:
    be = ops.backend
    works = {"gemm": lambda: be.gemm(ops.A, ops.B, ops.C)}
    for name in names:
        works[name] = (auto_work(ops, Config("rum", fused=True), "sustained") if name == "auto"
                       else strassen_work(CONFIGS[name], level, ops))
    return works


def group(ops: Operands, works: dict, rotate: bool) -> dict:
    return group_record(time_group(ops, works, "gemm", regime="sustained", rotate=rotate))


def main() -> None:
    be, out = get_backend("cupy"), {}
    for point in POINTS.split(";"):
        n, level, names, *groups = point.split(":")
        ops = Operands.uniform(be, int(n), seed=7)
        works = works_at(ops, int(level), names.split(","))
        runs = []
        for _ in range(int(groups[0]) if groups else GROUPS):
            for rotate in (False, True):
                runs.append({"order": "rotated" if rotate else "fixed", "methods": group(ops, works, rotate)})
                print(n, level, json.dumps(runs[-1]), flush=True)
        out[point] = runs
        del ops, works
        be.xp.get_default_memory_pool().free_all_blocks()
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "order.json"), "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
