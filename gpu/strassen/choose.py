"""The configuration a default call runs: the fastest measured one that fits (ties: fewer levels, less memory).

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
``fringe="peel"``) and estimates each configuration's speed-up there from the sizes it was measured at:

* at a size where it was measured, its measured speed-up;
* between two sizes it was measured at, no more than :data:`SPAN` apart, the **lower** of its speed-ups at
  the two: a level's gain grows with the size for a fixed configuration, so the lower neighbour's is the
  usual bound, and taking the smaller of the two keeps a configuration that wins on one side and loses on the
  other from being chosen where nothing says it wins (an interpolation could promise more than either
  measurement, and the speed-ups of different levels cross between sizes); farther apart, or on one side
  only, nothing;
* below the smallest size measured at all, nothing (level 0): a level only loses more as products shrink;
* above the largest, the speed-ups measured there (deeper levels that may pay more were not measured).

Of the configurations whose memory fits (the caller's ``fits``: :func:`gpu.strassen.costs.matmul_memory`
against the free memory) and that this backend can run (a graph needs nvmath-python: without it a graph
configuration is left out, so its eager twin, where measured, or the next best runs), the one with the
highest estimate is chosen where it beats DGEMM by at least :data:`MARGIN`; otherwise level 0, the library
GEMM. Estimates within :data:`TIE` of that highest count as a tie, which goes to the fewest levels (the smaller
error bound), then to the least memory (the caller's ``memory``: the workspace a kept plan holds between calls),
then to the higher estimate, then to the eager form (no capture per address set).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from .schedules import Config

#: Least measured gain over DGEMM for which a configuration is taken: a 10-sample median ratio moves by about
#: 1% between runs, and a level that wins by less is within noise of losing.
MARGIN = 0.02
#: Widest ratio between two measured sizes a configuration's estimate spans.
SPAN = 2.0
#: Estimates within this fraction of the highest count as a tie (the front door's :data:`gpu.frontdoor.rank.TIE`):
#: one configuration's ratio moves by 1-2% between runs under the power cap. At N = 45056 on the H200 (sustained,
#: results/published/h200/h200-configurations-between.csv) Lai's per-level plan at level 4 measured 1.424x and
#: RUM at level 3 1.422x: the first keeps 85 GB of workspace beside the 49 GB of A, B and C, so that not even
#: one more 16 GB output fits (an allocation of one failed in the as-called sweep), the second 16 GB.
TIE = 0.01
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
        """``L3:winograd+flat+graph`` (level, then the stored method name), or ``L0`` (the library GEMM);
        :meth:`parse` reads it back."""
        if not self.level:
            return "L0"
        return f"L{self.level}:{Config(self.schedule, fused=self.fused, graph=self.graph, flat=self.flat).name}"

    @classmethod
    def parse(cls, text: str) -> Configuration:
        """The configuration named ``text`` (``L4:lai7/winograd+fused``, ``L0``); ValueError saying the form."""
        head, _, rest = text.strip().partition(":")
        parts = rest.split("+") if rest else []
        flags = set(parts[1:])
        if not head.startswith("L") or not head[1:].isdigit() or (int(head[1:]) and not parts) or \
                not flags <= {"fused", "flat", "graph"} or (parts and not parts[0]):
            raise ValueError(f"a configuration reads L<level>:<schedule>[+fused][+flat][+graph], such as "
                             f"L3:winograd+flat+graph or L4:lai7/winograd+fused (L0: the library GEMM); got {text!r}")
        if not int(head[1:]):
            return GEMM
        return cls(int(head[1:]), parts[0], "fused" in flags, "flat" in flags, "graph" in flags)


#: Level 0: the library GEMM.
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


def estimates(measured: Table, size: int, interpolate: bool = False) -> dict[Configuration, tuple[float, str]]:
    """Each configuration's estimated speed-up at ``size`` and the sizes it rests on (see the module notes);
    ``interpolate``: between two measured neighbours, linear in log size instead of the lower of the two, and
    across a gap wider than :data:`SPAN` the lower of the two instead of nothing."""
    sizes = sorted(measured)
    if not sizes or size < sizes[0]:
        return {}
    if size >= sizes[-1]:
        return {c: (s, f"at N = {sizes[-1]}") for c, s in measured[sizes[-1]].items()}
    at: dict[Configuration, dict[int, float]] = {}
    for n in sizes:
        for c, s in measured[n].items():
            at.setdefault(c, {})[n] = s
    out = {}
    for c, points in at.items():
        if size in points:
            out[c] = (points[size], f"at N = {size}")
            continue
        lo = max((n for n in points if n < size), default=None)
        hi = min((n for n in points if n > size), default=None)
        if lo is None or hi is None or (hi > SPAN * lo and not interpolate):
            continue
        if interpolate and hi <= SPAN * lo:
            w = math.log(size / lo) / math.log(hi / lo)
            out[c] = ((1 - w) * points[lo] + w * points[hi], f"between N = {lo} and {hi}, linear in log N")
        else:
            out[c] = (min(points[lo], points[hi]), f"the lower of N = {lo} and {hi}")
    return out


def choose(section: Mapping[str, Any] | None, m: int, k: int, n: int, *, fits: Callable[[Configuration], bool],
           graphs: bool, fringe: str = "peel", memory: Callable[[Configuration], int] | None = None) -> Choice:
    """The configuration of an m x k by k x n product (see the module notes): the highest estimate among
    those that ``fits`` accepts and this backend can run (``graphs``: CUDA graphs available), within :data:`TIE`
    the fewest levels, then the least ``memory`` (bytes a configuration's plan holds; None: all alike), else
    level 0."""
    size = min(m, k, n) if fringe == "peel" else max(m, k, n)
    found = estimates(table(section), size)
    ranked = sorted(((s, c, where) for c, (s, where) in found.items() if c.level and (graphs or not c.graph)),
                    key=lambda scw: (-scw[0], scw[1].graph, scw[1].level))
    eligible = [(s, c, w) for s, c, w in ranked if s >= 1 + MARGIN and fits(c)]
    if eligible:
        top = eligible[0][0]
        speedup, config, where = min((scw for scw in eligible if scw[0] >= top * (1 - TIE)), key=lambda scw: (
            scw[1].level, memory(scw[1]) if memory else 0, -scw[0], scw[1].graph))
        tie = f"; within {TIE:.0%} of {eligible[0][1].name}'s {top:.3f}x, fewer levels or less memory" \
            if config != eligible[0][1] else ""
        return Choice(config, speedup, f"{config.name} measured {speedup:.3f}x DGEMM ({where}){tie}")
    best = next((f"; the fastest measured: {c.name}, {s:.3f}x ({w})" for s, c, w in ranked), "")
    return Choice(GEMM, 1.0, f"no configuration that fits and runs here beats DGEMM by {MARGIN:.0%} at N = "
                             f"{size}{best or ': none measured there'}")


def candidates(section: Mapping[str, Any] | None) -> Sequence[Configuration]:
    """Every configuration the section measured, in the order first seen."""
    seen: dict[Configuration, None] = {}
    for timed in table(section).values():
        seen.update(dict.fromkeys(timed))
    return list(seen)
