"""The planes layout on the GPU: each INT32 product reduced into its modulus's INT8 plane (added across k blocks)
gives NumPy's residues bit for bit, by the 16-a-thread kernel on whole aligned rows and by the one-element kernel
on other views, at the ends of the int32 range; and a product in the planes layout is the direct layout's."""

import numpy as np
import pytest

from accuracy.generate import phi_matrix
from gpu import ozaki2
from gpu.backend import get_backend
from gpu.ozaki2 import memory
from gpu.ozaki2.ops import FAMILY, HostOps
from gpu.ozaki2.options import Options
from gpu.ozaki2.workspace import layout


@pytest.mark.gpu
@pytest.mark.parametrize("m", [256, 255, 251, 129, 7, 2])
def test_a_products_reduction_into_its_plane_equals_numpys(cupy_backend, monkeypatch, m):
    from gpu.ozaki2 import plane_kernels  # CuPy's module: imported where a GPU runs

    rng, host, launched = np.random.default_rng(m), HostOps(get_backend("numpy")), []
    real = plane_kernels._module
    monkeypatch.setattr(plane_kernels, "_module", lambda: (launched.append(1), real())[1])
    P = rng.integers(-(2**31), 2**31, (40, 96), dtype=np.int64).astype(np.int32)
    P[0, :6] = [2**31 - 1, -(2**31), m, -m - 1, 2**16 * m - 1, -(2**16) * m]
    start = rng.integers(-(m // 2), (m - 1) // 2 + 1, (40, 96)).astype(np.int8)
    start[0, :2] = [-(m // 2), (m - 1) // 2]
    for cols, vector in ((slice(None), True), (slice(16, 80), True), (slice(0, 90), False), (slice(3, 35), False)):
        for accumulate in (False, True):
            launched.clear()
            want = start[:, cols].copy()
            host.reduce(P[:, cols], want, m, accumulate)
            plane = cupy_backend.asarray(start)
            cupy_backend.ops(FAMILY).reduce(cupy_backend.asarray(P)[:, cols], plane[:, cols], m, accumulate)
            got = cupy_backend.to_numpy(plane)
            assert np.array_equal(got[:, cols], want), (cols, accumulate)
            outside = np.ones(start.shape, dtype=bool)
            outside[:, cols] = False
            assert np.array_equal(got[outside], start[outside]), "only the view is written"
            assert bool(launched) is vector, (cols, launched)


@pytest.mark.gpu
@pytest.mark.parametrize("shape, k_block", [((96, 200, 160), None), ((67, 300, 75), None), ((64, 400, 48), 128)])
def test_a_product_in_the_planes_layout_is_the_direct_layouts(cupy_backend, monkeypatch, shape, k_block):
    """With no row panels offered, a cap just under the whole direct layout leaves the planes (k blocked: the
    planes are the only layout)."""
    m, k, n = shape
    A, B = (cupy_backend.asarray(phi_matrix(r, c, 1.0, seed)) for r, c, seed in ((m, k, k), (k, n, k + 1)))
    monkeypatch.setattr(memory, "panel_rows", lambda *shape: None)
    cap = layout(m, k, n, 15, "fast", direct=True).nbytes - 1 if k_block is None else None
    with ozaki2.Plan(A, B, options=Options(moduli=15, k_block=k_block), backend=cupy_backend) as direct, \
            ozaki2.Plan(A, B, options=Options(moduli=15, k_block=k_block, workspace=cap),
                        backend=cupy_backend) as planes:
        assert not planes.work.direct and direct.work.direct is (k_block is None)
        want = cupy_backend.to_numpy(direct.execute(A, B))
        assert np.array_equal(cupy_backend.to_numpy(planes.execute(A, B)), want)
    host = ozaki2.matmul(cupy_backend.to_numpy(A), cupy_backend.to_numpy(B), moduli=15, k_block=k_block,
                         backend="numpy")
    assert np.array_equal(host, want), "NumPy's bits"
