"""Cross-stream waits of a schedule, derived from its read and write sets.

Step ``i`` must wait for an earlier step ``j`` on another stream when ``j``
writes what ``i`` reads (RAW), reads what ``i`` writes (WAR) or writes what
``i`` writes (WAW). A product also writes its support matrix. Waits that are
already implied through another stream (vector clocks) are dropped, so the
executor issues the fewest event waits and no device-wide synchronisation.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from .liveness import supports
from .schedules import get_schedule


@dataclass(frozen=True)
class Wait:
    step: int          # 1-based step that waits
    after: int         # 1-based step it waits for
    kinds: tuple[str, ...]
    spaces: tuple[str, ...]


@dataclass(frozen=True)
class StreamPlan:
    schedule: str
    aliased: bool
    streams: tuple[int, ...]
    stream_of: tuple[int, ...]
    waits: tuple[Wait, ...]
    join: tuple[int, ...]   # last step of each side stream that stream 1 waits for at the end

    def as_dict(self) -> dict:
        return {"schedule": self.schedule, "aliased": self.aliased, "streams": list(self.streams),
                "steps": [{"step": i, "stream": s} for i, s in enumerate(self.stream_of, 1)],
                "waits": [{"step": w.step, "after": w.after, "kinds": list(w.kinds),
                           "spaces": list(w.spaces)} for w in self.waits],
                "join": list(self.join)}


def access_sets(name: str, aliased: bool) -> list[tuple[set[str], set[str]]]:
    """(reads, writes) of each step; a product's support counts as written."""
    schedule = get_schedule(name)
    alias = schedule.aliases if aliased else {}
    lent = supports(name) if get_schedule(schedule.products_schedule).support else {}
    sets = []
    for i, step in enumerate(schedule.steps):
        writes = {step.dst} | ({lent[i]} if i in lent else set())
        sets.append(({alias.get(r, r) for r in step.reads}, {alias.get(w, w) for w in writes}))
    return sets


def _conflict(earlier: tuple[set, set], later: tuple[set, set]) -> tuple[tuple[str, ...], set[str]]:
    (r1, w1), (r2, w2) = earlier, later
    found = {"RAW": w1 & r2, "WAR": r1 & w2, "WAW": w1 & w2}
    kinds = tuple(k for k, v in found.items() if v)
    return kinds, set().union(*found.values())


@cache
def plan(name: str, aliased: bool = True) -> StreamPlan:
    """The minimal waits of schedule ``name`` (with the level-1 aliases if ``aliased``)."""
    schedule = get_schedule(name)
    stream_of = tuple(s.stream for s in schedule.steps)
    sets = access_sets(name, aliased)
    streams = schedule.streams
    known = {s: {t: 0 for t in streams} for s in streams}
    clock: list[dict[int, int]] = []
    waits = []
    for i, (stream, acc) in enumerate(zip(stream_of, sets), start=1):
        for j in range(i - 1, 0, -1):
            other = stream_of[j - 1]
            if other == stream or known[stream][other] >= j:
                continue
            kinds, spaces = _conflict(sets[j - 1], acc)
            if kinds:
                waits.append(Wait(i, j, kinds, tuple(sorted(spaces))))
                for t, k in clock[j - 1].items():
                    known[stream][t] = max(known[stream][t], k)
        known[stream][stream] = i
        clock.append(dict(known[stream]))
    last = {s: max((i for i, t in enumerate(stream_of, 1) if t == s), default=0) for s in streams}
    join = tuple(last[s] for s in streams if s != 1 and last[s] > known[1][s])
    return StreamPlan(name, aliased, streams, stream_of, tuple(waits), join)
