"""``busy(ms)``: keep the current CuPy stream busy for at least ``ms`` milliseconds (one thread spinning on the
GPU's global nanosecond timer), so that a test can tell a call that waits for the device from one that does not."""

from functools import cache

import numpy as np


@cache
def _kernel():
    import cupy
    return cupy.RawKernel(r'''
extern "C" __global__ void gemmlab_busy(long long ns)
{
    long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); } while (now - start < ns);
}
''', "gemmlab_busy")


def busy(ms: float) -> None:
    """Launch the spinning kernel on the current stream and return at once."""
    _kernel()((1,), (1,), (np.int64(ms * 1e6),))
