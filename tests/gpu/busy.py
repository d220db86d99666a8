"""A kernel that keeps a stream busy for a given time (CuPy only).

The no-synchronisation tests enqueue it and then time a call: a call that waits for the device returns only
after the kernel, one that does not returns at once. The kernel spins on the device's global timer
(``%globaltimer``, nanoseconds) rather than on ``clock64()``'s SM cycles, so that ``ms`` means milliseconds
whatever the SM clock runs at (1.5-2.0 GHz on the H200, by load and power).
"""

from functools import cache

SOURCE = r"""
extern "C" __global__ void gemmlab_busy(unsigned long long ns)
{
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
}
"""


@cache
def _kernel():
    import cupy

    return cupy.RawKernel(SOURCE, "gemmlab_busy")


def busy(ms: float) -> None:
    """Launch, on the current stream, one thread that spins for ``ms`` milliseconds, and return at once (the
    kernel is compiled on the first call: make one before timing anything)."""
    import numpy as np

    _kernel()((1,), (1,), (np.uint64(ms * 1e6),))
