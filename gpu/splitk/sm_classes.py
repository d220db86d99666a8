"""Which SMs of a GPU read memory faster than the others while all of them read at once, as data.

On the H200 the 132 SMs fall into two classes under a full load of streaming reads: 24 read about 1.3 times as
fast as the other 108. Split-K's bulk kernel at m = n = 32, k = 2^22, one chunk of equal width per SM, ended its
chunks at 376 us on the one class and 488 us on the other, each SM within 1.6 us of itself from launch to launch
(results/published/h200/h200-splitk-sm-speed.json). An equal split leaves the fast class idle for the last fifth
of the kernel; chunks as much wider on it as it is faster (:func:`gpu.splitk.plan.balanced`) end together.

The classes are measured once per device and process (:func:`gpu.splitk.sm_probe.classes`, CuPy) and classified
here (:func:`classify`), so that the rule can be tested without a GPU. Which SM runs which chunk is no part of the
arithmetic: the chunks' bounds are the plan's, and a block computes a chunk its SM prefers (:func:`preference`)
only where that chunk is still free.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from .plan import MAX_RATIO

#: The least jump between neighbouring SM speeds (sorted) that parts two classes, and the most spread within a
#: class: a cleaner split than this is taken for noise or a busy device, and the SMs stay one class.
GAP = 1.06
#: The classes' speed ratio is rounded down to a multiple of 1 / STEPS, so that a measurement a little off
#: gives the same chunks (and so the same bits) from process to process.
STEPS = 32


@dataclass(frozen=True)
class SMClasses:
    """The SMs (``%smid``) of the faster class, how many times as fast they read as the others (rounded down to a
    multiple of 1 / :data:`STEPS`, at most :data:`gpu.splitk.plan.MAX_RATIO`), and every SM measured."""

    fast: tuple[int, ...]
    ratio: float
    sms: tuple[int, ...]


def classify(smids: Sequence[int], rates: Sequence[float]) -> SMClasses | None:
    """The two classes of SMs that read ``rates`` (bytes per second, one per SM of ``smids``), or None where they
    form one class: no jump of :data:`GAP` between neighbouring sorted rates, a class spread wider than that, a
    ratio that rounds to 1, or an SM measured twice (its blocks shared it: the device was busy)."""
    ids = [int(s) for s in smids]
    if len(ids) < 2 or len(set(ids)) != len(ids) or len(rates) != len(ids) or min(rates) <= 0:
        return None
    order = sorted(range(len(ids)), key=lambda i: rates[i])
    ranked = [float(rates[i]) for i in order]
    jumps = [b / a for a, b in zip(ranked, ranked[1:])]
    cut = max(range(len(jumps)), key=jumps.__getitem__) + 1
    slow, fast = ranked[:cut], ranked[cut:]
    if jumps[cut - 1] < GAP or slow[-1] / slow[0] >= GAP or fast[-1] / fast[0] >= GAP:
        return None
    ratio = min(MAX_RATIO, math.floor(statistics.median(fast) / statistics.median(slow) * STEPS) / STEPS)
    if ratio <= 1:
        return None
    return SMClasses(tuple(sorted(ids[i] for i in order[cut:])), ratio, tuple(sorted(ids)))


def preference(classes: SMClasses, slots: int) -> list[int]:
    """The chunks each SM prefers, ``slots`` per SM (a balanced wave's blocks per SM), as a flat table indexed by
    ``smid * slots + j``: the faster SMs (in order) the first ``len(fast) * slots`` chunks, the wider ones, and the
    others the rest; an SM identifier not measured prefers chunk 0 (its blocks then take what is free)."""
    table = [0] * ((max(classes.sms) + 1) * slots)
    fast = set(classes.fast)
    ordered = list(classes.fast) + [s for s in classes.sms if s not in fast]
    for i, sm in enumerate(ordered):
        table[sm * slots:(sm + 1) * slots] = range(i * slots, (i + 1) * slots)
    return table
