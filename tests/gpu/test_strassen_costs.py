"""What a Strassen-Winograd product costs (:mod:`gpu.strassen.costs`): operation counts and bytes
read from the schedule tables, by hand and against the spec's published unit counts."""

import pytest

from gpu.strassen.costs import (
    core_side,
    level_counts,
    matmul_memory,
    strassen_memory,
    temporaries_per_depth,
    total_launches,
    units,
)

# --- memory model --------------------------------------------------------------------------------

N = 1024


def test_rum_memory_is_twelve_units_at_every_level():
    for level in range(0, 6):
        est = strassen_memory("rum", N, level)
        assert units(est, N) == 12.0, level
        assert est.extra == 0


@pytest.mark.parametrize("level,expected", [(1, 14.0), (2, 14.5), (3, 14.625)])
def test_lai_memory(level, expected):
    assert units(strassen_memory("lai", N, level), N) == pytest.approx(12 + 2 * sum(4.0**-l for l in range(level)))
    assert units(strassen_memory("lai", N, level), N) == pytest.approx(expected)


def test_lai_memory_converges_to_14_667():
    assert units(strassen_memory("lai", 2**12, 10), 2**12) == pytest.approx(12 + 8 / 3, abs=1e-4)
    assert temporaries_per_depth("lai", 3) == [2, 2, 2]


def test_rum_without_overwrite_adds_four_support_quadrants():
    quad = (N // 2) ** 2 * 8
    for level in (1, 2, 3):
        est = strassen_memory("rum", N, level, overwrite_a=False, overwrite_b=False)
        assert est.support == 4 * quad and est.copies == 0 and est.temporaries == 0
        assert units(est, N) == 16.0
    half = strassen_memory("rum", N, 2, overwrite_a=True, overwrite_b=False)
    assert half.support == 2 * quad  # S21, S22 alias B's quadrants


def test_memory_model_refuses_an_indivisible_size():
    with pytest.raises(ValueError, match="not divisible"):
        strassen_memory("rum", 100, 3)


# --- memory for any N -----------------------------------------------------------------------------

def test_published_unit_counts():
    n = 2**12
    assert units(strassen_memory("rum", n, 8), n) == 12
    assert units(strassen_memory("lai", n, 10), n) == pytest.approx(12 + 8 / 3, abs=1e-4)
    assert units(strassen_memory("otsuka", n, 10, protect=False), n) == pytest.approx(12 + 28 / 3, abs=1e-4)
    assert units(strassen_memory("otsuka", n, 3, protect=False), n) == pytest.approx(12 + 7 + 7 / 4)
    assert units(strassen_memory("otsuka", n, 3), n) > units(strassen_memory("otsuka", n, 3, protect=False), n)


def test_matmul_memory_of_an_odd_size():
    est = matmul_memory("rum", 1001, 1001, 1001, 3)                 # core 1000, inputs kept
    assert est.operands == 3 * 1001**2 * 8
    assert (est.support, est.copies, est.temporaries) == (4 * 500**2 * 8, 0, 0)
    assert matmul_memory("rum", 1001, 1001, 1001, 3, overwrite_a=True, overwrite_b=True).extra == 0
    pad = matmul_memory("lai", 1001, 1001, 1001, 3, fringe="pad")   # 1008 = 126 x 8
    lai = strassen_memory("lai", 1008, 3)
    assert pad.copies == 3 * 1008**2 * 8 and pad.temporaries == lai.temporaries
    rect = matmul_memory("lai", 700, 900, 500, 2)                   # core 500
    assert rect.operands == (700 * 900 + 900 * 500 + 700 * 500) * 8
    assert rect.temporaries == strassen_memory("lai", 500, 2).temporaries
    assert matmul_memory("rum", 7, 7, 7, 3).extra == 0              # no core: library GEMM only
    with pytest.raises(ValueError, match="fringe"):
        matmul_memory("rum", 8, 8, 8, 1, fringe="crop")


def test_core_side_peels_down_or_pads_up():
    assert (core_side(1001, 1001, 1001, 3), core_side(1001, 1001, 1001, 3, "pad")) == (1000, 1008)
    assert core_side(700, 900, 500, 2) == 500 and core_side(700, 900, 500, 2, "pad") == 900
    assert core_side(7, 7, 7, 3) == 0 and core_side(7, 7, 7, 0) == 7
    with pytest.raises(ValueError, match="positive dimensions"):
        core_side(0, 4, 4, 1)
    with pytest.raises(ValueError, match="fringe must be 'peel' or 'pad', got 'crop'"):
        core_side(8, 8, 8, 1, "crop")


# --- counts from the tables ---------------------------------------------------------------------

def test_rum_counts_are_the_thesis_seven_and_fifteen():
    bottom, above = level_counts("rum", 1), level_counts("rum", 3)
    assert (bottom.products, bottom.geams, bottom.launches, bottom.temporaries) == (7, 15, 22, 0)
    assert (above.products, above.geams, above.launches) == (7, 15, 15)   # GEMMs are launched below
    assert [total_launches("rum", lv) for lv in range(4)] == [1, 22, 15 + 7 * 22, 15 + 7 * (15 + 7 * 22)]


def test_fused_rum_counts_each_run_once():
    # Runs of RUM's additions: {1,2} {4,5} {7} {9} {11} {13..17} {19,20} {22}; reads + writes of each:
    # 6 + 6 + 3 + 3 + 3 + (7 + 3) + (3 + 2) + 3 = 39 passes = 13 Geams, in 8 launches (+ 7 GEMMs).
    fused = level_counts("rum", 1, fused=True)
    assert fused.geams == pytest.approx(13) and fused.launches == 15
    assert level_counts("rum", 2, fused=True).launches == 8


def test_otsuka_counts_include_its_copies():
    low, high = level_counts("otsuka", 1), level_counts("otsuka", 2)
    assert (low.geams, low.temporaries) == (15, 0)
    # High level: 3 copies (2 passes), 15 additions (3), and the 4 protective copies of W1, W2 (2).
    assert high.geams == pytest.approx((3 * 2 + 15 * 3 + 4 * 2) / 3)
    assert (high.launches, high.temporaries) == (3 + 15 + 4, 7 + 4)
    with pytest.raises(ValueError, match="at least one level"):
        level_counts("rum", 0)
