"""Ozaki scheme II for complex products: the residues of the real and imaginary parts share one scaling, and the
INT8 products modulo each modulus are two over a Gaussian modulus (2M, the default under ``moduli="auto"``),
Karatsuba's three (3M) or the definition's four (4M).

Each part of C = A B is one real inner product of 2k terms (Re C = [Re A, -Im A] [Re B; Im B], Im C =
[Re A, Im A] [Im B; Re B]), so a row of A is scaled by the statistics of its 2k entries [Re a_i, Im a_i] (its
maximum, and the sum of its squared bars) and a column of B likewise, as scheme II scales a real product of 2k
terms (:mod:`gpu.ozaki2.scaling`), and ``moduli="auto"`` takes the fewest moduli whose normwise bound holds for
that product (:mod:`gpu.ozaki2.normwise`):

    |Re C_ij - Re (AB)_ij| <= t ||[Re a_i, Im a_i]||_2 ||[Re b_j; Im b_j]||_2 + 2**-53 |Re C_ij|

and the same for the imaginary part, t = 2**-56 sqrt(2k) for ``"dgemm"``. With the scaled integers A' = Ar' + i
Ai' and B' = Br' + i Bi', modulo each modulus m:

* ``"2m"`` (the default where the bound picks the count): over the Gaussian moduli, where -1 has a square root j
  modulo m (:data:`gpu.ozaki2.moduli.GAUSSIAN_MODULI`), P = (Ar' + j Ai')(Br' + j Bi') and
  Q = (Ar' - j Ai')(Br' - j Bi'), then Re C' = (P + Q) / 2 and Im C' = (P - Q) / (2 j) modulo m: two INT8 products
  (:mod:`gpu.ozaki2.gauss`). The Gaussian moduli are smaller than GEMMul8's, so ``"auto"`` counts over them (16
  where 3M takes 15 for the same bound, typically): 32 INT8 products where 3M takes 45;
* ``"3m"``: T1 = Ar' Br', T2 = Ai' Bi', T3 = (Ar' + Ai')(Br' + Bi') (the sums taken modulo m, INT8 again), then
  Re C' = T1 - T2 and Im C' = T3 - T1 - T2 modulo m: three INT8 products for four;
* ``"4m"``: Re C = [Ar, -Ai] [Br; Bi] and Im C = [Ar, Ai] [Bi; Br], each one real scheme II product of 2k
  terms through the real scheme's kept plans (:func:`gpu.ozaki2.matmul` under :func:`gpu.zgemm.matmul`): the
  INT8 work of 4M, but in the real scheme's fast layout, with its fused passes and no pass of its own.

Arithmetic modulo m is a ring, so 2M and 3M give the exact residues of Re C' and Im C', and the CRT recovers each
part as a real product's: 3M and 4M give the same bits (the real products of 4M have these rows, columns and
inner sums, so the same scaling and, under ``"auto"``, the same count), and 2M gives 3M's over the same moduli. 3M
in floating point loses accuracy on the imaginary part; over the residues it loses none. NaN and infinity give
the real formula's IEEE values in their rows and columns, as the real scheme does.

3M runs per modulus and k block: the operand sums (a pass each), three INT8 GEMMs into INT32, and both parts from
those in one pass (:meth:`gpu.ozaki2.winograd.HostResidueOps.karatsuba`); 2M forms each operand's pair U, V in place
of its parts' residues (a pass per modulus), then two INT8 GEMMs and one pass to both parts. Either writes straight
into the two parts' planes where k is one block and n a whole number of 16; the residues are held for the whole
product, and k is blocked as the real scheme blocks it. A and B are copied once, into [Re A, Im A] and [Re B; Im B]
(:func:`stacked`): the statistics read them whole, the residues their halves, and the IEEE repair A's whole with B's
two halves in place (B's lower half signed, so [Re B; -Im B] is never copied). At N = 16384 on the H200 the three
INT8 GEMMs took 322 of the 407 ms of a 3M call (``results/published/h200/h200-ozaki2-complex-probe.json``); the
first version's six 4 GiB concatenations of the statistics and the repair are now the two stacked parts. As called
at 16384 (``results/published/h200/h200-complex.csv``), 2M ran at 2.30x ZGEMM, 3M at 1.82x and 4M through the real
plans at 1.61x; the front door takes the scheme its device profile measured fastest (``gemmlab calibrate --methods``
times all three).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

from ..backend import Array, Backend, get_backend, matrix_pair, require_memory
from ..backend.plans import freeing_kept_plans
from ..ozaki.plan import _round_up
from ..zgemm.api import check_dtype
from ..zgemm.api import matmul as zgemm_matmul
from . import gauss
from .api import matmul as real_matmul
from .gemms import blocks
from .moduli import GAUSSIAN_MODULI, MAX_MODULI, MODULI, moduli_table
from .normwise import LineStats, refusal, target_value
from .ops import ops
from .options import count as count_of
from .options import k_block as block_of
from .winograd import FAMILY, add, int32_product

SCHEMES = ("2m", "3m", "4m")


def matmul(A: Any, B: Any, *, moduli: Any = "auto", target: Any = None, scheme: str | None = None,
           k_block: int | None = None, backend: str | Backend = "auto") -> Array:
    """The complex128 product ``A @ B`` by Ozaki scheme II over the residues of both parts (see the module):
    ``moduli`` a count in 1..20 or ``"auto"`` (``target``: ``"dgemm"`` by default, ``"sgemm"`` or a number in
    (0, 1)), of the Gaussian moduli for ``scheme`` ``"2m"``, of GEMMul8's for ``"3m"`` and ``"4m"`` (these two give
    the same bits). ``scheme`` None (the default): ``"2m"`` where the bound chooses the count, ``"3m"`` for a count
    given, which then keeps its meaning (that many of GEMMul8's moduli; as many Gaussian ones span fewer bits).
    ``k_block``: most inner terms per INT8 GEMM, as :func:`gpu.ozaki2.matmul`'s. Raises TypeError and ValueError
    before any work."""
    fixed, block = count_of(moduli, target), block_of(k_block)
    scheme = scheme_of(scheme, fixed)
    be = get_backend(backend)
    if scheme == "4m":
        real = partial(real_matmul, moduli=moduli, target=target, k_block=k_block, backend=be)
        return zgemm_matmul(A, B, scheme="4m", real=real, backend=be)
    A, B, _, _ = matrix_pair(be, A, B)
    check_dtype(A, "A")
    check_dtype(B, "B")
    (m, k), n = A.shape, B.shape[1]
    if m and n and k:
        _require(be, peak_bytes(m, k, n, fixed or MAX_MODULI, scheme),
                 f"Ozaki scheme II on a complex {m} x {k} x {n} product")
    SA, SB = stacked(be, A, "A", 1), stacked(be, B, "B", 0)
    C = be.xp.zeros((m, n), dtype=np.complex128)
    if not (m and n and k):
        return C
    (ar, ai), (br, bi) = (SA[:, :k], SA[:, k:]), (SB[:k], SB[k:])
    family, xp = ops(be), be.xp
    rows = family.line_stats(SA, None, fixed is None)
    cols = family.line_stats(SB.T, None, fixed is None)
    moduli_set = moduli_of(scheme)
    count = fixed or _auto(be, family, rows, cols, 2 * k, "dgemm" if target is None else target, moduli_set)
    table = moduli_table(count, moduli_set)
    shift_a, shift_b = family.shifts(rows, table), family.shifts(cols, table)
    ldk, n_pad = _round_up(k), _round_up(n)
    res = [family.residues(X, shift_a, rows.e, table, m, ldk) for X in (ar, ai)] + \
        [family.residues(X.T, shift_b, cols.e, table, n_pad, ldk) for X in (br, bi)]
    planes = _planes(be, res, table, blocks(ldk, block), scheme, n)
    out = xp.empty((m, n))
    family.prepare(table, planes[0])
    # Re C = [Re A, Im A] [Re B; -Im B] and Im C = [Re A, Im A] [Im B; Re B], in the IEEE repair's terms
    for plane, (top, below, sign), target_part in ((planes[0], (br, bi, -1.0), "real"),
                                                   (planes[1], (bi, br, 1.0), "imag")):
        family.crt(plane, table, shift_a, shift_b, out)
        family.fix_nonfinite(SA, top, out, rows, cols, below, sign)
        setattr(C, target_part, out)
    return C


def stacked(be: Backend, X: Array, name: str, axis: int) -> Array:
    """X's real and imaginary parts in one float64 array, side by side (``axis`` 1: [Re X, Im X], what A's rows
    are scaled by) or one above the other (``axis`` 0: [Re X; Im X], B's columns): the statistics read it whole
    and the residues read its halves, so the parts are copied out of X once (a zero imaginary part for a real X).
    TypeError for a dtype a complex product does not take."""
    check_dtype(X, name)
    rows, cols = X.shape
    S = be.xp.empty((rows, 2 * cols) if axis else (2 * rows, cols), dtype=np.float64)
    re, im = (S[:, :cols], S[:, cols:]) if axis else (S[:rows], S[rows:])
    complex_ = X.dtype.kind == "c"
    re[...] = X.real if complex_ else X
    im[...] = X.imag if complex_ else 0.0
    return S


def _require(be: Backend, need: int, what: str) -> None:
    """:func:`require_memory`, once more after freeing the plans every family's ``matmul`` keeps where it refuses
    (their workspaces held the memory: at N = 16384 on the H200 the check found 96.7 GiB free but not 57 in one
    block, after other calls in the same process), as the front door does."""
    freeing_kept_plans(partial(require_memory, be, need, what, "pass fewer moduli, or split the product into "
                               "blocks of rows"))


def peak_bytes(m: int, k: int, n: int, count: int, scheme: str = "2m") -> int:
    """Bytes a product takes beyond A and B at its peak (an upper bound): the parts of A and B (float64, stacked:
    :func:`stacked`), the residues of the four parts and the two parts' planes, one k block's INT32 products
    (three and the INT8 sums of 3M, two of 2M, whose pairs replace the residues) and their parts' residues, C
    (complex128) and the float64 part the CRT writes."""
    ldk, n_pad = -(-k // 16) * 16, -(-n // 16) * 16
    parts = 8 * 2 * (m * k + k * n)
    residues = 2 * count * (m + n_pad) * ldk
    planes = 2 * count * m * n
    products = 2 * m * n_pad * (4 + 1) if scheme == "2m" else 3 * m * n_pad * (4 + 2) + (m + n_pad) * ldk
    return parts + residues + planes + products + 16 * m * n + 8 * m * n


def _planes(be: Backend, res: list[Array], table: Any, ks: list[slice], scheme: str, n: int) -> list[Array]:
    """The residue planes of Re C' and Im C' for every modulus of ``table`` (INT8, (count, m, n) each) from the
    residues ``res`` of Re A, Im A, Re B^T and Im B^T (padded to n_pad rows of B^T), summed over the k blocks
    ``ks``: by 2M, the operands' pairs first replacing their parts' residues, or by 3M."""
    count, m, n_pad = table.count, res[0].shape[1], res[2].shape[1]
    planes = [be.xp.empty((count, m, n), dtype=np.int8) for _ in range(2)]
    for t, modulus in enumerate(table.moduli):
        if scheme == "2m":
            for x, y in ((res[0][t], res[1][t]), (res[2][t], res[3][t])):
                gauss.ops(be).split(x, y, modulus, out=(x, y))
        for number, kb in enumerate(ks):
            into = (planes[0][t], planes[1][t]) if len(ks) == 1 and n_pad == n else None
            found = _PARTS[scheme](be, *(r[t][:, kb] for r in res), modulus, into)
            if into is None:
                for plane, part in zip(planes, found, strict=True):
                    plane[t] = add(plane[t], part[:, :n], modulus) if number else part[:, :n]
    return planes


def scheme_of(scheme: str | None, count: int | None) -> str:
    """The scheme a call runs: ``scheme`` where given (ValueError for an unknown one), else 2M under the bound's
    count (``count`` None) and 3M for a count given (see :func:`matmul`)."""
    if scheme is None:
        return "3m" if count else "2m"
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {', '.join(map(repr, SCHEMES))}, not {scheme!r}")
    return scheme


def moduli_of(scheme: str) -> tuple[int, ...]:
    """The moduli a scheme draws its count from: the Gaussian ones for ``"2m"``, GEMMul8's for the others."""
    return GAUSSIAN_MODULI if scheme == "2m" else MODULI


def _auto(be: Backend, family: Any, rows: LineStats, cols: LineStats, k2: int, target: Any,
          moduli: tuple[int, ...] = MODULI) -> int:
    """The fewest of ``moduli`` whose normwise bound for a real product of ``k2`` terms meets ``target``."""
    buffers = family.count_buffers(be)
    count = family.auto_count(rows, cols, k2, target_value(target, k2), buffers, moduli)
    if count == 0:
        error = refusal(target, float(family.auto_errors(rows, cols, k2, buffers, moduli)[-1]))
        if moduli != MODULI:
            wider = float(family.auto_errors(rows, cols, k2, buffers, MODULI)[-1])
            error = ValueError(f"{error} (scheme='2m': {MAX_MODULI} Gaussian moduli; scheme='3m' takes GEMMul8's "
                               f"wider ones, normwise bound {wider:.3g} here at {MAX_MODULI})")
        raise error
    return count


def _parts_3m(be: Backend, ar: Array, ai: Array, br: Array, bi: Array, m: int,
              into: tuple[Array, Array] | None = None) -> tuple[Array, Array]:
    """The symmetric residues of Re C' and Im C' over one k block, modulo m, by 3M (see the module): three INT32
    products, then both parts in one pass over them (written into ``into``'s two planes where given)."""
    t1, t2 = int32_product(be, ar, br), int32_product(be, ai, bi)
    t3 = int32_product(be, add(ar, ai, m), add(br, bi, m))
    return be.ops(FAMILY).karatsuba(t1, t2, t3, m, into)


def _parts_2m(be: Backend, ua: Array, va: Array, ub: Array, vb: Array, m: int,
              into: tuple[Array, Array] | None = None) -> tuple[Array, Array]:
    """The same by 2M over a Gaussian modulus (:mod:`gpu.ozaki2.gauss`), from the operands' pairs (U, V) that
    replaced their parts' residues: two INT32 products, then both parts in one pass."""
    return gauss.ops(be).parts(int32_product(be, ua, ub), int32_product(be, va, vb), m, into)


_PARTS = {"2m": _parts_2m, "3m": _parts_3m}
