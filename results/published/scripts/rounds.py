"""Timing helpers of the probe scripts.

Kernel-level timing: CUDA events around each run, runs interleaved round by round. The probes time single
kernels or short sequences cold (no warm-up regime, no idle gap), where
:func:`experiments.core.timing.measure_interleaved`'s protocol would time a settled device instead. And the
record the probes keep of a protocol-timed group (:func:`group_record`), and where a probe writes its JSON
(:func:`write_json`).
"""

import json
import os
import statistics
import time
from collections.abc import Callable, Mapping
from typing import TypeVar

import cupy as cp

T = TypeVar("T")


def device_ms(run: Callable[[], object]) -> float:
    """Milliseconds of the device's work that ``run`` issues on the current stream, by CUDA events."""
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    run()
    stop.record()
    stop.synchronize()
    return cp.cuda.get_elapsed_time(start, stop)


def event_rounds(runs: Mapping[str, Callable[[], object]], rounds: int) -> dict[str, list[float]]:
    """Milliseconds of each run per round, the runs interleaved within every round."""
    samples: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            samples[name].append(device_ms(run))
    return samples


def turning(calls: Mapping[str, Callable[[], object]], rounds: int,
            sample: Callable[[Callable[[], object]], T]) -> dict[str, list[T]]:
    """``rounds`` rounds of one ``sample`` of every call, in an order that turns by one each round (so that no
    call always follows the same one)."""
    samples: dict[str, list[T]] = {k: [] for k in calls}
    order = list(calls)
    for r in range(rounds):
        for name in order[r % len(order):] + order[:r % len(order)]:
            samples[name].append(sample(calls[name]))
    return samples


def loop_seconds(call: Callable[[], object], loop: int) -> float:
    """Seconds per call of ``loop`` back-to-back calls and one synchronise, host time included (as a user's loop
    makes them)."""
    cp.cuda.Device().synchronize()
    t0 = time.perf_counter()
    for _ in range(loop):
        call()
    cp.cuda.Device().synchronize()
    return (time.perf_counter() - t0) / loop


def beside_dgemm(call: Callable[[], object], dgemm: Callable[[], object], loop: int) -> dict[str, float]:
    """One sample of ``call`` as called at the cap: two calls (its plan, its graph), one ``dgemm`` so that the board
    is at the cap, then ``loop`` calls back to back (:func:`loop_seconds`), then one ``dgemm``: milliseconds a call
    of each."""
    call()
    call()
    dgemm()
    seconds = loop_seconds(call, loop)
    return {"ms": seconds * 1e3, "dgemm_ms": loop_seconds(dgemm, 1) * 1e3}


def paired_ratios(samples: Mapping[str, list[float]], base: str) -> dict[str, float]:
    """Each run's speed against ``base``'s: the median over rounds of ``base``'s seconds over the run's in the same
    round (rounds of :func:`turning`), so that a drift of the clock between rounds cancels."""
    return {k: statistics.median(b / s for b, s in zip(samples[base], v, strict=True)) for k, v in samples.items()}


def beside_summary(samples: Mapping[str, list[Mapping[str, float]]], base: str) -> dict[str, object]:
    """Turning rounds of :func:`beside_dgemm` samples per form: the samples, each form's median ms and median ratio
    to the DGEMM beside it, and its speed paired against ``base``'s (:func:`paired_ratios`)."""
    ms = {name: [s["ms"] for s in v] for name, v in samples.items()}
    return {"samples": samples, "median_ms": {k: statistics.median(v) for k, v in ms.items()},
            "median_x_dgemm": {k: statistics.median(s["dgemm_ms"] / s["ms"] for s in v) for k, v in samples.items()},
            f"paired_speed_over_{base}": paired_ratios(ms, base)}


def summary(samples: Mapping[str, list[float]]) -> dict[str, dict[str, float]]:
    """Median, least and greatest milliseconds per run."""
    return {k: {"median_ms": statistics.median(v), "min_ms": min(v), "max_ms": max(v)} for k, v in samples.items()}


def group_record(comparison) -> dict[str, dict[str, object]]:
    """Per method of an interleaved group (:class:`experiments.core.timing.Comparison`): median ms, speed-up
    over the group's baseline, stability, the median SM clock at the samples' start, and the SM clock and
    power the protocol summarises."""
    return {k: {"ms": t.median * 1e3, "speedup": comparison.ratio(k), "stable": t.stable,
                "start_mhz": statistics.median(s["start"]["sm_mhz"] for s in t.power["telemetry"])
                if t.power.get("telemetry") else None,
                "sm_mhz": t.power.get("sm_clock_mhz"), "power_w": t.power.get("power_w")}
            for k, t in comparison.timings.items()}


def write_json(result: Mapping[str, object], filename: str) -> None:
    """``result`` as indented JSON in ``$OUT`` (default /tmp) under ``filename``."""
    with open(os.path.join(os.environ.get("OUT", "/tmp"), filename), "w") as fh:
        json.dump(result, fh, indent=1, default=str)
