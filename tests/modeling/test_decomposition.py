"""Segment plans of the matrix product, and the largest N against the paper's published sizes."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from modeling.access import enumerate_ranges
from modeling.decomposition import (
    FP32,
    largest_n,
    matmul_maps,
    plan_segments,
    segment_bytes_1d,
    segment_bytes_2d,
)

GIB = 2**30
FAST = settings(max_examples=60, deadline=None)


@st.composite
def plans(draw):
    two_d = draw(st.booleans())
    tile = draw(st.integers(1, 4))
    blocks = draw(st.integers(1, 6))
    side = draw(st.integers(1, blocks))
    m = side * side if two_d else side
    return plan_segments(tile * blocks, m, two_d=two_d, tile=tile, itemsize=draw(st.sampled_from([2, 4, 8])))


# --- plans ---------------------------------------------------------------------------------------------

@FAST
@given(plans())
def test_planned_ranges_equal_brute_force(plan):
    maps = matmul_maps(plan.n, plan.tile)
    for task in plan.tasks:
        by, bx = task.blocks
        for name, planned in (("A", task.a), ("B", task.b), ("C", task.c)):
            cols, rows = enumerate_ranges(maps[name].over(by=by, bx=bx), (plan.n, plan.n))
            assert planned == (rows, cols), (name, task)


@FAST
@given(plans())
def test_tasks_hold_the_formula_bytes_on_average_and_cover_c_once(plan):
    assert len(plan.tasks) == plan.m
    assert sum(t.bytes for t in plan.tasks) == pytest.approx(plan.m * plan.formula_bytes)
    covered = sum((t.c[0][1] - t.c[0][0] + 1) * (t.c[1][1] - t.c[1][0] + 1) for t in plan.tasks)
    assert covered == plan.n * plan.n
    assert max(t.c[0][1] for t in plan.tasks) == plan.n - 1
    for t in plan.tasks:
        assert t.a[0] == t.c[0] and t.b[1] == t.c[1]              # the rows of A and the columns of B that C needs
        assert t.a[1] == t.b[0] == (0, plan.n - 1)                # every k


@pytest.mark.parametrize("n,m,tile", [(96, 4, 8), (96, 3, 8), (64, 8, 2), (240, 5, 16)])
def test_every_1d_task_holds_the_formula_bytes_when_tiles_split_evenly(n, m, tile):
    plan = plan_segments(n, m, two_d=False, tile=tile)
    assert {t.bytes for t in plan.tasks} == {segment_bytes_1d(n, m)} and plan.max_bytes == segment_bytes_1d(n, m)
    assert all(t.b == ((0, n - 1), (0, n - 1)) for t in plan.tasks)


@pytest.mark.parametrize("n,m,tile,itemsize", [(96, 4, 8, 4), (96, 9, 8, 8), (64, 16, 4, 2), (48, 1, 16, 4)])
def test_every_2d_task_holds_the_formula_bytes_when_tiles_split_evenly(n, m, tile, itemsize):
    plan = plan_segments(n, m, tile=tile, itemsize=itemsize)
    assert {t.bytes for t in plan.tasks} == {segment_bytes_2d(n, m, itemsize)}


def test_a_2d_plan_by_hand():
    plan = plan_segments(64, 4, tile=8)
    assert [t.blocks for t in plan.tasks] == [((0, 3), (0, 3)), ((0, 3), (4, 7)), ((4, 7), (0, 3)), ((4, 7), (4, 7))]
    task = plan.tasks[1]
    assert task.a == ((0, 31), (0, 63)) and task.b == ((0, 63), (32, 63)) and task.c == ((0, 31), (32, 63))
    assert task.bytes == 4 * (32 * 64 * 2 + 32 * 32) == segment_bytes_2d(64, 4)


def test_an_uneven_1d_split_differs_by_one_tile_row():
    plan = plan_segments(64, 3, two_d=False, tile=8)
    assert [t.c[0] for t in plan.tasks] == [(0, 15), (16, 39), (40, 63)]
    assert plan.max_bytes == 4 * (2 * 24 * 64 + 64 * 64) > plan.formula_bytes


@pytest.mark.parametrize("args,kwargs,match", [
    ((64, 8), {}, "perfect square"),
    ((64, 0), {"two_d": False}, "at least 1"),
    ((100, 4), {"tile": 32}, "pad N to 128"),
    ((64, 4), {"tile": 0}, "tile side must be positive"),
    ((64, 9, False, 32), {}, "M = 9 tile rows do not fit"),
    ((64, 9), {"tile": 32}, r"sqrt\(M\) = 3 tile rows and columns do not fit"),
    ((64, 4), {"itemsize": 0}, "itemsize"),
])
def test_plans_refuse_clearly(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        plan_segments(*args, **kwargs)


# --- largest N and the published sizes ---------------------------------------------------------------

def test_largest_n_rounds_to_whole_tiles():
    assert largest_n(6e9, 9, multiple=32) == largest_n(6e9, 9) // 32 * 32
    assert largest_n(6e9, 9, multiple=1) == largest_n(6e9, 9)
    with pytest.raises(ValueError, match="positive tile"):
        largest_n(6e9, 9, multiple=0)


def test_the_published_gb_are_gib_of_a_b_and_c():
    for n, gb in ((31584, 11), (38496, 17), (207680, 482)):
        assert round(3 * FP32 * n * n / GIB) == gb
    assert round(3 * FP32 * 38496**2 / 1e9) == 18                            # not decimal GB


def test_unsplit_31584_is_one_tile_below_a_12_gb_gpu():
    """No stated budget gives 31,584; 12e9 bytes gives one 32-tile more. The window that gives it
    exactly is 12e9 less 5 to 29 MB, which the paper's free memory presumably was."""
    assert segment_bytes_1d(1, 1) == segment_bytes_2d(1, 1) == 3 * FP32         # M = 1 is the unsplit code
    assert largest_n(12e9, 1) == 31622
    assert largest_n(12e9, 1, multiple=32) == 31616 == 31584 + 32
    lo, hi = 3 * FP32 * 31584**2, 3 * FP32 * 31616**2
    assert largest_n(lo, 1, multiple=32) == largest_n(hi - 1, 1, multiple=32) == 31584
    assert largest_n(lo - 1, 1, multiple=32) == 31552 and largest_n(hi, 1, multiple=32) == 31616
    assert (12e9 - lo, 12e9 - hi) == (29_411_328, 5_142_528)


def test_1d_38496_in_6_gb_buffers_for_m_165_to_190():
    """Reproduced exactly with a 6e9-byte buffer (half a K40) and N in whole 32-tiles, for M from 165
    to 190 (the paper does not state M); without the tiles no M gives it."""
    assert {largest_n(6e9, m, two_d=False, multiple=32) for m in range(165, 191)} == {38496}
    assert largest_n(6e9, 164, two_d=False, multiple=32) == 38464
    assert largest_n(6e9, 191, two_d=False, multiple=32) == 38528
    assert largest_n(6e9, 164, two_d=False) == 38495 and largest_n(6e9, 165, two_d=False) == 38497
    assert largest_n(6e9, 10**9, two_d=False) == 38729 == math.isqrt(int(6e9 / 4))   # all of B, as M grows


def test_2d_207680_is_host_bound_and_not_reproduced():
    """A, B and C in 512 GiB of host allow 214,039; the paper stopped at 482 GiB of data, leaving an
    unstated 30 GiB. Read as 512e9 bytes the bound falls below the published size."""
    assert largest_n(512 * GIB, 1) == 214039 and largest_n(512 * GIB, 1, multiple=32) == 214016
    assert 207680 / 214039 == pytest.approx(0.9703, abs=1e-4)
    assert largest_n(512e9, 1) == 206559 < 207680
    assert largest_n(6e9, 59**2) >= 207680 > largest_n(6e9, 58**2) == 207673    # its segments fit from M = 3481
    assert segment_bytes_2d(207680, 59**2) <= 6e9


def test_40000_fits_6_gb_only_in_2d():
    assert segment_bytes_2d(40000, 9) == pytest.approx(4.98e9, rel=1e-3)
    assert segment_bytes_2d(40000, 9) < 6e9
    assert min(segment_bytes_1d(40000, m) for m in (9, 100, 10**6)) > 6.4e9 > 6e9
