"""A kernel that keeps a stream busy for a given time (CuPy only).

The no-synchronisation tests enqueue it and then time a call: a call that waits for the device returns only
after the kernel, one that does not returns at once. The kernel spins on the device's global timer
(``%globaltimer``, nanoseconds) rather than on ``clock64()``'s SM cycles, so that ``ms`` means milliseconds
whatever the SM clock runs at (1.5-2.0 GHz on the H200, by load and power).
"""

import time
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


def graph_launch_seconds(kind: str, count: int, behind_ms: float = 300.0, launches: int = 2) -> list[float]:
    """Host seconds of each of ``launches`` launches of one captured graph behind a ``behind_ms`` kernel: ``count``
    ``"kernels"`` (a CuPy element-wise kernel), ``"memsets"`` (4-byte ``cudaMemsetAsync``) or ``"pairs"`` (a memset,
    then a kernel: the pattern of cuBLAS's sm90 GEMMs). A launch that CUDA's launch queues take returns at once;
    one they do not waits for the busy kernel to end. Checks the kernels' count."""
    import cupy

    x = cupy.zeros(2)
    stream = cupy.cuda.Stream(non_blocking=True)

    def body() -> None:
        for _ in range(count):
            if kind in ("pairs", "memsets"):
                cupy.cuda.runtime.memsetAsync(x.data.ptr, 0, 4, stream.ptr)
            if kind in ("pairs", "kernels"):
                x[1:] += 1

    with stream:
        body()
        busy(1)
    stream.synchronize()
    stream.begin_capture()
    with stream:
        body()
    graph = stream.end_capture()
    seconds = []
    for _ in range(launches):
        with stream:
            busy(behind_ms)
            start = time.perf_counter()
            graph.launch()
            seconds.append(time.perf_counter() - start)
        stream.synchronize()
    assert float(x[1]) == (0 if kind == "memsets" else (1 + launches) * count), x
    return seconds
