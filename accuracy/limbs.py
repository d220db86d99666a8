"""Multi-limb integers, one per matrix entry, and their single rounding to float64.

An entry's exact value is N * 2**E, where N = sum_q L[q] * 2**(q * beta) is
held in int64 limbs ``L[q]`` (q = 0 least significant; shape ``(limbs, ...)``)
and E is an int64 per entry. The limbs take exact integer sums (GEMM results
below 2**53 each) without overflow as long as fewer than 2**9 of them are added
to a limb between two :func:`carry` calls.

:func:`round_to_float64` rounds such a number once, to nearest with ties to
even, as IEEE 754 binary64 does: subnormal results keep fewer bits, results at
or beyond the overflow threshold become infinite. All work is vectorised over
the entries (NumPy or CuPy), looping only over the few limbs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gpu.backend import Array

PRECISION = 53            # binary64 significand bits
MIN_EXPONENT = -1022      # exponent of the smallest normal number
SUBNORMAL_EXPONENT = MIN_EXPONENT - PRECISION + 1   # 2**-1074, the smallest subnormal
#: Largest shift used with int64 shifts (x86 masks shift amounts to 6 bits).
_MAX_SHIFT = 62


def carry(L: Array, beta: int) -> None:
    """Propagate carries in place: afterwards L[q] is in [0, 2**beta) for every q but the
    top one, which holds the (signed) rest. The value sum_q L[q] 2**(q beta) is unchanged."""
    mask = (1 << beta) - 1
    for q in range(L.shape[0] - 1):
        L[q + 1] += L[q] >> beta          # arithmetic shift: floor division, also for negatives
        L[q] &= mask


def magnitude(xp: Any, L: Array, beta: int) -> tuple[Array, Array]:
    """(where N < 0, the digits of |N|): L becomes |N|'s digits, all in [0, 2**beta), in place.

    After :func:`carry` the top limb carries N's sign; negated limbs carry again.
    The digits returned stop at the highest limb that is nonzero for some entry.
    """
    carry(L, beta)
    negative = L[-1] < 0
    L *= xp.where(negative, -1, 1)[None]
    carry(L, beta)
    if bool((L[-1] >> beta).any()):
        raise OverflowError("the top limb overflowed: too few limbs for these sums (a bug in the caller)")
    used = L.shape[0]
    while used > 1 and not bool(L[used - 1].any()):
        used -= 1
    return negative, L[:used]


def floor_shift(xp: Any, digits: Array, beta: int, shift: Array) -> tuple[Array, Array]:
    """(floor(N / 2**shift), whether N mod 2**shift != 0) per entry, for digits of N >= 0.

    ``shift`` is an int64 per entry and may be negative (then the first result is
    N * 2**-shift, exact). The first result must fit in 62 bits, which holds when
    it keeps at most the leading 55 bits of N. Digits that lie wholly below the
    cut for every entry only feed the sticky flag, and those wholly above it
    only the quotient, which saves most of the work on the usual narrow spread
    of shifts.
    """
    low, high = int(shift.min()), int(shift.max())
    quotient = xp.zeros(shift.shape, dtype=np.int64)
    sticky = xp.zeros(shift.shape, dtype=bool)
    for q in range(digits.shape[0]):
        d, unit = digits[q], q * beta
        if unit + beta <= low:                    # below the cut everywhere
            sticky |= d != 0
        elif unit - high > _MAX_SHIFT:            # far above every cut: zero (the quotient fits)
            continue
        elif unit >= high:                        # at or above the cut everywhere
            quotient += d << xp.minimum(unit - shift, _MAX_SHIFT)
        else:
            offset = unit - shift
            right = xp.maximum(xp.minimum(-offset, _MAX_SHIFT), 0)
            kept = d >> right
            quotient += kept << xp.maximum(xp.minimum(offset, _MAX_SHIFT), 0)
            sticky |= (kept << right) != d
    return quotient, sticky


def round_to_float64(xp: Any, digits: Array, beta: int, exponent: Array) -> Array:
    """The float64 nearest (ties to even) to N * 2**exponent, N >= 0 given by its digits."""
    nonzero = digits != 0
    top = digits.shape[0] - 1 - xp.argmax(nonzero[::-1].view(np.int8), axis=0)   # highest nonzero digit
    lead = xp.take_along_axis(digits, top[None], axis=0)[0]
    lead_bits = xp.frexp(lead.astype(np.float64))[1].astype(np.int64)     # exact: lead < 2**53
    bits = xp.where(nonzero.any(axis=0), top * beta + lead_bits, 0)       # bit length of N
    leading = bits - 1 + exponent                                          # exponent of N's top bit
    precision = xp.where(leading >= MIN_EXPONENT, PRECISION, leading - SUBNORMAL_EXPONENT + 1)
    dropped = bits - precision
    kept, sticky = floor_shift(xp, digits, beta, dropped - 1)                  # one guard bit more
    significand = kept >> 1
    round_up = (kept & 1).astype(bool) & (sticky | (significand & 1).astype(bool))
    significand += round_up
    scale = (dropped + exponent).clip(-(2**30), 2**30).astype(np.int32)
    with np.errstate(over="ignore"):          # overflow to infinity is the correct rounding there
        return xp.ldexp(significand.astype(np.float64), scale)
