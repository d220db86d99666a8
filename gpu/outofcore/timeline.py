"""A time-line of one out-of-core run: when each copy, product and host staging ran, lane by lane.

The engine's overlap is its whole point (copies hidden behind products), and a sum of times cannot show
it: :class:`Timeline` keeps intervals instead. The operations (:mod:`gpu.outofcore.ops`,
:mod:`gpu.outofcore.kernels`) record into it where one is passed to :func:`gpu.outofcore.run`:

* host work (staging a panel into pinned memory, placing a block into the output) with the host clock;
* device work (the H2D and D2H copies, the GEMMs) with a pair of CUDA events around it on its stream,
  read back once the run is over, so that recording never waits for the device.

Both clocks start at :meth:`Timeline.start`: the operations record an event on an idle device, wait for
it, and read the host clock at that moment, so host and device intervals share one origin (to within the
event's latency, microseconds).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

#: Lanes in the order a figure stacks them: mapping pages in and page-locking them ahead of the copies
#: (``staging="lock"``: :mod:`gpu.outofcore.ahead`, one span per piece), host staging, the two copy
#: directions, the products, and the host's placement of finished blocks into the output.
LANES = ("mapping", "locking", "staging", "H2D", "GEMM", "D2H", "placement")


@dataclass(frozen=True)
class Span:
    """One interval of one lane, in seconds from the start of the run; ``tag`` tells spans of a lane apart
    (the panel slot or the C buffer)."""

    lane: str
    tag: int
    start: float
    end: float

    def as_list(self) -> list:
        return [self.lane, self.tag, self.start, self.end]


class Timeline:
    """Intervals of one run: host ones measured at once, device ones resolved from events at the end."""

    def __init__(self) -> None:
        self._origin = 0.0
        self._pending: list[tuple[str, int, Callable[[], tuple[float, float]]]] = []

    def start(self, origin: float | None = None) -> None:
        """Set the host clock's origin (now, or the given ``time.perf_counter()`` value) and drop old spans."""
        self._origin = time.perf_counter() if origin is None else origin
        self._pending = []

    @contextmanager
    def host(self, lane: str, tag: int = 0) -> Iterator[None]:
        """Record the host work of the ``with`` body in ``lane``."""
        t0 = time.perf_counter() - self._origin
        yield
        span = (t0, time.perf_counter() - self._origin)
        self.add(lane, tag, lambda: span)

    def add(self, lane: str, tag: int, resolve: Callable[[], tuple[float, float]]) -> None:
        """Record a span whose (start, end), in seconds from the origin, ``resolve`` gives after the run."""
        if lane not in LANES:
            raise ValueError(f"unknown lane {lane!r}; the lanes are {', '.join(LANES)}")
        self._pending.append((lane, tag, resolve))

    def spans(self) -> list[Span]:
        """Every span, by start time (device spans resolved now: call after the run has finished)."""
        out = [Span(lane, tag, *resolve()) for lane, tag, resolve in self._pending]
        return sorted(out, key=lambda s: (s.start, LANES.index(s.lane)))


def merged(spans: list[Span], lane: str) -> list[tuple[float, float]]:
    """The times ``lane`` had work, as disjoint (start, end) intervals in order."""
    out: list[tuple[float, float]] = []
    for s in sorted((s for s in spans if s.lane == lane), key=lambda s: s.start):
        if out and s.start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], s.end))
        else:
            out.append((s.start, s.end))
    return out


def busy(spans: list[Span], lane: str) -> float:
    """Seconds during which ``lane`` had work (overlapping spans counted once)."""
    return sum(end - start for start, end in merged(spans, lane))


def overlap(spans: list[Span], a: str, b: str) -> float:
    """Seconds during which lanes ``a`` and ``b`` both had work."""
    total = 0.0
    for s0, e0 in merged(spans, a):
        for s1, e1 in merged(spans, b):
            total += max(0.0, min(e0, e1) - max(s0, s1))
    return total
