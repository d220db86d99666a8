"""The INT8 GEMMs' cublasLt route (:mod:`gpu.backend.lt_int8`): the algorithm picked by CTA tile from the
heuristic's offer, the fallback to cublasGemmEx, and (on a GPU) bits equal to cublasGemmEx's."""

import ctypes
import enum
from types import SimpleNamespace

import numpy as np
import pytest

from gpu.backend import lt_int8
from gpu.backend.blas import BlasCall, gemm_recipe

INT8 = gemm_recipe("int8")


class FakeLt:
    """A stand-in for nvmath's cublasLt bindings: its heuristic offers ``offers[(m, n, k)]``, a list of CTA tiles
    (``"raise"``: the heuristic fails), and it records what it is asked."""

    MatmulTile = enum.IntEnum("MatmulTile", {"TILE_128x128": 20, "TILE_256x128": 30, "TILE_128x256": 31})
    MatmulDescAttribute = SimpleNamespace(TRANSA=3, TRANSB=4)
    MatmulPreferenceAttribute = SimpleNamespace(MAX_WORKSPACE_BYTES=1, MIN_ALIGNMENT_A_BYTES=5, MIN_ALIGNMENT_B_BYTES=6,
                                                MIN_ALIGNMENT_C_BYTES=7, MIN_ALIGNMENT_D_BYTES=8)
    MatmulAlgoConfigAttribute = SimpleNamespace(TILE_ID=3)
    cuBLASLtError = type("cuBLASLtError", (Exception,), {})

    def __init__(self, offers):
        self.offers, self.asked, self.issued, self.attrs, self.layouts = offers, [], [], {}, {}
        self.live, self._next, self._shape = set(), 100, None

    def _new(self):
        self._next += 1
        self.live.add(self._next)
        return self._next

    def create(self):
        return 1

    def MatmulHeuristicResult(self, size):
        self._results = _Results(np.zeros(size, dtype=[("algo", np.uint64, (8,))]))
        return self._results

    def matmul_desc_create(self, compute, scale):
        return self._new()

    def matrix_layout_create(self, dtype, rows, cols, ld):
        handle = self._new()
        self.layouts[handle] = (dtype, rows, cols, ld)
        return handle

    def matmul_preference_create(self):
        return self._new()

    def get_matmul_desc_attribute_dtype(self, attr):
        return np.int32

    def get_matmul_preference_attribute_dtype(self, attr):
        return np.uint64

    def get_matmul_algo_config_attribute_dtype(self, attr):
        return np.uint16

    def matmul_desc_set_attribute(self, desc, attr, buf, size):
        self.attrs[(desc, attr)] = ctypes.c_int32.from_address(buf).value

    def matmul_preference_set_attribute(self, pref, attr, buf, size):
        self.attrs[(pref, attr)] = ctypes.c_uint64.from_address(buf).value

    def matmul_algo_get_heuristic(self, handle, desc, la, lb, lc, ld, pref, requested, results, count):
        shape = self.layouts[lc][1:3]
        self.asked.append(shape)
        self.told = {a: self.attrs[(pref, getattr(self.MatmulPreferenceAttribute, a))]
                     for a in ("MAX_WORKSPACE_BYTES", "MIN_ALIGNMENT_A_BYTES", "MIN_ALIGNMENT_B_BYTES",
                               "MIN_ALIGNMENT_C_BYTES", "MIN_ALIGNMENT_D_BYTES")}
        offer = self.offers[shape]
        if offer == "raise":
            raise self.cuBLASLtError("CUBLAS_STATUS_NOT_SUPPORTED")
        for i, tile in enumerate(offer[:requested]):
            self._results.array["algo"][i, 0] = self.MatmulTile[f"TILE_{tile}"]
        ctypes.c_int32.from_address(count).value = min(len(offer), requested)

    def matmul_algo_config_get_attribute(self, algo, attr, buf, size, written):
        ctypes.c_uint16.from_address(buf).value = ctypes.c_uint64.from_address(algo).value

    def matmul(self, handle, desc, alpha, a, la, b, lb, beta, c, lc, d, ld, algo, ws, ws_bytes, stream):
        self.issued.append((ctypes.c_uint64.from_address(algo).value, ctypes.c_int32.from_address(beta).value,
                            self.layouts[la], self.layouts[lb], ws, ws_bytes, stream))

    def _drop(self, handle):
        self.live.discard(handle)

    matrix_layout_destroy = matmul_desc_destroy = matmul_preference_destroy = _drop


class _Results:
    def __init__(self, array):
        self.array, self.ptr = array, array.ctypes.data

    def __getitem__(self, i):
        return self.array[i]


def _call(m, n, k, transa=1, transb=0):
    return BlasCall(transa, transb, m, n, k, 0x1000, k if transa else m, 0x2000, k if not transb else n, 0x3000, m)


@pytest.fixture
def fake(monkeypatch):
    stand_in = FakeLt({(2048, 8192): ["128x128", "256x128", "128x256"], (64, 64): ["128x128"],
                       (512, 512): ["128x256", "128x128"], (96, 96): "raise"})
    monkeypatch.setattr(lt_int8, "lt", stand_in)
    return stand_in


def test_the_first_preferred_tile_offered_is_taken_in_the_preference_order(fake):
    route = lt_int8.lt_int8("9.0", {"9.0": lt_int8.Preference(("256x128", "128x256"))})
    assert route.run(INT8, _call(2048, 8192, 4096), 0.0, (0xAA, 32 << 20), 7)
    assert route.run(INT8, _call(512, 512, 256, transa=0, transb=1), 1.0, (0xAA, 32 << 20), 7)
    (tile, beta, la, lb, ws, ws_bytes, stream), second = fake.issued
    assert fake.MatmulTile(tile).name == "TILE_256x128" and fake.MatmulTile(second[0]).name == "TILE_128x256"
    assert (beta, ws, ws_bytes, stream) == (0, 0xAA, 32 << 20, 7) and second[1] == 1
    assert la[1:3] == (4096, 2048) and lb[1:3] == (4096, 8192)          # op(A) = A^T: A stored k x m
    assert second[2][1:3] == (512, 256) and second[3][1:3] == (512, 256)  # op(B) = B^T: B stored n x k
    assert route._plans[next(iter(route._plans))].tile == "256x128"


def test_a_shape_with_no_preferred_tile_or_a_failed_heuristic_falls_back_having_freed_what_it_made(fake):
    route = lt_int8.lt_int8("9.0", {"9.0": lt_int8.Preference(("256x128", "128x256"))})
    made = set(fake.live)
    assert not route.run(INT8, _call(64, 64, 64), 0.0, (0xAA, 1 << 20), 0)
    assert not route.run(INT8, _call(96, 96, 64), 0.0, (0xAA, 1 << 20), 0)
    assert fake.live == made and not fake.issued


def test_the_heuristic_is_asked_once_per_shape_and_workspace(fake):
    route = lt_int8.lt_int8("9.0", {"9.0": lt_int8.Preference(("256x128", "128x256"))})
    for _ in range(3):
        route.run(INT8, _call(2048, 8192, 4096), 0.0, (0xAA, 32 << 20), 0)
        route.run(INT8, _call(64, 64, 64), 0.0, (0xAA, 32 << 20), 0)
    route.run(INT8, _call(2048, 8192, 4096), 0.0, (0xBB, 16 << 20), 0)
    assert fake.asked == [(2048, 8192), (64, 64), (2048, 8192)] and len(fake.issued) == 4


def test_the_heuristic_is_told_each_operands_alignment_and_asked_again_for_another(fake):
    route = lt_int8.lt_int8("9.0", {"9.0": lt_int8.Preference(("256x128",))})
    route.run(INT8, _call(2048, 8192, 4096), 0.0, (0xAA, 32 << 20), 0)
    assert fake.told == {"MAX_WORKSPACE_BYTES": 32 << 20, "MIN_ALIGNMENT_A_BYTES": 256, "MIN_ALIGNMENT_B_BYTES": 256,
                         "MIN_ALIGNMENT_C_BYTES": 256, "MIN_ALIGNMENT_D_BYTES": 256}
    route.run(INT8, _call(2048, 8192, 4096)._replace(a=0x1010, c=0x3008), 0.0, (0xAA, 32 << 20), 0)
    assert fake.asked == [(2048, 8192)] * 2
    assert (fake.told["MIN_ALIGNMENT_A_BYTES"], fake.told["MIN_ALIGNMENT_B_BYTES"],
            fake.told["MIN_ALIGNMENT_C_BYTES"], fake.told["MIN_ALIGNMENT_D_BYTES"]) == (16, 256, 8, 8)


def test_a_shorter_inner_dimension_than_the_preference_takes_goes_to_gemmex_unasked(fake):
    route = lt_int8.lt_int8("9.0", {"9.0": lt_int8.Preference(("256x128",), 4096)})
    assert not route.run(INT8, _call(2048, 8192, 4095), 0.0, (0xAA, 32 << 20), 0)
    assert route.run(INT8, _call(2048, 8192, 4096), 0.0, (0xAA, 32 << 20), 0)
    assert fake.asked == [(2048, 8192)]


def test_no_route_without_preferred_tiles_or_cublaslt(fake, monkeypatch):
    assert lt_int8.lt_int8("8.0") is None
    assert lt_int8.lt_int8("9.0", {"9.0": lt_int8.Preference(())}) is None
    assert lt_int8.lt_int8("9.0", {"9.0": lt_int8.Preference(("128x128",))}).preference.tiles == ("128x128",)
    monkeypatch.setattr(lt_int8, "lt", None)
    assert lt_int8.lt_int8("9.0") is None


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k", [(8192, 2048, 16384), (1024, 3072, 2048), (96, 160, 256), (16, 16, 16),
                                   (7, 5, 16388), (33, 130, 20000)])
def test_gpu_int8_products_through_the_route_equal_cublas_gemmex_bitwise(cupy_backend, m, n, k):
    """P = a @ b.T in INT32 (the call scheme II makes) through the backend's route and through cublasGemmEx,
    eagerly, accumulating (beta = 1) and replayed from a CUDA graph: the same bits. On a device with preferred
    tiles, a capped scheme II tile's GEMM (8192 x 2048 over 16384) takes one of them."""
    be, xp = cupy_backend, cupy_backend.xp
    rng = xp.random.default_rng(3)
    a, b = (rng.integers(-127, 128, size=(r, k), dtype=np.int8) for r in (m, n))
    want = xp.empty((m, n), dtype=np.int32)
    routes, be._lt = be._lt, None
    try:
        be.gemm_ex(a, b.T, want, recipe="int8")
    finally:
        be._lt = routes
    got = xp.empty_like(want)
    be.gemm_ex(a, b.T, got, recipe="int8")
    assert bool((got == want).all())
    be.gemm_ex(a, b.T, got, recipe="int8", beta=1.0)
    assert bool((got == 2 * want).all())
    got.fill(0)
    graph = be.capture(lambda: be.gemm_ex(a, b.T, got, recipe="int8"))
    got.fill(0)
    graph.launch()
    assert bool((got == want).all())
    if be._lt is None:                          # no nvmath-python: every INT8 GEMM is cublasGemmEx's
        return
    cc = xp.cuda.Device().compute_capability
    taken = be._lt._routes[xp.cuda.runtime.getDevice()]
    kernel = be._lt._cutlass[xp.cuda.runtime.getDevice()]
    preference = lt_int8.INT8_TILES.get(f"{cc[:-1]}.{cc[-1]}")
    if kernel is not None and k >= kernel.choice.min_k:  # a built CUTLASS kernel takes these first
        return
    if preference and k >= preference.min_k and (m, n) == (8192, 2048):
        assert [p.tile for p in taken._plans.values() if p is not None][0] in preference.tiles


@pytest.mark.gpu
@pytest.mark.parametrize("offset", [4, 16, 64])
def test_gpu_views_less_aligned_than_the_heuristic_assumes_still_equal_cublas_gemmex(cupy_backend, offset):
    """Operands that start ``offset`` bytes into their rows (k = 16384, inside the route's reach): the heuristic is
    told their alignment, and the product is cublasGemmEx's, bit for bit."""
    be, xp = cupy_backend, cupy_backend.xp
    rng = xp.random.default_rng(5)
    k = 16384
    a_rows, b_rows = (rng.integers(-127, 128, size=(r, k + 128), dtype=np.int8) for r in (512, 1024))
    a, b = a_rows[:, offset:offset + k], b_rows[:, offset:offset + k]
    want, got = (xp.zeros((512, 1024), dtype=np.int32) for _ in range(2))
    routes, be._lt = be._lt, None
    try:
        be.gemm_ex(a, b.T, want, recipe="int8")
    finally:
        be._lt = routes
    be.gemm_ex(a, b.T, got, recipe="int8")
    assert bool((got == want).all())
    assert bool((want[:8] == (a[:8].astype(np.float64) @ b.T.astype(np.float64)).astype(np.int32)).all())


def test_routes_take_each_devices_route_once_and_the_streams_workspace(fake):
    """``Int8Routes``: one route per device, made from its compute capability on its first INT8 GEMM, each call given
    the current stream's workspace and stream from one look at the stream's entry."""
    made, looked = [], []
    device = SimpleNamespace(id=0)
    xp = SimpleNamespace(cuda=SimpleNamespace(
        runtime=SimpleNamespace(getDevice=lambda: device.id),
        Device=lambda i: made.append(i) or SimpleNamespace(compute_capability={0: "90", 1: "80"}[i])))
    workspace = SimpleNamespace(data=SimpleNamespace(ptr=0xCC), nbytes=32 << 20)
    streams = SimpleNamespace(entry=lambda: looked.append(1) or (7, workspace, SimpleNamespace(ptr=0x55)))
    routes = lt_int8.Int8Routes(xp, streams, {"9.0": lt_int8.Preference(("256x128",))}, kernels={})
    for _ in range(2):
        assert routes.run(INT8, _call(2048, 8192, 4096), 0.0)
    device.id = 1
    assert not routes.run(INT8, _call(2048, 8192, 4096), 0.0)
    assert made == [0, 1] and len(looked) == 2
    assert [(ws, ws_bytes, stream) for *_, ws, ws_bytes, stream in fake.issued] == [(0xCC, 32 << 20, 0x55)] * 2
