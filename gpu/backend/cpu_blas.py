"""The CPU BLAS that SciPy ships, called on raw pointers.

SciPy exports its BLAS as Cython capsules (``scipy.linalg.cython_blas``), loaded on the first BLAS call:
importing ``scipy.linalg`` takes 0.3-0.7 s in a new process, which a caller of the NumPy backend's host
operations alone (the out-of-core engine's staging) should not pay.
Calling them through ctypes hands BLAS a view's pointer and leading dimension,
so a GEMM on a quadrant of a larger matrix runs with no copy and with a real
``beta`` (accumulate into C), as cuBLAS does on the GPU. ``np.matmul`` cannot
accumulate, and SciPy's f2py wrappers copy non-contiguous views.
"""

from __future__ import annotations

import ctypes
from functools import cache

import numpy as np

from .blas import BlasCall
from .interface import load

_P = ctypes.c_void_p
_SCALAR = {np.dtype(np.float64): ctypes.c_double, np.dtype(np.float32): ctypes.c_float}
_PREFIX = {np.dtype(np.float64): "d", np.dtype(np.float32): "s"}
_TRANS = (b"N", b"T")

_capsule_name = ctypes.pythonapi.PyCapsule_GetName
_capsule_name.restype, _capsule_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype, _capsule_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]


@cache
def _routine(name: str, n_args: int, n_chars: int = 0):
    """A ctypes function for BLAS routine ``name`` (all arguments by pointer)."""
    try:
        capsule = load("scipy.linalg.cython_blas:__pyx_capi__")[name]
    except (AttributeError, KeyError) as exc:  # pragma: no cover - depends on the SciPy build
        raise RuntimeError(f"SciPy's cython_blas does not export {name}; upgrade SciPy") from exc
    pointer = _capsule_pointer(capsule, _capsule_name(capsule))
    argtypes = [ctypes.c_char_p] * n_chars + [_P] * (n_args - n_chars)
    return ctypes.CFUNCTYPE(None, *argtypes)(pointer)


def _int(v: int):
    return ctypes.byref(ctypes.c_int(v))


def gemm(dtype: np.dtype, call: BlasCall, alpha: float, beta: float) -> None:
    """Run one column-major ``?gemm`` described by ``call``."""
    scalar = _SCALAR[dtype]
    fn = _routine(_PREFIX[dtype] + "gemm", 13, 2)
    fn(_TRANS[call.transa], _TRANS[call.transb], _int(call.m), _int(call.n), _int(call.k),
       ctypes.byref(scalar(alpha)), call.a, _int(call.lda), call.b, _int(call.ldb),
       ctypes.byref(scalar(beta)), call.c, _int(call.ldc))


def axpy(alpha: float, x: np.ndarray, y: np.ndarray) -> None:
    """``y += alpha * x`` in place, for 1-D arrays of one float dtype (any unit-size stride)."""
    dtype = np.dtype(y.dtype)
    it = dtype.itemsize
    fn = _routine(_PREFIX[dtype] + "axpy", 6)
    fn(_int(y.shape[0]), ctypes.byref(_SCALAR[dtype](alpha)),
       x.ctypes.data, _int(x.strides[0] // it), y.ctypes.data, _int(y.strides[0] // it))
