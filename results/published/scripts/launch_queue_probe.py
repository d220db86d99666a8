"""Which graphs fill CUDA's launch queues: the host time of launching one behind a 300 ms kernel.

``python3 launch_queue_probe.py KIND COUNT``: a graph of COUNT ``kernels`` (a CuPy element-wise kernel), ``memsets``
(4-byte ``cudaMemsetAsync``) or ``pairs`` (a memset, then a kernel: the pattern of cuBLAS's sm90 GEMMs), captured
on a stream, then launched twice behind a 300 ms kernel (:func:`tests.gpu.busy.graph_launch_seconds`); prints the
host milliseconds of each launch. A launch the queues take returns at once; one they do not waits until the busy
kernel ends. Run from the repository root with ``PYTHONPATH=$PWD``, with and without ``CUDA_SCALE_LAUNCH_QUEUES=4x``.
"""

import os
import sys

from tests.gpu.busy import graph_launch_seconds

if __name__ == "__main__":
    kind, count = sys.argv[1], int(sys.argv[2])
    host = graph_launch_seconds(kind, count)
    print(kind, count, os.environ.get("CUDA_SCALE_LAUNCH_QUEUES"), [round(1e3 * h, 1) for h in host])
