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

from .registry import Context
from .timing import Timing


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
