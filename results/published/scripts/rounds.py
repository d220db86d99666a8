"""Kernel-level timing for the probe scripts: CUDA events around each run, runs interleaved round by round.

The probes time single kernels or short sequences cold (no warm-up regime, no idle gap), where
:func:`experiments.core.timing.measure_interleaved`'s protocol would time a settled device instead.
"""

import statistics
from collections.abc import Callable, Mapping

import cupy as cp


def event_rounds(runs: Mapping[str, Callable[[], object]], rounds: int) -> dict[str, list[float]]:
    """Milliseconds of each run per round, the runs interleaved within every round."""
    samples: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            start, stop = cp.cuda.Event(), cp.cuda.Event()
            start.record()
            run()
            stop.record()
            stop.synchronize()
            samples[name].append(cp.cuda.get_elapsed_time(start, stop))
    return samples


def summary(samples: Mapping[str, list[float]]) -> dict[str, dict[str, float]]:
    """Median, least and greatest milliseconds per run."""
    return {k: {"median_ms": statistics.median(v), "min_ms": min(v), "max_ms": max(v)} for k, v in samples.items()}
