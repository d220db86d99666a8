"""Split-K's deterministic reduction on the GPU (``splitk_reduce``, one launch, and the chunk kernels' fused one)
adds the partials in the plan's order, so it gives the bits of the NumPy reduction
(:meth:`gpu.splitk.ops.HostOps.reduce`) for the same partials: one chunk, fewer chunks than a group, many groups,
outputs that fill no whole block, a -0.0 kept, beta 0 and not, into a column-major C."""

import math

import numpy as np
import pytest

from gpu.backend import get_backend
from gpu.splitk.plan import SplitPlan
from gpu.splitk.variants import Variant

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("chunks", [1, 2, 7, 64, 65, 300, 4097])
@pytest.mark.parametrize("m, n", [(3, 5), (16, 16), (33, 7)])
@pytest.mark.parametrize("beta", [0.0, -0.75])
def test_the_device_reduction_gives_the_host_bits(cupy_backend, chunks, m, n, beta):
    import cupy as cp

    from gpu.splitk import kernels

    rng = np.random.default_rng(chunks * 1000 + m)
    plan = SplitPlan(m, n, chunks * 4, chunks, math.isqrt(chunks - 1) + 1)
    partials = rng.standard_normal((chunks, m, n)) * np.exp2(rng.integers(-30, 30, (chunks, m, n)))
    partials[0, 0, 0] = -0.0 if chunks == 1 else partials[0, 0, 0]
    c0 = rng.standard_normal((n, m)).T                            # a column-major C
    host_c = c0.copy()
    get_backend("numpy").ops("splitk").reduce(partials.copy(), host_c, plan, 1.5, beta)
    P, C = cp.asarray(partials), cp.asarray(c0, order="F")
    kernels.Reduction(plan, np.float64, kernels._strides(C))(P, C, 1.5, beta)
    got = cp.asnumpy(C)
    assert np.array_equal(got, host_c) and np.array_equal(np.signbit(got), np.signbit(host_c))


KERNELS = {"bulk": Variant.tuned_bulk, "pipe": Variant.tuned,
           "dmma": lambda m, n: Variant.dmma(m, n, (2, 4)), "tile": lambda m, n: Variant.tile(np.float64),
           "tile-float32": lambda m, n: Variant.tile(np.float32)}


@pytest.mark.parametrize("kernel", list(KERNELS))
@pytest.mark.parametrize("m, n, k, chunks", [(16, 16, 2**16, 1), (32, 32, 2**18, 7), (32, 32, 2**18, 132),
                                             (64, 64, 2**17 + 64, 300), (33, 7, 5 * 4096 + 3, 65)])
@pytest.mark.parametrize("beta", [0.0, -0.75])
def test_the_fused_reduction_gives_the_host_bits_of_the_kernels_partials(cupy_backend, kernel, m, n, k, chunks, beta):
    """A chunk kernel that reduces its own partials (flag FUSED: the last block of a group to arrive adds the
    group, the last group adds the groups) gives, into a column-major C, the bits of the NumPy reduction of the
    partials the same kernel stores, call after call, and leaves its counters at zero for the next call."""
    import cupy as cp

    from gpu.splitk import kernels
    from gpu.splitk.executor import workspace
    from gpu.splitk.plan import plan as split_plan

    be = cupy_backend
    dtype = np.float32 if kernel == "tile-float32" else np.float64
    if kernel in ("bulk", "pipe") and (m % 8 or n % 8):
        pytest.skip("the staged kernels take sides that are multiples of 8")
    if kernel == "bulk" and int(cp.cuda.Device().compute_capability) < 90:
        pytest.skip("the bulk-copy kernel needs sm_90")
    v = KERNELS[kernel](m, n)
    split = split_plan(m, n, k, be.ops("splitk").limits(), kernels.resources(v), chunks=chunks)
    rng = np.random.default_rng(m * k + chunks)
    A, B = (be.asarray(rng.uniform(-1, 1, shape).astype(dtype)) for shape in ((m, k), (k, n)))
    c0 = rng.standard_normal((n, m)).astype(dtype).T
    launch = kernels.ChunkLaunch(v, split, A, B, (np.int64(n), np.int64(1), np.int64(m * n)), False)
    P = cp.full((split.chunks, m, n), np.nan, dtype=dtype)
    launch(A, B, P, 1.0)
    want = c0.copy()
    get_backend("numpy").ops("splitk").reduce(cp.asnumpy(P), want, split, 1.5, beta)
    W = workspace(be, split, dtype)
    for _ in range(2):
        C = cp.asarray(c0, order="F")
        launch(A, B, W.partials, 1.5, kernels.finish_args(C, kernels._strides(C), beta, W.counters, split))
        assert np.array_equal(cp.asnumpy(C), want)
        assert not cp.asnumpy(W.counters).any()
