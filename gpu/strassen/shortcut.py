"""Kept call plans of :func:`gpu.strassen.matmul`: a repeated call skips the checks it already passed.

A call that resolves to level 0 with ``out=`` given is the library GEMM, whose device time at N = 1024 is
about 50 us; the full call (conversions, layout and dtype checks, the output's checks, the schedule and
level resolution, the memory estimate) cost the host 90 us more than the GEMM call on the H100's host, so
``level="auto"`` lost to DGEMM wherever the GEMM was short; at level 1 the same work held the first launch
back 0.3 ms. A call's **signature** (backend, shapes, strides, dtypes and writeability of A, B and ``out``, and
every option) is kept with its checked :class:`Plan` once the full call has passed every check, for
:data:`MAX_SIGNATURES` signatures. A repeated call then checks only what can change without changing the
signature:

* the addresses: ``out``'s bytes must not meet A's or B's, nor A's B's (the overwrite rights depend on it);
  otherwise the full call runs, and says why where it refuses;
* the values: NaN and infinity where ``check_finite``;
* the free memory, where the plan needs memory beyond ``out``;
* the device profile, for ``level="auto"``: its file and modification time
  (:func:`gpu.profile.profile_stamp`); a profile written since makes the full call decide again (at once
  where this process wrote it, within :data:`gpu.profile.STAMP_TTL_S` where another did).

A call without ``out=`` is kept where it resolves to level 0: the library's own product into a new array
(:func:`product`, whose output's memory is checked on every call). Calls with inputs that are not plain
arrays of the backend, with options that are not keys (a list of schedules) or with ``workspace="auto"``
(a plan made from the free memory) always take the full call. Warnings the full call gave (an unreadable
profile, another regime's table standing in) are not repeated, as Python shows a warning once per place by
default anyway.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ..backend import Array, Backend, require_finite, require_memory
from ..backend.blas import bytes_meet
from ..backend.checks import writeable
from ..backend.memo import LRU
from ..profile import profile_stamp

#: Call signatures whose plan is kept.
MAX_SIGNATURES = 1024


class Plan(NamedTuple):
    """What the full call decided: the level and schedule, zero padding (``fringe="pad"``) and the core's
    side, the overwrite rights, and the memory it needs beyond ``out`` (``require_memory``'s arguments;
    None for none)."""

    level: int
    schedule: str
    padded: bool = False
    side: int = 0
    overwrite_a: bool = False
    overwrite_b: bool = False
    memory: tuple[int, str, str] | None = None


#: The plan of a call that is one library GEMM.
GEMM = Plan(0, "gemm")


def product(memory: tuple[int, str, str]) -> Plan:
    """The plan of a call with no ``out`` that is the library's own product into a new array, whose
    ``memory`` (``require_memory``'s arguments: the output) is checked on every call."""
    return Plan(0, "product", memory=memory)


class Kept(NamedTuple):
    """A kept plan, the profile stamp its ``level="auto"`` read (None for a given level) and the byte extents
    of A, B and ``out`` for the overlap tests."""

    plan: Plan
    stamp: Any
    extents: tuple[int, int, int]


_KEPT = LRU(MAX_SIGNATURES)


def signature(be: Backend, A: Any, B: Any, out: Any, options: tuple) -> tuple | None:
    """The key of a call, or None where it cannot be kept (inputs or ``out`` that are not plain arrays of
    ``be``); a key holding an option that cannot be hashed (a list of schedules) is never kept."""
    array = be.xp.ndarray
    if type(A) is not array or type(B) is not array or (out is not None and type(out) is not array):
        return None
    rights = tuple(writeable(x) for x in (A, B, out) if x is not None)   # a read-only one takes the full call
    given = (None,) if out is None else (out.shape, out.strides, out.dtype)
    return (be, A.shape, A.strides, A.dtype, B.shape, B.strides, B.dtype, *given, *rights, *options)


def _lookup(key: tuple | None) -> Kept | None:
    try:
        return None if key is None else _KEPT.get(key)
    except TypeError:                                   # an option that is no key (a list of schedules)
        return None


def kept(be: Backend, key: tuple | None, level: Any, A: Array, B: Array, C: Array, check_finite: bool,
         nonfinite: str) -> Plan | None:
    """The kept plan of this call after its per-call checks, or None (nothing done) where the signature is
    not kept, the profile changed since, or the addresses meet (the full call then decides)."""
    entry = _lookup(key)
    if entry is None or (level == "auto" and entry.stamp != profile_stamp(be)):
        return None
    if C is not None or entry.plan.level:
        (ea, eb, ec), pa, pb = entry.extents, be.pointer(A), be.pointer(B)
        pc = None if C is None else be.pointer(C)
        if pc is not None and (bytes_meet(pc, ec, pa, ea) or bytes_meet(pc, ec, pb, eb)):
            return None
        if entry.plan.level and bytes_meet(pa, ea, pb, eb):
            return None
    require_finite(be, check_finite, {"A": A, "B": B}, nonfinite)
    if entry.plan.memory is not None:
        require_memory(be, *entry.plan.memory)
    return entry.plan


def keep(be: Backend, key: tuple | None, level: Any, stamp: Any, A: Array, B: Array, C: Array | None,
         plan: Plan) -> Plan:
    """Keep the plan of a full call that passed every check (``stamp``: the profile stamp read before
    ``level="auto"`` was resolved; ``C`` None where the call has no ``out``); returns ``plan``."""
    if key is not None and _hashable(key):
        extents = tuple(0 if x is None else be.layout(x).extent for x in (A, B, C))
        _KEPT[key] = Kept(plan, stamp if level == "auto" else None, extents)
    return plan


def _hashable(key: tuple) -> bool:
    try:
        hash(key)
    except TypeError:
        return False
    return True


def forget() -> None:
    """Drop every kept plan."""
    _KEPT.clear()
