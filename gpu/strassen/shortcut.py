"""The level-0 shortcut of :func:`gpu.strassen.matmul`: a repeated call that comes out as one GEMM.

A call that resolves to level 0 with ``out=`` given is the library GEMM, whose device time at
N = 1024 is about 50 us; the full call (conversions, layout and dtype checks, the output's checks,
the schedule and level resolution) cost the host 90 us more than the GEMM call on an H100's host,
so ``level="auto"`` lost to DGEMM wherever the GEMM was short. Such a call's **signature** (backend,
shapes, strides and dtypes of A, B and ``out``, and the options that decide the level) is kept once
the full call has passed every check, :data:`MAX_SIGNATURES` of them. A repeated call then checks
only what can change without changing the signature:

* the addresses: ``out``'s bytes must not meet A's or B's (otherwise the full call runs and says why);
* the values: NaN and infinity where ``check_finite``;
* the device profile, for ``level="auto"``: its file and modification time
  (:func:`gpu.profile.profile_stamp`); a profile written since makes the full call decide again.

Warnings the full call gave (an unreadable profile, another regime's table standing in) are not
repeated by the shortcut, as Python shows a warning once per place by default anyway.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ..backend import Array, Backend, require_finite
from ..backend.memo import LRU
from ..profile import profile_stamp

#: Call signatures whose level-0 outcome is kept.
MAX_SIGNATURES = 1024


class Level0(NamedTuple):
    """A signature's kept outcome: the profile stamp its ``level="auto"`` read (None for a given level) and
    the byte extents of A, B and ``out`` for the overlap test."""

    stamp: Any
    extents: tuple[int, int, int]


_KEPT = LRU(MAX_SIGNATURES)


def signature(be: Backend, A: Any, B: Any, out: Any, options: tuple) -> tuple | None:
    """The key of a call, or None where it cannot take the shortcut (no ``out``, inputs that are not
    plain arrays of ``be``, or options that cannot be keys, such as a list of schedules)."""
    array = be.xp.ndarray
    if out is None or type(A) is not array or type(B) is not array or type(out) is not array:
        return None
    key = (be, A.shape, A.strides, A.dtype, B.shape, B.strides, B.dtype, out.shape, out.strides, out.dtype, *options)
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _overlap(be: Backend, extents: tuple[int, int, int], A: Array, B: Array, C: Array) -> bool:
    """Whether ``C``'s byte range meets A's or B's."""
    (ea, eb, ec), pa, pb, pc = extents, be.pointer(A), be.pointer(B), be.pointer(C)
    return (pc < pa + ea and pa < pc + ec) or (pc < pb + eb and pb < pc + ec)


def run(be: Backend, key: tuple | None, level: Any, A: Array, B: Array, C: Array, check_finite: bool,
        nonfinite: str) -> bool:
    """Run a kept level-0 call as ``C = A @ B`` and say so; False (nothing done) where the signature is not
    kept, the profile changed since, or ``C`` meets A or B."""
    entry = None if key is None else _KEPT.get(key)
    if entry is None or (level == "auto" and entry.stamp != profile_stamp(be)) \
            or _overlap(be, entry.extents, A, B, C):
        return False
    require_finite(be, check_finite, {"A": A, "B": B}, nonfinite)
    be.gemm(A, B, C)
    return True


def keep(be: Backend, key: tuple | None, level: Any, stamp: Any, A: Array, B: Array, C: Array) -> None:
    """Keep a signature whose full call passed every check and ran as one GEMM; ``stamp``: the profile
    stamp read before ``level="auto"`` was resolved."""
    if key is not None:
        spans = [be.layout(x).span for x in (A, B, C)]
        _KEPT[key] = Level0(stamp if level == "auto" else None, tuple(end - start for start, end in spans))


def forget() -> None:
    """Drop every kept signature."""
    _KEPT.clear()
