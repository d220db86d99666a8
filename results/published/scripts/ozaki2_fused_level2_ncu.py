"""The level-2 operand kernel's forms under Nsight Compute (``ozaki2_fused_level2_kernels.py``, alone).

Builds only what the operand kernel reads and writes at ``N`` (default 16384, 15 moduli: B's 49 operands per
modulus, which A's reuse), then runs each form in ``FORMS`` (default 0,1) on B and then on A, for a profiler that
takes the kernels by name::

    ncu --kernel-name ozaki2_level2_operands --launch-count 4 --section SpeedOfLight \\
        --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section Occupancy \\
        --section WarpStateStats --section InstructionStats --section LaunchStats \\
        python3 results/published/scripts/ozaki2_fused_level2_ncu.py > ncu.txt

Its metrics, trimmed, are in ``results/published/h200/h200-ozaki2-fused-level2-ncu-16384.txt``.
"""

import os

import cupy as cp
import ozaki2_fused_level2_probe as probe
from ozaki2_as_called import fresh_inputs
from ozaki2_fused_level2_kernels import operand_kernel

from gpu.backend import get_backend


def main() -> None:
    be = get_backend("cupy")
    n = int(os.environ.get("N", 16384))
    A, B = fresh_inputs(n)
    run = probe.Level2(be, A, B, None, 15, n // 4, gemms=False)
    ops = run.ops_b
    rows, cols, sa, sb = run.scale()
    for form in (int(f) for f in os.environ.get("FORMS", "0,1").split(",")):
        run.fast = form
        run.kernels = {side: operand_kernel(side, form) for side in "ab"}
        run.operands(B.T, sb, cols.e, "b", ops, 0, run.q)
        run.operands(A, sa, rows.e, "a", ops, 0, run.q)
    cp.cuda.Device().synchronize()


if __name__ == "__main__":
    main()
