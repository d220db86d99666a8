"""Scheme II in tiles (:class:`gpu.ozaki2.TiledPlan`): under any workspace cap whose least tiles fit, a count given
with the fast scaling gives the untiled product's bits, every tile of C written once; a cap below the least tiles
is refused before any work."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from accuracy.generate import phi_matrix
from gpu import ozaki2
from gpu.backend import MemoryPlanError, get_backend
from gpu.ozaki2 import tiled
from tests.property.strategies import profiled

BE = get_backend("numpy")


@profiled(0.5)
@given(m=st.integers(1, 200), k=st.integers(1, 120), n=st.integers(1, 200), share=st.floats(0.01, 1.2),
       count=st.integers(2, 20), seed=st.integers(0, 2**16))
def test_tiles_under_any_cap_give_the_untiled_bits(m, k, n, share, count, seed):
    A, B = phi_matrix(m, k, 2.0, (seed, 0)), phi_matrix(k, n, 2.0, (seed, 1))
    options = {"moduli": count, "workspace": max(1, int(share * tiled.tile_bytes(BE, m, k, n, count, "fast",
                                                                                  "normwise")))}
    out = np.full((m, n), np.nan)
    try:
        plan = ozaki2.TiledPlan(A, B, out=out, options=options, backend=BE)
    except MemoryPlanError:
        least = tiled.tile_bytes(BE, min(m, tiled.MIN_TILE), k, min(n, tiled.MIN_TILE), count, "fast", "normwise")
        assert options["workspace"] < least and np.isnan(out).all()
        return
    with plan:
        assert plan.execute(A, B, out) is out
        assert tiled.tile_bytes(BE, plan.rows, k, plan.cols, count, "fast", "normwise") <= options["workspace"]
    np.testing.assert_array_equal(out, ozaki2.matmul(A, B, moduli=count, backend="numpy"))


def test_the_tiles_cover_c_once_for_any_cut():
    for m, n, rows, cols in ((7, 5, 3, 2), (64, 64, 64, 64), (130, 65, 64, 64), (1, 300, 1, 7)):
        seen = np.zeros((m, n), dtype=int)
        for r, c in tiled.tiles(m, n, rows, cols):
            seen[r, c] += 1
        assert (seen == 1).all()
    with pytest.raises(StopIteration):
        next(tiled.tiles(0, 5, 1, 1))
