"""Split-K's deterministic reduction on the GPU (``splitk_reduce``, one launch) adds the partials in the
plan's order, so it gives the bits of the NumPy reduction (:meth:`gpu.splitk.ops.HostOps.reduce`) for the same
partials: one chunk, fewer chunks than a group, many groups, outputs that fill no whole block, a -0.0 kept,
beta 0 and not, into a column-major C."""

import math

import numpy as np
import pytest

from gpu.backend import get_backend
from gpu.splitk.plan import SplitPlan

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
