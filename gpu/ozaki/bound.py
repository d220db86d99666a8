"""The proven error bound behind ``target=``: how far the data's products sit below the slices' scale.

Notation of :mod:`gpu.ozaki`: x_ik = a_ik 2**-e_i and y_kj = b_kj 2**-f_j (|x|, |y| < 1), so
P_ij = sum_k |x_ik| |y_kj| = 2**-(e_i + f_j) (|A||B|)_ij; N_ij counts the k with a_ik b_kj != 0, and
K_ij = min(nonzeros of row i of A, nonzeros of column j of B) >= N_ij.

**Truncation.** The digits of x (:mod:`gpu.ozaki`) give x = sum_{s>=1} delta_s exactly, delta_s =
m_s 2**(-alpha s) with |m_s| <= 2**alpha - 1, since the first s digits X_s leave |x - X_s| < 2**(-alpha s);
likewise y = sum_t eps_t. The pairs the triangle drops (s + t >= S + 2) sum to

    (x - X_S) y + sum_{s=1..S} delta_s (y - Y_{S+1-s}),

less than 2**(-alpha S) + S (2**alpha - 1) 2**(-alpha (S+1)) < (S + 1) 2**(-alpha S) in magnitude, and
0 when x or y is 0. So the exact sum T of the kept pairs satisfies

    |T - AB|_ij <= (S + 1) 2**(-alpha S) N_ij 2**(e_i + f_j) = (S + 1) 2**(-alpha S) (N_ij / P_ij) (|A||B|)_ij.

(Scaling by 2**-e_i is exact except below float64's normal range, an error under 2**-1074: less than
2**-400 of that bound, since alpha S <= 640 for every format.) :func:`gpu.ozaki.plan.auto_slices` takes
the fewest S with (S + 1) 2**(-alpha S) G within the target, G = max_ij K_ij / P_ij over the entries
with N_ij > 0 (the others are exact zeros: every term has a zero factor).

**G from the data** (:func:`slice_ratio`). P is bounded from below by ONE low-precision GEMM of
magnitudes, P^ = M_A M_B: M_A holds |x| rounded toward zero to ``bits`` significant bits, nonzero
magnitudes below 2**-63 raised to 2**-63 (so every product of nonzeros is an FP32 normal and P^_ij > 0
exactly when N_ij > 0), zeros kept; SGEMM for FP32 slices (the paper's GPUs), BF16 tensor cores for the
others. Raising adds at most 2**-63 (|x| + |y|) + 2**-126 < 2**-61 per term, and every inner term may
cost the FP32 accumulation a relative 2**-20 (round to nearest loses 2**-24; tensor cores keep at least
the 22 bits the formats' exactness margin assumes), so

    P_ij >= P^_ij (1 - 2**-20)**(k + 1) - K_ij 2**-61  (=: L_ij).

Where L_ij < K_ij 2**-48 the raised magnitudes could dominate; those entries (rare: a product more than
2**48 below k times its row and column maxima) are recomputed from a float64 product of the scaled
magnitudes of their rows and columns, P_ij >= fl(P)_ij (1 - (k + 3) 2**-53) - 2**-1020 (round to nearest in
any order, and the scaling's underflow, k < 2**48). An entry whose float64 bound stays below 2**-900
needs alpha S > 900 > 640: no slice count reaches it, and G is infinite.

The GEMM's rounding differs between the CPU (emulated in float64) and the GPU, so their P^ may differ in
the last bits, and so may their float64 lower bounds of weak entries (the BLAS on the CPU, a dot product per
entry on the GPU, :mod:`gpu.ozaki.bound_kernels`); the slice count then differs only where G sits that close
to a threshold of the rule. On the GPU G never leaves the device: the slice count is made from it there too
(:func:`gpu.ozaki.ops.decode`), and a call reads back only that one 32-bit word (with ``verdict="host"``;
by default it stays on the device: :mod:`gpu.ozaki.deferred`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..backend import Array, Backend, require_memory
from ..backend.blas import gemm_recipe
from .formats import SliceFormat
from .ops import ADVICE, BLOCK_ENTRIES, ops

#: Relative error per inner term allowed to the magnitude GEMM's FP32 accumulation.
ACCUMULATION = 2.0**-20


def magnitude_recipe(fmt: SliceFormat) -> tuple[str, int]:
    """(GEMM recipe, significant bits) of the magnitude product: SGEMM for FP32 slices, BF16 otherwise."""
    return ("fp32", 24) if fmt.name == "fp32" else ("bf16", 8)


def lower_factor(k: int) -> float:
    """(1 - 2**-20)**(k + 1), rounded down: the magnitude GEMM's accumulation at its worst."""
    return float(np.exp((k + 1) * np.log1p(-ACCUMULATION))) * (1 - 2.0**-40)


def bound_bytes(m: int, k: int, n: int, fmt: SliceFormat) -> int:
    """Device bytes of the bound's work on an m x k by k x n product: the magnitude operands and product, and
    the NumPy screen's temporaries."""
    operands = (m + n) * k * np.dtype(gemm_recipe(magnitude_recipe(fmt)[0]).operands).itemsize
    return operands + 4 * m * n + 48 * min(m * n, BLOCK_ENTRIES)


def require_bound_memory(be: Backend, m: int, k: int, n: int, fmt: SliceFormat) -> None:
    """MemoryPlanError, before any work, where the bound's work would not fit in free memory."""
    require_memory(be, bound_bytes(m, k, n, fmt),
                   f"the bound for target= of a {m} x {k} x {n} product (a GEMM of magnitudes)", ADVICE)


@dataclass(frozen=True)
class BoundBuffers:
    """Every array a call's bound writes, held by a plan (a graph of its steps then allocates nothing): the
    lines' exponents and nonzeros, the magnitude operands and their product, and G."""

    erow: Array
    nnz_rows: Array
    ecol: Array
    nnz_cols: Array
    ma: Array
    mb: Array
    p: Array
    ratio: Array

    @classmethod
    def make(cls, be: Backend, m: int, k: int, n: int, fmt: SliceFormat) -> BoundBuffers:
        """The buffers of an m x k by k x n product with ``fmt`` slices (:func:`bound_bytes` and the lines)."""
        xp, rec = be.xp, gemm_recipe(magnitude_recipe(fmt)[0])
        return cls(xp.empty(m, dtype=np.int32), xp.empty(m, dtype=np.int64), xp.empty(n, dtype=np.int32),
                   xp.empty(n, dtype=np.int64), xp.empty((m, k), dtype=rec.operands), xp.empty((k, n),
                   dtype=rec.operands), xp.empty((m, n), dtype=rec.output), xp.empty(1, dtype=np.float64))


def magnitude_product(be: Backend, A: Array, B: Array, erow: Array, ecol: Array, fmt: SliceFormat,
                      held: BoundBuffers | None = None) -> Array:
    """P^ (m x n, float32): the product of the raised magnitudes of A and B (see the module); in ``held``'s
    buffers where given."""
    recipe, bits = magnitude_recipe(fmt)
    rec = gemm_recipe(recipe)
    family = ops(be)
    ma, mb, P = (None, None, be.xp.empty((A.shape[0], B.shape[1]), dtype=rec.output)) if held is None else \
        (held.ma, held.mb, held.p)
    be.gemm_ex(family.magnitudes(A, erow, 1, bits, rec.operands.name, out=ma),
               family.magnitudes(B, ecol, 0, bits, rec.operands.name, out=mb), P, recipe=recipe)
    return P


def ratio_on_device(be: Backend, A: Array, B: Array, erow: Array, ecol: Array, nnz_rows: Array,
                    nnz_cols: Array, fmt: SliceFormat, held: BoundBuffers | None = None) -> Array:
    """G (see the module) as a 1-element float64 array of the backend, with no wait for the device: the
    magnitude GEMM and one pass over its product (weak entries recomputed in it, :mod:`gpu.ozaki.bound_kernels`).
    Lines with exponent :data:`gpu.ozaki.ops.BAD` (NaN or infinity) are left out. ``held``: the buffers to
    write (new arrays without)."""
    P = magnitude_product(be, A, B, erow, ecol, fmt, held)
    return ops(be).ratio(P, nnz_rows, nnz_cols, lower_factor(A.shape[1]), A, B, erow, ecol, fmt,
                         out=None if held is None else held.ratio)


def slice_ratio(be: Backend, A: Array, B: Array, erow: Array, ecol: Array, fmt: SliceFormat) -> float:
    """G = max_ij K_ij / P_ij over the entries of AB that are not exactly zero, bounded from above
    (see the module): 0 when AB is exactly zero, inf when some entry is beyond any slice count.
    :func:`ratio_on_device`, then one wait for its value."""
    xp = be.xp
    (m, k), n = A.shape, B.shape[1]
    if not (m and n and k):
        return 0.0
    require_bound_memory(be, m, k, n, fmt)
    nnz_rows, nnz_cols = (xp.count_nonzero(X, axis=axis).astype(np.int64) for X, axis in ((A, 1), (B, 0)))
    return float(be.to_numpy(ratio_on_device(be, A, B, erow, ecol, nnz_rows, nnz_cols, fmt))[0])
