"""Run a parameter sweep into the results database, resuming where it stopped.

Each point is stored as soon as it is measured. A point already stored for the
same environment key and parameters is skipped unless ``force``, so a sweep
that was interrupted continues with the points it had not reached.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tqdm.auto import tqdm

from .lab import free_memory
from .registry import Context
from .timing import Comparison, Timing


@dataclass
class Record:
    """One stored result: a value with its unit, raw samples and anything else worth keeping."""

    value: float
    unit: str
    samples: Sequence[float] = ()
    meta: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_timing(cls, timing: Timing, **meta: Any) -> Record:
        """The median time in seconds, with every sample and the protocol's outcome."""
        return cls(timing.median, "s", timing.samples, {**timing.meta(), **meta})


@dataclass
class SweepOutcome:
    measured: int = 0
    skipped: int = 0


Measure = Callable[[Mapping[str, Any], Sequence[str]], Mapping[str, Record]]


def sweep(ctx: Context, experiment: str, points: Sequence[Mapping[str, Any]],
          methods: Sequence[str], measure: Measure, desc: str | None = None) -> SweepOutcome:
    """Measure every (point, method) pair not yet stored (every pair, with ``ctx.force``).

    A forced sweep that is interrupted keeps what it re-measured (the newest
    row of a point supersedes older ones); run it again without ``--force``
    to keep those and stop, or with it to re-measure everything.

    ``measure(params, missing)`` returns a Record for each method in
    ``missing``; it is called once per point, so methods of one point share
    its set-up (allocated operands, for example).
    """
    outcome = SweepOutcome()
    bar = tqdm(points, desc=desc or experiment, unit="pt", disable=not ctx.progress,
               file=sys.stderr, leave=False)
    for params in bar:
        missing = [m for m in methods
                   if ctx.force or not ctx.db.has(experiment, m, params, ctx.env_key)]
        outcome.skipped += len(methods) - len(missing)
        if not missing:
            continue
        bar.set_postfix_str(", ".join(f"{k}={v}" for k, v in params.items()))
        records = measure(params, missing)
        for method in missing:
            rec = records[method]
            ctx.db.add(ctx.run_id, experiment, method, params, value=rec.value, unit=rec.unit,
                       samples=list(rec.samples), meta=dict(rec.meta))
            outcome.measured += 1
    return outcome


def group_sweep(ctx: Context, experiment: str, points: Sequence[Any], is_stored: Callable[[Any], bool],
                measure: Callable[[Any], Any], label: Callable[[Any], str]) -> SweepOutcome:
    """Measure every point not yet stored as a whole group (every point with ``ctx.force``), one
    ``measure(point)`` each, with a progress bar; the device's cached blocks go back before each
    point (the previous point's operands) and at the end. For experiments whose methods are timed
    interleaved in one group per point, so that a point's ratios always come from its own group."""
    be, outcome = ctx.backend, SweepOutcome()
    bar = tqdm(points, desc=experiment, unit="pt", disable=not ctx.progress, file=sys.stderr, leave=False)
    try:
        for point in bar:
            if not ctx.force and is_stored(point):
                outcome.skipped += 1
                continue
            bar.set_postfix_str(label(point))
            free_memory(be)
            measure(point)
            outcome.measured += 1
    finally:
        free_memory(be)
    return outcome


def method_sweep(ctx: Context, experiment: str, points: Sequence[Any], methods: Sequence[str],
                 params: Callable[[Any], Mapping[str, Any]], measure: Callable[[Any, list[str]], Any],
                 label: Callable[[Any], str], desc: str, unit: str) -> SweepOutcome:
    """Per point, the ``methods`` not yet stored as rows of ``experiment`` at ``params(point)`` (every one with
    ``ctx.force``) measured as one group, ``measure(point, missing)``; counts per method. The device's cached
    blocks go back before and after each group (its operands), with a progress bar over the points. For benchmarks
    that time their methods interleaved per point and resume method by method."""
    be, outcome = ctx.backend, SweepOutcome()
    bar = tqdm(points, desc=desc, unit=unit, disable=not ctx.progress, file=sys.stderr, leave=False)
    for point in bar:
        at = params(point)
        missing = [m for m in methods if ctx.force or not ctx.db.has(experiment, m, at, ctx.env_key)]
        outcome.skipped += len(methods) - len(missing)
        if not missing:
            continue
        bar.set_postfix_str(label(point))
        free_memory(be)
        try:
            measure(point, missing)
        finally:
            free_memory(be)
        outcome.measured += len(missing)
    return outcome


def store_comparison(ctx: Context, experiment: str, params: Mapping[str, Any], result: Comparison,
                     meta: Callable[[str], Mapping[str, Any]]) -> int:
    """Every method of a timed group as a row of ``experiment`` at ``params`` (its median, samples and
    protocol record, plus ``meta(method)``); how many rows."""
    for name, timing in result.timings.items():
        ctx.db.add(ctx.run_id, experiment, name, params, value=timing.median, unit="s", samples=timing.samples,
                   meta={**timing.meta(), **meta(name)})
    return len(result.timings)
