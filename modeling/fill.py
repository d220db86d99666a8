"""DGEMM on a compute-starved GPU: the wave-fill limit, not an extrapolated rise.

The transfer model (:mod:`modeling.transfer`) learns how DGEMM's fraction of the FP64 peak rises
with u = x / (128 sqrt(SMs)) from its training devices. That rise has two causes, and only one of
them carries over to a GPU whose FP64 rate per SM, r = F / SMs, lies far below theirs:

* **wave fill**: with n tiles per SM, a GEMM of ceil(n) waves keeps n / ceil(n) of the SMs busy;
* **fixed costs and latency**: host and launch time per call (20-35 us on the H100 and H200, whose
  256 x 256 DGEMM takes 19-36 us), each tile's prologue and epilogue, and the DRAM latency the SM
  must hide. A 128 x 64 tile reads (128 + 64) x 8 bytes per 2 x 128 x 64 FLOP of each k step, 3/32
  byte per FLOP: at the H100's r = 67e12 / 132 = 508 GFLOP/s an SM consumes 48 GB/s, 48 KB in flight
  over ~1 us of latency against the 12 KB of a k = 8 slab, so it needs two or three tiles (or
  pipeline stages) per SM, and the efficiency keeps rising past u = 1.

FP64 per SM (GFLOP/s): H100 and H200 508, B200 270, A100 181, V100 98, P100 95, K20 90; RTX 4090 10.1,
L40S 10.1, RTX PRO 6000 10.5, RTX 5090 9.6 (FP64 at 1/64 of FP32: two FP64 units per SM). The
consumer parts lie 9-10x below the lowest training device (the P100). There an SM consumes
10.1 x 3/32 = 0.95 GB/s, 1 KB in flight: one tile hides the latency twelve times over; and one
128 x 64 tile with K = x = 2048 takes 2 x 128 x 64 x 2048 / 10.1e9 = 3.3 ms (66 us on an H100), so
launch, host and prologue costs are under 1% of it. What is left is the wave fill, and the learned
rise, extrapolated, charges such a part for a latency it does not have: it put the RTX 4090's
crossover at P = 7100-8700, later than the H100's, while its own note said Strassen pays early.

So for a target whose r lies more than :data:`RATE_MARGIN` times below every training device's
(:func:`starved`), DGEMM is priced at the **wave-fill limit**

    e(x) = e_inf fill(n),   n = x^2 / (tile area x SMs),   fill(n) = n / max(1, n + 1/2)

with e_inf the learned asymptote. Over each interval of sizes with k < n <= k + 1 the fill averages
(k + 1/2) / (k + 1), which n / (n + 1/2) passes through at the interval's middle (the size-averaged
tail of the last wave); below half a wave the fill is n itself. The tile is 128 x 64, the larger of
cuBLAS's FP64 SIMT kernels (``ampere_dgemm_128x64_*``, ``ampere_dgemm_64x64_*`` in kernel traces).
The limit bounds the data: no training device's measured efficiency exceeds e_max fill(n) with
128 x 64 tiles by more than 2.6% at any size (P100 0.1%, H100 0.5%, H200 2.6%), whereas with
128 x 128 tiles the H100 and H200 exceed it by 9% and 44% at small sizes; it is their fixed costs
that keep them below it, and those vanish on a starved part. The uncertainty is the
tile cuBLAS picks: the ensemble tries 64 x 64 (earlier P) and 128 x 128 (later P) too
(:data:`TILES`), beside the jackknife on e_inf, GEAM and the host time.

Arithmetic of the RTX 4090's answer: P ~ 3600 (64 x 64 tiles: 2700, 128 x 128: 4900). At x = 3600
the seven products of 1800 fill n = 1800^2 / (8192 x 128) = 3.1 waves (fill 0.86) against 12.4
(0.96) for the product they replace, so the products cost 7/8 x 0.96 / 0.86 = 0.98 of DGEMM(x), and
the 15 additions of 1800 x 1800 (at 0.60 of the bandwidth, 600 KB per SM: 2.0 ms against DGEMM's
85 ms) the other 0.02. Otsuka's analytic model says 448, because it prices the half-size products at full efficiency
(a product of 224 is six 128 x 64 tiles for 128 SMs, 5% fill); with fill ignored, this model too
would say 1600. From the hardware alone, P lies in [1354, 6144] on the RTX 4090
(``tests/modeling/test_fill.py``): below 2 sqrt(7/8 x 64^2 x 128) = 1354 the seven products, even of
64 x 64 tiles, fill under 7/8 of a wave and cost more than the product they replace; from 6144 on one
level pays at every size even with exact wave quantisation of 128 x 128 tiles and the additions at
half the bandwidth. Against DGEMM, Strassen pays about twice as early as on the H100 and H200 (measured
P 6600-9500), limited by the fill of the half-size products, not by the additions; and DGEMM is not
the right baseline there at all (:func:`baseline_note`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .efficiency import TILE
from .hardware import GPU

#: A target is compute-starved where its FP64 rate per SM is below every training device's by more
#: than this factor (the consumer parts: 9-10x; the K20, 0.95x the P100, is not).
RATE_MARGIN = 2.0
#: Tile areas (elements) the limit tries: the central one first (cuBLAS's larger FP64 SIMT tile),
#: then the ends of the uncertainty.
TILES = {"128x64": 128 * 64, "64x64": 64 * 64, "128x128": 128 * 128}
#: The central tile.
FILL_TILE = "128x64"
#: The crossover P measured on the data-centre parts (the H200's and the H100's level sweeps, the
#: measured boundaries of the transfer-validation experiment): what a starved part's P is compared with.
MEASURED_P = (6580.0, 9508.0)


def rate_per_sm(gpu: GPU) -> float:
    """FP64 FLOP/s per SM (tensor cores where there are): the rate one SM's tiles must be fed at."""
    return gpu.peak_flops / gpu.sm_count


def starved(target: GPU, trained: Iterable[GPU]) -> bool:
    """Whether the target's FP64 rate per SM lies more than RATE_MARGIN below every training device's:
    there the learned rise of the DGEMM efficiency is an extrapolation the physics does not support."""
    rates = [rate_per_sm(g) for g in trained]
    return bool(rates) and rate_per_sm(target) * RATE_MARGIN < min(rates)


def fill_fraction(n: Any) -> Any:
    """Size-averaged fraction of the SMs kept busy by n tiles per SM: n / max(1, n + 1/2)."""
    n = np.asarray(n, float)
    return n / np.maximum(1.0, n + 0.5)


@dataclass(frozen=True)
class FillLimited:
    """The wave-fill limit as a function of u = x / (TILE sqrt(SMs)), the scale of the learned curves:
    e(u) = e_inf fill(u^2 TILE^2 / tile area), since x^2 / SMs = u^2 TILE^2."""

    e_inf: float
    tile: str = FILL_TILE

    def __call__(self, u: Any) -> Any:
        return self.e_inf * fill_fraction(np.asarray(u, float) ** 2 * TILE**2 / TILES[self.tile])

    def with_tile(self, tile: str) -> FillLimited:
        return FillLimited(self.e_inf, tile)

    def as_dict(self) -> dict[str, Any]:
        return {"model": "wave-fill limit: e_inf n / max(1, n + 1/2), n = tiles per SM", "e_inf": self.e_inf,
                "tile": self.tile}


def limit_text(gpu: GPU, rates: tuple[float, float], tile: str, extrapolated_p: float | None) -> str:
    """What the note says of a starved target's GEMM curve: why the learned rise is not used, the limit,
    and the P the extrapolated rise would have given."""
    r = rate_per_sm(gpu) / 1e9
    p = "no crossover" if extrapolated_p is None else f"P = {extrapolated_p:.0f}"
    return (f"the {gpu.name}'s FP64 rate per SM ({r:.1f} GFLOP/s) lies {rates[0] / 1e9 / r:.0f}x below the "
            f"training devices' ({rates[0] / 1e9:.0f}-{rates[1] / 1e9:.0f} GFLOP/s), so the learned rise of DGEMM's "
            "efficiency (their latency and fixed costs, which a tile taking milliseconds per SM does not have) "
            f"is not extrapolated: DGEMM is priced at the wave-fill limit e_inf n / max(1, n + 1/2), n = "
            f"{tile} tiles per SM, with the learned e_inf (it bounds every training device's measured efficiency "
            f"to within 3%). Uncertainty: the tile ({', '.join(TILES)} tried) and e_inf; not measured on any part "
            f"of this kind. The extrapolated rise would give {p} (not used)")


def baseline_note(gpu: GPU, p: float | None, p_range: tuple[float, float] | None) -> str:
    """Where Strassen pays, and which baseline to compare with, for a part whose FP64 runs far below its
    FP32."""
    ratio = round(1 / gpu.fp64_per_fp32) if gpu.fp64_per_fp32 else None
    head = f"FP64 runs at 1/{ratio} of FP32 on the {gpu.name}" if ratio else f"the {gpu.name}'s FP64 is slow"
    if p is None:
        pays = "the model finds no crossover against DGEMM in its range"
    else:
        spread = "" if p_range is None else f" ({p_range[0]:.0f}-{p_range[1]:.0f} over the ensemble)"
        than = (f", earlier than the H100's and H200's measured P ({MEASURED_P[0]:.0f}-{MEASURED_P[1]:.0f})"
                if p < MEASURED_P[0] else "")
        pays = (f"against DGEMM, Strassen pays from P = {p:.0f}{spread}{than}, set by the wave fill of the seven "
                "half-size products rather than by the additions")
    return (f"{head}. Both answers hold: {pays}; and DGEMM is not the right baseline there: an FP64 product "
            "emulated on the FP32 units or the tensor cores (Ozaki scheme), whose products run at up to "
            f"{ratio or 'many'} times the FP64 rate, is what to compare with first")
