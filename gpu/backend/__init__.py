"""The backend interface and its two implementations (NumPy on the CPU, CuPy on the GPU).

* :mod:`~gpu.backend.interface`: :class:`Backend`, what every method is written against;
* :mod:`~gpu.backend.registry`: :func:`get_backend` by name;
* :mod:`~gpu.backend.checks`: what every entry point checks before any work (operands, outputs,
  finiteness, memory);
* :mod:`~gpu.backend.blas`: how a 2-D view reaches a column-major BLAS with no copy, and the
  low-precision GEMM recipes; :mod:`~gpu.backend.cpu_blas`: SciPy's BLAS on raw pointers;
* :mod:`~gpu.backend.numpy_backend`, :mod:`~gpu.backend.cupy_backend`: the implementations.
"""

from .checks import MemoryPlanError, check_output, matrix_pair, require_finite, require_host, require_memory
from .interface import (
    POLICIES,
    AllocationReport,
    Array,
    Backend,
    BackendUnavailable,
    NullEvent,
    NullStream,
    Timer,
    register_ops,
)
from .registry import BACKENDS, backend_class, backend_of, get_backend, gpu_available

__all__ = ["BACKENDS", "POLICIES", "AllocationReport", "Array", "Backend", "BackendUnavailable", "MemoryPlanError",
           "NullEvent", "NullStream", "Timer", "backend_class", "backend_of", "check_output", "get_backend",
           "gpu_available", "matrix_pair", "register_ops", "require_finite", "require_host", "require_memory"]
