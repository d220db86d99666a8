"""What one Strassen-Winograd call does at each level, read from the schedule tables.

The predictors need three numbers per call: the products it hands to the
level below (a, 7 for every schedule here), its addition work in units of one
quadrant-sized Geam (b: 15 for RUM, whose 15 additions each read two
quadrants and write one), and the kernels it launches itself (the host cost of
a call). Fused additions (``gpu.fusion``) read each space of a run once and
write each result once, so a fused run of k steps costs (reads + writes) / 3
Geams in one launch. Operand copies a level makes to protect values the level
below overwrites (``gpu.liveness.protected``, Otsuka) count as additions too.
Nothing here is typed in: change a table and the counts follow.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from gpu.fusion import dead_temporaries, fused_source, runs
from gpu.liveness import protected
from gpu.schedules import get_schedule, resolve

#: Memory passes of one Geam (C = alpha A + beta B): two reads and one write.
GEAM_PASSES = 3
#: Memory passes of an operand copy: one read and one write.
COPY_PASSES = 2


@dataclass(frozen=True)
class LevelCounts:
    """One call with ``levels`` Strassen levels left."""

    products: int        # a: products handed to the level below (library GEMMs at the bottom)
    geams: float         # b: addition work in Geam units of one quadrant
    launches: int        # kernels the call issues itself: addition runs, copies, and the GEMMs at the bottom
    temporaries: int     # quadrant buffers it allocates (temporaries and protective copies)


@cache
def level_counts(schedule: str, levels: int, fused: bool = False) -> LevelCounts:
    """Counts of one call of ``schedule`` with ``levels`` (>= 1) levels left."""
    if levels < 1:
        raise ValueError(f"a Strassen call has at least one level left, got {levels}")
    get_schedule(schedule)
    sched = resolve(schedule, levels)
    passes, launches = 0, 0
    for run in runs(sched, fused):
        steps = [sched.steps[i] for i in run]
        if steps[0].is_product:
            launches += levels == 1
            continue
        dead = dead_temporaries(sched, run) if fused else frozenset()
        inputs, outputs, _ = fused_source(tuple((s.dst, s.op, s.a, s.b) for s in steps), dead)
        passes += len(inputs) + len(outputs)
        launches += 1
    copies = sum(len(roles) for roles in protected(schedule, levels).values()) if levels > 1 else 0
    passes += COPY_PASSES * copies
    return LevelCounts(len(sched.products), passes / GEAM_PASSES, launches + copies,
                       len(sched.temporaries) + copies)


def total_launches(schedule: str, levels: int, fused: bool = False) -> int:
    """Kernels of a whole ``levels``-level product (a single GEMM at level 0)."""
    if levels == 0:
        return 1
    c = level_counts(schedule, levels, fused)
    if levels == 1:
        return c.launches
    return c.launches + c.products * total_launches(schedule_below(schedule, levels), levels - 1, fused)


def schedule_below(schedule: str, levels: int) -> str:
    """The schedule that runs a call's products (``levels`` left at the call)."""
    return resolve(schedule, levels).products_schedule
