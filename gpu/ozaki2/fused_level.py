"""One Winograd level over the residues in its fused form: the CRT combines the 7 products as it reads them.

:mod:`gpu.ozaki2.winograd` runs a level modulus by modulus in passes of its own (each operand's four sums, the
output blocks from the 7 products, reduced into INT8 planes that the CRT then reads). The fused form keeps no
planes, as the direct layout of level 0 keeps none: per modulus, each operand's four sums are formed into
the workspace (by the residue pass itself on the GPU, :mod:`gpu.ozaki2.residue_sums`), the 7 INT32 products of
half the size stay in it, and the CRT reads all 7 of every modulus for each entry of the four output blocks,

    C11 = M1 + M2,  C12 = M1 + M6 + M5 + M3,  C21 = M1 + M6 + M7 - M4,  C22 = M1 + M6 + M7 + M5,

exact in float64 (each M below 2**31 in magnitude), reduced to the symmetric residue there and summed into the
double-double CRT in the order of level 0: C is **bitwise** level 0's. The products are held for a span of the
top half's rows at a time (each span's GEMMs, then its CRT, as level 0's row panels); each INT8 GEMM is
7/8 of level 0's work, for 7/4 of the CRT's INT32 reads and one sums pass per operand.

Measured on the H200 (fast-15, phi = 1, as called beside DGEMM and the level-0 plan;
``results/published/h200/h200-ozaki2-fused-level-probe-*.json``, the same passes built by hand): at N = 32768 1.821x
DGEMM against level 0's 1.705x (the 7 half GEMMs 670 ms against 754, the sums 22 ms, 15.4 since they take two
residues a word, the CRT 29 against 20); at 16384 a tie (1.492 against 1.482x: the sub-products of 8192 run at
1324-1347 TOP/s against level 0's 1403, and the sums take 6.5-6.9 ms). The level passes' planes form ran level 1 at
1.335-1.345x against 1.489-1.492x at 16384 (``h200-ozaki2-levels*.json``). Through this module,
``ozaki2.matmul(A, B, level=1)`` at ``moduli="auto"`` ran at 1.829x against the defaults' 1.695x at 32768, 1.629x
against 1.559x at 24576 and 1.521x against 1.517x at 16384, as called, each beside its own DGEMM
(``h200-ozaki2-as-called-w1-*.json``); with the packed sums, 1.812x against 1.707x at 32768 and 1.523x against
1.500x at 16384 (``h200-ozaki2-as-called-sums-*.json``); with the sums formed in the residue pass, 1.563x against
1.541x (two passes) and level 0's 1.521x at 16384, 765.9 against 770.3 ms at 32768
(``h200-ozaki2-residue-sums-*.json``).

Where the backend's INT8 GEMMs can write residues (:func:`gpu.ozaki2.gemms.direct_products`: the CUTLASS kernel
built), the 7 products of a modulus are its INT8 residues, and the CRT combines those: the block sums differ, their
residues do not. On the H200 at N = 16384 (fast-15, kept plans in the same rounds;
``h200-ozaki2-residue-gemm-probe-16384.json``) the level then ran at 1.660x DGEMM against 1.600x on INT32 products,
its CRT 5.6 against 8.2 ms.

It takes level 1 on sides that halve into whole INT8 GEMM views (:func:`fusable`: m, n and the padded k
multiples of 2 :data:`~gpu.ozaki2.winograd.ALIGN_SIDE`, k in one block); other shapes and deeper levels run
:mod:`gpu.ozaki2.winograd`'s passes, which peel odd sides. Its workspace is the residues, the sums (as many
bytes again) and 105 bytes per entry of a span's four output blocks at 15 moduli (26.25 as residues, where the GEMMs
write them: the whole layout is then 10.8 FP64 matrices, against 20.6, and at N = 32768 it runs its whole span where
INT32 products took spans of 4096 rows: 1.890x and 1.875x DGEMM against 1.863x and 1.857x on the H200,
``h200-ozaki2-narrow-probe-563a3f5-32768.json``), beyond GEMMul8's bytes: a level is asked for (``level=1``), and
``workspace=`` caps it.
"""

from __future__ import annotations

from typing import Any

from ..backend import Array, Backend
from ..ozaki.plan import _round_up
from .gemms import panels, planned
from .winograd import ALIGN_SIDE, FAMILY, MIN_SIDE

#: The fewest rows of the top half a span of the fused layout holds; below, the level's planes are taken.
MIN_SPAN = 512
#: Rows and columns of the tile the GPU's one pass of residues and sums takes in each block of an operand.
SUMS_TILE = 32
#: The INT8 GEMM panels of sub-products over k up to SHORT_K. On the H200 at N = 16384 (sub-products of 8192 x 8192
#: over 8192, 15 moduli) panels of 2048 rows ran level 1 at 1.013x and 1.012x the speed of level 0's panels of 3072
#: in two runs (paired, as called; ``results/published/h200/h200-ozaki2-residue-sums-panels-16384*.json``) and its
#: GEMMs alone at 1532 against 1509 TOP/s (``h200-ozaki2-lt-batched-panel-rows.json``); longer k (N >= 24576, not
#: measured) keeps level 0's panels.
SHORT_K, SHORT_K_PANEL = 8192, (2048, 16384)


def fusable(m: int, k: int, n: int, level: int, block: int) -> bool:
    """Whether an m x k x n product at ``level`` takes the fused form (see the module)."""
    ldk = _round_up(max(k, 1))
    return level == 1 and ldk <= block and all(side % (2 * ALIGN_SIDE) == 0 and side // 2 >= MIN_SIDE
                                               for side in (m, n, ldk))


def span_rows(half: int) -> list[int]:
    """The spans of the top half's ``half`` rows the fused layout is offered in, fastest first: all of them,
    then balanced halves in whole multiples of 16 rows, down to :data:`MIN_SPAN`."""
    out = [half]
    while out[-1] > MIN_SPAN:
        rows = max(MIN_SPAN, _round_up(-(-out[-1] // 2), 16))
        if rows >= out[-1]:
            break
        out.append(rows)
    return out


def quadrants(res: Array, side: str) -> tuple[Array, Array, Array, Array]:
    """One modulus's blocks X11, X12, X21, X22 of A's residues (``side`` ``"a"``) or B's (``"b"``: B's columns as
    the rows of ``res``, so B's X12 is the bottom left block of ``res``)."""
    h, d = res.shape[0] // 2, res.shape[1] // 2
    top_right, bottom_left = res[:h, d:2 * d], res[h:2 * h, :d]
    x12, x21 = (top_right, bottom_left) if side == "a" else (bottom_left, top_right)
    return res[:h, :d], x12, x21, res[h:2 * h, d:2 * d]


def operands(res_a: Array, res_b: Array, sums_a: Array, sums_b: Array) -> tuple[tuple, tuple, tuple]:
    """One modulus's blocks of A's and B's residues (rows x k each: B's columns as rows) and the left and right
    operands of its 7 products M1..M7 (``sums_a``, ``sums_b``: its four sums of each operand)."""
    qa, qb, s, t = quadrants(res_a, "a"), quadrants(res_b, "b"), sums_a, sums_b
    pairs = ((qa[0], qb[0]), (qa[1], qb[2]), (s[3], qb[3]), (qa[3], t[3]), (s[0], t[0]), (s[1], t[1]), (s[2], t[2]))
    return qa, qb, pairs


def span_gemms(be: Backend, res_a: Array, res_b: Array, sums_a: Array, sums_b: Array, products: Array,
               span: slice, moduli: tuple[int, ...] | None = None) -> list[Any] | None:
    """The INT8 GEMMs of every modulus's 7 products for the top half's rows ``span``, planned once into
    ``products`` (count x 7 x rows x w: INT32, or INT8 residues modulo ``moduli``, None where the backend's
    residue GEMM does not take them all), each tiled as level 0 tiles a product of the span's size (panels of
    3072 rows from 6144 up, one GEMM below), or in panels of :data:`SHORT_K_PANEL` over k up to
    :data:`SHORT_K`."""
    rows, w = span.stop - span.start, res_b.shape[1] // 2
    tiles = panels(rows, w, rows, SHORT_K_PANEL if res_a.shape[2] // 2 <= SHORT_K else None)
    calls = []
    for t in range(products.shape[0]):
        _, _, pairs = operands(res_a[t], res_b[t], sums_a[t], sums_b[t])
        for p, (x, y) in enumerate(pairs):
            found = planned(be, x[span], y, products[t, p, :rows], tiles, moduli and moduli[t])
            if found is None:
                return None
            calls += found
    return calls


def whole_tiles(rows_pad: int, ldk: int) -> bool:
    """Whether an operand of ``rows_pad`` x ``ldk`` residues takes the GPU's one pass of residues and sums: both
    halves whole tiles of :data:`SUMS_TILE`."""
    return rows_pad > 0 and ldk > 0 and rows_pad % (2 * SUMS_TILE) == 0 and ldk % (2 * SUMS_TILE) == 0


def form_sums(be: Backend, res: Array, sums: Array, moduli: tuple[int, ...], side: str) -> None:
    """Each modulus's four sums of one operand's blocks (``side`` ``"a"`` or ``"b"``) into ``sums``, a pass each."""
    residue_ops = be.ops(FAMILY)
    for t, modulus in enumerate(moduli):
        residue_ops.operand_sums(*quadrants(res[t], side), modulus, side, out=tuple(sums[t]))


def form_operands(be: Backend, family: Any, table: Any, ldk: int, sides: tuple[tuple, ...], phase: Any) -> None:
    """Each operand's residues and, for a fused level, its four sums per modulus. ``sides``: per operand (X, its
    shifts, its bar exponents, its rows, its residues, its sums or None, ``"a"`` or ``"b"``); X None: residues
    kept from an earlier call (the sums are formed again). On the GPU one pass writes both where the blocks are
    whole tiles (:mod:`gpu.ozaki2.residue_sums`); otherwise the sums take a pass per modulus after the residues.
    The bits are the same either way. ``phase(name)``: a context that times a phase ("residues", "sums")."""
    left = []
    with phase("residues"):
        for X, shifts, exps, rows, res, sums, side in sides:
            if X is not None and sums is not None and family.residues_and_sums(X, shifts, exps, table, rows, ldk,
                                                                               res, sums, side):
                continue
            if X is not None:
                family.residues(X, shifts, exps, table, rows, ldk, out=res)
            if sums is not None:
                left.append((res, sums, side))
    if left:
        with phase("sums"):
            for res, sums, side in left:
                form_sums(be, res, sums, table.moduli, side)
