"""Segmented launcher: one single-GPU CuPy kernel run over data segments with index translation
(Sakai, Ino & Hagihara, "Multi-dimensional data decomposition for running single-GPU code on multi-GPU
environments", IPSJ SIG, about 2016).

* :mod:`~gpu.segmented.source`: the plain tiled matrix-product kernel, written once, and its index accessors
  (``whole``, ``translated``) as data: one formula gives the C macro and a Python evaluator;
* :mod:`~gpu.segmented.geometry`: tasks (duck-typed, as ``modeling.decomposition.plan_segments`` makes
  them) as checked launches: grid, block offsets, segment origins and widths;
* :mod:`~gpu.segmented.ops` and :mod:`~gpu.segmented.kernels`: the NumPy emulation and the CUDA operations
  (compiled kernels, pinned staging, copy, compute and store streams);
* :mod:`~gpu.segmented.launcher`: :func:`segmented_matmul`, the executor :func:`run`, and the device-resident
  :func:`whole_matmul` and :func:`translated_matmul` of the overhead measurement.
"""

from .geometry import Launch, Segment, launches, whole_launch
from .launcher import device_bytes, run, run_device, segmented_matmul, translated_matmul, whole_matmul
from .ops import FAMILY, emulate
from .source import ACCESSORS, TILE, Accessor, index_type, kernel_source

__all__ = ["ACCESSORS", "FAMILY", "TILE", "Accessor", "Launch", "Segment", "device_bytes", "emulate", "index_type",
           "kernel_source", "launches", "run", "run_device", "segmented_matmul", "translated_matmul",
           "whole_launch", "whole_matmul"]
