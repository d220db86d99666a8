"""Ozaki scheme II against DGEMM: what the benchmark measures, its plans, inputs and method families.

``gemmlab ozaki2`` (:mod:`experiments.ozaki2.commands`) and the ``ozaki2-pareto`` experiment measure,
for every product of a plan (N x N x N squares and rectangular m x k x n shapes) and every method
(audit names, resolved by :func:`accuracy.methods.get_method`):

* the max relative error against ``exact_matmul`` on each phi of the plan (:mod:`experiments.ozaki2.errors`,
  stored in ``ozaki2-error``), on sampled rows above :data:`experiments.ozaki.bench.FULL_ROWS_MAX`;
* the time of every method interleaved with DGEMM, the baseline, on phi = 1 inputs, in as few groups per product
  as its scheme II plans allow (:mod:`experiments.ozaki2.timing`, stored in ``ozaki2-time`` with the speed-up over
  its group's DGEMM);

then the table and the verdict on scheme II's speed targets (:data:`TARGETS`, :mod:`experiments.ozaki2.table`). The
``ozaki2-breakdown`` experiment (:mod:`experiments.ozaki2.breakdown`) stores scheme II's seconds per phase.

Methods come in families, each drawn in its own colour: DGEMM (``fp64``), SGEMM (``fp32``), scheme I
(``ozaki-<format>-<slices>``), scheme II in accurate and fast scaling (``ozaki2-<scaling>-<moduli>``, with
``-w<level>`` Winograd levels over the residues: the figure's series of their own)
and cuBLAS's own emulation (``cublas-emul-<bits>``). Inputs are the Ozaki benchmark's
(:func:`experiments.ozaki.bench.bench_inputs`) for squares and the audit's host-drawn ``phi_matrix``
(:func:`accuracy.audit.audit_inputs`) for rectangular shapes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from accuracy.audit import audit_inputs
from accuracy.methods import (
    get_method,
    ozaki2_level,
    ozaki2_method_name,
    parse_cublas_emulation_method,
    parse_ozaki2_method,
    parse_ozaki_method,
)
from gpu import ozaki2
from gpu.backend import Array, Backend

from ..audit.bench import Shape
from ..core.lab import HEADROOM, free_memory
from ..ozaki import bench as scheme1
from ..ozaki.bench import DGEMM, HOST_INPUTS, SGEMM, check_options

ERROR, TIME, BREAKDOWN = "ozaki2-error", "ozaki2-time", "ozaki2-breakdown"
PARETO = "ozaki2-pareto"
PHIS = (0.1, 1.0, 2.0, 4.0)
#: Timing inputs and the seed of every input (times do not depend on the values).
TIME_PHI, SEED = scheme1.TIME_PHI, scheme1.SEED
#: The family of each kind of method, in the order legends list them.
FAMILIES = ("DGEMM", "SGEMM", "scheme I", "scheme II accurate", "scheme II fast", "cuBLAS emulation", "scheme II fine",
            "other")
def family(name: str) -> tuple[str, str]:
    """(family, its parameter as a label) of a method name: ``("scheme II fast", "14")`` for
    ``ozaki2-fast-14``, ``("scheme I", "int8-8")`` for ``ozaki-int8-8``; DGEMM and SGEMM have no parameter."""
    if name in (DGEMM, SGEMM):
        return ("DGEMM" if name == DGEMM else "SGEMM"), ""
    if (two := parse_ozaki2_method(name)) is not None:
        level = ozaki2_level(name)
        return f"scheme II {two[0]}", str(two[1]) + (f" w{level}" if level else "")
    if (one := parse_ozaki_method(name)) is not None:
        return "scheme I", f"{one[0]}-{one[1]}"
    bits = parse_cublas_emulation_method(name)
    if bits != "":
        return "cuBLAS emulation", "auto" if bits is None else str(bits)
    return "other", name


def sort_key(name: str) -> tuple[int, str, float, int]:
    """Methods by family, then by their parameter (counts numerically, ``auto`` last), then Winograd levels."""
    fam, param = family(name)
    param, _, level = param.partition(" w")
    head, _, tail = param.rpartition("-")
    return FAMILIES.index(fam), head, float(tail) if tail.isdigit() else math.inf, int(level or 0)


def scheme2(counts: tuple[int, ...], scalings: tuple[str, ...] = ("accurate", "fast")) -> tuple[str, ...]:
    """Scheme II names of every scaling and modulus count."""
    return tuple(ozaki2_method_name(s, n) for s in scalings for n in counts)


def shape_text(shape: Shape) -> str:
    """``N`` for a square, else ``m x k x n``."""
    m, k, n = shape
    return f"N = {n}" if m == k == n else f"{m} x {k} x {n}"


def product_order(shape: Shape) -> tuple[bool, float, Shape]:
    """Squares first, then rectangular products, each by their multiply-adds."""
    m, k, n = shape
    return not m == k == n, float(m) * k * n, shape


# --------------------------------------------------------------------------- plans

@dataclass(frozen=True)
class Plan:
    """Products x methods, errors on ``phis``; DGEMM (the baseline) is always among the methods, first."""

    shapes: tuple[Shape, ...]
    methods: tuple[str, ...]
    phis: tuple[float, ...] = PHIS
    rows: int | None = None          # error rows per product (None: all up to FULL_ROWS_MAX, else SAMPLED_ROWS)
    slow_factor: float = 3.0
    errors: bool = True
    timing: bool = True

    def __post_init__(self) -> None:
        if not self.shapes or not all(isinstance(s, tuple) and len(s) == 3 and all(
                isinstance(v, int) and v > 0 for v in s) for s in self.shapes):
            raise ValueError(f"products must be a non-empty list of (m, k, n) positive integers, got "
                             f"{list(self.shapes)}; give --sizes or --shapes")
        object.__setattr__(self, "shapes", tuple(dict.fromkeys(self.shapes)))
        object.__setattr__(self, "methods", tuple(dict.fromkeys((DGEMM, *self.methods))))
        for name in self.methods:
            get_method(name)                # ValueError naming an unknown method
        check_options(self.phis, self.rows, self.slow_factor)

    def rows_for(self, shape: Shape) -> int:
        """Rows of A whose products the errors cover (all up to FULL_ROWS_MAX, else SAMPLED_ROWS)."""
        m = shape[0]
        return min(m, self.rows) if self.rows else (m if m <= scheme1.FULL_ROWS_MAX else scheme1.SAMPLED_ROWS)

    def with_methods(self, methods: list[str]) -> Plan:
        """The same plan on ``methods`` (those that can run, say)."""
        return Plan(self.shapes, tuple(methods), self.phis, self.rows, self.slow_factor, self.errors, self.timing)


def squares(*sizes: int) -> tuple[Shape, ...]:
    """N x N x N products, one per size."""
    return tuple((n, n, n) for n in sizes)


#: Scheme II's speed targets: at phi = 1, the fastest scheme II configuration as accurate as DGEMM is at least
#: this many times faster than DGEMM at N x N x N.
TARGETS = {16384: 1.4, 8192: 1.05}
#: Winograd levels over the residues the GPU benchmark times by default: level 1 where it can pay (the counts as
#: accurate as DGEMM at N = 16384, fused there), level 2 at the count of the defaults.
LEVELS = (*(ozaki2_method_name("fast", n, 1) for n in (14, 15, 16)), ozaki2_method_name("fast", 15, 2))
GPU_METHODS = (DGEMM, SGEMM, *(f"ozaki-int8-{s}" for s in range(8, 13)), *scheme2(tuple(range(8, 21))), *LEVELS,
               *(f"cublas-emul-{b}" for b in (31, 39, 47, 55, 63)), "cublas-emul-auto")
CPU_METHODS = (DGEMM, SGEMM, "ozaki-int8-4", "ozaki-int8-6", *scheme2((8, 12, 16, 20)))
#: K beyond one INT8 GEMM's exact range (2**17 - 1): scheme II adds residues across k blocks.
LONG_K = (1024, 2**18, 1024)
#: What ``gemmlab ozaki2`` measures when no products or methods are given.
BENCH_DEFAULTS: dict[str, Plan] = {
    "cupy": Plan((*squares(4096, 8192, 16384), LONG_K), GPU_METHODS),
    "numpy": Plan(squares(64, 128), CPU_METHODS),
}
#: The ``ozaki2-pareto`` experiment, by (backend, quick).
PARETO_PLANS: dict[tuple[str, bool], Plan] = {
    ("cupy", False): BENCH_DEFAULTS["cupy"],
    ("cupy", True): Plan(squares(4096), (DGEMM, SGEMM, "ozaki-int8-8", "ozaki-int8-10", *scheme2((8, 12, 14, 16, 20)),
                                         "cublas-emul-55", "cublas-emul-auto")),
    ("numpy", False): Plan(squares(128, 256), (*CPU_METHODS, "ozaki-int8-8")),
    ("numpy", True): Plan(squares(64), CPU_METHODS, phis=(0.1, 1.0, 4.0)),
}
#: The ``ozaki2-breakdown`` experiment, by (backend, quick): products and scheme II configurations.
BREAKDOWN_PLANS: dict[tuple[str, bool], tuple[tuple[Shape, ...], tuple[str, ...]]] = {
    ("cupy", False): (squares(8192, 16384), ("ozaki2-accurate-15", "ozaki2-fast-15", "ozaki2-fast-15-w1")),
    ("cupy", True): (squares(8192), ("ozaki2-accurate-15", "ozaki2-fast-15")),
    ("numpy", False): (squares(128, 256), ("ozaki2-accurate-15", "ozaki2-fast-15")),
    ("numpy", True): (squares(64), ("ozaki2-accurate-15", "ozaki2-fast-15")),
}


def needed_bytes(shape: Shape, methods: tuple[str, ...]) -> int:
    """Device bytes of one product's timing: A, B, C and an output in float64, SGEMM's float32 copies
    with their C, and the largest scheme II workspace among ``methods``."""
    m, k, n = shape
    counts = [c for name in methods if (p := parse_ozaki2_method(name)) for c in
              [ozaki2.MAX_MODULI if p[1] == "auto" else p[1]]]
    work = max((ozaki2.workspace_bytes(m, k, n, c) for c in counts), default=0)
    return 8 * (m * k + k * n + 2 * m * n) + 4 * (m * k + k * n + m * n) + work


def check_memory(be: Backend, plan: Plan) -> None:
    """ValueError before any measurement when a product's operands and workspace cannot fit in free memory."""
    free = free_memory(be)
    for shape in plan.shapes:
        need = needed_bytes(shape, plan.methods)
        if need > HEADROOM * free:
            raise ValueError(f"{shape_text(shape)} needs {need / 2**30:.1f} GiB for its operands and scheme II's "
                             f"workspace but the {be.name} device has {free / 2**30:.1f} GiB free; choose smaller "
                             "--sizes or --shapes, or fewer moduli")


# --------------------------------------------------------------------------- inputs

def shape_inputs(be: Backend, shape: Shape, phi: float, seed: int) -> tuple[Array, Array, str]:
    """A and B of one product and where they were drawn: the Ozaki benchmark's inputs for a square,
    the audit's host-drawn ``phi_matrix`` for a rectangular product."""
    m, k, n = shape
    if m == k == n:
        return scheme1.bench_inputs(be, n, phi, seed)
    a, b = audit_inputs(n, phi, seed, shape)
    return be.asarray(a), be.asarray(b), HOST_INPUTS


def shape_params(shape: Shape, **more: Any) -> dict[str, Any]:
    """Stored parameters of a product: m, k, n, then ``more``."""
    m, k, n = shape
    return {"m": int(m), "k": int(k), "n": int(n), **more}


def params_shape(params: dict[str, Any]) -> Shape:
    """(m, k, n) of stored parameters."""
    return int(params["m"]), int(params["k"]), int(params["n"])


def flops(shape: Shape) -> float:
    """2 m k n: the multiply-adds of one product."""
    m, k, n = shape
    return 2.0 * m * k * n

