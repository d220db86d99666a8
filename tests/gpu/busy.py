"""``busy(ms)``: a CUDA kernel that keeps the current stream busy for about ``ms`` milliseconds (one thread spinning
on ``clock64()``), so a test can tell whether a call waits for the device: a call that does not returns long
before the kernel ends."""

from __future__ import annotations

from functools import cache

import numpy as np

_SOURCE = r"""
extern "C" __global__ void busy(long long cycles)
{
    const long long start = clock64();
    while (clock64() - start < cycles) { }
}
"""


@cache
def _kernel():
    import cupy

    return cupy.RawKernel(_SOURCE, "busy")


@cache
def _cycles_per_ms() -> float:
    """clock64() cycles per millisecond, measured once with CUDA events (the SM clock, boost included)."""
    import cupy

    cycles = 20_000_000
    _kernel()((1,), (1,), (np.int64(1000),))            # compiled and loaded
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    start.record()
    _kernel()((1,), (1,), (np.int64(cycles),))
    stop.record()
    stop.synchronize()
    return cycles / cupy.cuda.get_elapsed_time(start, stop)


def busy(ms: float) -> None:
    """Queue a kernel of about ``ms`` milliseconds on the current stream."""
    _kernel()((1,), (1,), (np.int64(_cycles_per_ms() * ms),))
