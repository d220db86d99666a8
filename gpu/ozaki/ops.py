"""The Ozaki scheme's operations per backend: line statistics, slicing, the bound's magnitudes and the FP64 fold.

:func:`gpu.ozaki.matmul` is written once; what differs between the CPU and the
GPU is fetched as ``backend.ops("ozaki")``: :class:`HostOps` here (NumPy), and
:class:`gpu.ozaki.kernels.CudaOps` (CUDA kernels, loaded only with CuPy). Both
perform the same operations in the same order, so they give identical bits.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..backend import Array, Backend, register_ops
from .plan import OzakiPlan
from .slicing import encode, magnitudes, round_significant

FAMILY = "ozaki"
#: Flags of one fold launch: read the accumulator (and its compensation), read the open diagonal, store it,
#: add the compensation and apply the scales.
LOAD_ACC, LOAD_OPEN, STORE_OPEN, FINALIZE = 1, 2, 4, 8
#: The bound of ``target=`` (:mod:`gpu.ozaki.bound`): what raising the magnitudes adds per term at most, and
#: the lower bounds below K_ij times WEAK, which a float64 product recomputes.
RAISED_TERM, WEAK = 2.0**-61, 2.0**-48
#: Entries screened per block on NumPy (float64 temporaries of this many entries).
BLOCK_ENTRIES = 2**24


def screen_block(xp: Any, P: Array, nnz_rows: Array, nnz_cols: Array, factor: float) -> tuple[Array, Array, Array]:
    """(K, L, weak) of a block of the magnitude product P^ (:mod:`gpu.ozaki.bound`): K_ij, the lower bound
    L_ij = P^_ij factor - K_ij 2**-61 of P_ij, and where it is weak (P^_ij > 0 and L_ij < K_ij 2**-48)."""
    p = P.astype(np.float64)
    K = xp.minimum(nnz_rows[:, None], nnz_cols[None, :]).astype(np.float64)
    low = p * factor - K * RAISED_TERM
    return K, low, (p > 0) & (low < K * WEAK)


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

    def absmax(self, X: np.ndarray, axis: int) -> np.ndarray:
        """max |X| along ``axis`` (NaN where the line holds NaN)."""
        return np.abs(X).max(axis=axis)

    def magnitudes(self, X: np.ndarray, exps: np.ndarray, axis: int, bits: int, storage: str) -> np.ndarray:
        """The operand of the bound's magnitude GEMM (:func:`gpu.ozaki.slicing.magnitudes`), in ``storage``;
        ``exps`` per row (axis 1) or per column (axis 0)."""
        return encode(np, magnitudes(np, X, exps[:, None] if axis == 1 else exps[None, :], bits), storage)

    def screen(self, P: np.ndarray, nnz_rows: np.ndarray, nnz_cols: np.ndarray, factor: float
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(max K/L over the entries with P^ > 0 whose bound is not weak, or 0; rows and columns holding a
        weak entry) of :func:`screen_block`, in blocks of rows."""
        m, n = P.shape
        best, weak_rows, weak_cols = np.zeros(()), np.zeros(m, dtype=bool), np.zeros(n, dtype=bool)
        step = max(1, BLOCK_ENTRIES // n)
        for r in range(0, m, step):
            K, low, weak = screen_block(np, P[r:r + step], nnz_rows[r:r + step], nnz_cols, factor)
            ok = (P[r:r + step] > 0) & ~weak
            best = np.maximum(best, np.where(ok, K / np.where(ok, low, 1.0), 0.0).max())
            weak_rows[r:r + step] = weak.any(axis=1)
            weak_cols |= weak.any(axis=0)
        return best, weak_rows, weak_cols

    def split(self, X: np.ndarray, exps: np.ndarray, p: OzakiPlan, rows_pad: int, layout: dict[str, int],
              overwrite: bool) -> np.ndarray:
        """X's rows as concatenated slices, rows_pad x positions*ldk (see :func:`gpu.ozaki.slicing.slice_layout`);
        with ``overwrite`` X itself holds the scaled remainders (no float64 copy)."""
        fmt, rows, cols = p.format, *X.shape
        out = np.zeros((rows_pad, layout["positions"] * p.ldk), dtype=fmt.storage)

        def put(pos: int, values: np.ndarray) -> None:
            out[:rows, pos * p.ldk:pos * p.ldk + cols] = encode(np, values, fmt.storage)

        x = X if overwrite and X.flags.writeable else X.copy()
        np.ldexp(x, -exps[:, None], out=x)
        radix, digit = 2.0**p.alpha, np.empty_like(x)
        for j in range(1, p.slices + 1):
            if j >= layout["tail_from"]:
                put(layout["tail_first"] + (j - layout["tail_from"]) * layout["tail_step"],
                    round_significant(np, x * radix, fmt.bits, fmt.tiny))
            if j <= layout["digits"]:
                x *= radix
                np.trunc(x, out=digit)
                x -= digit
                put(layout["first"] + (j - 1) * layout["step"], digit)
        return out

    def fold(self, buffers: list[Array], scales: list[float], closes: list[bool], acc: Array, comp: Array | None,
             open_: Array | None, erow: Array, ecol: Array, flags: int) -> None:
        """Add buffers (m x n_pad) into acc (m x n) in the fixed order of :mod:`gpu.ozaki`: acc and ``comp``
        hold the compensated sum between launches, the last one writes ldexp(acc + comp, e_i + f_j)."""
        m, n = acc.shape
        hi = acc.copy() if flags & LOAD_ACC else np.zeros((m, n))
        lo = comp.copy() if flags & LOAD_ACC else np.zeros((m, n))
        d = open_.copy() if flags & LOAD_OPEN else np.zeros((m, n))
        for buf, scale, close in zip(buffers, scales, closes):
            d += buf[:, :n]
            if close:
                hi = two_sum(hi, lo, d * scale)
                d[...] = 0.0
        if flags & STORE_OPEN:
            open_[...] = d
        if flags & FINALIZE:
            with np.errstate(over="ignore"):            # an overflowing product is +-inf, as A @ B gives
                np.ldexp(hi + lo, erow[:, None] + ecol[None, :], out=acc)
        else:
            acc[...], comp[...] = hi, lo


def ops(backend: Backend) -> Any:
    """The Ozaki operations of ``backend``."""
    return backend.ops(FAMILY)


register_ops(FAMILY, "numpy", HostOps)
register_ops(FAMILY, "cupy", "gpu.ozaki.kernels:CudaOps")
