"""What a Strassen plan decides once per operand signature: the configuration and the memory it needs.

* Options that give the configuration (a schedule, ``fused``, ``flat``, ``graph``, ``parallel`` or
  ``workspace``, or an integer level) run it, ``level="auto"`` picking the level from the profile's level
  table of that configuration (:mod:`gpu.strassen.auto`).
* The default call (:attr:`gpu.strassen.Options.chooses`) runs the fastest configuration the device profile
  measured that fits in the free memory, within 1% of it the one with fewer levels, then the smaller workspace
  (:mod:`gpu.strassen.choose`). Where the profile has no
  configurations section (no profile is bundled for this device and none was measured), it runs
  :data:`FALLBACK`'s configuration at the level of the profile's level table, else of the transfer model's
  table for this GPU (:func:`gpu.profile.transfer_levels`), else of the fixed rule, lowered until its memory
  fits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..backend import Backend
from ..profile import configurations
from .choose import Configuration, choose
from .costs import core_side, matmul_memory
from .flat import FLAT_SCHEDULE, flat_plan
from .levels import check_level, check_schedule, deepest_level, resolve_auto_level
from .options import Options
from .plans import AUTO_SHARE, BASE, auto_workspace, choose_plan, plan_extra
from .schedules import plan_name

#: The configuration (schedule, fused additions) a default call runs where the profile measured none: RUM,
#: which needs no memory beyond a support quadrant, with its additions fused on the GPU (fused ran faster than
#: plain at every size of the H100's sweep); fusion changes nothing on NumPy.
FALLBACK = {"cupy": ("rum", True), "numpy": ("rum", False)}
#: The graph mode of a chosen graph configuration: captured the second time an address set of A, B and C is
#: called (:mod:`gpu.strassen.graphs`), so a loop that keeps its arrays replays while one-off arrays run eagerly.
REPEAT = "repeat"


@dataclass(frozen=True)
class Product:
    """The product a plan is for: its sides, dtype, the output it allocates per call (bytes; 0 with ``out=``)
    and the overwrite rights it holds."""

    m: int
    k: int
    n: int
    dtype: Any
    output: int
    overwrite_a: bool
    overwrite_b: bool

    @property
    def itemsize(self) -> int:
        return np.dtype(self.dtype).itemsize


@dataclass(frozen=True)
class Decision:
    """The configuration a plan runs, its graph mode, streams, fringe handling, and the memory its workspace
    takes (``memory``: :func:`gpu.backend.require_memory`'s arguments for the output and the workspace,
    checked before the plan first allocates them); ``reason``: what chose it."""

    configuration: Configuration
    graph: bool | str
    parallel: bool
    padded: bool
    side: int
    workspace: int
    memory: tuple[int, str, str]
    reason: str

    @property
    def level(self) -> int:
        return self.configuration.level


def decide(be: Backend, o: Options, p: Product, reclaimable: int = 0) -> Decision:
    """The decision for product ``p`` under options ``o`` (validated) on ``be``; ``reclaimable``: bytes the
    plan cache holds in other plans' workspaces, which it hands back where a choice needs them."""
    if o.chooses:
        config, reason = _chosen(be, o, p, reclaimable)
        return _decision(p, o.fringe, config, REPEAT if config.graph else False, False, reason)
    config, reason = _given(be, o, p)
    mode = False if o.graph is None else o.graph
    return _decision(p, o.fringe, config, mode, o.parallel, reason)


def _given(be: Backend, o: Options, p: Product) -> tuple[Configuration, str]:
    """The configuration the options give, with ``level="auto"`` resolved from the level tables."""
    fused, flat = bool(o.fused), bool(o.flat)
    schedule = plan_name((FLAT_SCHEDULE if flat else BASE) if o.schedule is None else o.schedule)
    level, reason = o.level, "given"
    if level == "auto":
        level = resolve_auto_level(p.m, p.k, p.n, be, schedule=schedule, fused=fused or flat, regime=o.regime,
                                   fringe=o.fringe)
        reason = "level='auto': the level table of this configuration (profile, transfer model or rule)"
    check_schedule(schedule, level)
    if flat and level:
        flat_plan(schedule, level)                       # ValueError for a schedule that cannot run flat
    check_level(p.m, p.k, p.n, level, o.fringe)
    level = level if min(p.m, p.k, p.n) else 0           # an empty product multiplies nothing
    if o.workspace is not None and level:
        schedule = _planned(be, o.workspace, p, level, o.fringe, fused)
    return Configuration(level, schedule, fused, flat, o.graph not in (None, False)), reason


def _planned(be: Backend, workspace: int | str, p: Product, level: int, fringe: str, fused: bool) -> str:
    """The per-level plan of ``workspace`` bytes (``"auto"``: see :func:`gpu.strassen.plans.auto_workspace`)."""
    shape = (p.m, p.k, p.n, level, p.itemsize, fringe, p.overwrite_a, p.overwrite_b)
    if workspace == "auto":
        workspace = auto_workspace(be.memory_info()[0], p.output, plan_extra(BASE, *shape))
    return choose_plan(p.m, p.k, p.n, level, workspace, fused=fused, itemsize=p.itemsize, fringe=fringe,
                       overwrite_a=p.overwrite_a, overwrite_b=p.overwrite_b)


def extra_bytes(c: Configuration, p: Product, fringe: str) -> int:
    """Workspace bytes of configuration ``c`` on product ``p`` (beyond A, B and C)."""
    if not c.level or not min(p.m, p.k, p.n):
        return 0
    return matmul_memory(c.schedule, p.m, p.k, p.n, c.level, p.itemsize, fringe=fringe, overwrite_a=p.overwrite_a,
                         overwrite_b=p.overwrite_b, flat=c.flat).extra


def runs(c: Configuration, p: Product, fringe: str) -> bool:
    """Whether configuration ``c`` can run product ``p``: its level within the bottom-size rule, its schedule
    able to recurse that deep (and to run flat, where flat)."""
    if c.level > deepest_level(p.m, p.k, p.n, fringe):
        return False
    try:
        check_schedule(c.schedule, c.level)
        if c.flat:
            flat_plan(c.schedule, c.level)
    except ValueError:
        return False
    return True


def _chosen(be: Backend, o: Options, p: Product, reclaimable: int) -> tuple[Configuration, str]:
    """The default call's configuration (see the module notes)."""
    if not min(p.m, p.k, p.n):
        return Configuration(), "an empty product"
    budget = AUTO_SHARE * (be.memory_info()[0] + reclaimable)

    def fits(c: Configuration) -> bool:
        return runs(c, p, o.fringe) and p.output + extra_bytes(c, p, o.fringe) <= budget

    section, where = configurations(be, o.regime)
    if section:
        choice = choose(section, p.m, p.k, p.n, fits=fits, graphs=be.supports_graphs, fringe=o.fringe,
                        memory=lambda c: extra_bytes(c, p, o.fringe))
        return choice.configuration, f"{choice.reason}, in {where}"
    schedule, fused = FALLBACK.get(be.name, FALLBACK["numpy"])
    level = resolve_auto_level(p.m, p.k, p.n, be, schedule=schedule, fused=fused, regime=o.regime, fringe=o.fringe)
    while level and not fits(Configuration(level, schedule, fused)):
        level -= 1
    return (Configuration(level, schedule, fused),
            "no configurations measured for this device: the level table of the profile, the transfer model or "
            "the fixed rule, within the free memory")


def _decision(p: Product, fringe: str, config: Configuration, graph: bool | str, parallel: bool,
              reason: str) -> Decision:
    level = config.level
    side = core_side(p.m, p.k, p.n, level, fringe) if level else 0
    padded = bool(level) and fringe == "pad" and (p.m, p.k, p.n) != (side, side, side)
    extra = extra_bytes(config, p, fringe)
    return Decision(config, graph if level else False, parallel, padded, side, extra,
                    memory_need(config, p, fringe), reason)


def memory_need(c: Configuration, p: Product, fringe: str) -> tuple[int, str, str]:
    """Bytes a plan needs when it first runs (its output where new, and its workspace), what for, and the way
    out: :func:`gpu.backend.require_memory`'s arguments."""
    if not c.level or not min(p.m, p.k, p.n):
        return p.output, f"the {p.m} x {p.n} output", ("pass out= (an array you allocated), or split the product "
                                                        "into blocks of rows")
    est = matmul_memory(c.schedule, p.m, p.k, p.n, c.level, p.itemsize, fringe=fringe, overwrite_a=p.overwrite_a,
                        overwrite_b=p.overwrite_b, flat=c.flat)
    parts = (f"output {p.output / 2**30:.2f} GiB, support {est.support / 2**30:.2f}, copies "
             f"{est.copies / 2**30:.2f}, temporaries {est.temporaries / 2**30:.2f}")
    advice = ("pass out= (an array you allocated), or split the product into blocks of rows" if not est.extra else
              "use flat=False (the recursive product keeps fewer temporaries), a lower level, or pass out="
              if c.flat else "use schedule='rum', overwrite_a=True, overwrite_b=True, a lower level, or pass out=")
    return (p.output + est.extra, f"{c.schedule} at level {c.level} on {p.m} x {p.k} x {p.n} ({parts})", advice)
