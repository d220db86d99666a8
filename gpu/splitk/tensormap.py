"""Tensor maps of the Tensor Memory Accelerator (sm_90+) for the bulk-copy kernel: 2-D row-major FP64 views.

A tensor map tells the TMA where a matrix lies (its address, sizes and row stride) and which box one copy
moves; the kernel names a box by its corner and the TMA copies it, filling whatever falls outside the matrix
with zeros. The map is encoded on the host by the driver (``cuTensorMapEncodeTiled``, through ``ctypes``: CuPy
does not wrap it) and passed to the kernel by value, as a one-element NumPy array of 128 bytes that the launch
copies: nothing is written to the device and nothing waits.
"""

from __future__ import annotations

import ctypes
from functools import cache
from typing import Any

import numpy as np

#: ``CUtensorMap``: 128 opaque bytes.
MAP = np.dtype([("opaque", np.uint64, 16)])
#: ``CU_TENSOR_MAP_DATA_TYPE_FLOAT64`` and ``CU_TENSOR_MAP_L2_PROMOTION_L2_256B``.
FLOAT64, L2_256B = 8, 3
#: Most elements along one side of a box.
MAX_BOX = 256


@cache
def _encoder() -> Any:
    f = ctypes.CDLL("libcuda.so.1").cuTensorMapEncodeTiled
    f.restype = ctypes.c_int
    f.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p] + [ctypes.c_void_p] * 4 + \
        [ctypes.c_int] * 4
    return f


class Box:
    """The map of a ``rows x cols`` row-major FP64 view of row stride ``ld`` elements, read in boxes of
    ``box_rows x box_cols``: :meth:`encode` gives it for the view's address."""

    def __init__(self, rows: int, cols: int, ld: int, box_rows: int, box_cols: int) -> None:
        if not (0 < box_rows <= MAX_BOX and 0 < box_cols <= MAX_BOX and box_cols * 8 % 16 == 0 and ld * 8 % 16 == 0):
            raise ValueError(f"no tensor map reads {box_rows} x {box_cols} boxes of rows {ld} elements apart")
        self.dims = (ctypes.c_uint64 * 2)(cols, rows)
        self.strides = (ctypes.c_uint64 * 1)(ld * 8)
        self.box = (ctypes.c_uint32 * 2)(box_cols, box_rows)
        self.steps = (ctypes.c_uint32 * 2)(1, 1)

    def encode(self, address: int) -> np.ndarray:
        """The map for a view at ``address`` (16-byte aligned), as the kernel argument."""
        out = np.zeros(1, MAP)
        status = _encoder()(out.ctypes.data, FLOAT64, 2, address, self.dims, self.strides, self.box, self.steps,
                            0, 0, L2_256B, 0)
        if status:
            raise RuntimeError(f"cuTensorMapEncodeTiled failed with CUresult {status}")
        return out
