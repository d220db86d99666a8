"""Reference products: the correctly rounded float64 value of every entry of A B.

Two routes to the same numbers:

* :func:`exact_matmul`, at BLAS speed on NumPy or CuPy: rows of A and columns
  of B are split into integer-valued FP64 slices (:mod:`accuracy.slicing`),
  every slice pair is multiplied by the library GEMM, where it is exact, and
  the products are summed exactly in int64 limbs (:mod:`accuracy.limbs`) and
  rounded once.
* :func:`mpfr_matmul`, with gmpy2 (MPFR): exact products, a correctly rounded
  sum per entry. Slow (Python loops), for checking the fast route and for a
  few entries of a large product.

Both round to nearest with ties to even into binary64, subnormal results and
overflow to infinity included. An exactly zero entry is +0.0; a nonzero one that rounds to
zero keeps its sign (-0.0 for a negative one), as IEEE 754 has it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpu.backend import Array, Backend, MemoryPlanError, get_backend, register_ops
from gpu.backend.checks import gib
from gpu.backend.plans import MatmulPlan, PlanCache, operand_signature, resolve_options
from gpu.frontdoor.frontplan import register_exact

from .blocking import SHARE, Shape, lines, nonfinite_in_chunks, one_block, plan_blocks, spans_in_chunks, within
from .complex_reference import exact_complex, is_complex
from .limbs import carry, magnitude, round_to_float64
from .mpfr import mpfr_matmul, sample_entries
from .operands import NONFINITE, check_operands
from .slicing import MAX_BETA, Split, row_spans, slice_counts, split_rows
from .special import ieee_product

#: One int64 accumulation of a slice-pair product costs, per entry, about as much as this
#: many multiply-adds of the GEMM (about 100 measured on the 2-core CPU: 2.4 ns against
#: 23 ps; an estimate of a few hundred on a GPU, whose GEMM is faster relative to its
#: memory); it decides between fewer, wider slices with a blocked inner dimension and
#: more, narrower slices with one block.
ACCUMULATE_COST = 256
#: Limb bytes per output tile: bounds the memory of the exact sums.
TILE_BYTES = 2**30
#: A limb takes at most this many GEMM results (each below 2**53) between carries.
ADDS_PER_CARRY = 2**9 - 1
#: Plans :func:`exact_matmul` keeps.
PLANS = PlanCache(16)
#: The backend operations of the exact product (:meth:`gpu.backend.Backend.ops`).
FAMILY = "exact"


# --------------------------------------------------------------------------- fast exact product

@dataclass(frozen=True)
class SplitPlan:
    """How :func:`exact_matmul` splits a product: digit width, inner block and slice counts.

    With digits |d| <= 2**(beta - 1), a GEMM over ``block`` inner terms sums
    integers of magnitude at most block * 2**(2 beta - 2) <= 2**53: every
    partial sum is an integer that float64 holds, so the GEMM is exact in any
    summation order, with or without FMA. (This assumes a DGEMM of IEEE
    multiply-adds, as OpenBLAS and cuBLAS's default math mode are; an emulated
    FP64 mode that is not exact for such integers would break it.)
    """

    beta: int
    block: int
    slices_a: int
    slices_b: int
    work: int

    def as_dict(self) -> dict[str, int]:
        return {"beta": self.beta, "block": self.block, "slices_a": self.slices_a,
                "slices_b": self.slices_b, "work": self.work}


def max_block(beta: int) -> int:
    """The largest inner block whose slice GEMMs are exact at ``beta`` bits per digit."""
    return 2 ** (55 - 2 * beta)


def plan_exact(xp: Any, A: Array, B: Array) -> SplitPlan:
    """The digit width that minimises the estimated work for these operands.

    Work counts slice-row times slice-column pairs (each row of A and column of
    B needs its own number of slices) times the inner dimension plus
    :data:`ACCUMULATE_COST` per inner block.
    """
    return choose_plan(row_spans(xp, A), row_spans(xp, B.T), A.shape[1])


def choose_plan(spans_a: Array, spans_b: Array, k: int) -> SplitPlan:
    """:func:`plan_exact` from the exponent spans of A's rows and B's columns (:func:`row_spans`)."""
    best = None
    for beta in range(1, MAX_BETA + 1):
        block = min(k, max_block(beta))
        counts_a, counts_b = slice_counts(spans_a, beta), slice_counts(spans_b, beta)
        pairs = int(counts_a.sum()) * int(counts_b.sum())
        work = pairs * (k + ACCUMULATE_COST * -(-k // block))
        if best is None or work < best.work:
            best = SplitPlan(beta, block, _largest(counts_a), _largest(counts_b), work)
    return best


def _largest(counts: Array) -> int:
    return int(counts.max()) if counts.size else 0


def limb_count(slices_a: int, slices_b: int, beta: int, k: int) -> int:
    """Limbs that hold every exact entry and its carries.

    Slice pair (s, t) (from 1) lands in limb q = slices_a + slices_b - s - t, so
    the pairs fill slices_a + slices_b - 1 limbs. In units of the top one
    (s = t = 1) an entry is below k * 2**(2 beta) in magnitude: ceil(bit_length(k)
    / beta) + 2 limbs above it hold that with room to spare, and one more the sign.
    """
    return slices_a + slices_b - 1 + 3 + -(-k.bit_length() // beta)


@dataclass(frozen=True)
class ExactOptions:
    """The options of :func:`exact_matmul` (see there)."""

    check_finite: bool = True


class ExactPlan(MatmulPlan):
    """:func:`exact_matmul` for one operand signature: the operands' checks, and on CuPy its kernels compiled
    (:mod:`accuracy.exact_cuda`: one module). An audit tool, it waits for the device by nature: each execute
    reads the exponent ranges of A's rows and B's columns, plans the digit width and the blocks from them
    (:func:`choose_plan`, kept while the ranges repeat; :mod:`accuracy.blocking`, while the free memory does),
    and checks the inputs' finiteness where asked."""

    def __init__(self, A: Any, B: Any, *, options: Any = None, backend: str | Backend = "auto",
                 stream: Any = None) -> None:
        be = get_backend(backend)
        self.options = resolve_options(ExactOptions, options)
        A, B = check_operands(be, A, B, check_finite=False)
        self.backend, self.stream, self.shape = be, stream, (A.shape[0], A.shape[1], B.shape[1])
        self.signature = operand_signature(be, A, B, None, stream)
        self._decided: tuple[Any, SplitPlan, Any, int | None] | None = None
        be.ops(FAMILY).prepare()

    def _execute(self, A: Array, B: Array, out: Array | None) -> Array:
        be, (m, _, n) = self.backend, self.shape
        A, B = check_operands(be, A, B, self.options.check_finite)
        free = be.memory_info()[0]
        budget = one_block(be, int(SHARE * free), 8 * m * n)
        if 8 * m * n > budget:
            raise MemoryPlanError(f"the {m} x {n} reference product needs {gib(8 * m * n)} but {gib(free)} are free "
                                  f"on the {be.name} device (at most {gib(budget)} of them in one block and to be "
                                  "used); compute it in blocks of rows")
        while True:
            try:
                return _planned(be, A, B, self.options.check_finite, budget, self)
            except MemoryError:                        # CuPy's OutOfMemoryError too
                if budget // 2 < 8 * m * n:
                    raise
            be.release_memory()
            budget //= 2

    def decide(self, spans_a: np.ndarray, spans_b: np.ndarray, k: int, shape_of: Any, budget: int
               ) -> tuple[SplitPlan, Any]:
        """(split plan, blocks) for these exponent spans (host arrays): the split plan kept while they repeat, its
        blocks while the budget does (the budget follows the free memory, which moves between calls)."""
        key = (spans_a.tobytes(), spans_b.tobytes())
        if self._decided is None or self._decided[0] != key:
            self._decided = (key, choose_plan(spans_a, spans_b, k), None, None)
        _, plan, blocks, used = self._decided
        if used != budget:
            blocks = plan_blocks(shape_of(plan), budget)
            self._decided = (key, plan, blocks, budget)
        return plan, blocks


def exact_matmul(A: Any, B: Any, *, backend: str | Backend = "auto", check_finite: bool = True) -> Array:
    """The correctly rounded float64 product ``A @ B`` (round to nearest, ties to even); for complex operands the
    complex128 product with each part correctly rounded (:mod:`accuracy.complex_reference`).

    Exact for any finite inputs: any exponent range (rows needing more slices
    get them), any inner dimension (blocked so each GEMM stays exact),
    subnormal and overflowing results, zero rows and columns. The GEMMs run
    on the backend's BLAS (cuBLAS on CuPy); the result is an array of that
    backend. Inputs are not modified. ``plan_exact`` tells how the product
    will be split; the work grows with the exponent range of the rows of A and
    columns of B (about 16 GEMMs of the full size for the papers' phi = 2).

    ``check_finite`` (default True) refuses NaN and infinity, at the cost of
    reading A and B once. With False, the rows of A and columns of B that hold
    them get the exact IEEE value of their entries (:mod:`accuracy.special`:
    NaN or an infinity, independent of the order of the sum), the rest the
    correctly rounded product as usual. A product whose slices would not fit
    in the free memory runs in blocks of A's rows and B's columns planned
    before any work (:mod:`accuracy.blocking`), with the same bits. Raises
    TypeError for dtypes float64 may not hold exactly, ValueError for bad
    shapes or non-finite inputs, and :class:`gpu.backend.MemoryPlanError` when
    even one row of A and one column of B cannot fit beside the output.

    A call is a kept :class:`ExactPlan` (one per operand signature, :data:`PLANS`) and its execution. It is an
    audit tool and waits for the device: it plans from the exponent ranges it reads.
    """
    if is_complex(A, B):
        return exact_complex(A, B, exact_matmul, backend=backend, check_finite=check_finite)
    be = get_backend(backend)
    options = ExactOptions(check_finite)
    key = operand_signature(be, A, B)
    if key is None:
        A, B = check_operands(be, A, B, check_finite=False)
        key = operand_signature(be, A, B)
    plan = PLANS.get(None if key is None else (key, options), lambda: ExactPlan(A, B, options=options, backend=be))
    return plan._execute(A, B, None)


def _planned(be: Backend, A: Array, B: Array, check_finite: bool, budget: int, plan: ExactPlan) -> Array:
    """The reference within ``budget`` bytes. Where the blocks' model undercounts the device's own temporaries
    (CuPy's, under a tight pool limit: a block then runs out of memory), :func:`exact_matmul` plans again at
    half the budget, after handing the pool's cached blocks back (a wait, on that rare path only): blocks are
    independent and exact, so the result has the same bits."""
    bad_rows = bad_cols = None
    if not check_finite:
        bad_rows, bad_cols = nonfinite_in_chunks(be.xp, A, budget), nonfinite_in_chunks(be.xp, B.T, budget)
    return _exact(be, A, B, bad_rows, bad_cols, budget, plan)


def _exact(be: Backend, A: Array, B: Array, bad_rows: Array | None, bad_cols: Array | None, budget: int,
           decider: ExactPlan) -> Array:
    """The correctly rounded product, in the blocks of :mod:`accuracy.blocking` (NaN and infinity in the
    given rows of A and columns of B: zeroed for the product, their entries then take IEEE values). On CuPy
    the spans, the splits and the tiles are :mod:`accuracy.exact_cuda`'s kernels."""
    xp, family = be.xp, be.ops(FAMILY)
    m, k, n = A.shape[0], A.shape[1], B.shape[1]
    if not (m and n and k):
        return xp.zeros((m, n), dtype=np.float64)
    sa, sb = (be.to_numpy(spans_in_chunks(xp, X, bad, budget, family.spans))
              for X, bad in ((A, bad_rows), (B.T, bad_cols)))
    nonfinite = any(x is not None and x.size for x in (bad_rows, bad_cols))

    def shape_of(p: SplitPlan) -> Shape:
        limbs = limb_count(p.slices_a, p.slices_b, p.beta, k)
        return Shape(m, k, n, p.slices_a, p.slices_b, limbs, max(1, TILE_BYTES // (8 * limbs)), nonfinite)

    plan, blocks = decider.decide(sa, sb, k, shape_of, budget)
    C = xp.zeros((m, n), dtype=np.float64)
    for I in blocks.row_blocks(m):
        rows = family.split(xp, lines(xp, A, I, bad_rows), plan.beta)
        for J in blocks.col_blocks(n):
            cols = family.split(xp, lines(xp, B.T, J, bad_cols), plan.beta)
            if rows.count and cols.count:
                _block(be, C, rows, cols, (I, J), plan, k, blocks.tile)
            del cols
            _ieee(xp, C, A, B, I, J, bad_rows, bad_cols)
        del rows                                   # before the next block's split, not after it
    return C


def _block(be: Backend, C: Array, rows: Split, cols: Split, block: tuple[slice, slice], plan: SplitPlan, k: int,
           tile: int) -> None:
    """C[I, J] from the slices of A's rows I and B's columns J, in tiles of at most ``tile`` entries."""
    I, J = block
    limbs = limb_count(rows.count, cols.count, plan.beta, k)
    for ti, tj in tiles(I.stop - I.start, J.stop - J.start, limbs, tile):
        part = C[I.start + ti.start:I.start + ti.stop, J.start + tj.start:J.start + tj.stop]
        be.ops(FAMILY).tile(be, rows, cols, ti, tj, plan.block, limbs, part, ADDS_PER_CARRY)


def _ieee(xp: Any, C: Array, A: Array, B: Array, I: slice, J: slice, bad_rows: Array | None,
          bad_cols: Array | None) -> None:
    """The exact IEEE values of C[I, J]'s entries in rows of A and columns of B holding NaN or infinity."""
    r, c = within(xp, bad_rows, I), within(xp, bad_cols, J)
    if r is not None:
        C[r + I.start, J] = ieee_product(xp, A[r + I.start], B[:, J])
    if c is not None:
        C[I, c + J.start] = ieee_product(xp, A[I], B[:, c + J.start])


def tiles(m: int, n: int, limbs: int, entries: int | None = None) -> list[tuple[slice, slice]]:
    """Output tiles whose limbs take at most :data:`TILE_BYTES` (at least one entry each), and of at most
    ``entries`` entries where given: whole columns where they fit, near-equal parts otherwise."""
    budget = max(1, TILE_BYTES // (8 * limbs))
    budget = min(budget, entries) if entries else budget
    mb = min(m, max(1, budget // min(n, 256)))
    nb = min(n, max(1, budget // mb))
    mb, nb = -(-m // -(-m // mb)), -(-n // -(-n // nb))
    return [(slice(i, min(i + mb, m)), slice(j, min(j + nb, n)))
            for i in range(0, m, mb) for j in range(0, n, nb)]


def _part(xp: Any, sl, span: slice) -> tuple[Array | None, Array]:
    """The digits of a slice that fall in rows ``span``, and their rows within the span
    (None: every row of the span, in order)."""
    if sl.rows is None:
        return None, sl.digits[span]
    lo, hi = (int(i) for i in xp.searchsorted(sl.rows, xp.asarray([span.start, span.stop])))
    return sl.rows[lo:hi] - span.start, sl.digits[lo:hi]


def _accumulate(xp: Any, limb: Array, product: Array, scratch: Array, rows: Array | None,
                cols: Array | None) -> None:
    """limb[rows, cols] += product, exactly (product holds integers below 2**53)."""
    xp.copyto(scratch, product, casting="unsafe")
    if rows is None and cols is None:
        limb += scratch
    elif rows is None:
        limb[:, cols] += scratch
    elif cols is None:
        limb[rows] += scratch
    else:
        limb[xp.ix_(rows, cols)] += scratch


def _tile(be: Backend, rows: Split, cols: Split, I: slice, J: slice, block: int, limbs: int) -> Array:
    """One output tile: every slice-pair GEMM summed exactly in limbs, then rounded once."""
    xp, beta = be.xp, rows.beta
    mi, nj = I.stop - I.start, J.stop - J.start
    L = xp.zeros((limbs, mi, nj), dtype=np.int64)
    buffer, scratch = xp.empty((mi, nj)), xp.empty((mi, nj), dtype=np.int64)
    pending = [0] * limbs
    top = rows.count + cols.count
    for s, sa in enumerate(rows.slices, 1):
        a_rows, a = _part(xp, sa, I)
        if not len(a):
            continue
        for t, sb in enumerate(cols.slices, 1):
            b_cols, b = _part(xp, sb, J)
            if not len(b):
                continue
            q = top - s - t
            out, tmp = buffer[:len(a), :len(b)], scratch[:len(a), :len(b)]
            for k0 in range(0, a.shape[1], block):
                if pending[q] == ADDS_PER_CARRY:
                    carry(L, beta)
                    pending = [0] * limbs
                be.gemm(a[:, k0:k0 + block], b[:, k0:k0 + block].T, out)
                _accumulate(xp, L[q], out, tmp, a_rows, b_cols)
                pending[q] += 1
    negative, digits = magnitude(xp, L, beta)
    exponent = rows.exponent[I][:, None] + cols.exponent[J][None, :] + 2 - top * beta
    value = round_to_float64(xp, digits, beta, exponent)
    return xp.where(negative, -value, value)


class HostExact:
    """The exact product's element-wise work on NumPy (:mod:`accuracy.exact_cuda` is CuPy's twin)."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def prepare(self) -> None:
        """Nothing to compile on NumPy."""

    spans = staticmethod(row_spans)
    split = staticmethod(split_rows)

    def tile(self, be: Backend, rows: Split, cols: Split, I: slice, J: slice, block: int, limbs: int, C: Array,
             adds_per_carry: int) -> None:
        """One output tile into ``C`` (:func:`_tile`; it reads :data:`ADDS_PER_CARRY` itself)."""
        C[...] = _tile(be, rows, cols, I, J, block, limbs)


register_ops(FAMILY, "numpy", HostExact)
register_ops(FAMILY, "cupy", "accuracy.exact_cuda:CudaExact")


class ExactInto(MatmulPlan):
    """An :class:`ExactPlan` that writes into ``out`` where given: the front door's ``accuracy="exact"``
    (:func:`gpu.frontdoor.frontplan.register_exact`). NaN and infinity give their IEEE entries, as every front-door
    method gives the library GEMM's pattern (``check_finite=False``)."""

    def __init__(self, A: Any, B: Any, out: Any, backend: Backend, stream: Any = None) -> None:
        self.backend, self.stream = backend, stream
        self._plan = ExactPlan(A, B, options=ExactOptions(check_finite=False), backend=backend, stream=stream)
        self.signature = operand_signature(backend, A, B, out, stream)      # arrays the front door checked

    def _execute(self, A: Array, B: Array, out: Array | None) -> Array:
        C = self._plan._execute(A, B, None)
        if out is None:
            return C
        out[...] = C
        return out


register_exact(ExactInto)


__all__: Sequence[str] = ("NONFINITE", "ExactOptions", "ExactPlan", "SplitPlan", "check_operands", "exact_matmul",
                          "mpfr_matmul", "plan_exact", "sample_entries")
