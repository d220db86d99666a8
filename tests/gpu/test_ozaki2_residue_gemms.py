"""INT8 GEMMs that write residues modulo m (:meth:`gpu.backend.Backend.residue_gemm`, the CUTLASS kernel's
``_res`` entry point) and scheme II's direct layout and fused level on them
(:func:`gpu.ozaki2.gemms.direct_products`): which calls the kernel takes and how they map to it, the fallback to
INT32 products where it takes not all, and (on a GPU where the kernel is built) residues equal to the library's
product reduced, and C bitwise the INT32 route's."""

import gc
import weakref
from types import SimpleNamespace

import numpy as np
import pytest

from accuracy.generate import phi_matrix
from gpu.backend import cutlass_int8 as ci
from gpu.backend import get_backend, lt_int8
from gpu.ozaki2 import gemms
from gpu.ozaki2.plan import Plan
from gpu.ozaki2.residues import symmetric
from gpu.ozaki2.workspace import layout

CHOICE = ci.KernelChoice("90a", (128, 256, 128), (2, 1), min_k=8192)


def _kernel(status=0):
    issued = []
    res = (lambda *args: issued.append(args) or status)
    return ci.CutlassInt8(lambda *args: 0, CHOICE, res), issued


def test_the_residue_kernel_takes_aligned_views_over_a_long_k_and_a_modulus_it_can_reduce_by():
    ok = ((0x1000, 8192), (0x2000, 8192), (0x3000, 4096))
    assert ci.takes_residues(*ok, 8192, 251, 8192)
    assert not ci.takes_residues(*ok, 4096, 251, 8192)
    assert not ci.takes_residues(*ok, 8200, 251, 0)
    assert not ci.takes_residues((0x1008, 8192), ok[1], ok[2], 8192, 251, 0)
    assert not ci.takes_residues(ok[0], (0x2000, 8200), ok[2], 8192, 251, 0)
    assert not ci.takes_residues(ok[0], ok[1], (0x3000, 4100), 8192, 251, 0)
    assert not ci.takes_residues(*ok, 8192, 257, 0) and not ci.takes_residues(*ok, 8192, 2, 0)
    assert ci.takes_residues(*ok, 8192, 256, 0) and ci.takes_residues(*ok, 8192, 3, 0)


def test_an_issuer_calls_the_kernel_with_its_views_and_the_stream_of_each_issue():
    kernel, issued = _kernel()
    spaces = iter([(0xCC, 1 << 20, 0x55), (0xDD, 2 << 20, 0x66)])
    issue = kernel.residues((0x1000, 8192), (0x2000, 8192), (0x3000, 4096), (300, 4096, 8192), 251,
                            lambda: next(spaces))
    issue()
    issue()
    assert issued == [(0x1000, 0x2000, 0x3000, 300, 4096, 8192, 1, 8192, 8192, 4096, 0, 0, 0, 251, 0xCC, 1 << 20,
                       0x55),
                      (0x1000, 0x2000, 0x3000, 300, 4096, 8192, 1, 8192, 8192, 4096, 0, 0, 0, 251, 0xDD, 2 << 20,
                       0x66)]
    assert kernel.calls == 2
    assert kernel.residues((0x1000, 8192), (0x2000, 8192), (0x3000, 4096), (300, 4096, 4096), 251, None) is None
    assert ci.CutlassInt8(lambda *a: 0, CHOICE).residues((0x1000, 8192), (0x2000, 8192), (0x3000, 4096),
                                                         (300, 4096, 8192), 251, None) is None


def test_a_batch_is_one_launch_with_each_views_batch_stride_and_counts_its_products():
    kernel, issued = _kernel()
    a, b, r = (0x1000, 8192, 49 << 20), (0x2000, 8192, 1 << 26), (0x3000, 4096, 49 << 20)
    issue = kernel.residues(a, b, r, (2048, 4096, 8192, 49), 251, lambda: (0xCC, 1 << 20, 0x55))
    issue()
    assert issued == [(0x1000, 0x2000, 0x3000, 2048, 4096, 8192, 49, 8192, 8192, 4096, 49 << 20, 1 << 26, 49 << 20,
                       251, 0xCC, 1 << 20, 0x55)]
    assert kernel.calls == 49
    assert kernel.residues(a, b, (0x3000, 4096, (49 << 20) + 8), (2048, 4096, 8192, 49), 251, None) is None
    assert kernel.residues(a, b, r, (2048, 4096, 8192, 0), 251, None) is None


def test_an_issue_the_kernel_refuses_raises_rather_than_leave_the_residues_unwritten():
    kernel, _ = _kernel(status=1)
    issue = kernel.residues((0, 16), (0, 16), (0, 16), (16, 16, 8192), 251, lambda: (0, 0, 0))
    with pytest.raises(RuntimeError, match="status 1"):
        issue()
    assert kernel.calls == 0


def _view(ptr, shape, stride, dtype=np.int8):
    return SimpleNamespace(data=SimpleNamespace(ptr=ptr), shape=shape, ndim=len(shape), dtype=np.dtype(dtype),
                           strides=(stride * np.dtype(dtype).itemsize, np.dtype(dtype).itemsize))


def _routes(monkeypatch):
    """Routes on a fake device whose CUTLASS kernel records each issue, and that record."""
    kernel, issued = _kernel()
    monkeypatch.setattr(lt_int8, "cutlass_int8", lambda cc, kernels: kernel)
    monkeypatch.setattr(lt_int8, "lt_int8", lambda cc, table: None)
    xp = SimpleNamespace(cuda=SimpleNamespace(runtime=SimpleNamespace(getDevice=lambda: 0),
                                              Device=lambda i: SimpleNamespace(compute_capability="90")))
    workspace = SimpleNamespace(data=SimpleNamespace(ptr=0xCC), nbytes=32 << 20)
    return lt_int8.Int8Routes(xp, SimpleNamespace(entry=lambda: (7, workspace, SimpleNamespace(ptr=0x55)))), issued


class _Followed:
    """A stand-in view that a weak reference can follow."""

    def __init__(self, view):
        self.__dict__.update(vars(view))


def test_a_residue_issuer_holds_its_views_since_the_kernel_keeps_only_their_addresses(monkeypatch):
    routes, issued = _routes(monkeypatch)
    a, b, r = (_Followed(v) for v in (_view(0x1000, (64, 8192), 8192), _view(0x2000, (128, 8192), 8192),
                                      _view(0x3000, (64, 128), 1024)))
    refs = [weakref.ref(x) for x in (a, b, r)]
    issue = routes.residues(a, b, r, 241)
    del a, b, r
    gc.collect()
    assert all(ref() is not None for ref in refs)
    issue()
    assert len(issued) == 1
    del issue
    gc.collect()
    assert all(ref() is None for ref in refs)


def test_routes_map_views_to_the_kernel_and_decline_what_it_cannot_write(monkeypatch):
    routes, issued = _routes(monkeypatch)
    a, b, r = _view(0x1000, (64, 8192), 8192), _view(0x2000, (128, 8192), 8192), _view(0x3000, (64, 128), 1024)
    routes.residues(a, b, r, 241)()
    assert issued == [(0x1000, 0x2000, 0x3000, 64, 128, 8192, 1, 8192, 8192, 1024, 0, 0, 0, 241, 0xCC, 32 << 20,
                       0x55)]
    assert routes.residues(a, b, _view(0x3000, (64, 128), 1024, np.int32), 241) is None
    assert routes.residues(a, b, _view(0x3000, (64, 96), 1024), 241) is None
    assert routes.residues(a, _view(0x2000, (128, 4096), 8192), r, 241) is None
    monkeypatch.setattr(lt_int8, "cutlass_int8", lambda cc, kernels: None)
    fresh = lt_int8.Int8Routes(routes.xp, routes.streams)
    assert fresh.residues(a, b, r, 241) is None


def _batch(ptr, shape, stride, batch_stride):
    view = _view(ptr, shape[1:], stride)
    view.shape, view.ndim, view.strides = shape, 3, (batch_stride, *view.strides)
    return view


def test_routes_issue_three_dimensional_views_as_one_batch_and_decline_mismatched_batches(monkeypatch):
    routes, issued = _routes(monkeypatch)
    a, b = _batch(0x1000, (7, 64, 8192), 8192, 64 * 8192), _batch(0x2000, (7, 128, 8192), 8192, 128 * 8192)
    r = _batch(0x3000, (7, 64, 128), 1024, 64 * 1024)
    routes.residues(a, b, r, 241)()
    assert issued == [(0x1000, 0x2000, 0x3000, 64, 128, 8192, 7, 8192, 8192, 1024, 64 * 8192, 128 * 8192,
                       64 * 1024, 241, 0xCC, 32 << 20, 0x55)]
    assert routes.residues(a, b, _batch(0x3000, (6, 64, 128), 1024, 64 * 1024), 241) is None
    assert routes.residues(a, b, _view(0x3000, (64, 128), 1024), 241) is None
    assert routes.residues(a, _batch(0x2000, (7, 128, 4096), 8192, 1 << 20), r, 241) is None


def test_numpy_has_no_residue_gemm_so_a_plan_keeps_int32_products():
    be = get_backend("numpy")
    a = np.zeros((16, 8192), np.int8)
    assert be.residue_gemm(a, a, np.zeros((16, 16), np.int8), 251) is None
    assert gemms.planned(be, a, a, np.zeros((16, 16), np.int8), [(slice(0, 16), slice(0, 16))], 251) is None
    A = phi_matrix(64, 256, 1.0, 3)
    with Plan(A, A.T.copy(), options={"moduli": 8, "workspace": 1 << 30}, backend=be) as plan:
        assert plan.part(8).direct and plan.part(8).planes[0].dtype == np.int32


def test_the_residues_are_a_view_of_the_products_first_quarter():
    P = np.arange(2 * 3 * 8, dtype=np.int32).reshape(2, 3, 8)
    R = gemms.as_residues(P)
    assert R.shape == P.shape and R.dtype == np.int8 and np.shares_memory(R, P)
    R[...] = -1
    assert (P.reshape(-1)[:P.size // 4] == -1).all() and (P.reshape(-1)[P.size // 4:] != -1).all()


def test_direct_products_take_residues_only_where_every_span_is_taken():
    P, spans, seen = np.zeros((2, 8, 16), np.int32), [slice(0, 4), slice(4, 8)], []

    def plan_span(taken):
        def make(view, span, moduli):
            seen.append((view.dtype, span, moduli))
            return None if view.dtype == np.int8 and span not in taken else [("gemm", span)]
        return make
    got, calls = gemms.direct_products(P, spans, (251, 241), plan_span(spans))
    assert got.dtype == np.int8 and calls == [[("gemm", s)] for s in spans]
    assert all(m == (251, 241) for _, _, m in seen)
    seen.clear()
    got, calls = gemms.direct_products(P, spans, (251, 241), plan_span(spans[:1]))
    assert got is P and calls == [[("gemm", s)] for s in spans]
    assert [m for dtype, _, m in seen if dtype == np.int32] == [None, None]


def test_planned_residue_calls_run_through_run_planned():
    ran = []
    be = SimpleNamespace(residue_gemm=lambda a, b, r, m: (lambda: ran.append(m)),
                         _gemm_ex=lambda *args: ran.append("lib"))
    a = np.zeros((8, 32), np.int8)
    calls = gemms.planned(be, a, a, np.zeros((8, 8), np.int8), [(slice(0, 4), slice(0, 8)), (slice(4, 8), slice(0, 8))],
                          193)
    gemms.run_planned(be, calls)
    assert ran == [193, 193]


def _gpu_kernel(be):
    cc = be.xp.cuda.Device().compute_capability
    if be._lt is None or ci.cutlass_int8(f"{cc[:-1]}.{cc[-1]}") is None:
        pytest.skip("no CUTLASS INT8 kernel built for this device (gemmlab kernels --build)")


@pytest.mark.gpu
@pytest.mark.parametrize("m, n, k, pad", [(300, 528, 8192, 0), (2048, 1024, 8192, 128), (129, 272, 16384, 16)])
def test_gpu_residues_equal_the_library_product_reduced(cupy_backend, m, n, k, pad):
    """Every modulus's symmetric residues, eagerly and replayed from a CUDA graph, from operands at the INT8
    extremes (-128 and 127 make the largest products of both signs) and random ones; ``pad``: views into wider
    rows, as a plan's panels are."""
    be, xp = cupy_backend, cupy_backend.xp
    _gpu_kernel(be)
    rng = xp.random.default_rng(5)
    a, b = (rng.integers(-128, 128, size=(r, k + pad), dtype=np.int8)[:, :k] for r in (m, n))
    a[0], b[0], b[1] = -128, -128, 127
    P = xp.zeros((m, n), dtype=np.int32)
    be.gemm_ex(a, b.T, P, recipe="int8")
    for modulus in (256, 255, 241, 193, 3):
        R = xp.zeros((m, n + pad), dtype=np.int8)[:, :n]
        issue = be.residue_gemm(a, b, R, modulus)
        issue()
        want = symmetric(P.astype(np.int64) % modulus, modulus)
        assert bool((R == want).all()), modulus
        R.fill(0)
        be.capture(issue).launch()
        assert bool((R == want).all()), modulus


@pytest.mark.gpu
def test_gpu_a_batch_of_residue_gemms_is_each_product_reduced(cupy_backend):
    """One launch over a batch of views (each product's rows padded, so the batch strides are not packed) writes
    every product's residues, eagerly and from a CUDA graph."""
    be, xp = cupy_backend, cupy_backend.xp
    _gpu_kernel(be)
    rng = xp.random.default_rng(11)
    a = rng.integers(-128, 128, size=(3, 300, 8192 + 64), dtype=np.int8)[:, :272, :8192]
    b = rng.integers(-128, 128, size=(3, 528, 8192), dtype=np.int8)
    a[1, 0], b[2, 0] = -128, 127
    want = []
    for i in range(3):
        P = xp.zeros((272, 528), dtype=np.int32)
        be.gemm_ex(a[i], b[i].T, P, recipe="int8")
        want.append(symmetric(P.astype(np.int64) % 241, 241))
    R = xp.zeros((3, 288, 528 + 16), dtype=np.int8)[:, :272, :528]
    issue = be.residue_gemm(a, b, R, 241)
    issue()
    assert all(bool((R[i] == want[i]).all()) for i in range(3))
    R.fill(0)
    be.capture(issue).launch()
    assert all(bool((R[i] == want[i]).all()) for i in range(3))


@pytest.mark.gpu
def test_gpu_a_kept_issuer_reads_its_own_operands_after_the_caller_drops_them(cupy_backend):
    """The pool hands a freed block to the next array of its size: an issuer that held only addresses would then
    multiply the new arrays' zeros."""
    be, xp = cupy_backend, cupy_backend.xp
    _gpu_kernel(be)
    rng = xp.random.default_rng(7)
    a, b = (rng.integers(-128, 128, size=(256, 8192), dtype=np.int8) for _ in range(2))
    P, R = xp.zeros((256, 256), dtype=np.int32), xp.zeros((256, 256), dtype=np.int8)
    be.gemm_ex(a, b.T, P, recipe="int8")
    want = symmetric(P.astype(np.int64) % 251, 251)
    issue = be.residue_gemm(a, b, R, 251)
    del a, b
    later = [xp.zeros((256, 8192), dtype=np.int8) for _ in range(2)]
    issue()
    assert bool((R == want).all()) and bool((later[0] == 0).all())


@pytest.mark.gpu
@pytest.mark.parametrize("m, k, n, level", [(256, 8192, 512, 0), (512, 16384, 512, 1), (520, 16384, 528, 1)])
def test_gpu_a_plan_on_residues_is_bitwise_the_plan_on_int32_products(cupy_backend, monkeypatch, m, k, n, level):
    """The direct layout (level 0) and the fused level on INT8 residues give the bits of the same plan on INT32
    products, eagerly and from its graph; (520, 528) at level 1 is not fused and keeps the INT32 products."""
    be, xp = cupy_backend, cupy_backend.xp
    _gpu_kernel(be)
    A, B = (xp.asarray(phi_matrix(r, c, 1.0, s)) for r, c, s in ((m, k, 1), (k, n, 2)))
    options = {"moduli": 15, "level": level, "workspace": 1 << 32}

    def narrow(plan):
        return plan.part(15).direct and plan.part(15).planes[0].dtype == np.int8
    with Plan(A, B, options=options, backend=be) as plan:
        got = [plan.execute(A, B) for _ in range(3)]
        assert narrow(plan) == ((m, n) != (520, 528))
    monkeypatch.setattr(be, "residue_gemm", lambda *args: None)
    monkeypatch.setattr(type(be), "residue_min_k", None)
    with Plan(A, B, options=options, backend=be) as plan:
        want = plan.execute(A, B)
        assert not narrow(plan)
    assert all(bool((C == want).all()) for C in got)


def _numpy_residue_gemm(a, b, r, modulus):
    """A NumPy stand-in for the CUTLASS kernel's residue GEMM (any k), so the narrow layouts run on the CPU."""
    def issue():
        r[...] = symmetric((a.astype(np.int64) @ b.astype(np.int64).T) % modulus, modulus)
    return issue


def test_a_narrow_layout_holds_a_quarter_of_the_products_bytes():
    for level, n in ((0, 1024), (1, 1024)):
        wide, narrow = (layout(n, n, n, 15, "fast", True, level, narrow=x) for x in (False, True))
        assert narrow.buffers["products"].dtype == np.int8
        assert narrow.buffers["products"].shape == wide.buffers["products"].shape
        assert wide.nbytes - narrow.nbytes >= 3 * wide.buffers["products"].nbytes // 4
    planes = layout(1024, 1024, 1024, 15, "fast", False)
    assert layout(1024, 1024, 1024, 15, "fast", True, narrow=True).nbytes < planes.nbytes
    assert layout(1024, 1024, 1024, 15, "fast", True).nbytes > planes.nbytes


def test_narrow_products_follow_the_backend_residue_gemms_least_depth(monkeypatch):
    from gpu.ozaki2 import memory
    be = get_backend("numpy")
    assert be.residue_min_k is None and not memory.narrow_products(be, 512, 512, 512, 0, 2**17 - 16)
    monkeypatch.setattr(be, "residue_min_k", 320)
    assert memory.narrow_products(be, 512, 640, 512, 0, 2**17 - 16)
    assert memory.narrow_products(be, 512, 640, 512, 1, 2**17 - 16), "a fused level's GEMMs are 320 deep"
    assert not memory.narrow_products(be, 512, 608, 512, 1, 2**17 - 16), "304 deep"
    assert not memory.narrow_products(be, 512, 300, 512, 0, 2**17 - 16)
    assert not memory.narrow_products(be, 512, 640, 512, 2, 2**17 - 16), "the levels' passes keep no products"
    assert not memory.narrow_products(be, 512, 640, 512, 0, 256), "k in blocks has no direct layout"
    assert gemms.writes_residues(be, 336) and not gemms.writes_residues(be, 328)


def test_a_plan_expects_residues_at_exactly_the_depths_the_kernel_then_takes(monkeypatch):
    be = get_backend("numpy")
    monkeypatch.setattr(be, "residue_min_k", 320)
    aligned = ((0x1000, 1024), (0x2000, 1024), (0x3000, 1024))
    for k in range(0, 1024, 4):
        assert gemms.writes_residues(be, k) == ci.takes_residues(*aligned, k, 251, 320), k


def test_narrow_products_that_the_gemms_do_not_all_write_raise_rather_than_hold_int32_in_int8():
    P, spans = np.zeros((2, 8, 16), np.int8), [slice(0, 4), slice(4, 8)]
    got, calls = gemms.direct_products(P, spans, (251, 241), lambda view, span, moduli: [("gemm", span)])
    assert got is P and calls == [[("gemm", s)] for s in spans]
    with pytest.raises(RuntimeError, match="INT8 residues"):
        gemms.direct_products(P, spans, (251, 241), lambda view, span, moduli: None if span.start else [span])


@pytest.mark.parametrize("m, k, n, level", [(256, 640, 192, 0), (256, 512, 320, 1), (130, 300, 70, 0)])
def test_a_plan_on_narrow_products_is_bitwise_the_plan_on_int32_products_in_fewer_bytes(monkeypatch, m, k, n, level):
    be = get_backend("numpy")
    A, B = phi_matrix(m, k, 1.0, 1), phi_matrix(k, n, 1.0, 2)
    options = {"moduli": 13, "level": level, "workspace": 1 << 30}
    with Plan(A, B, options=options, backend=be) as plan:
        want, wide = plan.execute(A, B), plan.work.layout
        assert plan.part(13).direct and plan.part(13).planes[0].dtype == np.int32
    monkeypatch.setattr(be, "residue_gemm", _numpy_residue_gemm)
    monkeypatch.setattr(be, "residue_min_k", 0)
    with Plan(A, B, options=options, backend=be) as plan:
        got, narrow = plan.execute(A, B), plan.work.layout
        assert plan.part(13).direct and plan.part(13).planes[0].dtype == np.int8
        assert narrow.buffers["products"].dtype == np.int8
    assert narrow.nbytes < wide.nbytes
    assert np.array_equal(got, want)
    with Plan(A, B, options={"moduli": 13, "level": level}, backend=be) as plan:
        assert level or plan.work.layout.nbytes <= layout(m, k, n, 13, "fast", False).nbytes, "GEMMul8's bytes"
        assert np.array_equal(plan.execute(A, B), want)


def test_narrow_products_let_the_fused_level_hold_its_whole_span_in_the_bytes_of_a_quarter_span():
    """At N = 32768 and 15 moduli the INT32 products fitted the H200 only in spans of 4096 rows; the residues
    hold the whole span of 16384 in the same bytes (measured 1.0-1.5% faster), and level 0's whole direct layout
    fits within the planes' bytes, so the default takes it before row panels."""
    from gpu.ozaki2.memory import layouts
    n, block = 32768, 2**17 - 16
    wide = {ws.rows: ws.nbytes for ws in layouts(n, n, n, 15, "fast", block, level=1)}
    narrow = layouts(n, n, n, 15, "fast", block, level=1, narrow=True)
    assert narrow[0].rows == n // 2 and narrow[0].nbytes == wide[n // 8]
    level0 = layouts(n, n, n, 15, "fast", block, narrow=True)
    assert level0[0].direct and level0[0].rows == n and level0[0].nbytes <= level0[-1].nbytes
    assert layouts(n, n, n, 15, "fast", block)[0].rows < n, "INT32 products take row panels"
