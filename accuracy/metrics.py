"""Error of a computed product against its correctly rounded reference, in one report.

``error_report(C, C_ref, A, B)`` measures C against C_ref, the correctly
rounded product (``accuracy.reference.exact_matmul``):

* ``max_rel``: the papers' max |c* - c| / |c*|, over the entries with c* != 0;
  ``median_rel`` the median of the same ratios.
* ``zeros``: reference entries that are exactly zero, counted apart (a relative
  error is undefined there); ``zeros_exact`` of them the method got exactly
  zero, and ``zero_max_abs`` is the largest |c| it left in their place.
* ``nrm``: the normwise relative error ||C - C*||_F / ||C*||_F.
* ``max_comp``: the componentwise error max |c - c*| / (|A| |B|)_ij, the
  quantity classical error bounds (n u for a dot product) speak of; with A
  and B only. The normaliser is a float64 GEMM of |A| and |B|: within a
  relative k u of the exact (|A| |B|)_ij, which does not matter at the scale of
  errors it judges.
* ``max_ulps`` / ``median_ulps``: |c - c*| in units in the last place of c*
  (2**(e - 52) for 2**e <= |c*| < 2**(e+1), never below 2**-1074), over the
  entries with c* != 0; ``bits`` = log2(1 + max_ulps), how many low bits of the
  worst entry are wrong (0: every entry correctly rounded).
* ``correctly_rounded``: the share of all entries equal to c* (+0 equals -0).

c* is the reference rounded to float64, so a relative error is measured
against a value within 2**-53 (relative) of the exact one: the error of a
method at the level of u = 2**-53 is known to within about u.

NaN or infinite entries of C (with a finite reference) are counted in
``nonfinite`` and make every error field infinite, so no finite number hides
them; ``finite`` is False then. Reference entries that are infinite (overflow,
or inputs with infinities) are counted in ``ref_infinite``, NaN ones (inputs
with NaN, or inf - inf, from ``exact_matmul(check_finite=False)``) in
``ref_nan``; both are left out of the errors, and ``ref_infinite_matched`` /
``ref_nan_matched`` say how many C reproduced. Masked arrays are refused (their
hidden values would be compared); other array-likes are converted.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from gpu.backend import backend_of

from .limbs import PRECISION, SUBNORMAL_EXPONENT


@dataclass(frozen=True)
class ErrorReport(Mapping):
    """The measures of one product; readable as a mapping (``report["max_rel"]``, ``dict(report)``)."""

    entries: int
    max_rel: float | None
    median_rel: float | None
    nrm: float | None
    max_comp: float | None
    max_ulps: float | None
    median_ulps: float | None
    bits: float | None
    correctly_rounded: float
    zeros: int
    zeros_exact: int
    zero_max_abs: float
    nonfinite: int = 0
    ref_infinite: int = 0
    ref_infinite_matched: int = 0
    ref_nan: int = 0
    ref_nan_matched: int = 0

    @property
    def finite(self) -> bool:
        """Whether every entry of C is a finite number (else every error field is infinite)."""
        return self.nonfinite == 0

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def __getitem__(self, key: str) -> Any:
        if key not in self._names():
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())

    @classmethod
    def _names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))


def array_module(x: Any) -> Any:
    """NumPy for NumPy arrays, CuPy for CuPy arrays."""
    return backend_of(x).xp


def ulp(xp: Any, x: Any) -> Any:
    """Unit in the last place of each |x| (x finite, nonzero): 2**(e - 52) for 2**e <= |x| < 2**(e+1)."""
    exponent = xp.frexp(x)[1].astype(np.int64) - PRECISION
    return xp.ldexp(xp.ones(x.shape), xp.maximum(exponent, SUBNORMAL_EXPONENT).astype(np.int32))


def _operands(C: Any, C_ref: Any, A: Any, B: Any) -> tuple[Any, Any, Any]:
    for name, x in (("C", C), ("C_ref", C_ref), ("A", A), ("B", B)):
        if isinstance(x, np.ma.MaskedArray):
            raise TypeError(f"{name} is a masked array; pass {name}.filled(value) or {name}.data")
    xp = array_module(C_ref)
    C, C_ref = xp.asarray(C), xp.asarray(C_ref)
    if C.shape != C_ref.shape:
        raise ValueError(f"C has shape {C.shape} but the reference has {C_ref.shape}; compare the same product")
    if C.dtype.kind not in "fiu" or C_ref.dtype.kind not in "fiu":
        raise TypeError(f"C ({C.dtype}) and the reference ({C_ref.dtype}) must be real arrays")
    if (A is None) != (B is None):
        raise ValueError("pass both A and B (for the componentwise error) or neither")
    if A is not None:
        A, B = xp.asarray(A), xp.asarray(B)
        if A.ndim != 2 or B.ndim != 2 or (A.shape[0], B.shape[1]) != C.shape or A.shape[1] != B.shape[0]:
            raise ValueError(f"A {A.shape} and B {B.shape} are not the factors of a {C.shape} product")
    return xp, C.astype(np.float64, copy=False), C_ref.astype(np.float64, copy=False)


def _stat(xp: Any, fn: Any, values: Any) -> float | None:
    return float(fn(values)) if values.size else None


def error_report(C: Any, C_ref: Any, A: Any = None, B: Any = None) -> ErrorReport:
    """Errors of C against the correctly rounded product C_ref (and the factors A, B, if given).

    Arrays may be NumPy or CuPy (all of one kind); nothing is modified. See the
    module notes for every field. Differences are taken after scaling each
    entry by the power of two that brings c* to [1/2, 1) (the norms by one such
    power for the whole matrix), so no measure overflows or underflows on its
    own at the ends of the exponent range.
    """
    C, C_ref, A, B = as_real(C, C_ref, A, B)
    xp, C, R = _operands(C, C_ref, A, B)
    ref_inf, ref_nan = xp.isinf(R), xp.isnan(R)
    finite_ref = ~(ref_inf | ref_nan)
    bad = int((~xp.isfinite(C) & finite_ref).sum())
    zero = R == 0
    nonzero = finite_ref & ~zero
    at_zero = xp.abs(C[zero])
    common = {
        "entries": int(C.size),
        "correctly_rounded": float(((C == R) | (xp.isnan(C) & ref_nan)).sum()) / C.size if C.size else 1.0,
        "zeros": int(zero.sum()), "zeros_exact": int((at_zero == 0).sum()),
        "zero_max_abs": _stat(xp, xp.max, at_zero) or 0.0, "nonfinite": bad,
        "ref_infinite": int(ref_inf.sum()), "ref_infinite_matched": int((C[ref_inf] == R[ref_inf]).sum()),
        "ref_nan": int(ref_nan.sum()), "ref_nan_matched": int(xp.isnan(C[ref_nan]).sum()),
    }
    if bad:
        inf = math.inf
        return ErrorReport(max_rel=inf, median_rel=inf, nrm=inf, max_comp=inf if A is not None else None,
                           max_ulps=inf, median_ulps=inf, bits=inf, **{**common, "zero_max_abs": inf})
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):   # inf - inf at overflowed c*: unused
        shift = -xp.frexp(R)[1]                              # 0 where c* is 0 or infinite
        diff = xp.abs(xp.ldexp(C, shift) - xp.ldexp(R, shift))
        rel = diff[nonzero] / xp.abs(xp.ldexp(R, shift))[nonzero]
        ulps = diff[nonzero] / xp.ldexp(ulp(xp, R[nonzero]), shift[nonzero])
        max_ulps = _stat(xp, xp.max, ulps)
        return ErrorReport(
            max_rel=_stat(xp, xp.max, rel), median_rel=_stat(xp, xp.median, rel),
            nrm=normwise(xp, C, R, finite_ref),
            max_comp=None if A is None else componentwise(xp, diff, shift, A, B, finite_ref),
            max_ulps=max_ulps, median_ulps=_stat(xp, xp.median, ulps),
            bits=None if max_ulps is None else math.log2(1.0 + max_ulps), **common)


def as_real(C: Any, C_ref: Any, A: Any = None, B: Any = None) -> tuple[Any, Any, Any, Any]:
    """A complex product as a real one whose entries are the parts: C and C* as [Re | Im], A and B as the factors
    [Re A, -Im A] and [[Re B, Im B], [Im B, -Re B]], so that |A||B| holds each part's own componentwise scale
    (|Re A||Re B| + |Im A||Im B| for the real part, |Re A||Im B| + |Im A||Re B| for the imaginary part); real
    operands as they are."""
    xp = array_module(C_ref)
    kinds = [getattr(x, "dtype", np.dtype(float)).kind == "c" for x in (C, C_ref)]
    if kinds[0] != kinds[1]:
        raise TypeError(f"C ({C.dtype}) and the reference ({C_ref.dtype}) must both be real arrays or both complex")
    if not kinds[0]:
        return C, C_ref, A, B
    C, C_ref = (xp.asarray(x, dtype=np.complex128) for x in (C, C_ref))
    C, C_ref = (xp.concatenate([x.real, x.imag], axis=1) for x in (C, C_ref))
    if A is not None and B is not None:
        A, B = xp.asarray(A, dtype=np.complex128), xp.asarray(B, dtype=np.complex128)
        A = xp.concatenate([A.real, -A.imag], axis=1)
        B = xp.concatenate([xp.concatenate([B.real, B.imag], axis=1), xp.concatenate([B.imag, -B.real], axis=1)])
    return C, C_ref, A, B


def normwise(xp: Any, C: Any, R: Any, where: Any) -> float | None:
    """||C - C*||_F / ||C*||_F over ``where``, both scaled by one power of two; None when C* = 0."""
    R, C = R[where], C[where]
    top = float(xp.abs(R).max()) if R.size else 0.0
    if top == 0:
        return None
    scale = math.ldexp(1.0, -math.frexp(top)[1])
    return float(xp.linalg.norm(C * scale - R * scale)) / float(xp.linalg.norm(R * scale))


def componentwise(xp: Any, diff: Any, shift: Any, A: Any, B: Any, where: Any) -> float | None:
    """max |c - c*| / (|A| |B|)_ij over ``where`` (``diff``: |c - c*| scaled by 2**shift); an
    entry with (|A||B|)_ij = 0 has c* = 0 and counts as 0 if c is 0 too, as infinite otherwise."""
    scale = xp.ldexp(xp.abs(A.astype(np.float64)) @ xp.abs(B.astype(np.float64)), shift)[where]
    diff = diff[where]
    if not diff.size:
        return None
    positive = scale > 0
    worst = float((diff[positive] / scale[positive]).max()) if bool(positive.any()) else 0.0
    return math.inf if bool((diff[~positive] > 0).any()) else worst
