"""The exact product's element-wise work on CuPy, in one CUDA module (:mod:`accuracy.exact_source`).

The NumPy path of :func:`accuracy.reference.exact_matmul` strings together some sixty NumPy functions; on CuPy
each is a kernel of its own, compiled on first use (13.5 s for a first call at N = 1024 on the H200, with an
empty kernel cache). Here the same steps are five kernels of one module, one NVRTC compilation: the spans, the
digits of each slice, the limbs' accumulation and carries, and the final rounding. Which rows each slice holds
is decided on the host (this is an audit tool: it waits for the device, for the exponent ranges it plans
from), so no CuPy indexing kernel is needed either.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import cupy
import numpy as np

from .exact_source import EXACT_SOURCE
from .slicing import Slice, Split, slice_counts

THREADS, MAX_BLOCKS = 256, 65535


@cache
def module() -> Any:
    """The module, compiled on first use."""
    return cupy.RawModule(code=EXACT_SOURCE)


def _blocks(n: int) -> int:
    return max(1, min(MAX_BLOCKS, -(-n // THREADS)))


def _strides(X: Any) -> tuple[np.int64, np.int64]:
    return np.int64(X.strides[0] // X.itemsize), np.int64(X.strides[1] // X.itemsize)


def spans(X: Any) -> tuple[Any, Any]:
    """(int64 exponents, int64 spans) of X's rows, as :func:`accuracy.slicing.row_exponents` and
    :func:`accuracy.slicing.row_spans` give them; one pass, a warp per row."""
    rows, k = X.shape
    exps, out = cupy.empty(rows, dtype=np.int64), cupy.empty(rows, dtype=np.int64)
    if rows:
        module().get_function("exact_spans")((max(1, min(MAX_BLOCKS, -(-rows // 8))),), (THREADS,),
                                             (X, np.int64(rows), np.int64(k), *_strides(X), exps, out))
    return exps, out


def split(X: Any, beta: int) -> Split:
    """:func:`accuracy.slicing.split_rows` on CuPy: slice s holds the rows that need at least s slices (their
    counts read once from the spans), each slice one kernel launch."""
    rows, k = X.shape
    exps, row_spans = spans(X)
    counts = slice_counts(cupy.asnumpy(row_spans), beta)
    rest = cupy.empty((rows, k))
    slices: list[Slice] = []
    for s in range(1, int(counts.max(initial=0)) + 1):
        active = np.flatnonzero(counts >= s)
        everyone = active.size == rows
        index = None if everyone else cupy.asarray(active)
        digits = cupy.empty((active.size, k))
        module().get_function("exact_digits")(
            (_blocks(active.size * k),), (THREADS,),
            (X, *_strides(X), np.int32(s == 1), rest, np.int64(k), index if index is not None else np.int64(0),
             np.int64(active.size), exps, np.int32(s), np.int32(beta), digits))
        slices.append(Slice(index, digits, None if everyone else active))
    return Split(exps, slices, beta)


def _part(sl: Slice, span: slice) -> tuple[Any, Any]:
    """(device row indices or None, digits) of a slice's rows inside ``span`` (indices counted from 0)."""
    if sl.rows is None:
        return None, sl.digits[span]
    lo, hi = np.searchsorted(sl.host, [span.start, span.stop])
    return sl.rows[lo:hi], sl.digits[lo:hi]


def tile(be: Any, rows: Split, cols: Split, I: slice, J: slice, block: int, limbs: int, C: Any,
         adds_per_carry: int) -> None:
    """One output tile into ``C`` (the tile's view of the output): every slice-pair GEMM summed exactly in
    limbs, then rounded once (:func:`accuracy.reference._tile`, whose steps these kernels are)."""
    fn = module().get_function
    beta, (mi, nj) = rows.beta, (I.stop - I.start, J.stop - J.start)
    L = cupy.zeros((limbs, mi, nj), dtype=np.int64)
    buffer = cupy.empty((mi, nj))
    pending, top = [0] * limbs, rows.count + cols.count
    i64 = np.int64
    for s, sa in enumerate(rows.slices, 1):
        a_rows, a = _part(sa, I)
        if not len(a):
            continue
        for t, sb in enumerate(cols.slices, 1):
            b_cols, b = _part(sb, J)
            if not len(b):
                continue
            q = top - s - t
            out = buffer[:len(a), :len(b)]
            for k0 in range(0, a.shape[1], block):
                if pending[q] == adds_per_carry:
                    fn("exact_carry")((_blocks(mi * nj),), (THREADS,), (L, i64(limbs), i64(mi * nj), np.int32(beta)))
                    pending = [0] * limbs
                be.gemm(a[:, k0:k0 + block], b[:, k0:k0 + block].T, out)
                fn("exact_accumulate")(
                    (_blocks(out.size),), (THREADS,),
                    (L[q], i64(nj), out, i64(nj), i64(len(a)), i64(len(b)),
                     a_rows if a_rows is not None else i64(0), i64(I.start),
                     b_cols if b_cols is not None else i64(0), i64(J.start)))
                pending[q] += 1
    overflow = cupy.zeros(1, dtype=np.int32)
    fn("exact_round")((_blocks(mi * nj),), (THREADS,),
                      (L, i64(limbs), i64(mi), i64(nj), np.int32(beta), rows.exponent[I], cols.exponent[J],
                       i64(2 - top * beta), C, i64(C.strides[0] // C.itemsize), overflow))
    if int(overflow.get()[0]):
        raise OverflowError("the top limb overflowed: too few limbs for these sums (a bug in the caller)")


class CudaExact:
    """The exact product's element-wise work on CuPy, for :func:`accuracy.reference.exact_matmul`."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend

    def prepare(self) -> None:
        """Compile (or load from CuPy's cache) the module, before a plan's first call."""
        module().get_function("exact_round")

    def spans(self, xp: Any, X: Any) -> Any:
        return spans(X)[1]

    def split(self, xp: Any, X: Any, beta: int) -> Split:
        return split(X, beta)

    tile = staticmethod(tile)
