"""Otsuka's analytic model: Strassen's speed-up from peak FP64 rate and memory bandwidth.

    Fmul(N) = (2N - 1) N^2 / F          one N x N GEMM at F FLOP/s
    Fadd(N) = 3 * itemsize * N^2 / G    one N x N add/sub at G bytes/s
    t_0(N)  = Fmul(N)
    t_L(N)  = a t_{L-1}(N/2) + b Fadd(N/2) + n_temp (malloc + free)(N/2)
    S_L(N)  = t_0(N) / t_L(N)

(Otsuka & Iguchi, "Optimizing Strassen's algorithm for GPUs", 2020: its analytic model.) It is the recursion of
:mod:`modeling.recursive` over Fmul and Fadd instead of measured curves, with
a, b and n_temp from the schedule tables (RUM allocates nothing) and no
launch overhead. Published peaks are a little above what a device delivers:
Otsuka measured 0.90 of the peak for GEMM and 0.92 for GEAM on a V100, the
default efficiencies here. Nothing is measured, so it predicts for a GPU one
does not have (``gemmlab predict --gpu``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .hardware import GPU
from .recursive import RecursiveModel
from .work import geam_bytes, gemm_flops

#: Otsuka's measured/predicted ratios on a V100 (GEMM for N >= 7000, GEAM for N >= 4000).
GEMM_EFFICIENCY = 0.90
GEAM_EFFICIENCY = 0.92


@dataclass(frozen=True)
class Fmul:
    """ms of one n x n GEMM at ``flops`` FLOP/s: (2n - 1) n^2 operations."""

    flops: float

    def __call__(self, n: float) -> float:
        return 1e3 * (gemm_flops(n, n, n) - n * n) / self.flops


@dataclass(frozen=True)
class Fadd:
    """ms of one n x n GEAM at ``bandwidth`` bytes/s: two reads and one write."""

    bandwidth: float
    itemsize: int = 8

    def __call__(self, n: float) -> float:
        return 1e3 * geam_bytes(n, n, self.itemsize) / self.bandwidth


def analytic_model(gpu: GPU, schedule: str = "rum", fused: bool = False, *,
                   gemm_efficiency: float = GEMM_EFFICIENCY, geam_efficiency: float = GEAM_EFFICIENCY,
                   itemsize: int = 8, alloc_ms: Callable[[float], float] | None = None) -> RecursiveModel:
    """t_L(N) for a hardware-table row, peaks scaled by the efficiencies; ``alloc_ms(n)`` is the
    measured malloc + free time of an n x n buffer (only schedules with temporaries use it)."""
    for name, e in (("gemm_efficiency", gemm_efficiency), ("geam_efficiency", geam_efficiency)):
        if not 0 < e <= 1:
            raise ValueError(f"{name} must lie in (0, 1], got {e}")
    return RecursiveModel(Fmul(gpu.peak_flops * gemm_efficiency), Fadd(gpu.bandwidth * geam_efficiency, itemsize),
                          schedule, fused, alloc=alloc_ms)
