"""CUDA's launch queues, which ``gemmlab`` scales to 4x (:data:`experiments.cli.LAUNCH_QUEUES`).

A launch that holds more operations than the queues take keeps the host in the launch until the device drains
them: scheme II's level-1 graph of 1727 nodes at N = 32768 (840 INT8 GEMMs, each after cuBLAS's memset) held the
host 318-335 ms a call with CUDA's default queues and 1.3-3.5 ms with them scaled
(``results/published/h200/h200-ozaki2-span-host-probe.json``). Each case runs in a process of its own, since CUDA
reads the variable once, when it makes the context.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.cli import LAUNCH_QUEUES

ROOT = Path(__file__).resolve().parents[2]
PAIRS = 900
CHILD = f"""
from tests.gpu.busy import graph_launch_seconds

print(max(graph_launch_seconds("pairs", {PAIRS})))
"""


def _launch_seconds(scale: str | None) -> float:
    """Host seconds of launching a graph of :data:`PAIRS` 4-byte memsets, each followed by a kernel (the pattern of
    cuBLAS's sm90 GEMMs), behind a 300 ms kernel, in a new process whose
    ``CUDA_SCALE_LAUNCH_QUEUES`` is ``scale`` (None: unset, CUDA's default queues)."""
    env = {k: v for k, v in os.environ.items() if k != LAUNCH_QUEUES[0]}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(ROOT), env.get("PYTHONPATH"))))
    if scale is not None:
        env[LAUNCH_QUEUES[0]] = scale
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return float(done.stdout.split()[-1])


@pytest.mark.gpu
def test_gemmlab_launch_queues_take_a_long_graph_without_holding_the_host():
    """With CUDA's default queues the launch of a graph of 900 memset-kernel pairs behind a busy stream waits for
    the device (the case this guards against: on the H200 301 ms, and 2000 memsets alone, or 6000 kernels alone,
    also; 2000 kernels alone or 500 pairs do not); with the queues ``gemmlab`` sets it returns at once (1-5 ms)."""
    pytest.importorskip("cupy")
    default = _launch_seconds(None)
    if default < 0.15:
        pytest.skip(f"this driver's default queues take {PAIRS} memset-kernel pairs (launch {1e3 * default:.1f} ms): "
                    "nothing to show")
    scaled = _launch_seconds(LAUNCH_QUEUES[1])
    assert scaled < 0.05, (default, scaled)
