"""Split-K: GEMM with a tiny output and a huge inner dimension (Hattori & Fujimoto, 2016).

``matmul(A, B)`` for A m x k and B k x n with m x n small and k large cuts k into
chunks, computes each chunk's product on its own layer of a 3-D grid (so the
device is full even where the output makes one block), and adds the chunks up:
in a fixed order through a small workspace (``deterministic=True``, the
default: bitwise reproducible), or atomically into C as the paper does.

* :mod:`~gpu.splitk.occupancy`: the paper's formula for the blocks a device runs at once;
* :mod:`~gpu.splitk.plan`: a split as data (chunk width, reduction grouping), chosen from it;
* :mod:`~gpu.splitk.ops`, :mod:`~gpu.splitk.variants` and :mod:`~gpu.splitk.kernels`: the NumPy and
  CUDA operations;
* :mod:`~gpu.splitk.executor`: :func:`run`, the one executor;
* :mod:`~gpu.splitk.matmul_plan`: :class:`Plan` and :class:`Options`, what one operand signature decides once;
* :mod:`~gpu.splitk.api`: :func:`matmul`, a kept plan per signature plus its execution.
"""

from .api import PLANS, Options, Plan, matmul, run
from .occupancy import Kernel, SMLimits, chunk_width, chunks, resident_blocks
from .plan import MAX_OUTPUTS, MIN_K, TARGET_WIDTH, SplitPlan, check_worth, plan

__all__ = ["MAX_OUTPUTS", "MIN_K", "PLANS", "TARGET_WIDTH", "Kernel", "Options", "Plan", "SMLimits", "SplitPlan",
           "check_worth", "chunk_width", "chunks", "matmul", "plan", "resident_blocks", "run"]
