"""Out-of-core GEMM: C = A B for host operands larger than the device.

A block of C stays resident on the device while the k-panels of A's block rows and B's block columns stream
through it from host memory, the copies of the next panels overlapping the products of the current ones,
and the finished block goes back to the host once.

* :mod:`~gpu.outofcore.plan`: the blocks, panels and buffers as data, chosen from the device memory and the
  link and GEMM rates, with their memory, traffic and predicted time;
* :mod:`~gpu.outofcore.ops` and :mod:`~gpu.outofcore.kernels`: the NumPy and CUDA operations (staging,
  streams, events, cuBLAS);
* :mod:`~gpu.outofcore.api`: :class:`Plan` and :class:`Options` (what one operand signature decides once),
  :func:`matmul` (a kept plan plus its execution), the one executor :func:`run`, and :func:`page_locked`;
* :mod:`~gpu.outofcore.pagelock`: page-locked host ranges, copied in place instead of staged;
* :mod:`~gpu.outofcore.ahead` and :mod:`~gpu.outofcore.ring`: pieces locked just ahead of the copies that read
  them (``staging="lock"``), and panels staged band by band through a small pinned ring (``"stream"``);
* :mod:`~gpu.outofcore.timeline`: when each copy, product and staging of one run ran (:class:`Timeline`).
"""

from .api import HEADROOM, PLANS, Options, Plan, matmul, page_locked, run
from .plan import ALIGN, DEFAULT_PANEL, OutOfCorePlan, Prediction, Step, flops, plan, predict, traffic_bytes
from .timeline import LANES, Span, Timeline

__all__ = ["ALIGN", "DEFAULT_PANEL", "HEADROOM", "LANES", "PLANS", "Options", "OutOfCorePlan", "Plan", "Prediction",
           "Span", "Step", "Timeline", "flops", "matmul", "page_locked", "plan", "predict", "run", "traffic_bytes"]
