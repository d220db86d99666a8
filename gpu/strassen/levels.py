"""Which levels a product may take: the bottom-size rule, the schedule's recursion, ``level="auto"``.

A level halves the side of the products below it. Levels whose bottom products would be smaller than
:data:`MIN_BOTTOM` (16 x 16) are refused: such blocks make thousands of library calls (7^L of them) and gain
nothing, and ``level=7`` on a 256 x 256 product took a minute. ``level="auto"`` never asks for one.
"""

from __future__ import annotations

import numpy as np

from ..backend import Backend
from .auto import MAX_LEVEL, auto_level
from .costs import core_side
from .liveness import recursion_blocker
from .schedules import get_schedule

#: Smallest side of the bottom products a level may make (see the module notes).
MIN_BOTTOM = 16


def deepest_level(m: int, k: int, n: int, fringe: str = "peel") -> int:
    """The most levels an m x k by k x n product may take: bottom products of at least
    :data:`MIN_BOTTOM` (0 when even one level would go below it)."""
    level = 0
    while (level < MAX_LEVEL and min(m, k, n) > 0
           and core_side(m, k, n, level + 1, fringe) // 2 ** (level + 1) >= MIN_BOTTOM):
        level += 1
    return level


def resolve_auto_level(m: int, k: int, n: int, be: Backend, *, schedule: str = "rum", fused: bool = False,
                       regime: str = "sustained", fringe: str = "peel") -> int:
    """The level ``matmul(level="auto")`` runs an m x k by k x n product at, with a configuration given:
    :func:`gpu.strassen.auto.auto_level` of the side the fringe mode recurses on, never deeper than
    :func:`deepest_level` (0 for an empty product)."""
    size = min(m, k, n) if fringe == "peel" else max(m, k, n)
    if not size:
        return 0
    return min(auto_level(size, be, schedule=schedule, fused=fused, regime=regime), deepest_level(m, k, n, fringe))


def check_level(m: int, k: int, n: int, level: int, fringe: str = "peel") -> None:
    """ValueError when ``level`` levels would make bottom products below :data:`MIN_BOTTOM`
    (an empty product multiplies nothing: any level gives its empty or zero result)."""
    deepest = deepest_level(m, k, n, fringe)
    if level > deepest and min(m, k, n) > 0:
        bottom = core_side(m, k, n, level, fringe) // 2**level
        fix = f"use level <= {deepest}" if deepest else "use level=0 (the library GEMM)"
        raise ValueError(f"level {level} on a {m} x {k} x {n} product would multiply {bottom} x {bottom} blocks at "
                         f"the bottom; a level needs bottom products of at least {MIN_BOTTOM} x {MIN_BOTTOM} "
                         f"(smaller ones make 7^{level} library calls and gain nothing): {fix}, or level='auto'")


def check_schedule(schedule: str, level: int) -> None:
    """ValueError unless ``schedule`` exists and can run ``level`` levels (every level
    above the bottom one must be able to recurse)."""
    if not isinstance(level, (int, np.integer)) or not 0 <= level <= MAX_LEVEL:
        raise ValueError(f"level must be an integer from 0 to {MAX_LEVEL} or 'auto', got {level!r}")
    get_schedule(schedule)
    blocked = recursion_blocker(schedule, level)
    if blocked:
        name, b = blocked
        raise ValueError(f"schedule {name!r} cannot recurse (step {b.step}: {b.reason}); "
                         f"use level 1, or a schedule that recurses such as 'rum' or 'otsuka'")
