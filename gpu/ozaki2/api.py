"""``matmul``: Ozaki scheme II on NumPy or CuPy, written once over the backend.

``matmul`` is a plan per operand signature (:class:`gpu.ozaki2.plan.Plan`, kept in a bounded cache, :data:`PLANS`)
plus its execution. Steps (Ozaki, Uchino & Imamura 2025, as in GEMMul8): one read of each operand gives its
line maxima, bar exponents and sums of squared bars (and, under ``moduli="auto"``, its lines' norms), with the
lines holding NaN or infinity found on the device; the bounds of the scaling mode (:mod:`gpu.ozaki2.bounds`),
the modulus count (given, or ``"auto"``), the residues of the scaled integers, one INT8 GEMM per modulus and k
block through :meth:`gpu.backend.Backend.gemm_ex` (in output panels, :mod:`gpu.ozaki2.gemms`: cuBLAS ran those
faster on the H100), each product reduced to its symmetric residue (added modulo m across k blocks), the CRT
with the unscaling, and the library's IEEE values in the lines holding NaN or infinity (:mod:`gpu.ozaki2.plan`
says which of these wait for the device: under ``moduli="auto"`` none on a repeated call, by default). (The CRT
of each row panel on a second stream, beside the next panel's INT8 GEMMs, gained nothing on the H100 at its
700 W cap and was taken out: fast-15 at N = 8192 took 17.77 and 16.96 ms against
17.17-17.42 ms serial, 111.7 against 111.3 ms at 16384, sustained, at 1980ee7.) The backend's ``"ozaki2"``
operations (:mod:`gpu.ozaki2.ops`) do the element-wise work with identical bits on both.

**Scaling modes.** Both give :class:`~gpu.ozaki2.scaling.Bounds` (bar exponents e, f and row and column
bounds R, Q with (Abar Bbar)_ij <= sqrt(R_i Q_j)), from which :func:`gpu.ozaki2.scaling.headroom` takes the
shifts (exact comparisons against L_N ~ M/2; proof there); they differ in R and Q (:mod:`gpu.ozaki2.bounds`):
``"fast"`` (the default) from the sums of squared bars, ``"accurate"`` from one more INT8 GEMM; ``"fine"`` takes
fast mode's bound with scales that are not powers of two (8 bits of fraction: a given count only). Fast is the
default because it is the faster at DGEMM's accuracy: on the H200 (phi = 1, sustained, against DGEMM in the
same run) fast-14 / 15 / 16 ran at 1.36 / 1.29 / 1.14x DGEMM at N = 8192 with max relative errors 3.9e-8 /
2.2e-9 / 1.8e-10 (DGEMM 3.8e-8), and fast-14 / 15 at 1.56 / 1.45x at 16384 (3.1e-8 / 2.8e-9; DGEMM 8.9e-8),
where accurate-15 ran at 1.38x. Both bounds of ``moduli="auto"`` hold for either mode.

**Memory.** Every large buffer (residues, products or planes, the scaling's scratch) is a view of one block
the plan allocates before any work (:mod:`gpu.ozaki2.workspace`, :mod:`gpu.ozaki2.memory`), by default no
larger than GEMMul8's: the INT32 products of every modulus for a panel of C's rows at a time, else INT8
planes (a ``workspace=`` that holds every product's INT32 products takes them whole); MemoryPlanError where
none fits. The cache keeps at most :data:`MAX_PLANS` plans, and frees them all where a new plan's faster
layout would not fit beside their blocks.
"""

from __future__ import annotations

from typing import Any

from ..backend import Array, Backend, MemoryPlanError, get_backend
from ..backend.plans import PlanCache, operand_signature
from ..ozaki.api import _operands
from .normwise import LineStats
from .ops import ops
from .options import AUTO_SCALINGS, SCALINGS, Options
from .plan import Plan
from .tiled import TiledPlan
from .workspace import layout

__all__ = ["AUTO_SCALINGS", "MAX_PLANS", "PLANS", "SCALINGS", "Options", "Plan", "line_stats", "matmul",
           "workspace_bytes"]

#: Plans :func:`matmul` keeps (each holds its workspace block on the device).
MAX_PLANS = 8
#: The plans :func:`matmul` keeps, by backend, operand signature and options.
PLANS = PlanCache(MAX_PLANS)


def _make_room() -> bool:
    """Free the kept plans' blocks for a new plan (see the module); whether there were any."""
    had = len(PLANS) > 0
    PLANS.clear()
    return had


def workspace_bytes(m: int, k: int, n: int, count: int, scaling: str = "accurate", direct: bool = False) -> int:
    """Device bytes of one product beyond A, B and C: its workspace block (:mod:`gpu.ozaki2.workspace`).
    ``direct``: the whole direct layout of one k block (the INT32 products of every modulus), which a call
    takes where a ``workspace=`` holds it; the default is the planes layout's (GEMMul8's workspace), which bounds
    what a call takes by default (the direct layout in row panels, :func:`gpu.ozaki2.memory.panel_rows`, where
    it is taken, holds no more)."""
    return layout(m, k, n, count, scaling, direct).nbytes


def line_stats(be: Backend, A: Array, B: Array, norms: bool = False, wide: bool = False
               ) -> tuple[LineStats, LineStats]:
    """The line statistics of A's rows and B's columns (:class:`~gpu.ozaki2.normwise.LineStats`; ``wide``: with fine
    scaling's Rw)."""
    family = ops(be)
    return family.line_stats(A, None, norms, wide=wide), family.line_stats(B.T, None, norms, wide=wide)


def matmul(A: Any, B: Any, *, moduli: Any = "auto", target: Any = None, scaling: str = "fast",
           bound: str = "normwise", k_block: int | None = None, out: Any = None, overwrite_a: bool = False,
           overwrite_b: bool = False, check_finite: bool = False, level: int = 0, workspace: int | None = None,
           verdict: str = "device", backend: str | Backend = "auto", phases: dict[str, float] | None = None) -> Array:
    """``A @ B`` in float64 by Ozaki scheme II (see :mod:`gpu.ozaki2` and this module): a kept
    :class:`~gpu.ozaki2.plan.Plan` per operand signature and options, executed.

    ``moduli``: a count in 1..20, or ``"auto"`` (the default): the fewest whose proven bound meets
    ``target`` (``"dgemm"`` when not given, ``"sgemm"``, or a number in (0, 1)). ``bound``: how ``"auto"``
    proves it: ``"normwise"`` (the default; :mod:`gpu.ozaki2.normwise`): ``|C_ij - (AB)_ij| <= t ||a_i||_2
    ||b_j||_2 + 2**-53 |C_ij|`` with t = 2**-56 sqrt(k) for ``"dgemm"``, computed on the device from the
    scaling's one read of A and B; or ``"componentwise"`` (:mod:`gpu.ozaki2.auto`, for auditors):
    ``|C - AB| <= t |A||B| + 2**-53 |C|`` with t = 2**-53 for ``"dgemm"``, at the cost of a float64 GEMM of
    |A||B| and waits. ``verdict``: where the normwise count is decided (:mod:`gpu.ozaki2.deferred`).
    ``"device"`` (the default): on the GPU a call on operands and output whose addresses the plan has seen
    before reads nothing back. It replays one CUDA graph that holds the product at every count the plan has
    needed, each under a conditional node. The first call of an address set, and a call after a count new to the
    plan, read the count (4 bytes: a wait for the device). Where no count up to 20 meets ``target``, C is the
    library GEMM's, and :attr:`~gpu.ozaki2.Plan.last_count` is 0. ``"host"``: every call reads the count, and
    such inputs raise ValueError before any product. The normwise guarantee is the weaker where (|A||B|)_ij is
    far below ||a_i||_2 ||b_j||_2
    (rows and columns whose large entries meet the other's small ones). ``scaling``: ``"fast"`` (the
    default), ``"accurate"``, or ``"fine"`` (with ``moduli=N`` only: each line's scale as large as fast mode's
    bound allows, to 8 bits, not a power of two; 1.3-2.0x smaller median errors than fast's on phi = 1 inputs
    on the H200, for one more read of A and B and one more rounding of each result entry;
    :mod:`gpu.ozaki2.scaling`). ``k_block``: most inner
    terms per INT8 GEMM (default and most 2**17 - 1; from 16 on rounded down to a multiple of 16, keeping the
    INT8 operands' views aligned).
    ``out``: a C-ordered float64 array of the backend for the result. ``level``: Winograd levels over the
    residues (0..4; :mod:`gpu.ozaki2.winograd`): each level does 7/8 of the INT8 work of the one above, and the
    result is bitwise the plain product's (``level=0``, the default). Level 1 on m, n and k multiples of 32 runs in
    its fused form (:mod:`gpu.ozaki2.fused_level`: on the H200 with the CUTLASS INT8 kernel built, its GEMMs
    writing residues, 1.88x DGEMM at N = 32768 and 1.66x at 16384 against level 0's 1.60x, for 10.8 FP64 matrices
    of workspace at 15 moduli against level 0's 5.6). Level 2 runs in its fused form where those GEMMs take k / 4
    (k >= 32768) on m and n multiples of 64 and k of 128 (:mod:`gpu.ozaki2.fused_level2`: 1.96-2.02x DGEMM at
    N = 32768 on the H200, for 8.6 FP64 matrices of workspace at 15 moduli); other shapes and levels run slower
    passes.
    ``workspace``: the most bytes the call takes beyond A, B and C (default: as the device allows: where the whole
    product's plan does not fit, even after the kept plans are freed, the call tiles within the memory free then);
    a product that needs more runs in tiles of C, each a scheme II product of its panels (:mod:`gpu.ozaki2.tiled`:
    bitwise the untiled product with a count given and the fast scaling; a kept :class:`~gpu.ozaki2.TiledPlan` per
    signature).
    ``overwrite_a`` / ``overwrite_b``: accepted for symmetry with scheme I; A and B are only read (a read-only
    operand with its flag set is refused, as every method refuses it).
    ``check_finite=True``: refuse NaN and infinity (reading the line maxima: a wait). By default (False) the
    entries in rows of A and columns of B holding them are the library GEMM's (IEEE arithmetic), found on the
    device, and the rest are scheme II's. ``phases``: a dict that receives seconds per phase (``scaling``,
    ``residues``, ``sums`` (a fused Winograd level's), ``gemm``, ``reduce``, ``crt``; each phase synchronized).
    Raises TypeError and ValueError before any product, and MemoryPlanError before any work where the device
    cannot give the workspace, one block (:mod:`gpu.ozaki2.memory`). The same options as one object:
    :class:`~gpu.ozaki2.options.Options`.
    """
    be = get_backend(backend)
    signature = operand_signature(be, A, B, out)
    if signature is None:
        A, B = _operands(be, A, B)
        signature = operand_signature(be, A, B, out)
    key = None if signature is None else (be, signature, moduli, target, scaling, bound, k_block, check_finite,
                                          overwrite_a, overwrite_b, level, workspace, verdict)

    def checked() -> Options:
        return Options(moduli, target, scaling, bound, k_block, check_finite, overwrite_a, overwrite_b, level,
                       workspace, verdict)

    def build() -> Plan:
        return Plan(A, B, out=out, options=checked(), backend=be, make_room=_make_room)

    def tiled() -> TiledPlan:
        return TiledPlan(A, B, out=out, options=checked(), backend=be)

    try:
        return PLANS.get(key, build if workspace is None else tiled).run(A, B, out, phases)
    except MemoryPlanError:
        if workspace is not None:
            raise
    return PLANS.get(key, tiled).run(A, B, out, phases)

