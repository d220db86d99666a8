"""Access-range estimation of affine index maps, against brute force over every thread."""

import math
from itertools import product

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from modeling.access import (
    AffineMap,
    corners,
    dimension_ranges,
    enumerate_ranges,
    evaluate,
    extreme_threads,
    flat_range,
    reduced_map,
)
from modeling.decomposition import matmul_maps

FAST = settings(max_examples=150, deadline=None)


def naive_ranges(amap, shape):
    """The mapping the spec warns about: f mod X, (f div X) mod Y, f div XY at the corner threads only."""
    strides = [math.prod(shape[:d]) for d in range(len(shape))]
    digits = [[(f // s) % x if d < len(shape) - 1 else f // s for d, (x, s) in enumerate(zip(shape, strides))]
              for f in (evaluate(amap, ids) for ids in corners(amap))]
    return tuple((min(col), max(col)) for col in zip(*digits))


def reduction_without_carry(amap, shape):
    """The spec's reduction and wrap merge taken literally, with no carry between dimensions."""
    out = []
    for d, x in enumerate(shape):
        lo, hi = flat_range(reduced_map(amap, shape, d))
        last = d == len(shape) - 1
        out.append((lo, hi) if last or (0 <= lo and hi < x) else (0, x - 1))
    return tuple(out)


def contains(outer, inner):
    return all(o[0] <= i[0] and i[1] <= o[1] for o, i in zip(outer, inner))


def wraps(amap, shape):
    """Whether any dimension but the last has a reduced range leaving [0, extent - 1]."""
    return any(not (0 <= lo and hi < x) for x, (lo, hi) in
               ((x, flat_range(reduced_map(amap, shape, d))) for d, x in enumerate(shape[:-1])))


@st.composite
def maps_in_arrays(draw):
    """Any affine map (coefficients and ids of either sign, zero included), shifted into an array."""
    d = draw(st.integers(1, 4))
    coefficients = draw(st.lists(st.integers(-40, 40), min_size=d, max_size=d))
    ranges = []
    for _ in range(d):
        lo = draw(st.integers(-3, 6))
        ranges.append((lo, lo + draw(st.integers(0, 5))))
    amap = AffineMap(0, tuple(coefficients), tuple(ranges))
    fmin, fmax = flat_range(amap)
    start = draw(st.integers(0, 20))
    amap = AffineMap(start - fmin, amap.coefficients, amap.ranges)
    dims = draw(st.integers(1, 3))
    fast = [draw(st.integers(1, 12)) for _ in range(dims - 1)]
    last = -(-(start + fmax - fmin + 1) // math.prod(fast)) + draw(st.integers(0, 2))
    return amap, (*fast, last)


@st.composite
def unwrapped_maps(draw):
    """Maps built digit by digit so that no reduced range wraps: a_i = x_i + X y_i + X Y z_i, z_i of either sign."""
    d = draw(st.integers(1, 4))
    ranges = tuple((lo, lo + draw(st.integers(0, 4))) for lo in (draw(st.integers(0, 5)) for _ in range(d)))
    dims = draw(st.integers(1, 3))
    extents, digits = [], []
    for _ in range(dims - 1):
        c = draw(st.lists(st.integers(0, 6), min_size=d + 1, max_size=d + 1))
        top = c[0] + sum(a * hi for a, (_, hi) in zip(c[1:], ranges))
        extents.append(top + 1 + draw(st.integers(0, 3)))
        digits.append(c)
    z = [0, *draw(st.lists(st.integers(-6, 6), min_size=d, max_size=d))]
    zmin, zmax = flat_range(AffineMap(0, tuple(z[1:]), ranges))
    z[0] = -zmin + draw(st.integers(0, 2))
    extents.append(z[0] + zmax + 1 + draw(st.integers(0, 2)))
    digits.append(z)
    strides = [math.prod(extents[:k]) for k in range(dims)]
    a = [sum(s * c[i] for s, c in zip(strides, digits)) for i in range(d + 1)]
    return AffineMap(a[0], tuple(a[1:]), ranges), tuple(extents)


# --- the flat range from two corner threads ------------------------------------------------------------

@FAST
@given(maps_in_arrays())
def test_flat_range_is_the_extreme_over_every_thread(case):
    amap, _ = case
    values = [evaluate(amap, ids) for ids in product(*(range(lo, hi + 1) for lo, hi in amap.ranges))]
    assert flat_range(amap) == (min(values), max(values))
    at_corners = [evaluate(amap, ids) for ids in corners(amap)]
    assert flat_range(amap) == (min(at_corners), max(at_corners))
    assert all(ids in set(corners(amap)) for ids in extreme_threads(amap))


# --- per dimension -------------------------------------------------------------------------------------

@FAST
@given(maps_in_arrays())
def test_the_estimate_always_contains_every_access(case):
    amap, shape = case
    estimate, truth = dimension_ranges(amap, shape), enumerate_ranges(amap, shape)
    assert contains(estimate, truth), (estimate, truth)
    assert all(0 <= lo <= hi < x for (lo, hi), x in zip(estimate, shape))
    if not wraps(amap, shape):
        assert estimate == truth


@FAST
@given(unwrapped_maps())
def test_the_estimate_is_exact_when_no_reduced_range_wraps(case):
    amap, shape = case
    assert not wraps(amap, shape)
    assert dimension_ranges(amap, shape) == enumerate_ranges(amap, shape)


def test_reduction_of_the_spec():
    amap = AffineMap(29, (-7, 50, 1), ((0, 1), (0, 2), (0, 3)))
    x, y = 4, 3
    assert reduced_map(amap, (x, y, 9), 0).coefficients == (1, 2, 1)
    assert reduced_map(amap, (x, y, 9), 0).offset == 29 % 4
    assert reduced_map(amap, (x, y, 9), 1).coefficients == ((-7 // 4) % 3, (50 // 4) % 3, 0)
    assert reduced_map(amap, (x, y, 9), 2).coefficients == (-7 // 12, 50 // 12, 0)
    assert reduced_map(amap, (x, y, 9), 2).offset == 2


def test_the_naive_decomposition_misses_a_wrapping_range():
    # f = 5 l, l = 0, 1, 2 on an 8 x 2 array: columns 0, 5, 2. The corners give 0 and 2 only.
    amap, shape = AffineMap(0, (5,), ((0, 2),)), (8, 2)
    truth = enumerate_ranges(amap, shape)
    assert truth == ((0, 5), (0, 1))
    assert not contains(naive_ranges(amap, shape), truth)
    assert dimension_ranges(amap, shape) == ((0, 7), (0, 1))        # G_x = 5 l reaches 10 >= 8: wraps, merged


def test_the_spec_reduction_needs_the_carry():
    # f = l, l in [0, 7] on a 4 x 2 array reads both rows, yet every reduced y coefficient is 0.
    amap, shape = AffineMap(0, (1,), ((0, 7),)), (4, 2)
    truth = enumerate_ranges(amap, shape)
    assert truth == ((0, 3), (0, 1))
    assert not contains(reduction_without_carry(amap, shape), truth)
    assert dimension_ranges(amap, shape) == truth


def test_a_wrap_merges_into_the_whole_extent():
    # G_x = 6 + l over [6, 9] on X = 8: pieces [0, 1] and [6, 7], merged into [0, 7]; the carry reaches row 1.
    amap, shape = AffineMap(6, (1,), ((0, 3),)), (8, 2)
    assert dimension_ranges(amap, shape) == enumerate_ranges(amap, shape) == ((0, 7), (0, 1))


def test_the_flat_bound_tightens_a_negative_coefficient():
    # f = 10 - l reduces to 10 + 15 l mod 16, which wraps; the flat range 7..10 stays in one row.
    amap = AffineMap(10, (-1,), ((0, 3),))
    assert dimension_ranges(amap, (16, 2)) == enumerate_ranges(amap, (16, 2)) == ((7, 10), (0, 0))


def test_one_dimensional_arrays_take_the_flat_range():
    amap = AffineMap(3, (4, -1), ((0, 2), (0, 3)))
    assert dimension_ranges(amap, (20,)) == enumerate_ranges(amap, (20,)) == (flat_range(amap),) == ((0, 11),)


# --- the matrix-product kernel -----------------------------------------------------------------------

@FAST
@given(st.integers(1, 4), st.integers(1, 4), st.data())
def test_the_matrix_product_maps_are_exact_on_every_task(tile, blocks, data):
    n = tile * blocks
    run = st.tuples(st.integers(0, blocks - 1), st.integers(0, blocks - 1)).map(sorted).map(tuple)
    by, bx = data.draw(run), data.draw(run)
    for name, amap in matmul_maps(n, tile).items():
        task = amap.over(by=by, bx=bx)
        assert dimension_ranges(task, (n, n)) == enumerate_ranges(task, (n, n)), name


def test_the_matrix_product_maps_by_hand():
    maps = matmul_maps(8, 2)
    task = {k: v.over(by=(1, 2), bx=(3, 3)) for k, v in maps.items()}
    assert dimension_ranges(task["C"], (8, 8)) == ((6, 7), (2, 5))          # (cols, rows)
    assert dimension_ranges(task["A"], (8, 8)) == ((0, 7), (2, 5))
    assert dimension_ranges(task["B"], (8, 8)) == ((6, 7), (0, 7))


# --- refusals ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("build,match", [
    (lambda: AffineMap(0, (1, 2), ((0, 1),)), "one id range per coefficient"),
    (lambda: AffineMap(0, (1,), ((2, 1),)), "lo <= hi"),
    (lambda: AffineMap(0, (1.5,), ((0, 1),)), "must be an integer"),
    (lambda: AffineMap(0, (1,), ((0, 1),), ("k", "j")), "name every id or none"),
    (lambda: AffineMap(0, (1, 1), ((0, 1), (0, 1)), ("k", "k")), "distinct"),
    (lambda: AffineMap(0, (1,), ((0, 1),), ("k",)).over(j=(0, 1)), "no id named 'j'"),
    (lambda: dimension_ranges(AffineMap(0, (1,), ((0, 8),)), (4, 2)), "outside an array of shape"),
    (lambda: dimension_ranges(AffineMap(-1, (1,), ((0, 2),)), (4, 2)), "outside an array of shape"),
    (lambda: dimension_ranges(AffineMap(0, (1,), ((0, 2),)), (4, 0)), "positive integer extents"),
    (lambda: enumerate_ranges(AffineMap(0, (1,), ((0, 99),)), (100,), limit=10), "exceeds the limit"),
    (lambda: reduced_map(AffineMap(0, (1,), ((0, 2),)), (4,), 1), "outside a 1-D shape"),
])
def test_clear_refusals(build, match):
    with pytest.raises(ValueError, match=match):
        build()
