"""Complex products against ZGEMM: what the ``complex`` benchmark measures, its plans, method families and inputs.

``gemmlab complex`` (:mod:`experiments.complex.commands`) and the ``complex-pareto`` experiment measure, for every
square size N of a plan and every complex audited method (names resolved by :func:`accuracy.methods.get_method`,
all of them ``complex``):

* the largest componentwise error on each phi of the plan against the exact complex product, each part against
  its own scale (:func:`accuracy.metrics.error_report`'s ``max_comp``), on sampled rows above
  :data:`FULL_ROWS_MAX` (:mod:`experiments.complex.errors`, stored in ``complex-error`` with ZGEMM's error beside);
* every method's public call as called beside ZGEMM's, in one interleaved group per N on phi = 1 inputs
  (:mod:`experiments.complex.timing`, stored in ``complex-time`` with the speed-up over ZGEMM);

then the table and the verdict on the complex speed targets (:mod:`experiments.complex.report`).

Methods come in families, each drawn in its own colour: ZGEMM (``zgemm``, the library complex GEMM and the
baseline), 3M and 4M over a real method (``zgemm-<3m|4m>-<real method>``), Ozaki scheme II over both parts
(``ozaki2c-<2m|3m|4m>-<moduli>``) and the front door (``zauto-<level>``: ``gpu.matmul(A, B, accuracy=level)``).
Inputs are the audit's host-drawn complex phi matrices (:func:`accuracy.audit.audit_inputs` with ``complex``)
up to 2**25 entries, drawn on the device above (:func:`point_inputs`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from accuracy.audit import audit_inputs
from accuracy.methods import get_method
from gpu.backend import Array, Backend
from gpu.ozaki2 import MAX_MODULI
from gpu.ozaki2 import complex as complex_ii

from ..core.lab import HEADROOM, free_memory
from ..frontdoor.errors import DEVICE_INPUTS, HOST_ELEMENTS, HOST_INPUTS, draw_phi
from ..ozaki.bench import check_options

ERROR, TIME, PARETO = "complex-error", "complex-time", "complex-pareto"
ZGEMM = "zgemm"
#: 3M over Strassen at its defaults, and the front door at the two accuracies the benchmark times.
STRASSEN_3M, FRONT_ZGEMM, FRONT_DGEMM = "zgemm-3m-strassen-defaults", "zauto-zgemm", "zauto-dgemm"
METHODS = (ZGEMM, "zgemm-3m-fp64", "zgemm-4m-fp64", STRASSEN_3M, "ozaki2c-2m-auto", "ozaki2c-3m-auto",
           "ozaki2c-4m-auto", FRONT_ZGEMM, FRONT_DGEMM)
PHIS = (0.1, 1.0, 2.0, 4.0)
#: Timing inputs and the seed of every input (times do not depend on the values).
TIME_PHI, SEED = 1.0, 1
#: Up to this N the errors cover every row; above it SAMPLED_ROWS rows (the exact complex reference is two real
#: exact products of 2N terms per row).
FULL_ROWS_MAX, SAMPLED_ROWS = 1024, 128
#: The families, in the order legends list them.
FAMILIES = ("ZGEMM", "3M over a real method", "4M over a real method", "Ozaki II complex", "front door")
#: The complex name forms a plan takes (for the message refusing a real method).
FORMS = "zgemm, zgemm-<3m|4m>-<real method>, ozaki2c-<2m|3m|4m>-<moduli|auto>, zauto-<zgemm|dgemm|sgemm|bound>"

_SCHEME = re.compile(r"zgemm-(?P<scheme>3m|4m)-(?P<real>.+)")
_OZAKI2C = re.compile(r"ozaki2c-(?P<scheme>2m|3m|4m)-(?P<moduli>\d+|auto)")
_FRONT = re.compile(r"zauto(?:-(?P<level>.+))?")


def family(name: str) -> tuple[str, str]:
    """(family, a short label of the method within it): ``("3M over a real method", "3M fp64")`` for
    ``zgemm-3m-fp64``, ``("front door", "accuracy='zgemm'")`` for ``zauto-zgemm``."""
    if name == ZGEMM:
        return "ZGEMM", "ZGEMM"
    if m := _SCHEME.fullmatch(name):
        return f"{m['scheme'].upper()} over a real method", f"{m['scheme'].upper()} {m['real']}"
    if m := _OZAKI2C.fullmatch(name):
        return "Ozaki II complex", f"ozaki2c {m['scheme'].upper()} {m['moduli']}"
    if m := _FRONT.fullmatch(name):
        return "front door", f"accuracy={front_level(name)!r}"
    return "other", name


def front_level(name: str) -> str | float:
    """The accuracy a ``zauto[-<level>]`` name asks the front door for (``"dgemm"`` without a level)."""
    level = _FRONT.fullmatch(name)["level"] or "dgemm"
    return level if level in ("zgemm", "dgemm", "sgemm") else float(level)


def real_of(name: str) -> str | None:
    """The real method of a ``zgemm-<3m|4m>-<real>`` name, else None."""
    m = _SCHEME.fullmatch(name)
    return m["real"] if m else None


def sort_key(name: str) -> tuple[int, str]:
    """Methods by family, then by name."""
    fam = family(name)[0]
    return (FAMILIES.index(fam) if fam in FAMILIES else len(FAMILIES)), name


def call_text(name: str, xp: str) -> str:
    """The public call a method's audit entry makes, as a user writes it (``xp``: ``numpy`` or ``cupy``)."""
    if name == ZGEMM:
        return f"{xp}.matmul(A, B)"
    if m := _SCHEME.fullmatch(name):
        return f"gpu.zgemm.matmul(A, B, scheme={m['scheme']!r}, real=<{m['real']}>)"
    if m := _OZAKI2C.fullmatch(name):
        moduli = m["moduli"] if m["moduli"] == "auto" else int(m["moduli"])
        return f"gpu.ozaki2.complex.matmul(A, B, moduli={moduli!r}, scheme={m['scheme']!r})"
    if _FRONT.fullmatch(name):
        return f"gpu.matmul(A, B, accuracy={front_level(name)!r})"
    return f"<{name}>(A, B)"


def check_method(name: str) -> None:
    """ValueError before any work for an unknown method or a real one (this benchmark multiplies complex
    operands)."""
    if not get_method(name).complex:
        raise ValueError(f"{name!r} is a real method, and gemmlab complex multiplies complex128 operands; name "
                         f"complex methods ({FORMS}), or run a real method over 3M or 4M as zgemm-3m-{name}")


@dataclass(frozen=True)
class Plan:
    """Sizes x complex methods, errors on ``phis``; ZGEMM (the baseline) is always among the methods, first.
    ValueError before any work for a size that is not a positive integer, an unknown or real method, a phi
    outside [0, 20], non-positive rows or slow factor."""

    sizes: tuple[int, ...]
    methods: tuple[str, ...] = METHODS
    phis: tuple[float, ...] = PHIS
    rows: int | None = None          # error rows per size (None: all up to FULL_ROWS_MAX, else SAMPLED_ROWS)
    slow_factor: float = 3.0
    errors: bool = True
    timing: bool = True

    def __post_init__(self) -> None:
        if not self.sizes or not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in self.sizes):
            raise ValueError(f"sizes must be a non-empty list of positive integers N, got {list(self.sizes)}; "
                             "give --sizes such as 1024,4096")
        object.__setattr__(self, "sizes", tuple(sorted(set(self.sizes))))
        object.__setattr__(self, "methods", tuple(dict.fromkeys((ZGEMM, *self.methods))))
        object.__setattr__(self, "phis", tuple(float(p) for p in dict.fromkeys(self.phis)))
        for name in self.methods:
            check_method(name)
        check_options(self.phis, self.rows, self.slow_factor)

    def rows_for(self, n: int) -> int:
        """Rows of A whose products the errors cover."""
        return min(n, self.rows) if self.rows else (n if n <= FULL_ROWS_MAX else SAMPLED_ROWS)

    def with_methods(self, methods: list[str]) -> Plan:
        """The same plan on ``methods`` (those that can run, say)."""
        return Plan(self.sizes, tuple(methods), self.phis, self.rows, self.slow_factor, self.errors, self.timing)


#: What ``gemmlab complex`` measures when no sizes are given.
BENCH_DEFAULTS: dict[str, Plan] = {"cupy": Plan((1024, 4096, 8192, 16384)), "numpy": Plan((32, 64))}
#: The ``complex-pareto`` experiment, by (backend, quick).
PARETO_PLANS: dict[tuple[str, bool], Plan] = {
    ("cupy", False): BENCH_DEFAULTS["cupy"],
    ("cupy", True): Plan((4096,)),
    ("numpy", False): Plan((64, 128)),
    ("numpy", True): Plan((32,), phis=(0.1, 1.0, 4.0)),
}


def needed_bytes(n: int, methods: tuple[str, ...]) -> int:
    """Device bytes of one size's timing: A, B, ZGEMM's C and one method's C (complex128), and the largest peak
    workspace of the Ozaki II complex schemes the plan times (at the most moduli)."""
    schemes = {found["scheme"] for m in methods if (found := _OZAKI2C.fullmatch(m))}
    work = max((complex_ii.peak_bytes(n, n, n, MAX_MODULI, s) for s in schemes), default=0)
    return 16 * 4 * n * n + work


def check_memory(be: Backend, plan: Plan) -> None:
    """ValueError before any measurement where a size's operands and workspace cannot fit in free memory."""
    free = free_memory(be)
    for n in plan.sizes:
        need = needed_bytes(n, plan.methods)
        if need > HEADROOM * free:
            fewer = ", or leave out the ozaki2c methods (their workspace)" if needed_bytes(n, ()) < need else ""
            raise ValueError(f"N = {n} needs {need / 2**30:.1f} GiB for its complex operands and workspaces but the "
                             f"{be.name} device has {free / 2**30:.1f} GiB free; choose smaller --sizes{fewer}")


def point_inputs(be: Backend, n: int, phi: float, seed: int = SEED) -> tuple[Array, Array, str]:
    """Complex128 A and B (n x n) of one point on ``be``, each part a phi matrix: the audit's, drawn on the host,
    where the four parts hold at most :data:`~experiments.frontdoor.errors.HOST_ELEMENTS` entries; above that
    drawn on the device by its generator, as the front door's grid draws them (a host draw of N = 4096 took
    3.6 s here, so the points at 16384 would spend minutes drawing); with where they were drawn."""
    if 4 * n * n <= HOST_ELEMENTS:
        a, b = audit_inputs(n, phi, seed, complex=True)
        return be.asarray(a), be.asarray(b), HOST_INPUTS
    rng = be.xp.random.default_rng(seed)
    A = draw_phi(be, n, n, phi, rng) + 1j * draw_phi(be, n, n, phi, rng)
    return A, draw_phi(be, n, n, phi, rng) + 1j * draw_phi(be, n, n, phi, rng), DEVICE_INPUTS
