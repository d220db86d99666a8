"""The execution layer: one backend interface over NumPy (CPU) and CuPy (GPU), and the methods
written against it, one sub-package per family.

* :mod:`gpu.backend`: the :class:`~gpu.backend.Backend` interface, its NumPy and CuPy
  implementations, and the BLAS view rules;
* :mod:`gpu.strassen`: Strassen-Winograd schedules as tables, their analyses, one executor
  and ``matmul``;
* :mod:`gpu.ozaki`: the Ozaki scheme (slice formats, plans, slicing, ``matmul``);
* :mod:`gpu.splitk`: split-K for a tiny output and a huge inner dimension (``matmul``);
* :mod:`gpu.profile`: the per-device profile file that ``level="auto"`` reads;
* :mod:`gpu.zgemm`: complex products from real ones (4M and 3M over any real method);
* :mod:`gpu.frontdoor`: the front door, ``gpu.matmul`` and ``gpu.plan`` (the fastest method that keeps the
  caller's accuracy on this device, chosen from the profile's measurements), and the accuracy contract.

This layer imports nothing from ``modeling``, ``accuracy`` or ``experiments``.
"""

from .backend import AllocationReport, Backend, BackendUnavailable, get_backend, gpu_available
from .frontdoor import Accuracy, matmul, plan

__all__ = ["Accuracy", "AllocationReport", "Backend", "BackendUnavailable", "get_backend", "gpu_available", "matmul",
           "plan"]
