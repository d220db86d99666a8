"""cuBLAS's own FP64 emulation (``CUBLAS_COMPUTE_64F_EMULATED_FIXEDPOINT``, cuBLAS 13), scheme II's peer.

``matmul(A, B, mantissa_bits=None)`` computes a float64 ``A @ B`` through cuBLAS's fixed-point emulation
on INT8 tensor cores, reached through nvmath-python's cuBLAS bindings on a handle and workspace of its own
(the emulation settings live on the handle, so they never reach the backend's ordinary DGEMMs):

* ``mantissa_bits=b``: the EAGER strategy (emulate whatever cuBLAS's heuristics say) with the mantissa
  fixed at b bits (``CUDA_EMULATION_MANTISSA_CONTROL_FIXED``);
* ``mantissa_bits=None``: everything left to cuBLAS (DEFAULT strategy, dynamic mantissa). On the H100
  with cuBLAS 13.1 that returns native DGEMM bit for bit: cuBLAS does not emulate on Hopper (the notes).

The operands are planned like :meth:`gpu.backend.Backend.gemm`'s (views with their leading dimensions, no
copy). It needs the CuPy backend, nvmath-python and cuBLAS 13 or later; elsewhere it raises
:class:`gpu.backend.BackendUnavailable` saying which is missing, before any work.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from ..backend import Array, Backend, BackendUnavailable, blas, check_output, get_backend, register_ops
from ..backend.stream_blas import nvcublas
from ..ozaki.api import _operands

FAMILY = "fp64-emulation"
#: Mantissa widths listed for the audit family ``cublas-emul-<bits>`` (any width in 1..MAX_BITS is accepted).
LISTED_BITS = (31, 39, 47, 55, 63, 71)
MAX_BITS = 127
#: The emulation's workspace: 8 GiB sufficed at N = 16384 on the H100 (the notes).
WORKSPACE_BYTES = 8 * 2**30
#: ``cudaEmulationMantissaControl``: DYNAMIC = 0, FIXED = 1 (CUDA 13 ``library_types.h``).
MANTISSA_DYNAMIC, MANTISSA_FIXED = 0, 1
#: ``CUDA_R_64F``.
CUDA_R_64F = 1
#: The first cuBLAS with the fixed-point FP64 emulation.
MIN_CUBLAS = 130000


def check_bits(bits: Any) -> None:
    """ValueError unless ``bits`` is None (cuBLAS decides) or a whole number in 1..MAX_BITS."""
    if bits is not None and (isinstance(bits, bool) or not isinstance(bits, numbers.Integral)
                             or not 1 <= bits <= MAX_BITS):
        raise ValueError(f"mantissa_bits must be None (cuBLAS decides) or a whole number in 1..{MAX_BITS}, "
                         f"got {bits!r}")


class CublasEmulation:
    """A cuBLAS handle of its own with a workspace, running emulated DGEMMs on the current stream."""

    def __init__(self, backend: Backend) -> None:
        if nvcublas is None:
            raise BackendUnavailable("cuBLAS's FP64 emulation is reached through nvmath-python, which is not "
                                     "installed: pip install 'gemmlab[gpu]'")
        self.backend = backend
        self.handle = nvcublas.create()
        self.version = int(nvcublas.get_version(self.handle))
        if self.version < MIN_CUBLAS:
            raise BackendUnavailable(f"cuBLAS {self.version} has no fixed-point FP64 emulation (cuBLAS 13 and "
                                     "later do)")
        self.workspace: Array | None = None

    def _bind(self, bits: int | None) -> None:
        xp = self.backend.xp
        if self.workspace is None:
            self.workspace = xp.empty(WORKSPACE_BYTES, dtype=np.uint8)
        nvcublas.set_stream(self.handle, xp.cuda.get_current_stream().ptr)
        nvcublas.set_workspace(self.handle, self.workspace.data.ptr, self.workspace.nbytes)
        strategy = nvcublas.EmulationStrategy.DEFAULT if bits is None else nvcublas.EmulationStrategy.EAGER
        nvcublas.set_emulation_strategy(self.handle, int(strategy))
        nvcublas.set_fixed_point_emulation_mantissa_control(self.handle,
                                                            MANTISSA_DYNAMIC if bits is None else MANTISSA_FIXED)
        if bits is not None:
            nvcublas.set_fixed_point_emulation_max_mantissa_bit_count(self.handle, int(bits))

    def gemm(self, A: Array, B: Array, C: Array, bits: int | None) -> None:
        """C = A @ B (float64 views) by the emulation with ``bits`` (see the module)."""
        be = self.backend
        call = blas.plan_gemm(be.layout(A, "A"), be.layout(B, "B"), be.layout(C, "C"))
        if call is None:
            return
        self._bind(bits)
        alpha, beta = np.array(1.0), np.array(0.0)
        compute = int(nvcublas.ComputeType.COMPUTE_64F_EMULATED_FIXEDPOINT)
        nvcublas.gemm_ex(self.handle, call.transa, call.transb, call.m, call.n, call.k, alpha.ctypes.data, call.a,
                         CUDA_R_64F, call.lda, call.b, CUDA_R_64F, call.ldb, beta.ctypes.data, call.c, CUDA_R_64F,
                         call.ldc, compute, -1)


def matmul(A: Any, B: Any, *, mantissa_bits: int | None = None, out: Any = None,
           backend: str | Backend = "auto") -> Array:
    """``A @ B`` (float64) by cuBLAS's fixed-point FP64 emulation (see the module); ``out``: a float64 array
    of the backend for the result. Raises ValueError for bad arguments and BackendUnavailable where the
    emulation cannot run, before any work."""
    check_bits(mantissa_bits)
    be = get_backend(backend)
    A, B = _operands(be, A, B)
    emulation = _emulation(be)
    C = check_output(be, out, (A.shape[0], B.shape[1]), np.float64, {"A": A, "B": B})
    C = be.xp.empty((A.shape[0], B.shape[1])) if C is None else C
    emulation.gemm(A, B, C, mantissa_bits)
    return C


def require(be: Backend) -> None:
    """BackendUnavailable, saying what is missing, where ``be`` cannot run the emulation."""
    _emulation(be)


def _emulation(be: Backend) -> CublasEmulation:
    """The backend's emulation handle (made once); BackendUnavailable where it has none."""
    try:
        return be.ops(FAMILY)
    except NotImplementedError:
        raise BackendUnavailable(f"cuBLAS's FP64 emulation runs on the CuPy backend only, not on {be.name}; "
                                 "pass backend='cupy' on a machine with an NVIDIA GPU") from None


register_ops(FAMILY, "cupy", CublasEmulation)
