"""The front door on NumPy: gpu.matmul and gpu.plan run the candidate the device's profile ranks first (the library
GEMM without one), hand on to the next where a family refuses, keep their plans, and refuse bad input first."""

import numpy as np
import pytest

import gpu
from accuracy.reference import exact_matmul
from gpu.backend import MemoryPlanError, get_backend
from gpu.frontdoor import PLANS, contract
from gpu.profile import bundled_profile, device_name, save_profile

N = 256


@pytest.fixture
def profile():
    """A NumPy device profile (in the test's private profile folder) whose tables rank Strassen L1 and Ozaki II
    over the library GEMM at N = 256."""
    be = get_backend("numpy")
    doc = {"backend": "numpy", "device": device_name(be), "levels": {},
           "configurations": {"points": [{"size": N, "gemm_s": 1e-3, "timed": [
               {"config": {"level": 1, "schedule": "winograd"}, "speedup": 1.10}]}]},
           "methods": {"points": [{"shape": [N, N, N], "gemm_s": 1e-3, "timed": [
               {"method": "ozaki2", "config": {"moduli": "auto", "target": "dgemm"}, "ratio": 1.50, "waits": True}]}]}}
    save_profile(doc)
    PLANS.clear()
    yield be
    PLANS.clear()


def operands(m=N, k=N, n=N, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((m, k)), rng.standard_normal((k, n))


def test_without_a_profile_the_library_gemm_runs_with_its_bits():
    A, B = operands(130, 70, 90)
    assert np.array_equal(gpu.matmul(A, B, backend="numpy"), A @ B)
    C = np.empty((130, 90))
    assert gpu.matmul(A, B, out=C, backend="numpy") is C and np.array_equal(C, A @ B)
    assert gpu.plan(A, B, backend="numpy").chosen.family == "gemm"


def test_dgemm_runs_ozaki2_from_the_profile_within_its_bound(profile):
    A, B = operands()
    p = gpu.plan(A, B, backend=profile)
    assert p.chosen.family == "ozaki2" and "winner: ozaki2" in p.explain()
    C, exact = p.execute(A, B), exact_matmul(A, B, backend="numpy")
    t = contract.ozaki2("dgemm", N).t
    rowcol = np.linalg.norm(A, axis=1)[:, None] * np.linalg.norm(B, axis=0)[None, :]
    assert (np.abs(C - exact) <= t * rowcol + 2.0**-53 * np.abs(exact)).all()


def test_under_a_number_the_fastest_candidate_that_keeps_it_runs_and_keeps_the_promise(profile):
    A, B = operands(seed=1)
    p = gpu.plan(A, B, accuracy=1e-10, backend=profile)
    order = [(r.name, r.eligible) for r in p.ranking.entries]
    assert order[:3] == [("ozaki2(moduli='auto', target='dgemm')", True), ("strassen L1:winograd", True),
                         ("gemm (the library GEMM)", True)]
    C, exact = p.execute(A, B), exact_matmul(A, B, backend="numpy")
    promise = 1e-10 * N * np.abs(A).max() * np.abs(B).max() + 2.0**-53 * np.abs(exact)
    assert (np.abs(C - exact) <= promise).all()


def test_a_bound_the_library_gemm_cannot_prove_runs_a_proven_method_and_keeps_it():
    """k = 1027: the library GEMM's gamma_k (1.14e-13) cannot prove 1e-13, and nothing was measured here, so the
    strongest guarantee runs (Ozaki I, entrywise), and its result keeps the promise against the exact one."""
    A, B = operands(40, 1027, 30, seed=2)
    p = gpu.plan(A, B, accuracy=1e-13, backend="numpy")
    assert p.chosen.family == "ozaki" and "the library GEMM does not keep 1e-13" in p.explain()
    C, exact = p.execute(A, B), exact_matmul(A, B, backend="numpy")
    promise = 1e-13 * A.shape[1] * np.abs(A).max() * np.abs(B).max() + 2.0**-53 * np.abs(exact)
    assert (np.abs(C - exact) <= promise).all() and not np.array_equal(C, A @ B)


def test_a_family_that_refuses_hands_on_to_the_next_candidate(profile, monkeypatch):
    from gpu.frontdoor import frontplan as plan_module

    real = plan_module.family_plan

    def refusing(r, *args):
        if r.family == "ozaki2":
            raise MemoryPlanError("the workspace does not fit (a test)")
        return real(r, *args)
    monkeypatch.setattr(plan_module, "family_plan", refusing)
    A, B = operands(seed=2)
    p = gpu.plan(A, B, accuracy=1e-10, backend=profile)
    assert p.chosen.name == "strassen L1:winograd" and "refused by its family: ozaki2" in p.explain()
    np.testing.assert_allclose(p.execute(A, B), A @ B, rtol=0, atol=1e-12 * N)



def test_ozaki2_whose_whole_workspace_does_not_fit_runs_in_tiles_of_the_free_memory(profile, monkeypatch):
    """The front door keeps its first choice where Ozaki II's whole plan (sized for every count "auto" may take)
    does not fit: a tiled plan within the memory free, said in explain(), its result within the bound."""
    from gpu.ozaki2 import TiledPlan, tiled

    whole = tiled.tile_bytes(profile, N, N, N, None, "fast", "normwise")
    monkeypatch.setattr(profile, "memory_info", lambda: (whole // 2 + 8 * N * N, 2**40))
    A, B = operands(seed=3)
    p = gpu.plan(A, B, backend=profile)
    assert p.chosen.family == "ozaki2" and isinstance(p._inner, TiledPlan) and p._inner.tiles >= 2
    assert f"tiles of {p._inner.rows} x {p._inner.cols}" in p.explain() and "refused by its family" not in p.explain()
    C, exact = p.execute(A, B), exact_matmul(A, B, backend="numpy")
    t = contract.ozaki2("dgemm", N).t
    rowcol = np.linalg.norm(A, axis=1)[:, None] * np.linalg.norm(B, axis=0)[None, :]
    assert (np.abs(C - exact) <= t * rowcol + 2.0**-53 * np.abs(exact)).all()

def test_a_plan_short_of_memory_frees_the_other_kept_plans_and_runs(profile, monkeypatch):
    """A MemoryPlanError comes before any work: the front door frees the plans every family keeps (another
    accuracy's Ozaki II workspace) and runs once more; where none was kept the error stands."""
    A, B = operands(seed=3)
    gpu.matmul(A, B, backend=profile)                                   # an Ozaki II plan, kept
    p = gpu.plan(A, B, accuracy="sgemm", backend=profile)
    inner, calls = p._inner, []

    def short_once(*args):
        calls.append(1)
        if len(calls) == 1:
            raise MemoryPlanError("the workspace needs 1 GiB but 0.5 GiB are free")
        return inner.__class__._execute(inner, *args)
    monkeypatch.setattr(inner, "_execute", short_once)
    assert np.allclose(p.execute(A, B), A @ B) and len(calls) == 2 and len(PLANS) == 0
    calls.clear()
    monkeypatch.setattr(inner, "_execute", lambda *a: (_ for _ in ()).throw(MemoryPlanError("short")))
    with pytest.raises(MemoryPlanError, match="short"):
        p.execute(A, B)


def test_matmul_keeps_one_plan_per_signature_accuracy_and_determinism(profile):
    A, B = operands(seed=3)
    for _ in range(3):
        gpu.matmul(A, B, backend=profile)
    gpu.matmul(A, B, accuracy="sgemm", backend=profile)
    gpu.matmul(A, B, deterministic=True, backend=profile)
    assert len(PLANS) == 3


def test_bad_input_is_refused_before_any_work():
    A, B = operands(8, 5, 4)
    with pytest.raises(ValueError, match="A's columns must equal B's rows"):
        gpu.matmul(A, A, backend="numpy")
    with pytest.raises(TypeError, match="the front door multiplies float64"):
        gpu.matmul(A.astype(np.float32), B.astype(np.float32), backend="numpy")
    with pytest.raises(ValueError, match="accuracy must be one of"):
        gpu.matmul(A, B, accuracy="fp64", backend="numpy")
    with pytest.raises(ValueError, match="must be one of"):
        gpu.matmul(A, B, accuracy=gpu.Accuracy("dgemm", scale="row"), backend="numpy")


def test_exact_runs_the_correctly_rounded_product_that_accuracy_registers():
    """``accuracy.reference`` (imported here) registers the exact product: its bits, into ``out`` too, with the
    IEEE entries of rows and columns that hold NaN or infinity."""
    A, B = operands(40, 30, 20, seed=5)
    A[3, 4] = np.nan
    want = exact_matmul(A, B, check_finite=False, backend="numpy")
    got = gpu.matmul(A, B, accuracy="exact", backend="numpy")
    assert np.array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    assert np.array_equal(got[ok], want[ok])
    C = np.empty((40, 20))
    assert gpu.matmul(A, B, accuracy="exact", out=C, backend="numpy") is C and np.array_equal(C[ok], want[ok])
    assert "the one method that keeps 'exact'" in gpu.plan(A, B, accuracy="exact", backend="numpy").explain()


def test_a_tight_bound_over_a_long_k_runs_splitk_on_its_own_split_where_it_is_measured():
    """The library GEMM cannot prove 1e-10 at k = 2^20 (gamma_k = 1.2e-10); split-K's own split of the
    product can (gamma of its chunk width plus its chunks), so the front door runs it and keeps the promise."""
    be = get_backend("numpy")
    m, k = 4, 2**20
    doc = {"backend": "numpy", "device": device_name(be), "levels": {},
           "methods": {"points": [{"shape": [m, k, m], "gemm_s": 1e-3, "timed": [
               {"method": "splitk", "config": {"deterministic": True}, "ratio": 1.2}]}]}}
    save_profile(doc)
    A, B = (np.random.default_rng(3).standard_normal(s) for s in ((m, k), (k, m)))
    plan = gpu.plan(A, B, accuracy=1e-10, backend=be)
    split = be.ops("splitk").split(np.dtype("float64"), m, m, k, deterministic=True)
    width, chunks = split.width, split.chunks
    assert plan.chosen.family == "splitk" and plan.chosen.guarantee == contract.splitk(width, chunks)
    C = plan.execute(A, B)
    R = exact_matmul(A, B, backend=be)
    assert np.all(np.abs(C - R) <= plan.chosen.guarantee.t * (np.abs(A) @ np.abs(B)) + 1e-300)


@pytest.mark.gpu
def test_on_the_h200_a_tight_bound_over_a_long_k_runs_splitk_not_ozaki2(cupy_backend):
    """With the bundled H200 profile, 16 x 2^20 x 16 at 1e-10 runs split-K on its own split (the grid measured
    Ozaki II at 0.004x the library GEMM there when split-K's bound was gamma_k), within that split's bound."""
    if not bundled_profile(cupy_backend):
        pytest.skip("no bundled profile for this GPU")
    xp = cupy_backend.xp
    A, B = xp.random.default_rng(1).standard_normal((16, 2**20)), xp.random.default_rng(2).standard_normal((2**20, 16))
    plan = gpu.plan(A, B, accuracy=1e-10, backend=cupy_backend)
    assert plan.chosen.family == "splitk" and plan.chosen.guarantee.t < 1e-11
    R = exact_matmul(A, B)
    scale = xp.abs(A) @ xp.abs(B)
    assert bool(xp.all(xp.abs(plan.execute(A, B) - R) <= plan.chosen.guarantee.t * scale))


def _leveled_profile(be, size):
    """A NumPy profile whose Ozaki II at two Winograd levels ranks first at ``size``, level 0 second."""
    entry = {"method": "ozaki2", "waits": True}
    save_profile({"backend": "numpy", "device": device_name(be), "levels": {}, "configurations": {"points": []},
                  "methods": {"points": [{"shape": [size] * 3, "gemm_s": 1e-3, "timed": [
                      {**entry, "config": {"moduli": "auto", "target": "dgemm", "level": 2}, "ratio": 2.0},
                      {**entry, "config": {"moduli": "auto", "target": "dgemm"}, "ratio": 1.5}]}]}})
    PLANS.clear()


def test_a_level_that_would_run_its_passes_is_refused_and_the_next_candidate_runs(monkeypatch):
    """Two levels run fused only where the INT8 GEMMs write residues; NumPy's do not, so the level-2 plan would take
    the level's passes, which its profile entry did not time: the front door says so and runs level 0. With a
    stand-in residue GEMM (the CUTLASS kernel's contract) the level runs fused, with level 0's bits."""
    from tests.gpu.test_ozaki2_fused_level2 import _residue_gemm

    be = get_backend("numpy")
    _leveled_profile(be, N)
    A, B = operands(seed=3)
    p = gpu.plan(A, B, backend=be)
    assert p.chosen.options.get("level") is None and p.chosen.family == "ozaki2"
    (refused, why), = p.refused
    assert refused.options["level"] == 2 and "would run the level's passes" in why and "CUTLASS" in why
    level0 = p.execute(A, B)
    monkeypatch.setattr(be, "residue_gemm", _residue_gemm)
    monkeypatch.setattr(type(be), "residue_min_k", 0)
    fused = gpu.plan(A, B, backend=be)
    assert fused.chosen.options["level"] == 2 and not fused.refused
    assert np.array_equal(fused.execute(A, B), level0)
    PLANS.clear()


def test_the_front_door_takes_no_level_in_tiles_nor_where_a_plan_runs_the_level_passes():
    """A level's tiles are planned per call and may run the level's passes, which no profile entry timed: the front
    door refuses them, freeing the plan, and takes level 0 as it takes it anywhere."""
    from gpu import ozaki2
    from gpu.frontdoor.frontplan import refuse_passes

    A, B = operands(256, 512, 256, seed=4)
    whole = ozaki2.Plan(A, B, options={"moduli": 15, "level": 1}, backend="numpy")
    assert whole.fused_levels == 1
    refuse_passes(whole, 1)
    assert whole.signature is not None, "a fused level runs"
    tiled = ozaki2.TiledPlan(A, B, options={"moduli": 15, "level": 1, "workspace": whole.work.layout.nbytes // 3},
                             backend="numpy")
    level0 = ozaki2.TiledPlan(A, B, options={"moduli": 15, "workspace": whole.work.layout.nbytes // 3},
                              backend="numpy")
    refuse_passes(level0, 0)
    with pytest.raises(ValueError, match="level 1 would run the level's passes"):
        refuse_passes(tiled, 1)
    assert tiled.signature is None, "freed"
    passes = ozaki2.Plan(A, B, options={"moduli": 15, "level": 3}, backend="numpy")
    with pytest.raises(ValueError, match="level 3"):
        refuse_passes(passes, 3)
    whole.free()
    level0.free()
