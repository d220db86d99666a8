"""Two Winograd levels over the residues in their fused form: 49 INT8 products a modulus, no residue planes.

Each operand's 49 second-level operands (Winograd's sums of its sums, each a sum modulo m of up to 16 of its
quarter-side sub-blocks) are written per modulus by one pass over its float64 entries (B's once, A's per span of
its quarters' rows); each span's 49 x count INT8 GEMMs write their residues, a modulus a launch where the backend
batches them; and the CRT combines the 49 products of each position into its 16 entries of C as it reads them,
exactly in integers, each reduced and summed into the double-double CRT in level 0's order. Every residue is a
function of its integer alone, so C is **bitwise** level 0's (and level 1's), as :mod:`gpu.ozaki2.fused_level` is
for one level. The passes: :mod:`gpu.ozaki2.level2_kernels` on CuPy, :meth:`gpu.ozaki2.ops.HostOps.level2_operands`
and :meth:`~gpu.ozaki2.ops.HostOps.crt_level2` on NumPy (the same bits, from the level passes' sums).

Measured on the H200 at N = 32768 (``ozaki2.matmul(A, B, moduli=15, level=2)`` as called, each beside its own
DGEMM in turning rounds, 700 W cap; ``results/published/h200/h200-ozaki2-as-called-level2-*32768.json``): 670.8,
683.2, 692.9 and 693.3 ms a call on four boards, **2.016x, 1.995x, 2.004x and 1.957x DGEMM** (DGEMM 1340-1408
ms), and 2.006x and 1.945x under ``moduli="auto"``, against level 0's 1.734x and level 1's 1.83-1.89x; error 3.2e-9
on sampled rows against DGEMM's 1.6e-8. Of a call's 683 ms the 735 INT8 GEMMs of 8192 x 8192 x 2048-row spans take
590 (at the power cap), the operand passes 58, the CRT 25 and the scaling 10 (``h200-ozaki2-level2-spans-32768.json``).
With the passes' fewer instructions (:mod:`gpu.ozaki2.level2_kernels`) the call ran 684.6 ms against 696.6 before on
one board, paired in turning rounds (**2.029x** against 1.993x), 672.2 ms (**2.068x**) on a second and 681.2 ms
(**1.991x**, DGEMM 1356 ms) on a third, whose DGEMM ran 1355-1393 ms within minutes, and 674.4 ms (**1.990x**, DGEMM
1342 ms) on a fourth, where the call ran 675.5 ms (2.015x) in turning rounds beside DGEMMs of 1339-1376 ms. More loads
in flight did not pay as called: an operand pass staging the next tile's entries with ``cp.async`` ran 0.934x, a CRT
with two moduli in flight 1.001x (``h200-ozaki2-level2-staged-probe.json``).

It takes level 2 where the backend's INT8 GEMMs write residues over k / 4
(:func:`gpu.ozaki2.memory.narrow_products`) on sides that quarter exactly (:func:`shape_fits`): m and n multiples
of :data:`SIDE_STEP`, the padded k of :data:`K_STEP`, k in one block. Its workspace holds B's operands (49 / 16 of
B's entries a modulus: 49 GB at N = 32768 and 15 moduli) and A's operands and the products of one span, beyond
GEMMul8's bytes: the level is asked for (``level=2``), or taken by the front door where the device profile measured it
faster (:func:`gpu.frontdoor.frontplan.refuse_passes`). Other shapes take the level passes
(:mod:`gpu.ozaki2.winograd`), which peel odd sides.
"""

from __future__ import annotations

from typing import Any

from ..backend import Array, Backend
from ..ozaki.api import _phase
from ..ozaki.plan import _round_up
from .fused_level import fusable
from .fused_level import span_rows as half_spans
from .gemms import blocks, planned, run_planned
from .moduli import ModuliTable
from .part import Part
from .winograd import MIN_SIDE

#: The most rows of A's quarters a span takes. On the H200 at N = 32768 and 15 moduli (as called, each beside its
#: own DGEMM; ``results/published/h200/h200-ozaki2-as-called-level2-*32768.json``) spans of 2048 rows ran 670.8 ms a
#: call (2.016x DGEMM) against 709.2 ms (1.900x) for spans of 4096, the largest that fitted, whose batched INT8
#: GEMMs took 625.4 ms against 590.5 (``h200-ozaki2-level2-spans-32768.json``); spans of 1024 ran 707.7 ms
#: (1.963x) against 692.9 (2.004x) on another board.
MAX_SPAN = 2048
#: m and n must be multiples of this (quarters of whole 16-line INT8 GEMM views), and the padded k of
#: :data:`K_STEP` (quarters of whole 32-column tiles of the operand pass).
SIDE_STEP, K_STEP = 64, 128


def shape_fits(m: int, k: int, n: int, level: int, block: int) -> bool:
    """Whether an m x k x n product at ``level`` has the shape the fused second level takes (see the module)."""
    ldk = _round_up(max(k, 1))
    return (level == 2 and ldk <= block and ldk % K_STEP == 0 and m % SIDE_STEP == 0 and n % SIDE_STEP == 0
            and min(m, n, ldk) // 4 >= MIN_SIDE)


def gemm_depth(k: int) -> int:
    """The depth of the fused second level's INT8 GEMMs for an inner dimension ``k``: a quarter of the padded k,
    which the backend's residue GEMMs must take (:func:`gpu.ozaki2.memory.narrow_products`)."""
    return _round_up(max(k, 1)) // 4


def fused_shape(m: int, k: int, n: int, level: int, block: int) -> bool:
    """Whether an m x k x n product at ``level`` has the shape of a fused form: one level's
    (:func:`gpu.ozaki2.fused_level.fusable`) or two levels' (:func:`shape_fits`). Other shapes and levels run the
    level passes (:mod:`gpu.ozaki2.winograd`), several times slower a level."""
    return fusable(m, k, n, level, block) or shape_fits(m, k, n, level, block)


def span_rows(quarter: int) -> list[int]:
    """The spans of A's quarters' rows the layout is offered in, fastest first: balanced spans of at most
    :data:`MAX_SPAN` rows, then halves of them down to :data:`gpu.ozaki2.fused_level.MIN_SPAN`
    (:func:`gpu.ozaki2.fused_level.span_rows`)."""
    offered = half_spans(quarter)
    return [rows for rows in offered if rows <= MAX_SPAN] or offered[-1:]


def span_gemms(be: Backend, ops_a: Array, ops_b: Array, products: Array, span: slice,
               moduli: tuple[int, ...]) -> list[Any]:
    """The 49 x count residue GEMMs of A's rows ``span`` (of each quarter), planned once on the plan's buffers:
    per modulus one batched launch (``products[t][p] = ops_a[t][p] @ ops_b[t][p].T mod m``) where the backend
    batches, else one a product. RuntimeError where the backend declines a view it promised to take."""
    rows, calls = span.stop - span.start, []
    for t, modulus in enumerate(moduli):
        a, r = ops_a[t][:, :rows], products[t][:, :rows]
        issue = be.residue_gemm(a, ops_b[t], r, modulus)
        if issue is not None:
            calls.append((None, issue, None))
            continue
        for p in range(49):
            found = planned(be, a[p], ops_b[t][p], r[p], [(slice(0, rows), slice(0, r.shape[-1]))], modulus)
            if found is None:
                raise RuntimeError("scheme II's fused second level holds its products as INT8 residues, but the "
                                   "backend declined a residue GEMM on one of its views (Backend.residue_min_k "
                                   "promised them): a bug; please report it with the operands' shapes")
            calls += found
    return calls


def level2_part(be: Backend, m: int, table: ModuliTable, work: Any) -> Part:
    """A plan's part for ``table``'s moduli in the fused second level's layout (``work``, a carved block): its
    operands' and products' views, the spans of A's quarters' rows and each span's residue GEMMs."""
    count, quarter = table.count, m // 4
    ops_a, ops_b, products = (work.view(name)[:count] for name in ("res_a", "res_b", "products"))
    spans = blocks(quarter, work.layout.rows)
    gemms = [span_gemms(be, ops_a, ops_b, products, span, table.moduli) for span in spans]
    return Part(table, ops_a, ops_b, products, [products] * len(spans), spans, True, gemms, [], quarter=quarter)


def run(plan: Any, family: Any, part: Any, A: Array, B: Array, C: Array, shift_a: Array, shift_b: Array,
        exps_a: Array, exps_b: Array, phases: dict[str, float] | None = None) -> None:
    """The product after the shifts: B's operands, then per span A's operands, its GEMMs and its CRT (see the
    module); ``phases``: as :meth:`gpu.ozaki2.plan.Plan.run`'s."""
    be, table, quarter = plan.backend, part.table, part.quarter
    with _phase(be, phases, "residues"):
        family.level2_operands(B.T, shift_b, exps_b, table, part.res_b, "b", 0, plan.n // 4, plan.n // 4)
    for span, products, gemms in zip(part.spans, part.planes, part.gemms, strict=True):
        rows = span.stop - span.start
        with _phase(be, phases, "residues"):
            family.level2_operands(A, shift_a, exps_a, table, part.res_a, "a", span.start, rows, quarter)
        with _phase(be, phases, "gemm"):
            run_planned(be, gemms)
        with _phase(be, phases, "crt"):
            family.crt_level2(products, table, shift_a, shift_b, C, span.start, rows, quarter)
