"""Split-K's bound away from the device: :func:`gpu.splitk.plan.widest` covers the automatic split of every device
of that SM count, whatever its kernels' tiles, blocks per SM and wide form (what ``gemmlab choose --gpu`` proves)."""

from hypothesis import given
from hypothesis import strategies as st

from gpu.splitk.occupancy import Kernel, SMLimits
from gpu.splitk.plan import BLOCKS_PER_SM, MAX_OUTPUTS, MIN_K, plan, widest
from tests.property.strategies import profiled

TILES = st.sampled_from([8, 16, 32, 64])


@st.composite
def devices(draw):
    """(SM limits, chunk kernel) of some device: ``blocks`` resident blocks per SM for the narrow kernel, and a
    wide form holding fewer or as many."""
    sm, blocks = draw(st.integers(1, 200), label="SMs"), draw(st.integers(1, BLOCKS_PER_SM), label="blocks per SM")
    limits = SMLimits(threads=64 * BLOCKS_PER_SM, shared_bytes=0, registers=64 * BLOCKS_PER_SM * 32, blocks=blocks,
                      sm_count=sm)
    wide = draw(st.none() | st.builds(lambda t, tn, c: Kernel(64 * c, 0, 32, t, tn), TILES, TILES,
                                      st.integers(1, BLOCKS_PER_SM)), label="wide form")
    return limits, Kernel(64, 0, 32, draw(TILES), draw(TILES), wide)


@profiled()
@given(device=devices(), m=st.integers(1, 512), n=st.integers(1, 512), k=st.integers(MIN_K, 2**26),
       deterministic=st.booleans())
def test_the_widest_split_bounds_the_split_any_device_of_that_sm_count_takes(device, m, n, k, deterministic):
    limits, kernel = device
    if m * n > MAX_OUTPUTS:
        return
    try:
        split = plan(m, n, k, limits, kernel, deterministic=deterministic)
    except ValueError:                                        # more chunks than a grid holds: no split to bound
        return
    width, chunks = widest(m, n, k, limits.sm_count, deterministic)
    assert split.width + split.chunks <= width + chunks, (split, (width, chunks))
