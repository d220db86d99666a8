"""The Ozaki scheme against DGEMM and SGEMM: what each experiment measures, and the inputs.

The audit methods ``ozaki-<format>-<slices>`` (``ozaki-fp32-3``,
``ozaki-int8-8``, ...) are registered by :mod:`accuracy.methods` itself, so
``gemmlab audit --methods ozaki-int8-8`` works. A float format with ``r``
appended (``ozaki-fp32r-3``) is the paper's form, whose last diagonal
multiplies rounded tails (``remainder=True`` in :func:`gpu.ozaki.matmul`).

Experiments for ``gemmlab reproduce`` (:mod:`experiments.ozaki.experiments`),
and their figures (:mod:`experiments.ozaki.figures`):

* ``ozaki-accuracy``: the paper's design (N = 1024, 2048, 4096; phi = 0.1, 1,
  2; seeds 1-10; SGEMM, 2-6 FP32 splits in the paper's form and with exact
  digits only, DGEMM), audited against the correctly rounded product; rows go
  to the shared ``accuracy`` store.
* ``ozaki-time``: N = 128-4096, every configuration timed interleaved with
  DGEMM and SGEMM on the same inputs; stored with both ratios.
* ``ozaki-breakdown``: seconds of the split (exponents and slicing), the GEMMs
  and the FP64 sum, each phase synchronized.
* ``ozaki-pareto``: max relative error (phi = 0.1, 1, 2) and time of every
  format and slice count at one N, drawn as error against time with each
  format's Pareto front.

``gemmlab ozaki`` (:mod:`experiments.ozaki.commands`) runs the last one at
chosen sizes, formats and slice counts (the H100 benchmark): the errors
(:mod:`experiments.ozaki.errors`), the times (:mod:`experiments.ozaki.timing`,
whose notes give the timing protocol), then the table and the verdict
(:mod:`experiments.ozaki.table`).

Inputs: up to :data:`FULL_ROWS_MAX` they are the audit's ``phi_matrix``
matrices drawn on the host (the same numbers on every backend); above it two
N x N host matrices and their copies would cost more than the products, so
they are drawn by the backend's array library where the data live (same
distribution as ``phi_matrix``, other numbers; on NumPy that is the host).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from accuracy.audit import audit_inputs
from accuracy.methods import OZAKI_VARIANTS, ozaki_method_name
from gpu import ozaki
from gpu.backend import Array, Backend

from ..audit.bench import TEN, AuditPlan
from ..core.lab import HEADROOM, free_memory, operand_bytes

TIME, ERROR, BREAKDOWN = "ozaki-time", "ozaki-error", "ozaki-breakdown"
DGEMM, SGEMM = "fp64", "fp32"
LABELS = {DGEMM: "DGEMM", SGEMM: "SGEMM"}
PHIS = (0.1, 1.0, 2.0)
PAPER_SPLITS = (2, 3, 4, 5, 6)
#: What ``gemmlab ozaki`` measures on a GPU by default: the paper's FP32 method and every tensor-core format.
GPU_FORMATS = ("fp32r", "tf32", "fp16", "fp16r", "bf16", "int8")
#: Up to this N, errors cover every row and inputs are the audit's host-drawn ``phi_matrix``.
FULL_ROWS_MAX = 4096
SAMPLED_ROWS = 512
#: Timing inputs: phi = 1 (times do not depend on the values).
TIME_PHI, SEED = 1.0, 1
#: The ``inputs`` meta of an error row: where its A and B were drawn (see the module notes).
HOST_INPUTS = "phi_matrix (host)"
DEVICE_INPUTS = "(ru - 0.5) exp(phi rn) drawn on the device"


# --------------------------------------------------------------------------- plans

def check_options(phis: tuple[float, ...], rows: int | None, slow_factor: float) -> None:
    """ValueError for the options both Ozaki benchmarks take: phi values, error rows and the slow factor."""
    if not phis or any(not 0 <= p <= 20 for p in phis):
        raise ValueError(f"phi values must lie in [0, 20], got {list(phis)}")
    if rows is not None and rows <= 0:
        raise ValueError(f"rows must be positive, got {rows}")
    if not slow_factor > 0:
        raise ValueError(f"slow_factor must be positive, got {slow_factor}")


@dataclass(frozen=True)
class BenchPlan:
    """Sizes x formats x slice counts, timed against DGEMM and SGEMM, with errors on ``phis``."""

    sizes: tuple[int, ...]
    formats: tuple[str, ...]
    slices: tuple[int, ...]
    phis: tuple[float, ...] = PHIS
    rows: int | None = None          # error rows per size (None: all up to FULL_ROWS_MAX, else SAMPLED_ROWS)
    slow_factor: float = 3.0
    max_ratio: float | None = 25.0   # configurations predicted slower than this many DGEMMs are not run
    errors: bool = True
    timing: bool = True

    def __post_init__(self) -> None:
        if not self.sizes or any(not isinstance(n, int) or n <= 0 for n in self.sizes):
            raise ValueError(f"sizes must be positive integers, got {list(self.sizes)}")
        for f in self.formats or ("",):
            ozaki.parse_variant(f)
        if not self.slices or any(not isinstance(s, int) or not 1 <= s <= ozaki.MAX_SLICES for s in self.slices):
            raise ValueError(f"slice counts must be integers in 1..{ozaki.MAX_SLICES}, got {list(self.slices)}")
        check_options(self.phis, self.rows, self.slow_factor)
        if self.max_ratio is not None and not self.max_ratio > 0:
            raise ValueError(f"max_ratio must be positive, got {self.max_ratio}")

    def configs(self, fmt: str | None = None) -> list[str]:
        """The Ozaki method names of the plan (of one format, if given), by format then slices."""
        return [ozaki_method_name(f, s) for f in self.formats if fmt in (None, f) for s in self.slices]

    def rows_for(self, n: int) -> int:
        """Rows of A whose products the errors cover at size ``n``."""
        return min(n, self.rows) if self.rows else (n if n <= FULL_ROWS_MAX else SAMPLED_ROWS)


ACCURACY_PLANS: dict[tuple[str, bool], AuditPlan] = {
    ("cupy", False): AuditPlan((1024, 2048, 4096), seeds=TEN),
    ("cupy", True): AuditPlan((1024,), seeds=(1, 2)),
    ("numpy", False): AuditPlan((256, 512, 1024), seeds=TEN),
    ("numpy", True): AuditPlan((128,), seeds=(1, 2)),
}
TIME_PLANS: dict[tuple[str, bool], BenchPlan] = {
    ("cupy", False): BenchPlan((128, 256, 512, 1024, 2048, 4096), GPU_FORMATS, PAPER_SPLITS, errors=False),
    ("cupy", True): BenchPlan((1024, 4096), GPU_FORMATS, (2, 4, 6), errors=False),
    # The CPU runs only FP32 slices at speed; the other formats are emulated in float64 there.
    ("numpy", False): BenchPlan((128, 256, 512, 1024), ("fp32r", "fp32"), PAPER_SPLITS, errors=False),
    ("numpy", True): BenchPlan((64, 128), ("fp32r",), (2, 4), errors=False),
}
PARETO_PLANS: dict[tuple[str, bool], BenchPlan] = {
    ("cupy", False): BenchPlan((4096,), OZAKI_VARIANTS, tuple(range(2, 10))),
    ("cupy", True): BenchPlan((1024,), GPU_FORMATS, (2, 4, 6, 8)),
    ("numpy", False): BenchPlan((256,), ("fp32r", "fp32"), tuple(range(2, 9))),
    ("numpy", True): BenchPlan((96,), ("fp32r",), (2, 3, 4, 6)),
}
#: The benchmark ``gemmlab ozaki`` runs when no sizes, formats or slices are given.
BENCH_DEFAULTS: dict[str, BenchPlan] = {
    "cupy": BenchPlan((4096, 8192, 16384), GPU_FORMATS, tuple(range(2, 11))),
    "numpy": BenchPlan((256, 512), ("fp32r", "fp32"), PAPER_SPLITS),
}
#: Sizes and (variant, slices) of the breakdown.
BREAKDOWN_PLANS: dict[tuple[str, bool], tuple[tuple[int, ...], tuple[tuple[str, int], ...]]] = {
    ("cupy", False): ((1024, 4096), (("fp32r", 2), ("fp32r", 4), ("fp32r", 6), ("fp16", 6), ("int8", 4),
                                     ("int8", 8))),
    ("cupy", True): ((1024,), (("fp32r", 2), ("fp32r", 6), ("int8", 8))),
    ("numpy", False): ((512,), (("fp32r", 2), ("fp32r", 4), ("fp32r", 6))),
    ("numpy", True): ((128,), (("fp32r", 2), ("fp32r", 4))),
}


def check_sizes(be: Backend, plan: BenchPlan) -> None:
    """ValueError before any measurement when a size's operands cannot fit in free memory."""
    free = free_memory(be)
    for n in plan.sizes:
        # A, B, C (DGEMM's) and the Ozaki output in float64, SGEMM's float32 copies with their C
        need = operand_bytes(n) + 8 * n * n + operand_bytes(n, np.float32)
        if need > HEADROOM * free:
            raise ValueError(f"N = {n} needs {need / 2**30:.1f} GiB for its operands but the {be.name} device has "
                             f"{free / 2**30:.1f} GiB free; choose smaller --sizes")


# --------------------------------------------------------------------------- inputs

def bench_inputs(be: Backend, n: int, phi: float, seed: int) -> tuple[Array, Array, str]:
    """A and B of one benchmark point, and where they were drawn (see the module notes)."""
    if n <= FULL_ROWS_MAX:
        a, b = audit_inputs(n, phi, seed)
        return be.asarray(a), be.asarray(b), HOST_INPUTS
    xp = be.xp
    rng = xp.random.default_rng(seed)

    def draw() -> Array:
        ru, rn = rng.random((n, n)), rng.standard_normal((n, n))
        ru -= 0.5
        rn *= phi
        xp.exp(rn, out=rn)
        ru *= rn
        return ru

    return draw(), draw(), DEVICE_INPUTS


def sample_rows(n: int, rows: int, seed: int) -> np.ndarray | None:
    """Sorted row indices for the error (None: every row)."""
    if rows >= n:
        return None
    return np.sort(np.random.default_rng((seed, n)).choice(n, size=rows, replace=False))
