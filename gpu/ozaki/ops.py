"""The Ozaki scheme's operations per backend: line statistics, slicing, the bound, the verdict and the FP64 fold.

:func:`gpu.ozaki.matmul` is written once; what differs between the CPU and the
GPU is fetched as ``backend.ops("ozaki")``: :class:`HostOps` here (NumPy), and
:class:`gpu.ozaki.kernels.CudaOps` (CUDA kernels, loaded only with CuPy). Both
perform the same operations in the same order, so they give identical bits.

Lines (rows of A, columns of B) holding NaN or infinity get the exponent :data:`BAD`: their slices are zeros,
the bound skips them, and the fold's last launch writes their entries of C as the library GEMM's arithmetic
does (the device recomputes those dot products itself), so a call needs no wait to handle them.

The **verdict** is one 32-bit word, the only value a call may read back from the device (:func:`decode`):
bits 0-6 the slice count ``target=`` chose (0: none reaches it), bit 7 whether a line holds NaN or infinity,
bits 8-30 the binade of the bound's ratio (for the error message), offset by :data:`SPREAD_OFFSET`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..backend import Array, Backend, register_ops, require_memory
from .plan import MAX_FOLD, MAX_SLICES, OzakiPlan
from .slicing import encode, magnitudes, round_significant

FAMILY = "ozaki"
#: Flags of one fold launch: read the accumulator (and its compensation), read the open diagonal, store it,
#: add the compensation and apply the scales.
LOAD_ACC, LOAD_OPEN, STORE_OPEN, FINALIZE = 1, 2, 4, 8
#: The bound of ``target=`` (:mod:`gpu.ozaki.bound`): what raising the magnitudes adds per term at most, and
#: the lower bounds below K_ij times WEAK, which a float64 product recomputes.
RAISED_TERM, WEAK = 2.0**-61, 2.0**-48
#: A float64 lower bound below this: no slice count reaches the entry (alpha S <= 640).
UNREACHABLE = 2.0**-900
#: Way out named when the bound's work would not fit in free memory.
ADVICE = "pass slices= (a count, with no proven bound), or split the product into blocks of rows"
#: Entries screened per block on NumPy (float64 temporaries of this many entries).
BLOCK_ENTRIES = 2**24
#: The exponent of a line holding NaN or infinity (far below any real one: sums of two stay in 32 bits).
BAD = -(2**20)
#: The verdict's binade field: its offset, and the value that means an infinite ratio.
SPREAD_OFFSET, SPREAD_INF = 2**22, 2**22 - 1
#: The verdict's slice-count field.
COUNT_MASK = 127


def encode_verdict(slices: int, bad: bool, ratio: float | None) -> int:
    """The verdict word (see the module) from its parts, as the device's ``ozaki_verdict`` writes it."""
    spread = 0
    if ratio is not None and np.isinf(ratio):
        spread = SPREAD_INF
    elif ratio is not None and ratio > 0:
        spread = int(min(max(np.rint(np.log2(ratio)), 1 - SPREAD_OFFSET), SPREAD_INF - 1))
    return slices | (int(bad) << 7) | ((spread + SPREAD_OFFSET) << 8)


def decode(word: int) -> tuple[int, bool, float | None]:
    """(slices, whether a line holds NaN or infinity, log2 of the ratio: None for infinite) of a verdict."""
    spread = (word >> 8) - SPREAD_OFFSET
    return word & COUNT_MASK, bool(word >> 7 & 1), None if spread == SPREAD_INF else float(spread)


def _count(word: np.ndarray) -> int:
    """The slice count of a verdict word held in an array."""
    return int(word[0]) & COUNT_MASK


def batch_scales(diagonals: list[int], closes: list[bool]) -> tuple[int, int]:
    """(first diagonal, closing mask) of a fold batch, which the device turns back into the scales
    2**(-alpha d): a batch's diagonals run down by one after each closing buffer."""
    if len(closes) > MAX_FOLD:
        raise ValueError(f"a fold launch adds at most {MAX_FOLD} buffers, got {len(closes)}")
    d, mask = diagonals[0], 0
    for q, (diagonal, close) in enumerate(zip(diagonals, closes)):
        if diagonal != d:
            raise ValueError("a fold batch's diagonals must run down by one after each closing buffer")
        if close:
            mask |= 1 << q
            d -= 1
    return diagonals[0], mask


def screen_block(xp: Any, P: Array, nnz_rows: Array, nnz_cols: Array, factor: float) -> tuple[Array, Array, Array]:
    """(K, L, weak) of a block of the magnitude product P^ (:mod:`gpu.ozaki.bound`): K_ij, the lower bound
    L_ij = P^_ij factor - K_ij 2**-61 of P_ij, and where it is weak (P^_ij > 0 and L_ij < K_ij 2**-48)."""
    p = P.astype(np.float64)
    K = xp.minimum(nnz_rows[:, None], nnz_cols[None, :]).astype(np.float64)
    low = p * factor - K * RAISED_TERM
    return K, low, (p > 0) & (low < K * WEAK)


def refine(be: Backend, A: Array, B: Array, erow: Array, ecol: Array, P: Array, nnz_rows: Array,
           nnz_cols: Array, rows: Array, cols: Array, factor: float) -> float:
    """max K/L over the weak entries of rows x cols (``factor``: :func:`gpu.ozaki.bound.lower_factor` of k), L from
    a float64 product (inf: one is unreachable)."""
    xp, k = be.xp, A.shape[1]
    require_memory(be, 8 * (rows.size + cols.size) * k + 48 * rows.size * cols.size,
                   f"the float64 bound of {rows.size} x {cols.size} entries for target=", ADVICE)
    X = xp.ldexp(xp.abs(A[rows]), -erow[rows][:, None])
    Y = xp.ldexp(xp.abs(B[:, cols]), -ecol[cols][None, :])
    K, _, weak = screen_block(xp, P[rows][:, cols], nnz_rows[rows], nnz_cols[cols], factor)
    low = (X @ Y) * (1 - (k + 3) * 2.0**-53) - 2.0**-1020
    if bool((weak & (low < UNREACHABLE)).any()):
        return float("inf")
    return float(xp.where(weak, K / xp.where(weak, low, 1.0), 0.0).max())


def two_sum(hi: Array, lo: Array, t: Array) -> Array:
    """hi + t with its rounding error added to ``lo`` (in place; Knuth's TwoSum, any magnitudes): the new hi."""
    s = hi + t
    b = s - hi
    lo += (hi - (s - b)) + (t - b)
    return s


class HostOps:
    """The Ozaki scheme's operations on NumPy arrays."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def prepare(self, fmt: Any, target: bool) -> None:
        """Nothing to compile on NumPy."""

    def absmax(self, X: np.ndarray, axis: int) -> np.ndarray:
        """max |X| along ``axis`` (NaN where the line holds NaN)."""
        return np.abs(X).max(axis=axis)

    def line_exponents(self, X: np.ndarray, axis: int, count: bool, fmt: Any,
                       out: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray, Any]:
        """Per row (axis 1) or column (axis 0): the exponent e with max |x| < 2**e, :data:`BAD` where the line
        holds NaN or infinity, and with ``count`` its nonzeros (int64); into ``out`` where given."""
        lines = X.shape[1 - axis]
        nnz = np.count_nonzero(X, axis=axis).astype(np.int64) if count else None
        if X.shape[axis] == 0:
            exps = np.zeros(lines, dtype=np.int32)
        else:
            top = np.abs(X).max(axis=axis)
            exps = np.where(np.isfinite(top), np.frexp(top)[1], BAD).astype(np.int32)
        return (exps, nnz) if out is None else _into(out, (exps, nnz))

    def magnitudes(self, X: np.ndarray, exps: np.ndarray, axis: int, bits: int, storage: str,
                   out: np.ndarray | None = None) -> np.ndarray:
        """The operand of the bound's magnitude GEMM (:func:`gpu.ozaki.slicing.magnitudes`), in ``storage``;
        ``exps`` per row (axis 1) or per column (axis 0); the lines marked BAD are zeros; into ``out``."""
        e = exps[:, None] if axis == 1 else exps[None, :]
        with np.errstate(invalid="ignore", over="ignore"):
            values = np.where(e == BAD, 0.0, magnitudes(np, X, np.where(e == BAD, 0, e), bits))
        return _into(out, encode(np, values, storage))

    def screen(self, P: np.ndarray, nnz_rows: np.ndarray, nnz_cols: np.ndarray, factor: float
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(max K/L over the entries with P^ > 0 whose bound is not weak, or 0; rows and columns holding a
        weak entry) of :func:`screen_block`, in blocks of rows."""
        m, n = P.shape
        best, weak_rows, weak_cols = np.zeros(()), np.zeros(m, dtype=bool), np.zeros(n, dtype=bool)
        step = max(1, BLOCK_ENTRIES // max(n, 1))
        for r in range(0, m, step):
            K, low, weak = screen_block(np, P[r:r + step], nnz_rows[r:r + step], nnz_cols, factor)
            ok = (P[r:r + step] > 0) & ~weak
            best = np.maximum(best, np.where(ok, K / np.where(ok, low, 1.0), 0.0).max(initial=0.0))
            weak_rows[r:r + step] = weak.any(axis=1)
            weak_cols |= weak.any(axis=0)
        return best, weak_rows, weak_cols

    def ratio(self, P: np.ndarray, nnz_rows: np.ndarray, nnz_cols: np.ndarray, factor: float, A: np.ndarray,
              B: np.ndarray, erow: np.ndarray, ecol: np.ndarray, fmt: Any, out: np.ndarray | None = None
              ) -> np.ndarray:
        """G of :mod:`gpu.ozaki.bound` as a 1-element float64 array (``out`` where given): :meth:`screen`, then
        the weak entries from a float64 product of their rows' and columns' scaled magnitudes."""
        best, weak_rows, weak_cols = self.screen(P, nnz_rows, nnz_cols, factor)
        if weak_rows.any():
            rows, cols = np.flatnonzero(weak_rows), np.flatnonzero(weak_cols)
            best = max(float(best), refine(self.backend, A, B, erow, ecol, P, nnz_rows, nnz_cols, rows, cols, factor))
        return _into(out, np.array([best], dtype=np.float64))

    def verdict(self, ratio: np.ndarray | None, erow: np.ndarray, ecol: np.ndarray, alpha: int, budget: float,
                fmt: Any, out: np.ndarray | None = None) -> np.ndarray:
        """The verdict word (see the module) as a 1-element int32 array (``out`` where given)."""
        bad = bool((erow == BAD).any() or (ecol == BAD).any())
        slices, value = 0, None
        if ratio is not None:
            value = float(ratio[0])
            slices = next((s for s in range(1, MAX_SLICES + 1)
                           if (s + 1) * 2.0 ** (-alpha * s) * value * (1 + 2.0**-40) <= budget), 0)
        return _into(out, np.array([encode_verdict(slices, bad, value)], dtype=np.int32))

    @staticmethod
    def branch(word: np.ndarray, diagonal: int, most: int, handle: Any) -> bool:
        """Whether ``diagonal`` is among those of the count in ``word``, a count of at most ``most`` (the
        condition the device's ``ozaki_branch`` sets; ``handle`` is unused)."""
        return 1 <= _count(word) <= most and diagonal <= _count(word) + 1

    def split(self, X: np.ndarray, exps: np.ndarray, p: OzakiPlan, rows_pad: int, layout: dict[str, int],
              overwrite: bool, out: np.ndarray, other: np.ndarray | None = None,
              limit: np.ndarray | None = None) -> np.ndarray:
        """X's rows as concatenated slices into ``out`` (rows_pad x positions*ldk; see
        :func:`gpu.ozaki.slicing.slice_layout`); with ``overwrite`` X itself holds the scaled remainders (no
        float64 copy), unless a line of X or of the other operand (exponents ``other``) is BAD: the fold then
        reads both operands. ``limit``: a verdict word whose count caps the digits written (0 where it is 0 or
        above the layout's)."""
        fmt, rows, cols = p.format, *X.shape
        digits = layout["digits"]
        if limit is not None:
            digits = _count(limit) if 1 <= _count(limit) <= digits else 0
        out[...] = 0

        def put(pos: int, values: np.ndarray) -> None:
            out[:rows, pos * p.ldk:pos * p.ldk + cols] = encode(np, values, fmt.storage)

        bad = exps == BAD
        clean = not bad.any() and (other is None or not (other == BAD).any())
        x = X if overwrite and X.flags.writeable and clean else X.copy()
        x[bad] = 0.0
        np.ldexp(x, -np.where(bad, 0, exps)[:, None], out=x)
        radix, digit = 2.0**p.alpha, np.empty_like(x)
        for j in range(1, p.slices + 1):
            if j >= layout["tail_from"]:
                put(layout["tail_first"] + (j - layout["tail_from"]) * layout["tail_step"],
                    round_significant(np, x * radix, fmt.bits, fmt.tiny))
            if j <= digits:
                x *= radix
                np.trunc(x, out=digit)
                x -= digit
                put(layout["first"] + (j - 1) * layout["step"], digit)
        return out

    def fold(self, buffers: np.ndarray, count: int, diagonals: list[int], closes: list[bool], alpha: int,
             acc: np.ndarray, comp: np.ndarray | None, open_: np.ndarray | None, erow: np.ndarray,
             ecol: np.ndarray, flags: int, A: np.ndarray, B: np.ndarray, fmt: Any, dst: np.ndarray | None = None,
             limit: np.ndarray | None = None, most: int = 0) -> None:
        """Add ``buffers[:count]`` (each m x n_pad) into acc (m x n) in the fixed order of :mod:`gpu.ozaki`: acc
        and ``comp`` hold the compensated sum between launches; the last launch writes ldexp(acc + comp,
        e_i + f_j) into ``dst`` (default ``acc``), and the library GEMM's entries in the rows and columns marked
        BAD, or everywhere where the verdict word ``limit`` has a count of 0 or above ``most`` (then no buffer is
        added). With a count c in 1..most, the buffers of diagonals above c + 1 (which that count does not run)
        are left out."""
        batch_scales(diagonals, closes)
        dst = acc if dst is None else dst
        m, n = acc.shape
        hi = acc.copy() if flags & LOAD_ACC else np.zeros((m, n))
        lo = comp.copy() if flags & LOAD_ACC else np.zeros((m, n))
        d = open_.copy() if flags & LOAD_OPEN else np.zeros((m, n))
        top = None if limit is None else _count(limit) + 1 if 1 <= _count(limit) <= most else 0
        for buf, diagonal, close in zip(buffers[:count], diagonals, closes):
            live = top is None or diagonal <= top
            if live:
                d += buf[:, :n]
            if close:
                if live:
                    hi = two_sum(hi, lo, d * 2.0 ** (-alpha * diagonal))
                d[...] = 0.0
        if flags & STORE_OPEN:
            open_[...] = d
        if flags & FINALIZE:
            with np.errstate(over="ignore", invalid="ignore"):  # an overflowing product is +-inf, as A @ B gives
                if limit is not None and not 1 <= _count(limit) <= most:
                    np.matmul(A, B, out=dst)
                    return
                np.ldexp(hi + lo, erow[:, None] + ecol[None, :], out=dst)
                rows, cols = np.flatnonzero(erow == BAD), np.flatnonzero(ecol == BAD)
                if rows.size:
                    dst[rows] = A[rows] @ B
                if cols.size:
                    dst[:, cols] = A @ B[:, cols]
        else:
            acc[...], comp[...] = hi, lo


def _into(out: Any, values: Any) -> Any:
    """``values`` (an array, or a tuple of arrays and None) copied into ``out`` where given, which it returns."""
    if out is None:
        return values
    if isinstance(values, tuple):
        for dst, src in zip(out, values):
            if src is not None:
                dst[...] = src
        return tuple(dst if src is not None else None for dst, src in zip(out, values))
    out[...] = values
    return out


def ops(backend: Backend) -> Any:
    """The Ozaki operations of ``backend``."""
    return backend.ops(FAMILY)


register_ops(FAMILY, "numpy", HostOps)
register_ops(FAMILY, "cupy", "gpu.ozaki.kernels:CudaOps")
