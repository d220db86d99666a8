"""The measurement protocol: warm-up, batches of samples, stability check, interleaved pairs.

As in the papers, a batch of at least 10 samples is taken and measured again
when any sample falls outside 95-105% of the batch mean; here the retries are
bounded, by a count and by time (:func:`attempts_within`: a batch is measured
again only while the timed seconds of all batches, one more included, stay within
``retry_seconds``, two minutes by default, so a group of 16384-sized products is
re-measured and one of 49152-sized Strassen levels is not), and the outcome is
recorded (``stable``, ``attempts``, ``batch_s``) rather than looping forever.
The median is reported. Methods compared with each other are timed interleaved,
one round of all of them after another, so drift in clocks or temperature hits
them alike, and reported as ratios. The order rotates by one
method each round (A B C, B C A, C A B, ...): under a power cap a sample starts at
the clock its predecessor left (on the H100, ``level="auto"`` samples that followed
DGEMM at N = 16384 started at 1485 MHz and ended at 1650), so a fixed order would
favour the methods that follow lighter ones. GPU samples are timed with CUDA events.

Every measurement runs in a power regime (:mod:`experiments.core.regime`):
``sustained`` by default (back-to-back work until the SM clock settles, then
back-to-back samples) or ``cold`` (an idle gap before each sample); each sample
carries the SM clock, power and throttle reasons at its start and end where the
backend has telemetry, and the stored record says the regime.

With ``hide_launch`` the device is held until a sample's work is all issued
(:mod:`gpu.backend.hold`), so a sample is device time only: for work of tens of
microseconds, where the host's launch overhead would otherwise count. The
stored record says which (``launch``).

Methods named in ``wall`` are timed as a user's loop runs them: ``calls`` calls back to
back, then one synchronise, by the host's clock (``time.perf_counter``), the sample their
time over ``calls``; host work, launches and any wait inside a call all count
(:mod:`experiments.core.ascalled`). They take their rounds beside the device-timed methods,
so the ratios of both kinds come from the same rounds.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from gpu.backend import Backend, Timer

from .regime import Regime, get_regime, idle, reading, settle, summary

Work = Callable[[], Any] | Sequence[Callable[[], Any]]
#: What a timing records of its rounds' order, by ``rotate``.
ORDER = {True: "rotated each round", False: "fixed"}

MIN_REPEATS = 10
#: Fewest samples a caller may ask for instead (``least=``), for calls that last over a second each: three
#: samples still give a median that one disturbed sample cannot move.
FEWEST_REPEATS = 3
#: Warm-up runs of each method's buffer sets, batches at most, and the timed seconds within which an unstable batch
#: is measured again (see the module notes): the protocol's defaults.
WARMUP, MAX_ATTEMPTS, RETRY_SECONDS = 2, 3, 120.0


@dataclass
class Timing:
    """Samples (seconds) of one method, from the batch that is reported."""

    samples: list[float]
    attempts: int = 1
    stable: bool = True
    tolerance: float = 0.05
    rejected: list[list[float]] = field(default_factory=list)
    power: dict[str, Any] = field(default_factory=dict)
    launch: str = "counted"
    order: str = ORDER[True]
    batch_s: float = math.nan

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.samples)

    @property
    def spread(self) -> float:
        """Largest relative distance of a sample from the batch mean."""
        return _spread(self.samples)

    def meta(self) -> dict[str, Any]:
        """What the results database keeps beside the samples."""
        return {"median_s": self.median, "mean_s": self.mean, "attempts": self.attempts,
                "stable": self.stable, "tolerance": self.tolerance, "spread": self.spread,
                "rejected_batches": self.rejected, "launch": self.launch, "order": self.order,
                "batch_s": self.batch_s, **self.power}


@dataclass
class Comparison:
    """Interleaved timings of several methods and their speed-ups over a baseline."""

    baseline: str
    timings: dict[str, Timing]

    def ratio(self, method: str, baseline: str | None = None) -> float:
        """Speed-up of ``method``: the baseline's (``baseline`` where given) median time over the method's."""
        return self.timings[baseline or self.baseline].median / self.timings[method].median

    def ratios(self) -> dict[str, float]:
        return {name: self.ratio(name) for name in self.timings}


def _spread(samples: Sequence[float]) -> float:
    """Largest relative distance from the mean; infinite when a sample is not a positive time."""
    if not all(math.isfinite(s) and s > 0 for s in samples):
        return math.inf
    mean = statistics.fmean(samples)
    return max(abs(s - mean) for s in samples) / mean


def _rotation(work: Work) -> Sequence[Callable[[], Any]]:
    """Callables to cycle through, one per sample (several buffer sets defeat caches)."""
    rotation = [work] if callable(work) else list(work)
    if not rotation:
        raise ValueError("nothing to time: the work sequence is empty")
    return rotation


@contextmanager
def wall_timer(backend: Backend) -> Iterator[Timer]:
    """Host-clock seconds of the block from an idle device to the end of its work: one synchronise
    before, one after, nothing in between (as a user's loop of calls runs)."""
    t = Timer()
    backend.synchronize()
    start = time.perf_counter()
    yield t
    backend.synchronize()
    t.seconds = time.perf_counter() - start


def _clock(backend: Backend, hide_launch: bool, wall: bool) -> Any:
    """The timer of one sample: the host's clock, or the backend's (launch held out where asked)."""
    if wall:
        return wall_timer(backend)
    return backend.timer(hide_launch=True) if hide_launch else backend.timer()


def _sample(backend: Backend, fns: Sequence[Callable[[], Any]], flush: bool, setup: Callable[[], Any] | None = None,
            regime: Regime | None = None, telemetry: Any = None, hide_launch: bool = False, wall: bool = False
            ) -> tuple[float, dict | None]:
    """One timed run of ``fns`` back to back, per call, and the telemetry at its start and end (None
    without telemetry); ``wall``: by :func:`wall_timer`."""
    if setup is not None:
        setup()
    if flush:
        backend.flush_cache()
    if regime is not None:
        idle(regime, backend)
    start = reading(telemetry)
    with _clock(backend, hide_launch, wall) as t:
        for fn in fns:
            fn()
    return t.seconds / len(fns), None if start is None else {"start": start, "end": reading(telemetry)}


def measure_interleaved(
    works: Mapping[str, Work],
    backend: Backend,
    *,
    repeats: int = MIN_REPEATS,
    warmup: int = WARMUP,
    tolerance: float = 0.05,
    max_attempts: int = MAX_ATTEMPTS,
    retry_seconds: float = RETRY_SECONDS,
    flush: bool = False,
    setup: Mapping[str, Callable[[], Any]] | None = None,
    regime: str | Regime = "sustained",
    telemetry: Any = "auto",
    hide_launch: bool = False,
    calls: int | Mapping[str, int] = 1,
    rotate: bool = True,
    least: int = MIN_REPEATS,
    wall: Collection[str] = (),
) -> dict[str, Timing]:
    """Time each method ``repeats`` times, one round of all methods after another, the order rotated by one
    method each round (see the module notes).

    ``works`` maps a name to a callable, or to a sequence of callables used in
    turn (buffer rotation; warm-up runs each of them ``warmup`` times, since a plan may build its graph on an
    address set's second call). With ``flush`` the last-level cache is flushed
    before every sample, outside the timed region. A batch in which any
    method has a sample outside ``1 +- tolerance`` of its mean is measured
    again, as many batches in all as :func:`attempts_within` allows for their mean length; the reported batch is the
    last stable one, or else the least spread, marked ``stable=False``.
    ``setup[name]``, where given, runs before each sample of that method,
    outside the timed region (restoring inputs a method overwrites, say).
    ``regime``: ``"sustained"`` (default) or ``"cold"``, or a
    :class:`~experiments.core.regime.Regime`; ``telemetry``: the reader the
    samples record (``"auto"``: the backend's, None: none); ``hide_launch``:
    device time only, the host's launch overhead left out (see the module notes); ``calls``: calls
    issued back to back in each sample (the rotation continued), the sample their time over ``calls``,
    as a loop of calls runs: the host's dispatch counts only where it outlasts the device's work (a
    mapping gives each method its own count, 1 where it names none);
    ``rotate=False`` keeps the order of ``works`` in every round (to measure what the order does);
    ``least``: the fewest samples allowed, the protocol's :data:`MIN_REPEATS` unless a caller of calls that
    last over a second lowers it (to :data:`FEWEST_REPEATS` at least; the record keeps the count);
    ``wall``: the methods timed by the host's clock, as called (see the module notes), ``hide_launch``
    aside.
    """
    least = max(FEWEST_REPEATS, min(least, MIN_REPEATS))
    if repeats < least:
        raise ValueError(f"repeats must be at least {least} (the protocol's minimum), got {repeats}")
    count = {name: int(calls.get(name, 1) if isinstance(calls, Mapping) else calls) for name in works}
    if min(count.values(), default=1) < 1:
        raise ValueError(f"calls per sample must be at least 1, got {calls}")
    if unknown := set(wall) - set(works):
        raise ValueError(f"methods to time by the host's clock are not among those timed: {sorted(unknown)}")
    if max_attempts < 1 or warmup < 0 or not retry_seconds >= 0:
        raise ValueError(f"need max_attempts >= 1, warmup >= 0 and retry_seconds >= 0, got {max_attempts}, "
                         f"{warmup} and {retry_seconds}")
    if not (math.isfinite(tolerance) and tolerance > 0):
        raise ValueError(f"tolerance must be a positive fraction such as 0.05, got {tolerance}")
    if not works:
        raise ValueError("nothing to time: no methods given")
    regime = get_regime(regime)
    telemetry = backend.telemetry() if isinstance(telemetry, str) and telemetry == "auto" else telemetry
    setup = setup or {}
    rotations = {name: _rotation(work) for name, work in works.items()}
    for fns in rotations.values():
        for i in range(warmup * len(fns)):
            fns[i % len(fns)]()
    backend.synchronize()

    def one_round() -> None:
        for name, fns in rotations.items():
            (setup.get(name) or (lambda: None))()
            fns[0]()

    settled = settle(regime, one_round, backend, telemetry)
    batches: list[dict[str, list[tuple[float, dict | None]]]] = []
    names = list(rotations)
    for _ in range(max_attempts):
        batch: dict[str, list[tuple[float, dict | None]]] = {name: [] for name in names}
        for i in range(repeats):
            shift = i % len(names) if rotate else 0
            for name in names[shift:] + names[:shift]:
                fns, c = rotations[name], count[name]
                run = [fns[(i * c + j) % len(fns)] for j in range(c)]
                batch[name].append(_sample(backend, run, flush, setup.get(name), regime, telemetry, hide_launch,
                                           name in wall))
        batches.append(batch)
        if all(_spread([t for t, _ in s]) <= tolerance for s in batch.values()):
            break
        if len(batches) >= attempts_within(_seconds(batches, count) / len(batches), retry_seconds, max_attempts):
            break
    launch = {name: _launch(backend, hide_launch, count[name], name in wall) for name in names}
    return _report(batches, tolerance, regime, settled, launch, ORDER[rotate], _seconds(batches, count) / len(batches))


def _launch(backend: Backend, hide_launch: bool, calls: int, wall: bool) -> str:
    """What a method's record says of its clock and of the host's launch overhead (``launch``)."""
    if wall:
        return f"as called: {calls} calls back to back, then one synchronise (host clock)"
    launch = "hidden" if hide_launch and getattr(backend, "asynchronous", False) else "counted"
    return launch + (f", {calls} calls back to back" if calls > 1 else "")


def attempts_within(batch_s: float, retry_seconds: float = RETRY_SECONDS, max_attempts: int = MAX_ATTEMPTS) -> int:
    """Batches the protocol takes at most where each lasts ``batch_s`` timed seconds: another while the
    batches, it included, fit ``retry_seconds``; at least one, at most ``max_attempts``."""
    if not batch_s > 0:
        return max_attempts
    return max(1, min(max_attempts, math.floor(retry_seconds / batch_s)))


def _seconds(batches: Sequence[Mapping[str, Sequence[tuple[float, Any]]]], calls: int | Mapping[str, int]) -> float:
    """Timed seconds of ``batches`` (a sample is the time per call of its method's ``calls`` calls); NaN samples
    count 0."""
    def count(name: str) -> int:
        return calls.get(name, 1) if isinstance(calls, Mapping) else calls

    return sum(count(name) * t for b in batches for name, s in b.items() for t, _ in s if math.isfinite(t))


def _report(batches: list[dict[str, list[tuple[float, dict | None]]]], tolerance: float, regime: Regime,
            settled: dict[str, Any], launch: Mapping[str, str], order: str, batch_s: float) -> dict[str, Timing]:
    times = [{name: [t for t, _ in s] for name, s in b.items()} for b in batches]
    worst = [max(_spread(s) for s in b.values()) for b in times]
    if math.isinf(min(worst)):
        raise RuntimeError(f"every batch had a sample that is not a positive finite time: {times[-1]}")
    chosen = len(batches) - 1 if worst[-1] <= tolerance else min(range(len(batches)), key=worst.__getitem__)
    rejected = [b for i, b in enumerate(times) if i != chosen]
    return {
        name: Timing(samples=samples, attempts=len(batches), stable=worst[chosen] <= tolerance,
                     tolerance=tolerance, rejected=[b[name] for b in rejected],
                     power=summary(regime, [tel for _, tel in batches[chosen][name]], settled), launch=launch[name],
                     order=order, batch_s=batch_s)
        for name, samples in times[chosen].items()
    }


#: Runs :func:`call_seconds` times at most, and the length from which one run is enough.
CALL_RUNS, CALL_LONG_S = 3, 0.1


def call_seconds(backend: Backend, work: Callable[[], Any]) -> float:
    """Seconds of one run of ``work``: the least of up to :data:`CALL_RUNS` runs after one warm-up (one where it
    lasts :data:`CALL_LONG_S` or more), so that a run the machine preempted does not size a sample's loop (a
    64 x 64 GEMM timed once on a loaded 2-core machine gave 1 call per sample instead of more than 10)."""
    work()
    best = math.inf
    for _ in range(CALL_RUNS):
        with backend.timer() as t:
            work()
        best = min(best, t.seconds)
        if best >= CALL_LONG_S:
            break
    return best


def repeats_lasting(backend: Backend, work: Callable[[], Any], seconds: float, most: int | None = None) -> int:
    """How many runs of ``work`` back to back last about ``seconds`` (at most ``most``), by
    :func:`call_seconds`. A sample that lasts that long sees the clock a sustained load runs at, and hides the
    host's dispatch behind the device's work wherever the device's work is the longer."""
    repeats = max(1, math.ceil(seconds / max(call_seconds(backend, work), 1e-9)))
    return repeats if most is None else min(repeats, most)


def single_run(backend: Backend, work: Callable[[], Any]) -> float:
    """Seconds of one run of ``work`` on an idle device (for methods too slow to batch)."""
    backend.synchronize()
    return _sample(backend, [work], flush=False)[0]


def first_calls(backend: Backend, works: Mapping[str, Work],
                clock: Callable[[Backend, Work], float] = single_run) -> dict[str, float]:
    """Seconds of one timed run of each work, after one untimed run of each (first-use costs out: kernels,
    plans, handles): what a benchmark screens slow methods by. ``clock``: :func:`single_run` (the device's
    time), or the host's clock from an idle device (:func:`experiments.core.ascalled.wall_seconds`)."""
    for work in works.values():
        work()
    backend.synchronize()
    return {name: clock(backend, work) for name, work in works.items()}


def slower_than(seconds: Mapping[str, float], reference: str, factor: float) -> set[str]:
    """The names whose seconds exceed ``factor`` times the reference's: too slow to beat it, and too slow to
    interleave (their batches would take minutes); a benchmark stores them from their one run."""
    return {name for name, s in seconds.items() if name != reference and s > factor * seconds[reference]}


def measure(work: Work, backend: Backend, **options: Any) -> Timing:
    """Time one method under the protocol (see :func:`measure_interleaved`)."""
    return measure_interleaved({"_": work}, backend, **options)["_"]


def compare(works: Mapping[str, Work], backend: Backend, baseline: str, **options: Any) -> Comparison:
    """Time methods side by side, interleaved, and report speed-ups over ``baseline``."""
    if baseline not in works:
        raise ValueError(f"baseline {baseline!r} is not among the methods {sorted(works)}")
    return Comparison(baseline, measure_interleaved(works, backend, **options))
