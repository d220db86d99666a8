"""Which graphs fill CUDA's launch queues: the host time of launching one behind a 300 ms kernel.

``python3 launch_queue_probe.py KIND COUNT``: a graph of COUNT ``kernels`` (a CuPy element-wise kernel), ``memsets``
(4-byte ``cudaMemsetAsync``) or ``pairs`` (a memset, then a kernel: the pattern of cuBLAS's sm90 GEMMs), captured
on a stream, then launched twice behind :func:`tests.gpu.busy.busy` (300 ms); prints the host milliseconds of each
launch. A launch the queues take returns at once; one they do not waits until the busy kernel ends. Run from the
repository root with ``PYTHONPATH=$PWD``, with and without ``CUDA_SCALE_LAUNCH_QUEUES=4x``.
"""

import os
import sys
import time

import cupy

from tests.gpu.busy import busy

KIND, COUNT = sys.argv[1], int(sys.argv[2])


def main() -> None:
    x = cupy.zeros(1024)
    stream = cupy.cuda.Stream(non_blocking=True)

    def body() -> None:
        for _ in range(COUNT):
            if KIND in ("pairs", "memsets"):
                cupy.cuda.runtime.memsetAsync(x.data.ptr, 0, 4, stream.ptr)
            if KIND in ("pairs", "kernels"):
                x[1:] += 1

    with stream:
        body()
        busy(1)
    stream.synchronize()
    stream.begin_capture()
    with stream:
        body()
    graph = stream.end_capture()
    host = []
    for _ in range(2):
        with stream:
            busy(300)
            start = time.perf_counter()
            graph.launch()
            host.append(time.perf_counter() - start)
        stream.synchronize()
    print(KIND, COUNT, os.environ.get("CUDA_SCALE_LAUNCH_QUEUES"), [round(1e3 * h, 1) for h in host])


if __name__ == "__main__":
    main()
