"""The Ozaki scheme: float64 products from exact products of low-precision slices.

``matmul(A, B, slices=S, slice_format=F)`` computes A @ B for float64 A and B
by splitting them into S integer slices, multiplying slice pairs on a
low-precision GEMM unit where every product is exact, and summing in float64
(Ozaki, Ogita, Oishi & Rump 2012; Nanai & Fujimoto 2021 with FP32 slices;
Mukunoki et al. 2020 and Ootomo et al. 2024 with tensor cores and INT8).

Slicing (truncation on a power-of-two grid)
-------------------------------------------
Row i of A has the exponent e_i, the smallest integer with max_k |a_ik| <
2**e_i (a zero row gets 0 and only zero digits). With x = a_ik * 2**-e_i, so
|x| < 1, slice t = 1..S holds the integer digit

    m_t = trunc(x_{t-1} * 2**alpha),   x_t = x_{t-1} * 2**alpha - m_t,

so a_ik = 2**e_i * (sum_t m_t 2**(-alpha t) + x_S 2**(-alpha S)) exactly and
|m_t| <= 2**alpha - 1. Every step is exact in float64 (scaling by a power of
two; the fractional part of a float). Columns of B get exponents f_j and
digits the same way (B's slices are stored as rows of B^T). Slices hold the
raw integers in the slice format; the scales 2**(e_i + f_j - alpha d) are
applied in the float64 summation, so inputs far outside the FP32 (or FP16)
exponent range work: only the final ``ldexp`` sees the exponents.

Truncation rather than the papers' ``fl((a + sigma) - sigma)`` (round to
nearest): both give digits of the same grid, but truncation is
sign-symmetric (the digits of -a are those of a, negated), so exact zeros and
exact cancellations in the product come out exactly, and its digits stay
within 2**alpha - 1, which is exactly the INT8 range at alpha = 7.

Products and exactness
----------------------
The triangular scheme keeps the slice pairs (s, t) with s + t <= S + 1,
S(S+1)/2 pair products in all, grouped by diagonal d = s + t. A format's
accumulator holds every integer up to ``limit`` exactly (2**24 for SGEMM,
2**31 - 1 for INT32, a documented margin of 2**22 for tensor-core FP32
accumulation, whose alignment details NVIDIA does not specify). A GEMM that
sums L inner terms of digits below 2**alpha in magnitude is exact when
L * (2**alpha - 1)**2 <= limit, in any order and with any blocking, since
every partial sum is then an integer the accumulator holds. ``alpha`` is the
largest such value for the whole inner dimension k, or the format's
``min_alpha`` when k is too long for it, and then the inner dimension is
blocked: ``k_block`` (at most limit // (2**alpha - 1)**2, a multiple of 16)
inner terms per GEMM call. Any k works.

The slices of one side are stored side by side (A_cat = [A_1 | ... | A_S],
each slice padded to a multiple of 16 columns; B's in reverse order), so the
pairs of a diagonal are ONE product over a contiguous inner range:
sum_{s+t=d} A_s B_t = A_cat[:, a0:a1] @ B_cat[:, b0:b1]^T. A diagonal is cut
into calls of at most ``k_block`` inner terms, each into its own accumulator
buffer: for INT8 (k_block = 133,136 terms) a whole diagonal of up to eight
pairs of k = 16384 lands in one INT32 buffer with one ``gemmEx`` call, and no
buffer is read back by the GEMMs (no beta = 1 passes).

Summation
---------
One fold pass adds the buffers in a fixed order: per diagonal, from the
smallest (d = S + 1) to the largest, D_d = the sum of its buffers in float64
(exact: integers below 2**53), then the exact D_d * 2**(-alpha d) joins the
sum by TwoSum (Knuth): the float64 sum and the sum of its rounding errors are
kept apart and added once at the end, C = ldexp(sum + errors, e_i + f_j). So
C is within 2**-53 |C| + 2**-91 (|A||B|)_ij of the exact sum of the slice
products (the errors' own rounding, S <= 64: digits carry their entry's sign,
so every partial sum is at most (|A||B|)_ij), where a plain float64 sum of
the S diagonals is only bounded by (S - 1) 2**-53 (|A||B|)_ij, far above
2**-53 |C| on a cancelling entry. The result depends only on the exact
integers D_d, so it is bitwise the same on NumPy and CuPy, for any blocking,
and -0 never appears (exact zeros are +0, as in the correctly rounded
product). When the buffers do not all fit in memory, GEMMs and folds
alternate in batches, with the open diagonal's D and the errors kept between
them (one more m x n float64 array).

Layout
------
:mod:`~gpu.ozaki.formats` (the slice formats as data), :mod:`~gpu.ozaki.plan`
(alpha, k_block, chunks, buffers, workspace, the slice count for a target),
:mod:`~gpu.ozaki.slicing` (the digits), :mod:`~gpu.ozaki.ops` and
:mod:`~gpu.ozaki.kernels` (the element-wise work on NumPy and CuPy),
:mod:`~gpu.ozaki.execution` (:class:`Plan`, :class:`Options`), :mod:`~gpu.ozaki.api`
(:func:`matmul`, :func:`configure`).

On NumPy the same algorithm runs with NumPy and the CPU BLAS: FP32 slices
through SGEMM, the other formats emulated by a float64 GEMM of their integer
values, which is exact (k_block * 2**(2 alpha) <= 2**53): the CPU path
reproduces the GPU's values, not its speed.

The paper's form: rounded tails (``remainder=True``)
---------------------------------------------------
Nanai & Fujimoto keep the last slice as "the remainder rounded to FP32"; their
3-split product A1 B1 + A1 B2 + A2 B1 + A1 B3 + A2 B2 + A3 B gains the digits
they report only if each slice of A meets the rest of B, rounded: with S - 1
exact digits per side and the rounded tails T_j = fl(B - B_1 - ... - B_{j-1})
(T_1 = fl(B)) and A_S = fl(A - A_1 - ... - A_{S-1}),

    C = sum_{s+t <= S} A_s B_t  +  sum_{s=1..S} A_s T_{S+1-s},

still S(S+1)/2 products, and no term is dropped: the error is the rounding of
the tails to the format (``bits`` significant bits) and of the last diagonal's
FP32 accumulation, about 2**(-alpha (S-1)) times SGEMM's, which is the papers'
gain of alpha bits per split. Tails are rounded to nearest in float64 and
flushed to zero below the format's smallest normal, identically on both
paths; the last diagonal is a rounded float GEMM, so there CPU and GPU differ
in the last bits. INT8 has no such form (its slices are integers). Without
the option, 2 and 3 exact slices of 7 bits lose to SGEMM itself (their
truncation error is 2**(-7 S) times the ratio G below).

Number of slices for a target
-----------------------------
``target=t`` (``"dgemm"``: t = 2**-53, ``"sgemm"``: 2**-24) promises, entrywise,

    |C - AB| <= t (|A||B|) + 2**-53 |C|

(and within 2**-1074 where C is subnormal): the componentwise bound of a
float64 GEMM, with float64's one final rounding; scheme II's ``target`` means
the same. Truncating rows to their own maxima is what makes it hard: an entry
far below its row's maximum keeps few or no digits, and when it meets a large
entry of B its term can carry the whole product (A = [[1, 2**-200]] against
B = [[2**-200], [2**200]]: 1 + 2**-400, where few slices give 0).
:mod:`gpu.ozaki.bound` proves that the dropped pairs and remainders miss
(AB)_ij by less than

    E(S) = (S + 1) 2**(-alpha S) G,   G = max_ij K_ij 2**(e_i + f_j) / (|A||B|)_ij

relative to (|A||B|)_ij, K_ij <= k the count of nonzero terms, and computes an
upper bound of G from the data with one more low-precision GEMM (of |A| and
|B| scaled and rounded down: SGEMM for FP32 slices, BF16 tensor cores for the
others), plus a float64 product for the rare entries where that GEMM cannot
resolve (|A||B|)_ij. ``target=t`` takes the fewest S with E(S) + 2**-91 <= t
(:func:`~gpu.ozaki.plan.auto_slices`; :meth:`OzakiPlan.report` shows the
bound); when even 64 slices cannot, because some entries of AB lie hundreds
of binades below their rows' and columns' maxima, the call raises a
ValueError before any product. On the papers' inputs at N = 1024 with FP32
or INT8 slices this gives the same slice counts as the former rule (a
scale-ratio estimate, which missed its target on such entries) at phi = 0.1,
1 and 2 (9, 11, 12), and two more at phi = 4 (14), where the former rule
missed 'dgemm' by up to 10**4; BF16 slices take one more at phi = 2 and three
at 4. The bound assumes the worst case for every dropped digit; on random
data the error is far below it. Choosing S from the data needs the device's
answer, since the host launches the S(S+1)/2 products: the bound, the slice
count and a NaN flag are made on the device into one 32-bit word. By default
(``verdict="device"``, :mod:`gpu.ozaki.deferred`) the word stays there: a CUDA
graph whose IF nodes run only the diagonals the count needs does the products,
and the call never waits; ``verdict="host"`` reads the 4 bytes back, its one
wait. With ``slices=`` a call never waits.

Plans
-----
:class:`Plan` (options: :class:`Options`) is built once per operand signature
and executed per call (after nvmath-python's ``Matmul``:
:mod:`gpu.ozaki.execution`); :func:`matmul` keeps one per signature and options.
NaN and infinity are handled on the device by default: their rows and columns
are sliced as zeros and their entries of C are the IEEE dot products, so C
has NaN and infinity where ``A @ B`` has them.
"""

from .api import PLANS, configure, matmul
from .bound import slice_ratio
from .execution import Options, Plan
from .formats import FORMATS, SliceFormat, get_format, parse_variant
from .plan import (
    HEADROOM,
    MAX_HELD,
    MAX_SLICES,
    SUM_ERROR,
    TARGETS,
    Chunk,
    OzakiPlan,
    WorkspaceError,
    auto_slices,
    choose_alpha,
    plan,
    predicted_error,
    target_value,
)
from .slicing import encode, magnitudes, round_significant, split_values

__all__ = ["FORMATS", "HEADROOM", "MAX_HELD", "MAX_SLICES", "PLANS", "SUM_ERROR", "TARGETS", "Chunk", "Options",
           "OzakiPlan", "Plan", "SliceFormat", "WorkspaceError", "auto_slices", "choose_alpha", "configure", "encode",
           "get_format", "magnitudes", "matmul", "parse_variant", "plan", "predicted_error", "round_significant",
           "slice_ratio", "split_values", "target_value"]
