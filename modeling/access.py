"""Access ranges of affine index maps, per array dimension (Sakai, Ino & Hagihara 2016).

A task (a set of thread blocks) reads the elements ``f(l) = a0 + sum_i a_i l_i`` of an array, where
the ``l_i`` are thread and block ids (and loop counters treated as ids), each over an inclusive range
``[lo_i, hi_i]`` for the task, and the ``a_i`` are constant at launch (the paper's access-range estimation).
Segmenting the array needs, per dimension, an interval holding every index the task touches.

* :class:`AffineMap` is the map as data, built once and analysed for many tasks (:meth:`AffineMap.over`).
* :func:`flat_range`: f is affine, so its bounds over the box of ids are reached at corners of the box;
  the sign of each ``a_i`` picks the two corner threads (:func:`extreme_threads`) that attain them, so
  only those are evaluated. Exact.
* :func:`dimension_ranges`: per dimension of an ``(X, Y, Z)`` array (extents fastest first, as in the
  spec: a row-major NumPy array of shape ``(rows, cols)`` is ``(cols, rows)`` here). The naive
  ``f mod X``, ``(f div X) mod Y``, ``f div XY`` is not affine, so corner threads can miss indices.
  The spec's fix reduces every coefficient, offset included, per dimension first:
  ``x_i = a_i mod X``, ``y_i = (a_i div X) mod Y``, ``z_i = a_i div XY``. Each reduced map ``G`` is
  affine, its bounds ``[L, U]`` come from the corners, and ``f = G_x + X G_y + X Y G_z`` exactly.
* :func:`enumerate_ranges` evaluates every thread: the brute-force reference of the tests.

Semantics and guarantees:

* ``mod`` and ``div`` are floor division (Python's), so residues lie in ``[0, extent)`` and negative
  coefficients and offsets are supported: ``a_i = (a_i mod X) + X (a_i div X)`` holds for any sign.
* Wrap: a reduced range ``[L, U]`` that leaves ``[0, X-1]`` wraps. If ``U - L < X`` it covers the two
  pieces ``[0, U mod X]`` and ``[L mod X, X-1]``; merged, as the spec says, into one segment, the
  smallest interval inside ``[0, X-1]`` covering both, which is the whole ``[0, X-1]`` (the pieces
  sit at the two ends). If ``U - L >= X`` every residue can occur: again ``[0, X-1]``.
* Carry, beyond the paper: when ``G_x`` reaches ``X`` or more, ``G_x div X`` carries into the next
  dimension, ``g_y = (G_y + G_x div X) mod Y``. The spec's reduction alone omits it and then misses
  accesses (``f = l`` for ``l`` in ``[0, 7]`` on a 4 x 2 array: ``G_y = 0``, yet rows 0 and 1 are
  read), so the carry's range ``[L div X, U div X]`` is added to the next dimension's bounds.
* Every range is intersected with the one the flat range implies (``f div s_d`` is monotone in f),
  which is how a prior 1-D estimate bounds a dimension; both contain the truth, so their
  intersection does too, and it recovers exact ranges for some maps whose reduction wraps (a
  negative coefficient reduces to a large positive one).
* Hence the estimate always contains every index the task touches; it equals brute force whenever
  no reduced range of a dimension but the last leaves ``[0, extent-1]`` (no wrap, no carry), which
  holds for the matrix-product kernel's tiles. A map reaching outside the array is refused.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import product

import numpy as np

Interval = tuple[int, int]

#: Threads :func:`enumerate_ranges` evaluates at most, unless told otherwise.
ENUMERATION_LIMIT = 1 << 24


@dataclass(frozen=True)
class AffineMap:
    """``f(l) = offset + sum_i coefficients[i] * l_i`` over ``l_i`` in ``ranges[i]`` (inclusive).

    ``names`` optionally names the ids (``"by"``, ``"tx"``, ``"k"``) so that :meth:`over` can give a
    task's ranges by name; either it is empty or it has one name per coefficient.
    """

    offset: int
    coefficients: tuple[int, ...]
    ranges: tuple[Interval, ...]
    names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "coefficients", tuple(_integer(a, "coefficient") for a in self.coefficients))
        object.__setattr__(self, "ranges", tuple(_interval(r) for r in self.ranges))
        object.__setattr__(self, "offset", _integer(self.offset, "offset"))
        object.__setattr__(self, "names", tuple(self.names))
        if len(self.coefficients) != len(self.ranges):
            raise ValueError(f"an affine map needs one id range per coefficient, got {len(self.coefficients)} "
                             f"coefficients and {len(self.ranges)} ranges")
        if self.names and len(self.names) != len(self.coefficients):
            raise ValueError(f"name every id or none: {len(self.names)} names for {len(self.coefficients)} ids")
        if len(set(self.names)) != len(self.names):
            raise ValueError(f"id names must be distinct, got {self.names}")

    def over(self, ranges: Mapping[str, Interval] | None = None, /, **by_name: Interval) -> AffineMap:
        """The same map over other ranges of the named ids (those not named keep theirs)."""
        given = {**(ranges or {}), **by_name}
        unknown = sorted(set(given) - set(self.names))
        if unknown:
            raise ValueError(f"no id named {unknown[0]!r} in this map; its ids are {self.names}")
        new = tuple(given.get(name, r) for name, r in zip(self.names, self.ranges))
        return AffineMap(self.offset, self.coefficients, new, self.names)

    @property
    def threads(self) -> int:
        """Number of id tuples in the box (threads, counting loop ids as threads)."""
        return math.prod(hi - lo + 1 for lo, hi in self.ranges)


def _integer(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"an affine map's {what} must be an integer, got {value!r}")
    return int(value)


def _interval(r: Sequence[int]) -> Interval:
    if len(r) != 2:
        raise ValueError(f"an id range is (lo, hi), got {r!r}")
    lo, hi = _integer(r[0], "id bound"), _integer(r[1], "id bound")
    if lo > hi:
        raise ValueError(f"an id range needs lo <= hi, got ({lo}, {hi}); ranges are inclusive")
    return lo, hi


def evaluate(amap: AffineMap, ids: Sequence[int]) -> int:
    """f at one thread (one id per coefficient)."""
    if len(ids) != len(amap.coefficients):
        raise ValueError(f"the map has {len(amap.coefficients)} ids, got {len(ids)} values")
    return amap.offset + sum(a * l for a, l in zip(amap.coefficients, ids))


def corners(amap: AffineMap) -> Iterator[tuple[int, ...]]:
    """The 2^d extreme threads: every id at its low or high bound."""
    return product(*amap.ranges)


def extreme_threads(amap: AffineMap) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The two corner threads where f is smallest and largest (each id at the end its coefficient's sign picks)."""
    low = tuple(lo if a >= 0 else hi for a, (lo, hi) in zip(amap.coefficients, amap.ranges))
    high = tuple(hi if a >= 0 else lo for a, (lo, hi) in zip(amap.coefficients, amap.ranges))
    return low, high


def flat_range(amap: AffineMap) -> Interval:
    """``[min, max]`` of f over the task, from its two extreme threads only."""
    low, high = extreme_threads(amap)
    return evaluate(amap, low), evaluate(amap, high)


def _shape(shape: Sequence[int]) -> tuple[int, ...]:
    extents = tuple(shape)
    if not extents or any(isinstance(x, bool) or not isinstance(x, (int, np.integer)) or x < 1 for x in extents):
        raise ValueError(f"an array shape is one or more positive integer extents (X, Y, Z), got {shape!r}")
    return tuple(int(x) for x in extents)


def _strides(extents: tuple[int, ...]) -> list[int]:
    return [math.prod(extents[:d]) for d in range(len(extents))]


def _inside(flat: Interval, extents: tuple[int, ...]) -> None:
    size = math.prod(extents)
    if flat[0] < 0 or flat[1] >= size:
        raise ValueError(f"the map reaches flat indices {flat[0]}..{flat[1]}, outside an array of shape "
                         f"{extents} (indices 0..{size - 1}); check the offset, coefficients and id ranges, "
                         f"or give the array's full shape")


def _residues(lo: int, hi: int, extent: int) -> Interval:
    """The smallest interval inside ``[0, extent-1]`` holding ``v mod extent`` for every v in ``[lo, hi]``."""
    if hi - lo + 1 >= extent or lo // extent != hi // extent:
        return 0, extent - 1
    return lo % extent, hi % extent


def reduced_map(amap: AffineMap, shape: Sequence[int], dim: int) -> AffineMap:
    """The spec's reduced map of dimension ``dim``: ``(a_i div s_d) mod extent_d``, offset included,
    with ``s_d`` the product of the faster extents; the last dimension keeps ``a_i div s_d`` unreduced."""
    extents = _shape(shape)
    if not 0 <= dim < len(extents):
        raise ValueError(f"dimension {dim} is outside a {len(extents)}-D shape {extents}")
    stride, last = _strides(extents)[dim], dim == len(extents) - 1

    def reduce(a: int) -> int:
        return a // stride if last else (a // stride) % extents[dim]

    return AffineMap(reduce(amap.offset), tuple(reduce(a) for a in amap.coefficients), amap.ranges, amap.names)


def dimension_ranges(amap: AffineMap, shape: Sequence[int]) -> tuple[Interval, ...]:
    """Per dimension of an array of ``shape`` (extents fastest first), an inclusive ``(lo, hi)`` holding
    every index the task touches: the spec's coefficient reduction with wrap merge, plus carries,
    intersected with the flat range's bound (module docstring). Exact when nothing wraps."""
    extents = _shape(shape)
    flat = flat_range(amap)
    _inside(flat, extents)
    carry = (0, 0)
    out = []
    for d, (extent, stride) in enumerate(zip(extents, _strides(extents))):
        lo, hi = flat_range(reduced_map(amap, extents, d))
        lo, hi = lo + carry[0], hi + carry[1]
        q_lo, q_hi = flat[0] // stride, flat[1] // stride
        if d == len(extents) - 1:
            out.append((max(lo, q_lo), min(hi, q_hi)))
            break
        carry = (lo // extent, hi // extent)
        est, bound = _residues(lo, hi, extent), _residues(q_lo, q_hi, extent)
        out.append((max(est[0], bound[0]), min(est[1], bound[1])))
    return tuple(out)


def enumerate_ranges(amap: AffineMap, shape: Sequence[int], limit: int = ENUMERATION_LIMIT) -> tuple[Interval, ...]:
    """Exact per-dimension ``(min, max)`` of the indices, by evaluating every thread (the tests' reference)."""
    extents = _shape(shape)
    if amap.threads > limit:
        raise ValueError(f"enumerating {amap.threads} threads exceeds the limit of {limit}; "
                         f"shrink the id ranges or raise limit")
    flat = np.full((1,) * len(amap.ranges), amap.offset, dtype=np.int64)
    for i, (a, (lo, hi)) in enumerate(zip(amap.coefficients, amap.ranges)):
        axis = [1] * len(amap.ranges)
        axis[i] = hi - lo + 1
        flat = flat + a * np.arange(lo, hi + 1, dtype=np.int64).reshape(axis)
    _inside((int(flat.min()), int(flat.max())), extents)
    out = []
    for d, (extent, stride) in enumerate(zip(extents, _strides(extents))):
        index = flat // stride if d == len(extents) - 1 else (flat // stride) % extent
        out.append((int(index.min()), int(index.max())))
    return tuple(out)
