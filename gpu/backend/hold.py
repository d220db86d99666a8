"""A stream hold: time device work without the host's launch overhead (CuPy only).

Events recorded around a Python call time the device from the moment the start
event is reached, so the time it takes the host to issue the call's first
kernel is counted as device time: a few microseconds per launch, which is a
tenth of a 100-microsecond split-K product. :class:`StreamHold` closes that gap
the way NVBench's blocking kernel does: a one-thread kernel spins on a flag in
pinned host memory, the start event and the timed work queue up behind it, and
the host raises the flag once all of it is issued, so the work then runs back to
back from the start event. The gaps between its kernels on the device stay
counted. Work that waits for the device inside the hold would wait for the spin:
the kernel gives up after :data:`TIMEOUT_S` and says so, and the hold raises. The first
call of a library routine can be such work (loading its kernels waits for the device),
so time only after a warm-up, as the measurement protocol does.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

import numpy as np

#: Longest the hold waits for the host to issue the timed work (then it lets go and reports it).
TIMEOUT_S = 1.0

_SOURCE = r"""
extern "C" __global__ void gemmlab_hold(volatile int* flag, unsigned long long timeout_ns)
{
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    while (flag[0] == 0) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        if (t - t0 > timeout_ns) { flag[1] = 1; return; }
        __nanosleep(500);
    }
}
"""


class StreamHold:
    """The flag (two int32 in pinned host memory: release, timed out) and the spin kernel."""

    def __init__(self, cupy: Any) -> None:
        self._memory = cupy.cuda.alloc_pinned_memory(8)
        self.flag = np.frombuffer(self._memory, dtype=np.int32, count=2)
        self._kernel = cupy.RawKernel(_SOURCE, "gemmlab_hold")

    @contextmanager
    def held(self, stream: Any) -> Iterator[None]:
        """Hold ``stream`` while the block issues work; release it on leaving (even on error)."""
        self.flag[:] = 0
        self._kernel((1,), (1,), (self._memory.ptr, np.uint64(TIMEOUT_S * 1e9)), stream=stream)
        try:
            yield
        finally:
            self.flag[0] = 1

    def check(self) -> None:
        """RuntimeError where the last hold timed out: the timed work waited for the device."""
        if self.flag[1]:
            raise RuntimeError(f"the stream hold timed out after {TIMEOUT_S} s: the timed work waits for the "
                               "device (a synchronisation or a host copy) or takes longer to issue; time it "
                               "without hide_launch")


@cache
def stream_hold(cupy: Any) -> StreamHold:
    """One hold per process (its pinned flag and compiled kernel are reused)."""
    return StreamHold(cupy)
