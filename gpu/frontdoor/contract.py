"""What each accuracy level promises, in one place, and which methods' proven bounds keep the promise.

**The form of every promise.** For every entry whose row of A and column of B are finite,

    |C_ij - (AB)_ij| <= t S_ij + u |C_ij| + eta

with u the unit roundoff of float64 (2**-53), eta = k 2**-1074 for products that underflow, and one of three
**scales** S, each at least the one before it:

* ``"entry"``: S_ij = (|A||B|)_ij, the library GEMM's own scale (Higham, *Accuracy and Stability of Numerical
  Algorithms*, eq. 3.13: |C - AB| <= gamma_k |A||B|, gamma_k = k u / (1 - k u));
* ``"rowcol"``: S_ij = ||a_i||_2 ||b_j||_2 (a_i row i of A, b_j column j of B);
* ``"matrix"``: S = k max|A| max|B|.

(|A||B|)_ij <= ||a_i||_2 ||b_j||_2 <= k max|A| max|B| by Cauchy-Schwarz, so a **guarantee** (:class:`Guarantee`:
a scale and a t) in a finer scale holds with the same t in every coarser one. A method keeps a promise where its
guarantee's scale is as fine or finer and its t is no larger (:meth:`Guarantee.meets`).

**The levels** (:class:`Accuracy`):

* ``"dgemm"``: rowcol, t = gamma_k. The library GEMM keeps it (entry, gamma_k); so do split-K
  (entry, gamma_(width + chunks + 2) <= gamma_k, :mod:`gpu.splitk.api`), the out-of-core engine (a k-term sum
  per entry) and Ozaki scheme I at ``target="dgemm"`` (entry, 2**-53). Ozaki scheme II's default
  (``moduli="auto"``, ``bound="normwise"``) keeps it with rowcol t = 2**-56 sqrt(k) <= gamma_k for k >= 2
  (:mod:`gpu.ozaki2.normwise`): that is a rowcol bound, **not** the library's componentwise one, which is
  why ``"dgemm"`` is stated in the rowcol scale; ``Accuracy("dgemm", scale="entry")`` asks for the
  componentwise reading, which Ozaki II keeps only with ``bound="componentwise"`` (an FP64 GEMM of |A||B|).
  **Strassen never keeps it**: its bound is normwise over the whole matrix (:mod:`gpu.strassen.api`), and
  even there c_S u / k (:func:`strassen`) exceeds gamma_k at every level >= 1, since its fringe term alone,
  2 k^2, is above k^2 / (1 - k u) (:func:`strassen_against_library`).
* ``"sgemm"``: matrix, t = gamma_(k + 2) at u = 2**-24 (a float32 GEMM of operands rounded to float32).
  Strassen keeps it at every level its bottom products allow.
* a number t in (0, 1): matrix, t (``scale=`` asks for a finer one). The library GEMM keeps it only where
  gamma_k <= t: at t = 1e-10 not from k = 2**20 on (gamma = 1.16e-10), although its errors are far smaller;
  this contract credits proven bounds only.
* ``"exact"``: every entry correctly rounded (``accuracy.reference.exact_matmul``, t = 0 and the u |C| term).

**Complex operands.** Each part of a complex product is a real inner product of 2k terms (Re C = [Re A, -Im A]
[Re B; Im B], Im C = [Re A, Im A] [Im B; Re B]), and every level promises for each part what it promises for
that real product: k becomes 2k, and the scales are the stacked operands' (entry: |Re A||Re B| + |Im A||Im B|
for the real part, |Re A||Im B| + |Im A||Re B| for the imaginary part; rowcol: the 2-norms of A's complex rows
and B's complex columns). The library's complex GEMM keeps entry gamma_2k; Ozaki scheme II over both parts
keeps rowcol 2**-56 sqrt(2k) (:mod:`gpu.ozaki2.complex`), so it keeps ``"dgemm"``. The level ``"zgemm"`` asks
for the complex library GEMM's own promise, componentwise: entry, gamma_2k (only complex operands take it).

NaN and infinity are outside the promise: every family gives the library GEMM's pattern of non-finite entries.
The float64 arithmetic of the bounds here is exact enough for a comparison (they are compared, not relied on
for the last bit); a guarantee of t = inf is none (gamma_n where n u >= 1).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, replace
from typing import Any

from ..ozaki.plan import target_value as componentwise_target
from ..ozaki2.normwise import target_value as rowcol_target
from ..splitk.plan import widest

#: The scales, finest first (see the module notes).
SCALES = ("entry", "rowcol", "matrix")
#: Unit roundoff of float64 and float32.
U64, U32 = 2.0**-53, 2.0**-24
#: The named levels.
LEVELS = ("dgemm", "sgemm", "zgemm", "exact")


def gamma(n: int, u: float = U64) -> float:
    """gamma_n = n u / (1 - n u) (Higham's constant), inf where n u >= 1."""
    return n * u / (1 - n * u) if n * u < 1 else math.inf


@dataclass(frozen=True)
class Guarantee:
    """A proven bound: |C_ij - (AB)_ij| <= t S_ij + u |C_ij| + eta in ``scale`` (see the module notes);
    ``source``: where it is proven."""

    scale: str
    t: float
    source: str = ""

    def __post_init__(self) -> None:
        if self.scale not in SCALES:
            raise ValueError(f"scale must be one of {', '.join(SCALES)}, got {self.scale!r}")

    def meets(self, need: Guarantee) -> bool:
        """Whether this guarantee implies ``need``: a scale as fine or finer, and t no larger."""
        return SCALES.index(self.scale) <= SCALES.index(need.scale) and self.t <= need.t

    def describe(self) -> str:
        return f"{self.t:.2g} in the {self.scale} scale" + (f" ({self.source})" if self.source else "")


@dataclass(frozen=True)
class Accuracy:
    """What a caller asks for: ``level`` ``"dgemm"``, ``"sgemm"``, ``"exact"`` or a number in (0, 1), in
    ``scale`` (None: the level's own, see the module notes)."""

    level: str | float = "dgemm"
    scale: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.level, str):
            if self.level not in LEVELS:
                raise ValueError(f"accuracy must be one of {', '.join(map(repr, LEVELS))} or a number in (0, 1) "
                                 f"(an error bound), got {self.level!r}")
        elif isinstance(self.level, bool) or not isinstance(self.level, numbers.Real) or not 0 < self.level < 1:
            raise ValueError(f"accuracy must be one of {', '.join(map(repr, LEVELS))} or a number in (0, 1) "
                             f"(an error bound), got {self.level!r}")
        else:
            object.__setattr__(self, "level", float(self.level))
        if self.scale is not None and self.scale not in SCALES:
            raise ValueError(f"scale must be one of {', '.join(SCALES)}, got {self.scale!r}")
        if self.level == "exact" and self.scale is not None:
            raise ValueError("'exact' has no scale: every entry is correctly rounded")

    @property
    def exact(self) -> bool:
        return self.level == "exact"

    def required(self, k: int) -> Guarantee | None:
        """The guarantee a method must meet on an inner dimension of k (None for ``"exact"``, which only the
        correctly rounded product keeps)."""
        if self.level == "exact":
            return None
        if self.level == "dgemm":
            return Guarantee(self.scale or "rowcol", gamma(k), "the library GEMM's, gamma_k")
        if self.level == "zgemm":
            return Guarantee(self.scale or "entry", gamma(k), "the complex library GEMM's, gamma_2k on each part")
        if self.level == "sgemm":
            return Guarantee(self.scale or "matrix", gamma(k + 2, U32), "a float32 GEMM's, gamma_(k+2) at 2**-24")
        return Guarantee(self.scale or "matrix", float(self.level), "the caller's bound")


#: The levels asked for so far (``"dgemm"``, 1e-10, ...) and their :class:`Accuracy`: a call's level is read
#: once, not checked again on every call of a kept plan (0.4 us of a 3.5 us call on a 2-core CPU).
_SEEN: dict[tuple[type, Any], Accuracy] = {}


def as_accuracy(accuracy: Any) -> Accuracy:
    """``accuracy`` as an :class:`Accuracy`: one already, or its level."""
    if isinstance(accuracy, Accuracy):
        return accuracy
    key = (type(accuracy), accuracy)
    try:
        return _SEEN[key]
    except (KeyError, TypeError):
        want = Accuracy(accuracy)
    if len(_SEEN) < 256:
        _SEEN[key] = want
    return want


# --------------------------------------------------------------------------- the methods' guarantees

def library(k: int) -> Guarantee:
    """The library GEMM in float64 (any summation order, with or without FMA)."""
    return Guarantee("entry", gamma(k), "gpu.backend.Backend.gemm")


def splitk(width: int, chunks: int) -> Guarantee:
    """Split-K in ``chunks`` chunks at most ``width`` wide: every entry a sum of chunk sums."""
    return Guarantee("entry", gamma(width + chunks + 2), "gpu.splitk.api")


def splitk_any(k: int) -> Guarantee:
    """Split-K whatever its split: gamma_(width + chunks + 2) is at most gamma_k for any split of k >= 4096 into
    at least two chunks, each at least two wide, so the library GEMM's bound holds."""
    return Guarantee("entry", gamma(k), "gpu.splitk.api: gamma_(width + chunks + 2) <= gamma_k")


def splitk_auto(m: int, n: int, k: int, sm_count: int, deterministic: bool) -> Guarantee:
    """Split-K's automatic split on some device of ``sm_count`` SMs, whatever its kernels: the bound of the split
    with the largest width + chunks it could take (:func:`gpu.splitk.plan.widest`), so it holds for the split
    the device will take. What a ranking made away from the device (``gemmlab choose --gpu``) proves."""
    return replace(splitk(*widest(m, n, k, sm_count, deterministic)),
                   source=f"gpu.splitk.plan.widest: any automatic split on {sm_count} SMs")


def strassen_constant(level: int, core: int, k: int) -> float:
    """c_S = 18^L (n0^2 + 6 n0) + 2 k^2 of an L-level product whose Strassen core has side ``core`` (n0 = core /
    2^L): max |C - AB| <= c_S u max|A| max|B| (:mod:`gpu.strassen.api`, after Higham sec. 23.2.2)."""
    n0 = core / 2**level
    return 18.0**level * (n0 * n0 + 6 * n0) + 2.0 * k * k


def strassen(level: int, core: int, k: int) -> Guarantee:
    """An L-level Strassen-Winograd product (any schedule: the same sums) whose core has side ``core``; the
    library GEMM's guarantee at level 0."""
    if level == 0:
        return library(k)
    return Guarantee("matrix", strassen_constant(level, core, k) * U64 / max(k, 1), "gpu.strassen.api")


def strassen_against_library(level: int, core: int, k: int) -> tuple[float, float]:
    """Both sides of Strassen's test against the library GEMM in the matrix scale: (c_S u, k gamma_k); it keeps
    the library's bound only where the first is at most the second, which never happens at level >= 1."""
    return strassen_constant(level, core, k) * U64, k * gamma(k)


def ozaki2(target: Any, k: int, bound: str = "normwise") -> Guarantee:
    """Ozaki scheme II with ``moduli="auto"`` aiming at ``target``: rowcol t (:mod:`gpu.ozaki2.normwise`) under
    the default normwise bound, entry t (:mod:`gpu.ozaki2.auto`) under ``bound="componentwise"``."""
    if bound == "normwise":
        return Guarantee("rowcol", rowcol_target(target, k), "gpu.ozaki2.normwise")
    if bound == "componentwise":
        return Guarantee("entry", componentwise_target(target), "gpu.ozaki2.auto")
    raise ValueError(f"bound must be 'normwise' or 'componentwise', got {bound!r}")


def ozaki1(target: Any) -> Guarantee:
    """Ozaki scheme I with ``target=``: entry t (:mod:`gpu.ozaki.plan`)."""
    return Guarantee("entry", componentwise_target(target), "gpu.ozaki.plan")


def exact() -> Guarantee:
    """The correctly rounded product: no error beyond the final rounding (``accuracy.reference``)."""
    return Guarantee("entry", 0.0, "accuracy.reference.exact_matmul")


def keeps(guarantee: Guarantee, accuracy: Any, k: int, correctly_rounded: bool = False) -> tuple[bool, str]:
    """Whether a method with ``guarantee`` keeps ``accuracy`` on an inner dimension of k, and why, in words;
    ``correctly_rounded``: the method is the correctly rounded product (the only one that keeps ``"exact"``)."""
    want = as_accuracy(accuracy)
    need = want.required(k)
    if need is None:
        return correctly_rounded, ("correctly rounded" if correctly_rounded else "not correctly rounded")
    if guarantee.meets(need):
        return True, f"proven {guarantee.describe()} meets {need.describe()}"
    if SCALES.index(guarantee.scale) > SCALES.index(need.scale):
        return False, f"its bound is in the {guarantee.scale} scale, coarser than the {need.scale} one asked for"
    return False, f"proven {guarantee.t:.2g} exceeds {need.t:.2g} ({need.scale} scale)"
