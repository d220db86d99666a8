"""Efficiency curves of the transfer model: what a library call reaches of a datasheet peak,
as a function of a size normalised by the hardware, and the weighted saturating fit that learns them.

* GEMM's fraction of the FP64 peak, e = 2 x^3 / (t F), against u = x / (T sqrt(SMs)) with T = 128.
  A library DGEMM tiles the output into (x/T)^2 blocks of about T x T (cuBLAS's FP64 tiles are 64
  to 256 wide), so u^2 is the number of blocks per SM: below u ~ 1 the GPU is not full, and the
  efficiency rises towards its asymptote as the waves grow. T only scales u; the fit's u0 absorbs it.
* GEAM's fraction of the bandwidth, g = 24 x^2 / (t G), against the bytes one call moves per SM,
  v = 24 x^2 / SMs: a small call does not have enough bytes in flight per SM to hide latency.
* both as the saturating curve e(u) = e_inf (u/u0)^a / (1 + (u/u0)^a), fitted by (weighted) least
  squares in log space (scipy.optimize.curve_fit).

Devices are weighted by their FP64 class (:func:`fp64_class`): the rise of the DGEMM efficiency
(u ~ 1-4) is set by the kernel, and an FP64 tensor-core DGEMM (A100, H100, H200, B200) reaches its
asymptote at another u than a vector-unit one (P100): pooled with equal weight, the P100 pulls the
curve learned for an H200 20% off the H100's own DGEMM from 2048 up (10% weighted), and the
crossovers transferred to the H100 and H200 20-60% late. Devices of the target's class weigh 1
and the others :data:`OTHER_CLASS_WEIGHT`, so the other class still shapes the curve where the
target's class has no point; with no device of the target's class, all weigh the same.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from scipy.optimize import curve_fit

from .hardware import GPU

#: Tile edge of the normalised GEMM size u = x / (TILE sqrt(SMs)).
TILE = 128
#: Bytes one n x n FP64 GEAM moves: two reads and a write.
GEAM_BYTES = 24
#: Weight of a training device of another FP64 class than the target's (1: the unweighted pool). The
#: leave-one-out losses of the transfer-validation experiment barely change for weights from 0 to 0.2.
OTHER_CLASS_WEIGHT = 0.1


def gemm_efficiency(gpu: GPU, x: Any, ms: Any) -> Any:
    """Fraction of the FP64 peak (tensor cores where there are) a GEMM of size x taking ``ms`` reaches."""
    return 2 * np.asarray(x, float) ** 3 / (1e-3 * np.asarray(ms, float) * gpu.peak_flops)


def geam_efficiency(gpu: GPU, x: Any, ms: Any) -> Any:
    """Fraction of the memory bandwidth an x x x GEAM taking ``ms`` reaches (24 x^2 bytes moved)."""
    return GEAM_BYTES * np.asarray(x, float) ** 2 / (1e-3 * np.asarray(ms, float) * gpu.bandwidth)


def gemm_scale(gpu: GPU, x: Any) -> Any:
    """u = x / (TILE sqrt(SMs))."""
    return np.asarray(x, float) / (TILE * math.sqrt(gpu.sm_count))


def geam_scale(gpu: GPU, x: Any) -> Any:
    """Bytes one GEAM moves per SM."""
    return GEAM_BYTES * np.asarray(x, float) ** 2 / gpu.sm_count


def fp64_class(gpu: GPU) -> str:
    """The FP64 class: ``tensor`` where DGEMM runs on FP64 tensor cores, else ``vector``; the kernels,
    and so the shape of the efficiency curve, differ between the two."""
    return "tensor" if gpu.fp64_tensor_tflops else "vector"


def class_weights(gpus: Mapping[str, GPU], target: GPU | None) -> dict[str, float]:
    """Each training device's weight in a fit for ``target``: 1 for its FP64 class, OTHER_CLASS_WEIGHT
    for the other; all 1 with no target or no training device of its class."""
    if target is None or not any(fp64_class(g) == fp64_class(target) for g in gpus.values()):
        return {name: 1.0 for name in gpus}
    return {name: 1.0 if fp64_class(g) == fp64_class(target) else OTHER_CLASS_WEIGHT for name, g in gpus.items()}


class EfficiencyCurve(Protocol):
    """A fraction of a peak against a normalised size: :class:`Saturating`, or the wave-fill limit of
    :mod:`modeling.fill` for a compute-starved target."""

    def __call__(self, u: Any) -> Any: ...

    def as_dict(self) -> dict[str, Any]: ...


def _log_saturating(logu: Any, log_einf: float, log_u0: float, a: float) -> Any:
    z = a * (logu - log_u0)
    return log_einf + z - np.logaddexp(0.0, z)


@dataclass(frozen=True)
class Saturating:
    """e(u) = e_inf (u/u0)^a / (1 + (u/u0)^a); ``rms``: RMS log residual of the fit (relative error)."""

    e_inf: float
    u0: float
    a: float
    rms: float = 0.0

    def __call__(self, u: Any) -> Any:
        return np.exp(_log_saturating(np.log(u), math.log(self.e_inf), math.log(self.u0), self.a))

    def as_dict(self) -> dict[str, float]:
        return {"e_inf": self.e_inf, "u0": self.u0, "a": self.a, "rms_log_residual": self.rms}


def fit_saturating(u: Sequence[float], e: Sequence[float], weights: Sequence[float] | None = None) -> Saturating:
    """Least squares on log e, each point weighted by ``weights`` (None: all 1); e_inf in (0, 1.2]
    (a little above 1 allows a peak quoted low). ``rms`` is the weighted RMS log residual."""
    lu, le = np.log(np.asarray(u, float)), np.log(np.asarray(e, float))
    w = np.ones_like(lu) if weights is None else np.asarray(weights, float)
    keep = w > 0
    lu, le, w = lu[keep], le[keep], w[keep]
    p0 = (float(le.max()), float(np.median(lu)), 1.5)
    bounds = ([-6.0, lu.min() - 8, 0.2], [math.log(1.2), lu.max() + 8, 8.0])
    (le_inf, lu0, a), _ = curve_fit(_log_saturating, lu, le, p0=p0, bounds=bounds, sigma=1 / np.sqrt(w),
                                    maxfev=20000)
    rms = float(np.sqrt(np.average((_log_saturating(lu, le_inf, lu0, a) - le) ** 2, weights=w)))
    return Saturating(math.exp(le_inf), math.exp(lu0), float(a), rms)


@dataclass(frozen=True)
class TransferredGemm:
    """Gemm(x) in ms of a datasheet row from a learned fraction of its FP64 peak."""

    gpu: GPU
    e: EfficiencyCurve

    def __call__(self, x: float) -> float:
        return float(1e3 * 2 * x**3 / (self.gpu.peak_flops * self.e(gemm_scale(self.gpu, x))))


@dataclass(frozen=True)
class TransferredGeam:
    """Geam(x) in ms of a datasheet row from a learned fraction of its bandwidth."""

    gpu: GPU
    g: Saturating

    def __call__(self, x: float) -> float:
        return float(1e3 * GEAM_BYTES * x**2 / (self.gpu.bandwidth * self.g(geam_scale(self.gpu, x))))
