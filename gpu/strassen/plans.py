"""Schedules chosen per level under a memory budget: ``matmul(..., workspace=bytes | "auto")``.

A level's schedule trades memory for addition work. RUM allocates nothing and
makes 13 quadrant Geams' worth of additions per call when fused; Winograd's
printed form makes 9 but allocates 18 quadrant-sized temporaries; Lai's
7-stream form sits between (15 temporaries, 11.67). A level's temporaries
are a quarter of the size of the level above's, while its additions are
7/4 of theirs in total, so memory spent low in the recursion buys the most:
a Winograd level at the bottom under RUM above it is the usual answer.

A plan is data, a list of schedules top level first (:func:`gpu.strassen.schedules.plan_name`,
``"rum/winograd"``), and runs, is priced and is counted as any schedule is.
:func:`choose_plan` builds it from the counts tables alone (:mod:`gpu.strassen.costs`):
the candidates are the schedules that recurse, keep the inputs intact and
take no bottom rule of their own, ranked by their fused or plain addition
work; those that are not faster than a candidate with fewer temporaries are
dropped (the Pareto front). From the bottom level up, each level takes the fastest
candidate whose plan still fits the budget and can run (a level above RUM
must lend it a support for every product). ``workspace=0`` gives RUM at
every level; the budget counts bytes beyond those of the RUM product with the
same ``overwrite_a``/``overwrite_b`` (which needs none when the inputs may be
overwritten, and one support matrix otherwise).
"""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np

from .costs import level_counts, matmul_memory
from .liveness import recursion_blocker
from .schedules import plan_name

#: Schedules a plan may use: they recurse, leave the inputs intact and have no bottom rule.
CANDIDATES = ("rum", "lai", "lai7", "winograd")
#: The zero-temporary schedule every plan starts from.
BASE = "rum"
#: Share of the free memory that ``workspace="auto"`` spends (the rest is headroom for the pool).
AUTO_SHARE = 0.9


def speed_key(schedule: str, fused: bool) -> tuple[float, int]:
    """How a schedule ranks as a level above another: its addition work, then its launches."""
    c = level_counts(schedule, 2, fused)
    return c.geams, c.launches


@cache
def front(fused: bool) -> tuple[str, ...]:
    """The candidates worth their memory, fastest first: each is faster than every candidate with
    fewer temporaries (ties of speed go to the one with fewer)."""
    by_memory = sorted(CANDIDATES, key=lambda s: (level_counts(s, 2, fused).temporaries, speed_key(s, fused)))
    kept: list[str] = []
    for name in by_memory:
        if not kept or speed_key(name, fused) < speed_key(kept[-1], fused):
            kept.append(name)
    return tuple(reversed(kept))


def plan_extra(plan: str, m: int, k: int, n: int, levels: int, itemsize: int, fringe: str,
               overwrite_a: bool, overwrite_b: bool) -> int:
    """Bytes a plan's product needs beyond A, B and C (:func:`gpu.strassen.costs.matmul_memory`)."""
    return matmul_memory(plan, m, k, n, levels, itemsize, fringe=fringe, overwrite_a=overwrite_a,
                         overwrite_b=overwrite_b).extra


def choose_plan(m: int, k: int, n: int, levels: int, workspace: int, *, fused: bool = False, itemsize: int = 8,
                fringe: str = "peel", overwrite_a: bool = False, overwrite_b: bool = False) -> str:
    """The per-level plan of an m x k by k x n product at ``levels`` levels whose memory beyond the
    RUM product's stays within ``workspace`` bytes (see the module notes)."""
    check_workspace(workspace, auto=False)
    shape = (m, k, n, levels, itemsize, fringe, overwrite_a, overwrite_b)
    floor = plan_extra(BASE, *shape)
    plan = [BASE] * levels
    for depth in reversed(range(levels)):
        for candidate in front(fused):
            trial = plan[:depth] + [candidate] + plan[depth + 1:]
            name = plan_name(trial)
            if recursion_blocker(name, levels) is None and plan_extra(name, *shape) - floor <= workspace:
                plan = trial
                break
    return plan_name(plan) if plan else BASE


def check_workspace(workspace: Any, auto: bool = True) -> None:
    """ValueError unless ``workspace`` is None, a whole number of bytes >= 0, or (with ``auto``) "auto"."""
    if workspace is None or (auto and workspace == "auto"):
        return
    if isinstance(workspace, (bool, float, str)) or not isinstance(workspace, (int, np.integer)) or workspace < 0:
        raise ValueError(f"workspace must be a whole number of bytes >= 0{' or auto' if auto else ''}, "
                         f"got {workspace!r}")


def auto_workspace(free: int, output: int, floor: int) -> int:
    """``workspace="auto"``: :data:`AUTO_SHARE` of the free memory, less the output still to be
    allocated and the RUM product's own extra memory (0 when that leaves nothing)."""
    return max(0, int(AUTO_SHARE * free) - output - floor)
