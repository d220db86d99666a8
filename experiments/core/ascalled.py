"""The call as a user makes it, timed beside the executor under it.

A user's code calls a method in a loop and synchronises once, where it needs the result. So the
time that counts for a user is the *as-called* time: the public call (its defaults, or the
options a user passes) issued ``calls`` times back to back, then one synchronise, by the host's
clock (``time.perf_counter``), over ``calls``; the median of at least 10 such samples. Host work,
launches, any check that waits for the device and any allocation all count, and the host's
dispatch hides behind the device's work exactly where a loop would hide it. Beside it:

* ``host_s``: the host time of one call, ``perf_counter`` around the call alone on an idle device
  and no synchronise after it (median of :func:`host_repeats` calls): what its dispatch costs;
  it is as long as the call only where the call waits for the device itself;
* ``device_s``: the executor's time by the device's clock (CUDA events), as the family's
  benchmark has always timed it.

:func:`time_called` times a family's group with both kinds in the same interleaved rounds (the
protocol of :mod:`experiments.core.timing`, its ``wall`` methods): the library GEMM as a user
calls it (``cupy.matmul(A, B, out=C)``) is the reference of the as-called ratio, the library GEMM
by the device's clock that of the device ratio. :meth:`Called.meta` is what a stored row adds:
``call``, ``as_called_s``, ``host_s``, ``device_s``, ``reference_s``, ``ratio_as_called`` and
``ratio_device`` (None where not measured), with the samples and the regime's readings.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpu.backend import Backend

from .lab import time_group
from .timing import Comparison, Timing, measure_interleaved

#: A stored method's name in a group, for its public call timed as called.
AS_CALLED = "as called: "
#: An as-called sample issues calls back to back for about this long (where the device runs apart from
#: the host), at most MAX_CALLS: long enough that the first call's dispatch weighs little, as in a loop.
PIPELINE_S, MAX_CALLS = 0.1, 512
#: Calls whose host time is taken (each on an idle device, so each costs a whole call): at most
#: HOST_REPEATS, as many as fit in HOST_BUDGET_S, at least MIN_HOST_REPEATS.
HOST_REPEATS, MIN_HOST_REPEATS, HOST_BUDGET_S = 21, 5, 2.0
#: What a family's row class reads of a stored row's as-called record (:func:`as_called_fields`).
FIELDS = ("call", "as_called_s", "host_s", "ratio_as_called")
#: What a row keeps of the regime its as-called samples ran in.
TELEMETRY = ("sm_clock_mhz", "power_w", "throttle_reasons")

Work = Callable[[], Any]


@dataclass(frozen=True)
class Call:
    """A public call as a user writes it (``text``, stored with the row) and the callable that makes it;
    ``max_calls``: the most calls one sample may issue back to back (a call that uses its inputs as scratch
    grows their values from one call to the next: a few calls stay finite, hundreds may not)."""

    text: str
    fn: Work
    max_calls: int | None = None


def call_text(function: str, options: Mapping[str, Any], operands: str = "A, B, out=C") -> str:
    """A call as a user writes it: ``splitk.matmul(A, B, out=C, deterministic=False)``."""
    return f"{function}({', '.join([operands, *(f'{k}={v!r}' for k, v in options.items())])})"


def calls_for(call_s: float, asynchronous: bool = True) -> int:
    """Calls one as-called sample issues back to back where one call takes ``call_s``: enough for
    :data:`PIPELINE_S`, at most :data:`MAX_CALLS`; one where every call is synchronous (a loop of them
    costs the sum of their times, so more calls change nothing)."""
    if not asynchronous:
        return 1
    return min(MAX_CALLS, max(1, math.ceil(PIPELINE_S / max(call_s, 1e-9))))


def host_repeats(call_s: float) -> int:
    """Calls :func:`host_seconds` takes where one call lasts ``call_s`` (see :data:`HOST_BUDGET_S`)."""
    return min(HOST_REPEATS, max(MIN_HOST_REPEATS, math.floor(HOST_BUDGET_S / max(call_s, 1e-9))))


def host_seconds(backend: Backend, work: Work, repeats: int = HOST_REPEATS) -> float:
    """Median host time of one call of ``work`` issued to an idle device, with no synchronise after it:
    what its dispatch costs the host, which a loop of calls hides behind device work that lasts longer,
    and only there. After a long wait it holds the host's wake-up too: on the H100 the same DGEMM dispatch
    read 19-26 us at N <= 2048 and 26-400 us above (``results/published/h100-auto-latency.json``), so
    compare the calls of one size, not sizes."""
    times = []
    for _ in range(repeats):
        backend.synchronize()
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    backend.synchronize()
    return statistics.median(times)


def wall_seconds(backend: Backend, work: Work) -> float:
    """Seconds of one call of ``work`` from an idle device to the end of its work, by the host's clock."""
    backend.synchronize()
    start = time.perf_counter()
    work()
    backend.synchronize()
    return time.perf_counter() - start


def as_called(work: Work, backend: Backend, *, calls: int, **protocol: Any) -> Timing:
    """``work`` timed as called (see the module notes): ``calls`` calls back to back and one synchronise
    per sample, by the host's clock, under the protocol (``protocol``: the options of
    :func:`~experiments.core.timing.measure_interleaved`: ``repeats``, ``regime``, ...)."""
    return measure_interleaved({"_": work}, backend, wall={"_"}, calls=calls, **protocol)["_"]


@dataclass
class Called:
    """A group timed with its public calls (:func:`time_called`): every timing, the calls, and the host
    time of each call."""

    result: Comparison
    public: Mapping[str, Call]
    reference: Call | None
    host: dict[str, float]
    calls: int
    counts: Mapping[str, int] = field(default_factory=dict)

    @property
    def device(self) -> Comparison:
        """The group's methods by the device's clock, as the family stored them before."""
        return Comparison(self.result.baseline, {name: t for name, t in self.result.timings.items()
                                                 if not name.startswith(AS_CALLED)})

    def meta(self, name: str) -> dict[str, Any]:
        """What method ``name``'s stored row adds (see the module notes): nothing for a method with no
        public call (a device copy, say); for the baseline its own call, the reference."""
        timed = self.result.timings.get(AS_CALLED + name)
        if timed is None:
            return {}
        base = self.result.baseline
        ref, device = self.result.timings.get(AS_CALLED + base), self.result.timings.get(name)
        call = self.reference if name == base and self.reference else self.public[name]
        return {"call": call.text, "as_called_s": timed.median, "as_called_samples": timed.samples,
                "as_called_calls": self.counts.get(name, min(self.calls, call.max_calls or self.calls)),
                "as_called_stable": timed.stable,
                "as_called_launch": timed.launch,
                "host_s": self.host[name], "device_s": device.median if device else None,
                "reference_call": self.reference.text if self.reference else None,
                "reference_s": ref.median if ref else None, "reference_host_s": self.host.get(base),
                "ratio_as_called": ref.median / timed.median if ref else None,
                "ratio_device": self.result.ratio(name) if device else None,
                **{f"as_called_{key}": timed.power[key] for key in TELEMETRY if key in timed.power}}


def time_called(ops: Any, works: Mapping[str, Work], baseline: str, public: Mapping[str, Call],
                reference: Call | None, *, calls: int | None = None, **protocol: Any) -> Called:
    """``works`` by the device's clock and, in the same interleaved rounds, the ``public`` calls and the
    ``reference`` (the library GEMM as a user calls it, the as-called baseline) as called, ``calls`` calls
    per sample (default :func:`calls_for` the reference's time, and no more than :func:`calls_for` a call's own
    time: a call 100 times slower than the reference fills the pipeline with fewer; a call's ``max_calls`` bounds
    its own); each
    call's host time is taken first, after a warm-up call. ``public`` may name configurations with no device
    work (a family's defaults: their ``device_s`` is None). ``reference`` None: nothing to compare the calls
    with as called (their ratio None), the baseline's own time sizing the samples. ``ops``: the group's
    operands; ``protocol``: the options of :func:`experiments.core.lab.time_group` (``refill``, ``regime``,
    ``hide_launch``, ...)."""
    if (reference and baseline in public) or baseline not in works:
        raise ValueError(f"the baseline {baseline!r} must be among the works and its call given as the reference")
    be = ops.backend
    everyone = {**({baseline: reference} if reference else {}), **public}
    for call in everyone.values():
        call.fn()
    seconds = {name: wall_seconds(be, call.fn) for name, call in everyone.items()}
    host = {name: host_seconds(be, call.fn, host_repeats(seconds[name])) for name, call in everyone.items()}
    base_s = seconds[baseline] if reference else wall_seconds(be, works[baseline])
    count = calls or calls_for(base_s, be.asynchronous)
    named = {AS_CALLED + name: call.fn for name, call in everyone.items()}
    own = {name: min(count, call.max_calls or count, count if calls else calls_for(seconds[name], be.asynchronous))
           for name, call in everyone.items()}
    per_call = {AS_CALLED + name: n for name, n in own.items()}
    result = time_group(ops, {**works, **named}, baseline, wall=set(named), calls=per_call, **protocol)
    return Called(result, dict(public), reference, host, count, own)


def as_called_fields(meta: Mapping[str, Any]) -> dict[str, Any]:
    """A stored row's as-called fields, None where the row has none (rows stored before these were)."""
    return {key: meta.get(key) for key in FIELDS}
