"""The configuration a default call runs: the fastest measured one that fits, from the device profile.

A device profile (:mod:`gpu.profile`) may hold, per power regime, a **configurations** section: per measured
size, the time of each configuration ``gemmlab calibrate --configurations`` timed beside DGEMM in one
interleaved group, and its speed-up over that DGEMM. A configuration is data::

    {"level": 3, "schedule": "winograd", "flat": true, "graph": true}
    {"level": 4, "schedule": "lai7/winograd", "fused": true}

and the section reads::

    {"points": [{"size": 16384, "gemm_s": 0.169,
                 "timed": [{"config": {"level": 3, "schedule": "winograd", "flat": true, "graph": true},
                            "seconds": 0.130, "speedup": 1.301, "samples": 10}, ...]}, ...]}

:func:`choose` takes, for an m x k by k x n product, the side Strassen recurses on (``s = min(m, k, n)`` with
``fringe="peel"``) and estimates each configuration's speed-up there from the measured sizes around it:

* at a measured size, its measured speed-up;
* between two measured sizes, the **lower** of its speed-ups at the two (a configuration measured at only one
  of them is not taken): a level's gain grows with the size for a fixed configuration, so the lower
  neighbour's is the usual bound, and taking the smaller of the two keeps a configuration that wins at one
  side and loses at the other from being chosen where nothing says it wins; the speed-ups between levels
  cross, so an interpolation could promise a configuration more than either neighbour measured;
* below the smallest measured size, nothing (level 0): a level only loses more as products shrink;
* above the largest, its speed-up there (deeper levels that may pay more were not measured).

Of the configurations whose memory fits (the caller's ``fits``: :func:`gpu.strassen.costs.matmul_memory`
against the free memory) and that this backend can run (a graph needs nvmath-python: without it a graph
configuration is left out, so its eager twin, where measured, or the next best runs), the one with the
highest estimate is chosen where it beats DGEMM by at least :data:`MARGIN`; otherwise level 0, the library
GEMM. Ties go to the eager form (no capture per address set).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from .schedules import Config

#: Least measured gain over DGEMM for which a configuration is taken: a 10-sample median ratio moves by about
#: 1% between runs, and a level that wins by less is within noise of losing.
MARGIN = 0.02
FIELDS = ("level", "schedule", "fused", "flat", "graph")


@dataclass(frozen=True)
class Configuration:
    """A level and how it runs (schedule or per-level plan, fused additions, flat, CUDA graph)."""

    level: int = 0
    schedule: str = "rum"
    fused: bool = False
    flat: bool = False
    graph: bool = False

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> Configuration:
        """The configuration of a profile entry; ValueError naming an unknown field."""
        unknown = sorted(set(data) - set(FIELDS))
        if unknown:
            raise ValueError(f"a configuration has no field {', '.join(map(repr, unknown))}; its fields are "
                             f"{', '.join(FIELDS)}")
        return cls(int(data.get("level", 0)), str(data.get("schedule", "rum")), bool(data.get("fused", False)),
                   bool(data.get("flat", False)), bool(data.get("graph", False)))

    def as_dict(self) -> dict[str, Any]:
        """The entry a profile stores: the level and schedule, and the flags that are set."""
        return {k: v for k, v in asdict(self).items() if k in ("level", "schedule") or v}

    @property
    def name(self) -> str:
        """``L3 winograd+flat+graph``, or ``L0 (the library GEMM)``."""
        if not self.level:
            return "L0 (the library GEMM)"
        return f"L{self.level} {Config(self.schedule, fused=self.fused, graph=self.graph, flat=self.flat).name}"


GEMM = Configuration()


@dataclass(frozen=True)
class Choice:
    """A configuration, the speed-up over DGEMM its measurements promise (1 for level 0), and why."""

    configuration: Configuration
    estimate: float
    reason: str


Table = dict[int, dict[Configuration, float]]


def table(section: Mapping[str, Any] | None) -> Table:
    """The speed-ups of a configurations section by measured size (an empty table for None)."""
    out: Table = {}
    for point in (section or {}).get("points", ()):
        timed = out.setdefault(int(point["size"]), {})
        for entry in point.get("timed", ()):
            timed[Configuration.of(entry["config"])] = float(entry["speedup"])
    return out


def estimates(measured: Table, size: int) -> tuple[dict[Configuration, float], str]:
    """Each configuration's estimated speed-up at ``size`` (see the module notes), and the sizes it rests on."""
    sizes = sorted(measured)
    if not sizes or size < sizes[0]:
        return {}, "below the smallest measured size" if sizes else "nothing measured"
    if size >= sizes[-1]:
        return dict(measured[sizes[-1]]), f"N = {sizes[-1]}"
    lo = sizes[bisect.bisect_right(sizes, size) - 1]
    if lo == size:
        return dict(measured[lo]), f"N = {lo}"
    hi = sizes[bisect.bisect_right(sizes, size)]
    both = {c: min(s, measured[hi][c]) for c, s in measured[lo].items() if c in measured[hi]}
    return both, f"the lower of N = {lo} and {hi}"


def choose(section: Mapping[str, Any] | None, m: int, k: int, n: int, *, fits: Callable[[Configuration], bool],
           graphs: bool, fringe: str = "peel") -> Choice:
    """The configuration of an m x k by k x n product (see the module notes): the highest estimate among
    those that ``fits`` accepts and this backend can run (``graphs``: CUDA graphs available), else level 0."""
    size = min(m, k, n) if fringe == "peel" else max(m, k, n)
    found, where = estimates(table(section), size)
    ranked = sorted(((s, c) for c, s in found.items() if c.level and (graphs or not c.graph)),
                    key=lambda sc: (-sc[0], sc[1].graph, sc[1].level))
    for speedup, config in ranked:
        if speedup < 1 + MARGIN:
            break
        if fits(config):
            return Choice(config, speedup, f"measured {speedup:.3f}x DGEMM ({where})")
    best = next((f"; the fastest measured, {c.name}, {s:.3f}x" for s, c in ranked), "")
    return Choice(GEMM, 1.0, f"no configuration that fits and runs here beats DGEMM by {MARGIN:.0%} "
                             f"({where}{best})")


def candidates(section: Mapping[str, Any] | None) -> Sequence[Configuration]:
    """Every configuration the section measured, in the order first seen."""
    seen: dict[Configuration, None] = {}
    for timed in table(section).values():
        seen.update(dict.fromkeys(timed))
    return list(seen)
