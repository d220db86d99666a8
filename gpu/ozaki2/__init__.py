"""Ozaki scheme II: float64 products from INT8 GEMMs modulo coprime moduli and the CRT (first step: NumPy).

Scale A and B by powers of two into integers A', B' (:mod:`~gpu.ozaki2.scaling`, accurate mode),
take their symmetric residues modulo each modulus (:mod:`~gpu.ozaki2.residues`), multiply the
residues once per modulus (INT8 GEMMs; emulated exactly in :mod:`~gpu.ozaki2.reference`), recover
A'B' with the double-double Chinese remainder theorem (:mod:`~gpu.ozaki2.crt`) and unscale. The
moduli and the CRT constants are data (:mod:`~gpu.ozaki2.moduli`). The method: Ozaki, Uchino & Imamura, "Ozaki
Scheme II: a GEMM-oriented emulation of floating-point matrix multiplication using an integer modular
technique" (2025), as GEMMul8 implements it (Uchino, Ozaki & Imamura, 2025).
k beyond the INT32 range is cut into blocks whose residues are added modulo each modulus before
one CRT (:mod:`~gpu.ozaki2.reference`); ``moduli="auto"`` picks the fewest moduli whose bound meets a
target: normwise, from the scaling's one read of each operand (:mod:`~gpu.ozaki2.normwise`, the default), or
componentwise, from a float64 GEMM (:mod:`~gpu.ozaki2.auto`, for auditors). :func:`matmul`
(:mod:`~gpu.ozaki2.api`) is a kept :class:`Plan` (:mod:`~gpu.ozaki2.plan`) with its :class:`Options`; it runs
both scaling modes on NumPy and CuPy with the same bits; :mod:`~gpu.ozaki2.emulation` reaches cuBLAS's own
FP64 emulation. Complex products (:mod:`~gpu.ozaki2.complex`) take two INT8 products per modulus over the
Gaussian moduli, where -1 has a square root (:mod:`~gpu.ozaki2.gauss`), or Karatsuba's three.
"""

from . import emulation, tiled, winograd
from .api import AUTO_SCALINGS, PLANS, SCALINGS, Options, Plan, matmul, workspace_bytes
from .auto import choose_moduli, predicted_error
from .crt import reconstruct, reconstruct_exact
from .moduli import (
    GAUSSIAN_MODULI,
    MAX_MODULI,
    MODULI,
    ModuliTable,
    greedy_moduli,
    imaginary_unit,
    moduli_table,
    residue_range,
)
from .normwise import LineStats
from .reference import MAX_K, modular_product
from .reference import matmul as reference_matmul
from .residues import reduce, residues
from .scaling import Bounds, Scaled, accurate_bounds, bound_limit, headroom, scale_accurate
from .tiled import TiledPlan

__all__ = ["AUTO_SCALINGS", "GAUSSIAN_MODULI", "MAX_K", "MAX_MODULI", "MODULI", "PLANS", "SCALINGS", "Bounds",
           "LineStats",
           "ModuliTable", "Options", "Plan", "Scaled", "TiledPlan", "accurate_bounds", "bound_limit", "choose_moduli",
           "emulation", "greedy_moduli", "headroom", "imaginary_unit", "matmul",
           "modular_product", "moduli_table", "predicted_error", "reconstruct", "reconstruct_exact", "reduce",
           "reference_matmul", "residue_range", "residues", "scale_accurate", "tiled", "winograd", "workspace_bytes"]
