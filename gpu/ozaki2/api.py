"""``matmul``: Ozaki scheme II on NumPy or CuPy, written once over the backend.

Steps (Ozaki, Uchino & Imamura 2025, as in GEMMul8): row and column exponents (the line maxima, which also find NaN and
infinity, with one wait for the device; in fast mode read together with the sums of squared bars), the bars
``ceil(|x| 2**e) <= 64`` of A's rows and B's columns, the bounds of the scaling mode (:func:`bounds`), the
modulus count (given, or ``"auto"``), the residues of the scaled integers, one INT8 GEMM per modulus and k
block through :meth:`gpu.backend.Backend.gemm_ex` (in output panels, :data:`PANEL`: cuBLAS ran those faster on
the H100), each product reduced to its symmetric residue (added modulo m across k blocks), and the CRT with
the unscaling. (The CRT of each row panel on a second stream, beside the next panel's INT8 GEMMs, gained
nothing on the H100 at its 700 W cap and was taken out: fast-15 at N = 8192 took 17.77 and 16.96 ms against
17.17-17.42 ms serial, 111.7 against 111.3 ms at 16384, sustained, at 1980ee7.) The backend's ``"ozaki2"``
operations (:mod:`gpu.ozaki2.ops`) do the element-wise work with identical bits on both.

**Scaling modes.** Both give :class:`~gpu.ozaki2.scaling.Bounds` (bar exponents e, f and row and column
bounds R, Q with (Abar Bbar)_ij <= sqrt(R_i Q_j)), from which :func:`gpu.ozaki2.scaling.headroom` takes the
shifts (exact comparisons against L_N ~ M/2; proof there); they differ in R and Q:

* ``"accurate"``: the row and column maxima of Cbar = Abar Bbar (one more INT8 GEMM), and Cbar itself,
  which tightens the shifts further.
* ``"fast"`` (no GEMM; our bound, not GEMMul8's): ``R_i = sum_k Abar_ik**2`` and ``Q_j = sum_k Bbar_kj**2``,
  sums of squares of the bars computed exactly in integers. Proof: (Abar Bbar)_ij <= ||Abar_i||_2
  ||Bbar_j||_2 = sqrt(R_i Q_j) (Cauchy-Schwarz), which is all the scaling's proof needs. It is
  scale-invariant: multiplying a row of A (a column of B) by 2**p changes e_i by -p and nothing else
  (the bars are the same), so A' and the result are the same up to that power of two; a general
  scaling changes the bars by at most a factor of 2 per entry. The bound is at most sqrt(k) times
  accurate mode's (a bit or so per operand on uniform data), and the sums are integers, so CPU and GPU
  agree.

The predicted error of ``moduli="auto"`` (:mod:`gpu.ozaki2.auto`) holds for either mode.

**Memory.** Every large buffer (residues, products or planes, the scaling's scratch) is a view of one block
allocated before any work (:mod:`gpu.ozaki2.workspace`, :mod:`gpu.ozaki2.memory`): the INT32 products of every
modulus where the device holds them, else INT8 planes; MemoryPlanError where neither fits.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..backend import Array, Backend, check_output, get_backend
from ..backend.checks import require_writeable
from ..ozaki.api import (
    Lines,
    _operands,
    _phase,
    _refuse_nonfinite,
    _tiles,
    _with_nonfinite,
    line_pair,
    lines_of,
    located,
)
from ..ozaki.plan import ALIGN, _round_up
from .auto import choose_moduli
from .memory import Carved, reserve_workspace
from .moduli import MAX_MODULI, ModuliTable, moduli_table
from .ops import ops
from .reference import MAX_K
from .scaling import MAX_K_BOUND_GEMM, Bounds, headroom
from .workspace import layout

SCALINGS = ("accurate", "fast")
#: INT8 GEMM output panels (rows, columns) from PANEL_FROM rows of output up; whole products below. Measured on
#: the H100 (15 INT8 GEMMs of N x N x N, cuBLAS 13.1, interleaved rounds; results/published/h100-ozaki2-panels.json,
#: made by results/published/scripts/ozaki2_panels.py): panels of 3072 rows and the full width ran 4-10% faster
#: than whole products or scheme I's 8192 x 8192 tiles at N = 6144-12288 (N = 8192: 12.48 against 13.07-13.54 ms)
#: and as fast at 16384 (98.9 against 97.5-105 ms); whole products at 16384 took 163 ms, and at N = 4096 panels
#: of 2048 rows ran 1.5x slower than the whole product.
PANEL_FROM, PANEL = 6144, (3072, 16384)


def _blocks(ldk: int, block: int) -> list[slice]:
    return [slice(lo, min(lo + block, ldk)) for lo in range(0, ldk, block)]


def _int8_product(be: Backend, a: Array, b: Array, P: Array) -> None:
    """P = a @ b.T (INT8 rows, INT32 result) in output panels (:data:`PANEL`)."""
    for rows, cols in _tiles(P.shape[0], P.shape[1], PANEL if P.shape[0] >= PANEL_FROM else None):
        be.gemm_ex(a[rows], b[cols].T, P[rows, cols], recipe="int8")


def bounds(be: Backend, A: Array, B: Array, e: Array, f: Array, ldk: int, n_pad: int, scaling: str,
           squares: tuple[Array, Array] | None = None, work: Carved | None = None) -> Bounds:
    """The mode's Bounds (see the module): fast mode's sums of squared bars (``squares``, where
    :func:`scaled_lines` made them with the maxima), with no bars stored; accurate mode's Cbar is the INT8
    product of the bars of A's rows and B's columns (in ``work``'s buffers where given)."""
    m, n = A.shape[0], B.shape[1]
    if scaling == "fast":
        rows, cols = squares or (ops(be).line_squares(A)[1], ops(be).line_squares(B.T)[1])
        return Bounds(e, rows.astype(np.float64), f, cols.astype(np.float64))
    bars_a = ops(be).bars(A, e, m, ldk, out=work.view("bars_a") if work else None)
    bars_b = ops(be).bars(B.T, f, n_pad, ldk, out=work.view("bars_b") if work else None)
    blocks = _blocks(bars_a.shape[1], MAX_K_BOUND_GEMM // ALIGN * ALIGN)
    P = work.view("bound_product") if work else be.xp.empty((bars_a.shape[0], bars_b.shape[0]), dtype=np.int32)
    cbar = P
    if len(blocks) > 1:
        cbar = work.view("cbar") if work else be.xp.empty(P.shape, dtype=np.int64)
    for number, block in enumerate(blocks):
        _int8_product(be, bars_a[:, block], bars_b[:, block], P)
        if cbar is not P:
            be.xp.add(cbar, P, out=cbar) if number else be.xp.copyto(cbar, P)
    cbar = cbar[:m, :n]
    return Bounds(e, cbar.max(axis=1).astype(np.float64), f, cbar.max(axis=0).astype(np.float64), cbar)


def scaled_lines(be: Backend, A: Array, B: Array, scaling: str, scratch: Array | None = None
                 ) -> tuple[Lines, Lines, tuple[Array, Array] | None]:
    """The maxima of A's rows and B's columns with the lines holding NaN or infinity located, and in fast
    mode the sums of squared bars, made in the same read of each operand (:mod:`gpu.ozaki2.fused`; its tile
    sums in ``scratch`` where given)."""
    if scaling != "fast":
        return *line_pair(be, A, B), None
    (ma, R), (mb, Q) = ops(be).line_squares(A, scratch), ops(be).line_squares(B.T, scratch)
    return *located(be, lines_of(be, ma), lines_of(be, mb)), (R, Q)


def _count(moduli: Any, target: Any) -> int | None:
    """The modulus count (None: ``"auto"``), after the checks of :func:`matmul`."""
    if isinstance(moduli, str) and moduli == "auto":
        return None
    if target is not None:
        raise ValueError("give either a moduli count or target (with moduli='auto'), not both")
    if isinstance(moduli, bool) or not isinstance(moduli, (int, np.integer)) or not 1 <= moduli <= MAX_MODULI:
        raise ValueError(f"moduli must be 'auto' or a count in 1..{MAX_MODULI}, not {moduli!r}")
    return int(moduli)


def _k_block(k_block: Any) -> int:
    if k_block is None:
        return MAX_K // ALIGN * ALIGN
    if isinstance(k_block, bool) or not isinstance(k_block, (int, np.integer)) or not 1 <= k_block <= MAX_K:
        raise ValueError(f"k_block must be an integer in 1..{MAX_K} (the INT8 GEMM's exact range), not {k_block!r}")
    return int(k_block) // ALIGN * ALIGN if k_block >= ALIGN else int(k_block)


def workspace_bytes(m: int, k: int, n: int, count: int, scaling: str = "accurate", direct: bool = False) -> int:
    """Device bytes of one product beyond A, B and C: its workspace block (:mod:`gpu.ozaki2.workspace`).
    ``direct``: the faster layout of one k block (the INT32 products of every modulus), which the call
    takes where the device holds it; the default is the least the call can run in."""
    return layout(m, k, n, count, scaling, direct).nbytes


def matmul(A: Any, B: Any, *, moduli: Any = "auto", target: Any = None, scaling: str = "accurate",
           k_block: int | None = None, out: Any = None, overwrite_a: bool = False, overwrite_b: bool = False,
           check_finite: bool = False, backend: str | Backend = "auto",
           phases: dict[str, float] | None = None) -> Array:
    """``A @ B`` in float64 by Ozaki scheme II (see :mod:`gpu.ozaki2` and this module).

    ``moduli``: a count in 1..20, or ``"auto"`` (the default): the fewest whose proven componentwise
    bound (:func:`gpu.ozaki2.auto.predicted_error`: ``|C - AB| <= E |A||B| + 2**-53 |C|``) meets
    ``target`` (``"dgemm"`` = 2**-53 when not given, ``"sgemm"``, or a number); ``"auto"`` costs one
    float64 GEMM of |A||B| on top, so pass a count where speed matters. ``scaling``: ``"accurate"`` or
    ``"fast"`` (module notes). ``k_block``: most inner terms per INT8 GEMM (default and most 2**17 - 1;
    from 16 on rounded down to a multiple of 16, keeping the INT8 operands' views aligned). ``out``: a
    C-ordered float64 array of the backend for the result.
    ``overwrite_a`` / ``overwrite_b``: accepted for symmetry with scheme I; A and B are only read (a read-only
    operand with its flag set is refused, as every method refuses it).
    ``check_finite=True``: refuse NaN and infinity; by default (False) the rows and columns holding
    them are computed by the library GEMM (IEEE arithmetic) and the rest by scheme II. ``phases``: a
    dict that receives seconds per phase (``scaling``, ``residues``, ``gemm``, ``reduce``, ``crt``;
    each phase synchronized). Raises TypeError and ValueError before any product, and MemoryPlanError
    before any work where the device cannot give the workspace, one block (:mod:`gpu.ozaki2.memory`).
    """
    be = get_backend(backend)
    A, B = _operands(be, A, B)
    require_writeable({"A": (A, overwrite_a), "B": (B, overwrite_b)})
    (m, k), n = A.shape, B.shape[1]
    if scaling not in SCALINGS:
        raise ValueError(f"scaling must be one of {SCALINGS}, not {scaling!r}")
    count, block = _count(moduli, target), _k_block(k_block)
    C = check_output(be, out, (m, n), np.float64, {"A": A, "B": B}, rows_contiguous=True)
    if m == 0 or n == 0 or k == 0:
        C = be.xp.zeros((m, n)) if C is None else C
        C[...] = 0.0
        return C
    work, C = reserve_workspace(be, m, k, n, count, scaling, block, C)
    with _phase(be, phases, "scaling"):
        rows, cols, squares = scaled_lines(be, A, B, scaling, work.region("tiles") if scaling == "fast" else None)
        if rows.bad or cols.bad:
            if check_finite:
                _refuse_nonfinite(rows, cols)
            del work                                # the call on the finite copies takes its own block
            options = dict(moduli=moduli, target=target, scaling=scaling, k_block=k_block, backend=be, phases=phases)
            return _with_nonfinite(be, A, B, C, rows.nonfinite, cols.nonfinite, options, method=matmul)
        e, f = 6 - rows.exps, 6 - cols.exps
        ldk, n_pad = _round_up(max(k, 1)), _round_up(max(n, 1))
        found = bounds(be, A, B, e, f, ldk, n_pad, scaling, squares, work)
        del squares
        table = moduli_table(count or choose_moduli(A, B, found, "dgemm" if target is None else target))
        u, v = headroom(found, table)
        shift_a, shift_b = (e + u).astype(np.int32), (f + v).astype(np.int32)
        del found
    with _phase(be, phases, "residues"):
        res_a = ops(be).residues(A, shift_a, e, table, m, ldk, out=work.view("res_a")[:table.count])
        res_b = ops(be).residues(B.T, shift_b, f, table, n_pad, ldk, out=work.view("res_b")[:table.count])
    planes = _modular_products(be, res_a, res_b, table, block, work, phases)
    with _phase(be, phases, "crt"):
        ops(be).crt(planes, table, shift_a, shift_b, C)
    return C


def _modular_products(be: Backend, res_a: Array, res_b: Array, table: ModuliTable, block: int, work: Carved,
                      phases: dict[str, float] | None) -> Array:
    """A'B' modulo every modulus, (N, m, n), for the CRT: in the direct layout (one k block) the INT32
    products themselves (the CRT reduces them as it reads them: no reduction pass); otherwise per modulus
    and k block one INT8 GEMM and its reduction into INT8 residues, added modulo m across blocks."""
    n = work.n
    if work.direct:
        products = work.view("products")[:table.count]
        with _phase(be, phases, "gemm"):
            for t in range(table.count):
                _int8_product(be, res_a[t], res_b[t], products[t])
        return products[:, :, :n]
    planes, P = work.view("planes")[:table.count], work.view("product")
    for t, modulus in enumerate(table.moduli):
        for number, kb in enumerate(_blocks(res_a.shape[2], block)):
            with _phase(be, phases, "gemm"):
                _int8_product(be, res_a[t][:, kb], res_b[t][:, kb], P)
            with _phase(be, phases, "reduce"):
                ops(be).reduce(P[:, :n], planes[t], modulus, number > 0)
    return planes
