"""Scheme II in a bounded workspace (``ozaki2.matmul(..., workspace=bytes)``): the tiles fit the cap, a count given
with the fast scaling is bitwise the untiled product, ``"auto"`` keeps its proven bound, ``out`` and odd shapes
are honoured, a cap too small for the least tiles is refused before any work, and bad caps are refused."""

import functools

import numpy as np
import pytest

from accuracy.generate import phi_matrix
from accuracy.reference import exact_matmul
from gpu import ozaki2
from gpu.backend import MemoryPlanError, get_backend
from gpu.ozaki2 import tiled
from gpu.ozaki2.memory import peak_bytes

host_matmul = functools.partial(ozaki2.matmul, backend="numpy")
BE = get_backend("numpy")


def operands(m, k, n, phi=1.0, seed=1):
    return phi_matrix(m, k, phi, seed), phi_matrix(k, n, phi, seed + 1)


def test_tiles_are_the_largest_that_fit_and_cover_c_once():
    m, k, n = 300, 200, 260
    whole = tiled.tile_bytes(BE, m, k, n, 14, "fast", "normwise")
    assert tiled.panels(BE, m, k, n, 14, "fast", "normwise", whole) == (m, n)
    rows, cols = tiled.panels(BE, m, k, n, 14, "fast", "normwise", whole // 3)
    assert (rows, cols) != (m, n) and tiled.tile_bytes(BE, rows, k, cols, 14, "fast", "normwise") <= whole // 3
    bigger = min(m, 2 * rows), min(n, 2 * cols)
    assert tiled.tile_bytes(BE, *bigger[:1], k, bigger[1], 14, "fast", "normwise") > whole // 3
    seen = np.zeros((m, n), dtype=int)
    shapes = []
    for r, c in tiled.tiles(m, n, rows, cols):
        seen[r, c] += 1
        shapes.append((r.stop - r.start, c.stop - c.start))
    assert (seen == 1).all()
    assert shapes == sorted(shapes, key=shapes.index) and len(set(shapes)) <= 4
    changes = sum(1 for a, b in zip(shapes, shapes[1:]) if a != b)
    assert changes == len(set(shapes)) - 1, "the tiles of one shape come together (one plan per shape)"


@pytest.mark.parametrize("shape", [(300, 200, 260), (129, 77, 301), (97, 50, 400)])
@pytest.mark.parametrize("share", [2, 5])
def test_a_count_given_with_the_fast_scaling_is_bitwise_the_untiled_product(shape, share):
    m, k, n = shape
    A, B = operands(m, k, n, 2.0)
    cap = tiled.tile_bytes(BE, m, k, n, 15, "fast", "normwise") // share
    want = host_matmul(A, B, moduli=15)
    assert np.array_equal(host_matmul(A, B, moduli=15, workspace=cap), want)
    out = np.full((m, n), np.nan)
    assert host_matmul(A, B, moduli=15, workspace=cap, out=out) is out and np.array_equal(out, want)


@pytest.mark.parametrize("shape", [(300, 200, 260), (129, 77, 301)])
def test_a_count_given_with_the_fine_scaling_is_bitwise_the_untiled_product(shape):
    """The fine scaling's shifts are a line's own too (its bound takes the whole k, which every tile keeps): square
    tiles and row panels that keep their residues give the untiled product's bits."""
    m, k, n = shape
    A, B = operands(m, k, n, 2.0, 7)
    want = host_matmul(A, B, moduli=15, scaling="fine")
    assert not np.array_equal(want, host_matmul(A, B, moduli=15)), "the fine scaling is not the fast one here"
    square = tiled.tile_bytes(BE, m, k, n, 15, "fine", "normwise") // 3
    kept = tiled.tile_bytes(BE, m, k, -(-n // 4), 15, "fine", "normwise", keep_a=True)
    reused = []
    for cap in (square, kept):
        with ozaki2.TiledPlan(A, B, options={"moduli": 15, "workspace": cap, "scaling": "fine"},
                              backend="numpy") as plan:
            assert plan.tiles > 1
            reused.append(plan.reuse)
            for _ in range(2):
                assert np.array_equal(plan.execute(A, B), want)
    assert reused[-1], "the second cap cuts row panels that keep A's residues"


def test_auto_in_tiles_keeps_its_proven_bound(monkeypatch):
    m, k, n = 200, 300, 180
    A, B = operands(m, k, n, 1.0, 4)
    built = []
    real = ozaki2.Plan
    record = lambda *a, **kw: (built.append(a[0].shape), real(*a, **kw))[1]  # noqa: E731
    monkeypatch.setattr("gpu.ozaki2.api.Plan", record)
    monkeypatch.setattr("gpu.ozaki2.tiled.Plan", record)
    cap = tiled.tile_bytes(BE, m, k, n, None, "fast", "normwise") // 3
    C = host_matmul(A, B, workspace=cap)
    assert len(built) >= 2, "the product ran in tiles"
    R = exact_matmul(A, B, backend=BE)
    t = 2.0**-56 * np.sqrt(k)
    bound = t * np.linalg.norm(A, axis=1)[:, None] * np.linalg.norm(B, axis=0)[None, :] + 2.0**-53 * np.abs(C)
    assert np.all(np.abs(C - R) <= bound)


def test_a_cap_too_small_for_the_least_tiles_is_refused_before_any_work():
    A, B = operands(300, 200, 260)
    least = tiled.tile_bytes(BE, tiled.MIN_TILE, 200, tiled.MIN_TILE, 14, "fast", "normwise")
    out = np.full((300, 260), 7.0)
    with pytest.raises(MemoryPlanError, match="even in tiles of 64 x 64, more than the workspace"):
        host_matmul(A, B, moduli=14, workspace=least - 1, out=out)
    assert (out == 7.0).all(), "nothing written"


@pytest.mark.parametrize("cap", [0, -5, 1.5, True, "1GiB"])
def test_bad_caps_are_refused(cap):
    A, B = operands(8, 8, 8)
    with pytest.raises(ValueError, match="workspace must be None or a positive number of bytes"):
        host_matmul(A, B, moduli=4, workspace=cap)


@pytest.mark.gpu
def test_on_the_gpu_tiles_under_a_cap_equal_numpy_bit_for_bit(cupy_backend):
    m, k, n = 1000, 700, 900
    A, B = operands(m, k, n, 1.0, 8)
    cap = tiled.tile_bytes(cupy_backend, m, k, n, 15, "fast", "normwise") // 3
    got = ozaki2.matmul(cupy_backend.asarray(A), cupy_backend.asarray(B), moduli=15, workspace=cap,
                        backend=cupy_backend)
    assert np.array_equal(cupy_backend.to_numpy(got), host_matmul(A, B, moduli=15))


def test_a_product_whose_plan_does_not_fit_runs_in_tiles_of_the_free_memory(monkeypatch):
    """No ``workspace=``: where the whole product's plan does not fit (even after the kept plans are freed), the
    call tiles within the memory free then, bitwise the untiled product with a count given; where not even the
    least tiles fit, MemoryPlanError."""
    from gpu.backend.plans import PlanCache

    m, k, n = 300, 200, 260
    A, B = operands(m, k, n, 2.0)
    want = host_matmul(A, B, moduli=15)
    monkeypatch.setattr("gpu.ozaki2.api.PLANS", PlanCache())
    built = []
    real = ozaki2.Plan
    record = lambda *a, **kw: (built.append(a[0].shape), real(*a, **kw))[1]  # noqa: E731
    monkeypatch.setattr("gpu.ozaki2.api.Plan", record)
    monkeypatch.setattr("gpu.ozaki2.tiled.Plan", record)
    whole = tiled.tile_bytes(BE, m, k, n, 15, "fast", "normwise")
    monkeypatch.setattr(BE, "memory_info", lambda: (whole // 2, 2**40))
    assert np.array_equal(host_matmul(A, B, moduli=15), want)
    assert len(built) >= 3 and built[0] == (m, k), "the whole product was refused, then tiles ran"
    tiled_plan = next(iter(ozaki2.api.PLANS._plans.values()))
    assert isinstance(tiled_plan, ozaki2.TiledPlan) and tiled_plan.tiles >= 2, "the tiled plan is kept"
    before = len(built)
    assert np.array_equal(host_matmul(A, B, moduli=15), want)
    assert len(built) - before <= 3, "a repeat tries no whole plan: only the tile shapes are planned again"
    monkeypatch.setattr("gpu.ozaki2.api.PLANS", PlanCache())
    monkeypatch.setattr(BE, "memory_info", lambda: (1000, 2**40))
    with pytest.raises(MemoryPlanError, match="even in tiles of 64 x 64|holds no workspace"):
        host_matmul(A, B, moduli=15)


def test_a_tiled_plan_of_one_tile_shape_keeps_its_tile_plan_between_calls(monkeypatch):
    """Every tile of one shape: the first call builds the tile plan, a repeat builds none (into ``out`` too, with
    the phases summed over the tiles), and free() drops it."""
    m, k, n = 256, 100, 256
    A, B = operands(m, k, n, 1.0, 5)
    cap = tiled.tile_bytes(BE, m // 2, k, n // 2, 15, "fast", "normwise")
    built = []
    real = ozaki2.Plan
    monkeypatch.setattr("gpu.ozaki2.tiled.Plan", lambda *a, **kw: (built.append(a[0].shape), real(*a, **kw))[1])
    plan = ozaki2.TiledPlan(A, B, options={"moduli": 15, "workspace": cap}, backend="numpy")
    assert (plan.rows, plan.cols, plan.tiles, plan.one_shape) == (m // 2, n // 2, 4, True)
    want = host_matmul(A, B, moduli=15)
    assert np.array_equal(plan.execute(A, B), want) and built == [(m // 2, k)]
    phases = {}
    assert np.array_equal(plan.run(A, B, phases=phases), want) and len(built) == 1, "a repeat plans nothing"
    assert set(phases) >= {"scaling", "residues", "crt"} and all(v >= 0 for v in phases.values())
    plan.free()
    with pytest.raises(ValueError, match="freed"):
        plan.execute(A, B)
    out = np.full((m, n), np.nan)
    with ozaki2.TiledPlan(A, B, out=out, options={"moduli": 15, "workspace": cap}, backend="numpy") as into:
        assert into.execute(A, B, out) is out and np.array_equal(out, want)



def test_row_panels_narrow_their_tiles_where_a_whole_panel_then_runs_as_one_span(monkeypatch):
    """Of the column widths down to a quarter of the panel's height, the widest whose row panel holds every INT32
    product is taken where its GEMM does enough work (one span a tile, one INT8 GEMM a modulus, where a plan that
    does not keep A cuts a span of 6144 rows into panels of 3072), else the widest that fits; bitwise either way."""
    m, k, n = 256, 100, 256
    A, B = operands(m, k, n, 2.0, 9)
    want = host_matmul(A, B, moduli=15)

    def whole(rows, cols):
        return peak_bytes(BE, rows, k, cols, 15, "fast", direct=True, out_given=True, keep_a=True)
    cap = tiled.tile_bytes(BE, m // 2, k, n // 2, 15, "fast", "normwise")
    assert whole(m // 2, n // 2) > cap >= whole(m // 2, n // 4), "the case: a narrower tile holds its panel whole"
    assert tiled.reusing_panels(BE, m, k, n, 15, "normwise", cap) == (m // 2, n // 2), "too little work a GEMM"
    monkeypatch.setattr(tiled, "MIN_PANEL_WORK", 0)
    assert tiled.reusing_panels(BE, m, k, n, 15, "normwise", cap) == (m // 2, n // 4)
    assert tiled.one_span(BE, m // 2, k, n // 2, 15, "normwise", whole(m // 2, n // 2) - 1, 0, n // 2) == n // 2, \
        "no narrower width allowed: the widest that fits"
    assert tiled.one_span(BE, m // 2, k, n // 2, 15, "normwise", cap, 2, n // 8) == n // 2, \
        "from level 2 up a plan keeping A's residues takes the planes: no direct layout to narrow for"
    with ozaki2.TiledPlan(A, B, options={"moduli": 15, "workspace": cap}, backend="numpy") as plan:
        assert np.array_equal(plan.execute(A, B), want)
        part = plan._held.part(15)
        assert part.spans == [slice(0, m // 2)] and len(part.gemms[0]) == 15, "one span, one GEMM a modulus"
    tall = operands(6144, 16, 64, 1.0, 4)
    for keep, gemms in ((False, 30), (True, 15)):
        with ozaki2.Plan(*tall, options={"moduli": 15, "workspace": 1 << 30}, backend="numpy", keep_a=keep) as plan:
            part = plan.part(15)
            assert part.spans == [slice(0, 6144)] and len(part.gemms[0]) == gemms, "panels of 3072 rows, else one"
            assert np.array_equal(plan.execute(*tall), host_matmul(*tall, moduli=15))

def _formed_lines(monkeypatch):
    """Every residue pass of the NumPy operations, as the number of lines it formed."""
    from gpu.ozaki2.ops import HostOps

    lines, real = [], HostOps.residues
    monkeypatch.setattr(HostOps, "residues", lambda self, X, *a, **kw: (lines.append(X.shape[0]), real(
        self, X, *a, **kw))[1])
    return lines


def _stats_lines(monkeypatch):
    """Every line-statistics pass of the NumPy operations, as the lines it read, by operand (B's come as B.T)."""
    from gpu.ozaki2.ops import HostOps

    found, real = {"A": [], "B": []}, HostOps.line_stats
    monkeypatch.setattr(HostOps, "line_stats", lambda self, X, *a, **kw: (found[
        "B" if X.strides[0] == X.itemsize and X.shape[1] > 1 else "A"].append(X.shape[0]), real(self, X, *a, **kw))[1])
    return found


@pytest.mark.parametrize("shape", [(256, 120, 256), (300, 200, 260), (129, 77, 301), (600, 50, 300)])
def test_row_panels_keep_their_residues_for_their_column_tiles_bitwise(monkeypatch, shape):
    """A count given and the fast scaling: where it forms fewer residues than square tiles, the tiles are row panels
    whose residues serve each of their column tiles (A's rows formed once, B's columns once per row panel), and
    the product is bitwise the untiled one, on a repeat too."""
    m, k, n = shape
    A, B = operands(m, k, n, 3.0, 11)
    want = host_matmul(A, B, moduli=15)
    cap = tiled.tile_bytes(BE, m, k, -(-n // 4), 15, "fast", "normwise", keep_a=True)
    plan = ozaki2.TiledPlan(A, B, options={"moduli": 15, "workspace": cap}, backend="numpy")
    assert plan.reuse and "residues kept" in plan.note
    firsts = {}
    for r, c in tiled.tiles(m, n, plan.rows, plan.cols):
        firsts.setdefault((c.stop - c.start, r.start), r.stop - r.start)
    assert len(firsts) < plan.tiles or plan.cols == n, "tiles use their row panel's residues, or span B"
    lines, stats = _formed_lines(monkeypatch), _stats_lines(monkeypatch)
    for _ in range(2):
        lines.clear()
        stats["A"].clear()
        stats["B"].clear()
        assert np.array_equal(plan.execute(A, B), want)
        assert sum(lines) == sum(firsts.values()) + n * -(-m // plan.rows), \
            "A's rows formed once per row panel and tile width, B's columns once per row panel"
        assert sum(lines) == tiled.formed(m, n, plan.rows, plan.cols, True), "the choice's count is the real one"
        assert sum(stats["B"]) == n * (1 + (m % plan.rows != 0)), \
            "B's column statistics once per tile plan, kept for the later row panels"
        assert sum(stats["A"]) == sum(firsts.values())
    with ozaki2.TiledPlan(A, B, options={"moduli": 15, "workspace": cap, "scaling": "accurate"},
                          backend="numpy") as accurate:
        assert not accurate.reuse, "the accurate scaling's shifts depend on both operands: no reuse"


def test_row_panels_are_taken_only_where_they_form_fewer_residues_than_square_tiles(monkeypatch):
    """A last, narrower column of tiles has a plan of its own and forms A's rows again: the choice counts it, and
    square tiles win where row panels would form more (2049 x 64 x 513: 5124 lines against 4101)."""
    m, k, n = 2049, 64, 513
    cap = tiled.tile_bytes(BE, m, k, n // 3, 15, "fast", "normwise", keep_a=True)
    A, B = operands(m, k, n, 1.0, 3)
    plan = ozaki2.TiledPlan(A, B, options={"moduli": 15, "workspace": cap}, backend="numpy")
    square = tiled.panels(BE, m, k, n, 15, "fast", "normwise", cap)
    reusing = tiled.reusing_panels(BE, m, k, n, 15, "normwise", cap)
    assert tiled.formed(m, n, *reusing, True) > tiled.formed(m, n, *square, False)
    assert not plan.reuse and (plan.rows, plan.cols) == square
    want = host_matmul(A, B, moduli=15)
    lines = _formed_lines(monkeypatch)
    assert np.array_equal(plan.execute(A, B), want)
    assert sum(lines) == tiled.formed(m, n, *square, False)


def test_a_kept_plan_forms_a_again_for_another_a_and_refuses_what_it_cannot_keep():
    """``reuse_a`` uses A's kept residues only for the A they were formed from (its address), ``reuse_b`` a slot's
    kept statistics of B only for the B they were taken from; ``keep_a`` needs a given count and the fast scaling;
    the kept layout's scratch starts after A's residues."""
    from gpu.ozaki2.workspace import layout

    m, k, n = 64, 80, 48
    A1, B = operands(m, k, n, 1.0, 2)
    A2 = operands(m, k, n, 2.0, 7)[0]
    plan = ozaki2.Plan(A1, B, options={"moduli": 12}, backend="numpy", keep_a=True)
    first = plan.run(A1, B)
    assert np.array_equal(plan.run(A1, B, reuse_a=True), first)
    assert np.array_equal(plan.run(A2, B, reuse_a=True), host_matmul(A2, B, moduli=12)), "another A: formed"
    assert np.array_equal(plan.run(A2, B, reuse_a=True), host_matmul(A2, B, moduli=12))
    checked = ozaki2.Plan(A1, B, options={"moduli": 12, "check_finite": True}, backend="numpy", keep_a=True)
    checked.run(A1, B)
    bad = A1.copy()
    bad[3, 5] = np.nan
    with pytest.raises(ValueError, match="NaN or infinity"):
        checked.run(bad, B)
    assert checked._kept[0] is None, "a call that stopped after overwriting A's statistics keeps no A"
    assert np.array_equal(checked.run(A1, B, reuse_a=True), first)
    slots = ozaki2.Plan(A1, B, options={"moduli": 12}, backend="numpy", keep_a=True, b_slots=2)
    B2 = operands(m, k, n, 2.0, 8)[1]
    assert np.array_equal(slots.run(A1, B, b_slot=1), first)
    assert np.array_equal(slots.run(A1, B, reuse_a=True, reuse_b=True, b_slot=1), first)
    assert np.array_equal(slots.run(A1, B2, reuse_a=True, reuse_b=True, b_slot=1), host_matmul(A1, B2, moduli=12)), \
        "another B: its statistics taken"
    assert np.array_equal(slots.run(A1, B, reuse_a=True, reuse_b=True, b_slot=0), first), "a slot that never held B"
    for options in ({"moduli": "auto"}, {"moduli": 12, "scaling": "accurate"}):
        with pytest.raises(ValueError, match="keep_a needs a given modulus count and the fast or fine scaling"):
            ozaki2.Plan(A1, B, options=options, backend="numpy", keep_a=True)
    shared, kept = (layout(m, k, n, 12, "fast", True, keep_a=keep) for keep in (False, True))
    assert shared.buffers["tiles"].offset < shared.buffers["res_a"].end
    assert kept.buffers["tiles"].offset >= kept.buffers["res_a"].end


@pytest.mark.gpu
def test_on_the_gpu_row_panels_with_kept_residues_equal_numpy_bit_for_bit(cupy_backend):
    """The kept residues through the graphs too: the second call captures a graph per tile (a row panel's first
    tile forming A, the others not), the third replays them all (the tile plan keeps one per tile)."""
    m, k, n = 1024, 640, 1024
    A, B = operands(m, k, n, 1.0, 9)
    cap = tiled.tile_bytes(cupy_backend, m // 2, k, n // 4, 15, "fast", "normwise", keep_a=True)
    dA, dB = cupy_backend.asarray(A), cupy_backend.asarray(B)
    plan = ozaki2.TiledPlan(dA, dB, options={"moduli": 15, "workspace": cap}, backend=cupy_backend)
    assert plan.reuse
    want = host_matmul(A, B, moduli=15)
    for _ in range(3):
        assert np.array_equal(cupy_backend.to_numpy(plan.execute(dA, dB)), want)
    assert plan.tiles > 4 and len(plan._held._graphs.captured) == plan.tiles
