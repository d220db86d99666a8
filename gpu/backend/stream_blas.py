"""cuBLAS through nvmath-python's bindings, one handle and one workspace per CUDA stream: calls that
CUDA graphs can capture.

CuPy's own cuBLAS wrappers refuse to run while a stream is being captured (cupy#6290); the same
routines reached through ``nvmath.bindings.cublas`` are captured. What capture forbids is done
outside it, once per stream, the first time the stream issues a call: create a handle, bind it
to the stream, give it its own workspace (``set_stream`` resets the workspace, so the workspace
is set after it) and host pointer mode. A stream met for the first time during a capture is an
error: run the work once eagerly first (``Backend.capture`` does). Handles live as long as the
backend; the streams they serve are kept alive with them, so a stream's address is never reused
by another while its handle is bound.

Where nvmath-python is missing, :data:`nvcublas` is None and the CuPy backend keeps CuPy's own
cuBLAS wrappers (no graphs).
"""

from __future__ import annotations

from typing import Any

import numpy as np

try:
    from nvmath.bindings import cublas as nvcublas
except ImportError:  # nvmath-python is in the gpu extra; without it there are no CUDA graphs
    nvcublas = None

#: cuBLAS's recommended workspace on Hopper.
WORKSPACE_BYTES = 32 * 2**20


class StreamBlas:
    """The cuBLAS routines the CuPy backend calls, on a handle bound to the current stream."""

    def __init__(self, xp: Any) -> None:
        self.xp = xp
        self._handles: dict[int, tuple[int, Any, Any]] = {}
        self.gemm = {np.dtype(np.float64): nvcublas.dgemm, np.dtype(np.float32): nvcublas.sgemm}
        self.geam = {np.dtype(np.float64): nvcublas.dgeam, np.dtype(np.float32): nvcublas.sgeam}
        self.gemm_ex = nvcublas.gemm_ex

    def handle(self) -> int:
        """The handle of the current stream (made and bound on its first use, outside any capture)."""
        return self.entry()[0]

    def entry(self) -> tuple[int, Any, Any]:
        """(handle, workspace, stream) of the current stream, made on its first use: the workspace is also what
        cublasLt's calls on the stream are given (:mod:`gpu.backend.lt_int8`)."""
        stream = self.xp.cuda.get_current_stream()
        entry = self._handles.get(stream.ptr)
        if entry is None:
            if stream.is_capturing():
                raise RuntimeError("a stream issued its first cuBLAS call inside a CUDA graph capture; run the "
                                   "work once without capturing first (Backend.capture does)")
            handle = nvcublas.create()
            nvcublas.set_stream(handle, stream.ptr)
            workspace = self.xp.empty(WORKSPACE_BYTES, dtype=np.uint8)
            nvcublas.set_workspace(handle, workspace.data.ptr, workspace.nbytes)
            nvcublas.set_pointer_mode(handle, int(nvcublas.PointerMode.HOST))
            entry = self._handles[stream.ptr] = (handle, workspace, stream)
        return entry


def stream_blas(xp: Any) -> StreamBlas | None:
    """The per-stream cuBLAS of nvmath-python, or None where it is not installed."""
    return None if nvcublas is None else StreamBlas(xp)
