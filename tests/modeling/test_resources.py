"""Stream concurrency, split-K occupancy and decomposition segments, by hand."""

import math

import pytest

from modeling.concurrency import concurrent_streams, sms_per_call
from modeling.decomposition import largest_n, segment_bytes_1d, segment_bytes_2d
from modeling.splitk import (
    Kernel,
    SMLimits,
    bandwidth_floor_s,
    chunk_width,
    chunks,
    minimum_bytes,
    resident_blocks,
)

K20C = SMLimits(threads=2048, shared_bytes=49152, registers=65536, blocks=16, sm_count=13)
PAPER_KERNEL = Kernel(threads=64, shared_bytes=4096, registers_per_thread=55, tile=16)


# --- P_theo ---------------------------------------------------------------------------------------

def test_streams_from_registers():
    # 65536 registers / 64 per thread = 1024 threads per SM; 24576 threads fill 24 SMs; 80 / 24 -> 3.
    assert sms_per_call(24576, 64, 65536) == 24
    assert concurrent_streams(24576, 64, 65536, 80) == 3
    assert concurrent_streams(8192, 64, 65536, 80) == 7            # 10 would fit: at most 7 products
    assert concurrent_streams(2**20, 128, 65536, 80) == 1          # one call needs more than the GPU
    with pytest.raises(ValueError, match="registers_per_thread"):
        concurrent_streams(1024, 0, 65536, 80)


# --- split-K ----------------------------------------------------------------------------------------

def test_k20c_runs_156_blocks_at_once():
    # min(2048/64 = 32, 49152/4096 = 12, 65536/(55*64) = 18, 16) = 12 blocks per SM, 13 SMs.
    assert resident_blocks(K20C, PAPER_KERNEL) == 156


def test_chunks_fill_whole_waves():
    assert chunks(16, 16, K20C, PAPER_KERNEL) == 156               # one 16 x 16 tile per chunk
    assert chunks(32, 32, K20C, PAPER_KERNEL) == 39                # four tiles per chunk
    assert chunks(32, 32, K20C, PAPER_KERNEL, waves=2) == 78
    assert chunk_width(2**20, 1024) == 1024 and chunk_width(1000, 3) == 334
    with pytest.raises(ValueError, match="does not fit"):
        resident_blocks(K20C, Kernel(threads=1024, shared_bytes=4096, registers_per_thread=255))


def test_split_k_is_memory_bound():
    assert minimum_bytes(16, 16, 2**20) == 8 * 32 * 2**20
    assert bandwidth_floor_s(16, 16, 2**20, 208e9) == pytest.approx(8 * 32 * 2**20 / 208e9)


# --- decomposition ------------------------------------------------------------------------------------

def test_segment_bytes_of_the_paper():
    n = 40000
    assert segment_bytes_2d(n, 9) == pytest.approx(4 * n * n * 7 / 9)     # ~4.98 GB: fits a 6 GB buffer
    assert segment_bytes_1d(n, 9) == pytest.approx(4 * n * n * 11 / 9)
    assert segment_bytes_1d(n, 10**6) > 4 * n * n == 6.4e9                # never below all of B
    with pytest.raises(ValueError, match="perfect square"):
        segment_bytes_2d(n, 8)


def test_largest_n_for_a_buffer():
    n = largest_n(6e9, 9)
    assert segment_bytes_2d(n, 9) <= 6e9 < segment_bytes_2d(n + 1, 9)
    # 1-D blocks stay bound by all of B: about sqrt(6e9 / 4) = 38730, the paper reached 38,496.
    assert 38496 <= largest_n(6e9, 4096, two_d=False) < math.isqrt(int(6e9 / 4)) + 1
