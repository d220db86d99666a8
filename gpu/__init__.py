"""The execution layer: one backend interface over NumPy (CPU) and CuPy (GPU).

Strassen-Winograd schedules, split-K GEMM, the Ozaki scheme and tiled
multi-GPU GEMM are written against :class:`gpu.backend.Backend`.
"""

from .backend import AllocationReport, Backend, BackendUnavailable, get_backend, gpu_available

__all__ = ["AllocationReport", "Backend", "BackendUnavailable", "get_backend", "gpu_available"]
