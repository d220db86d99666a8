"""The Ozaki scheme as a plan: options, plans kept per signature, NaN and infinity found on the device, the one
verdict word a ``target=`` call reads, no wait with ``slices=``, and only the kernels a call needs."""

import dataclasses
import inspect
import shutil
import subprocess
import time

import numpy as np
import pytest

from accuracy.generate import phi_matrix
from gpu import ozaki
from gpu.backend import get_backend
from gpu.backend.plans import PlanMismatch
from gpu.ozaki import cuda_sources, execution
from gpu.ozaki.ops import BAD, HostOps, batch_scales, decode, encode_verdict

NP = get_backend("numpy")


def phi_pair(m, k, n, phi=1.0, seed=1):
    return phi_matrix(m, k, phi, (seed, 0)), phi_matrix(k, n, phi, (seed, 1))


def poisoned(m=30, k=40, n=20, seed=6):
    """Operands with NaN and infinities of both signs meeting zeros, and their bad rows and columns."""
    A, B = phi_pair(m, k, n, 2.0, seed)
    A[3, 7], A[8, 0], B[5, 2], B[9, 11], B[9, 12], B[0, 12] = np.nan, np.inf, np.inf, -np.inf, np.inf, -np.inf
    B[0, 4] = 0.0                                       # A's infinity meets it: NaN in row 8, column 4
    return A, B, [3, 8], [2, 11, 12]


def ieee(A, B):
    with np.errstate(invalid="ignore", over="ignore"):
        return A @ B


def assert_same_pattern(C, R):
    np.testing.assert_array_equal(np.isnan(C), np.isnan(R))
    np.testing.assert_array_equal(np.isinf(C), np.isinf(R))
    np.testing.assert_array_equal(C[np.isinf(R)], R[np.isinf(R)])


# --------------------------------------------------------------------------- options and plans

def test_options_are_matmuls_keywords_and_a_plan_runs_them():
    keywords = set(inspect.signature(ozaki.matmul).parameters) - {"A", "B", "backend", "out", "phases"}
    assert {f.name for f in dataclasses.fields(ozaki.Options)} == keywords
    A, B = phi_pair(24, 50, 18)
    want = ozaki.matmul(A, B, slices=4, slice_format="int8", backend="numpy")
    with ozaki.Plan(A, B, options=ozaki.Options(slices=4, slice_format="int8"), backend="numpy") as plan:
        np.testing.assert_array_equal(plan.execute(A, B), want)
        out = np.empty((24, 18))
        with pytest.raises(PlanMismatch, match="out"):
            plan.execute(A, B, out)
        with pytest.raises(PlanMismatch, match="A's shape"):
            plan.execute(A[:5], B)
    with pytest.raises(ValueError, match="freed"):
        plan.execute(A, B)
    default = ozaki.Plan(A, B, options={"slice_format": "int8"}, backend="numpy")
    np.testing.assert_array_equal(default.execute(A, B), ozaki.matmul(A, B, slice_format="int8", backend="numpy"))
    with pytest.raises(TypeError, match="no option 'slice'"):
        ozaki.Plan(A, B, options={"slice": 3}, backend="numpy")
    with pytest.raises(ValueError, match="not both"):
        ozaki.Plan(A, B, options={"slices": 3, "target": "dgemm"}, backend="numpy")


def test_matmul_builds_one_plan_per_signature_and_options(monkeypatch):
    built = []
    real = execution.Plan.__init__
    monkeypatch.setattr(execution.Plan, "__init__", lambda self, *a, **kw: (built.append(1), real(self, *a, **kw))[1])
    ozaki.PLANS.clear()
    A, B = phi_pair(16, 20, 12)
    first = ozaki.matmul(A, B, slices=3, backend="numpy")
    for _ in range(3):
        np.testing.assert_array_equal(ozaki.matmul(A.copy(), B.copy(), slices=3, backend="numpy"), first)
    assert len(built) == 1 and len(ozaki.PLANS) == 1
    ozaki.matmul(A, B, slices=4, backend="numpy")
    ozaki.matmul(np.asfortranarray(A), B, slices=3, backend="numpy")
    ozaki.matmul(np.asmatrix(A), B, slices=3, backend="numpy")          # converted, then the kept plan
    assert len(built) == 3


def test_a_holding_plan_reuses_its_workspace_and_free_drops_it():
    A, B = phi_pair(20, 30, 10)
    plan = ozaki.Plan(A, B, options={"slices": 3}, backend="numpy")
    block = plan._held[1]
    first = plan.execute(A, B)
    np.testing.assert_array_equal(plan.execute(2 * A, B), 2 * first)
    assert plan._held[1] is block
    plan.free()
    assert plan._held is None


# --------------------------------------------------------------------------- NaN and infinity

@pytest.mark.parametrize("fmt", ["fp32", "int8"])
def test_nan_and_infinity_give_the_library_gemms_pattern_with_no_second_product(fmt, monkeypatch):
    """A plan built on finite operands, executed on poisoned ones: NaN and infinity exactly where A @ B has
    them, the finite entries those of the finite lines' product, and the product made once (no zeroed copies
    and no second Ozaki call)."""
    A, B, bad_rows, bad_cols = poisoned()
    finite_a, finite_b = np.where(np.isfinite(A), A, 0.0), np.where(np.isfinite(B), B, 0.0)
    rows, cols = np.delete(np.arange(30), bad_rows), np.delete(np.arange(20), bad_cols)
    splits = []
    real = HostOps.split
    monkeypatch.setattr(HostOps, "split", lambda self, *a, **kw: (splits.append(1), real(self, *a, **kw))[1])
    for options in ({"slices": 5, "slice_format": fmt}, {"slice_format": fmt}):
        plan = ozaki.Plan(finite_a, finite_b, options=options, backend="numpy")
        splits.clear()
        C = plan.execute(A, B)
        assert len(splits) == 2, "A and B sliced once each"
        assert_same_pattern(C, ieee(A, B))
        assert np.isfinite(C[np.ix_(rows, cols)]).all()
    want = ozaki.matmul(A[rows], B[:, cols], slices=5, slice_format=fmt, backend="numpy")
    C = ozaki.matmul(A, B, slices=5, slice_format=fmt, backend="numpy")
    np.testing.assert_array_equal(C[np.ix_(rows, cols)], want)


def test_overwrite_keeps_both_operands_where_a_line_is_not_finite():
    """The last fold reads A and B for the lines with NaN or infinity: neither may hold remainders then."""
    A, B = np.array([[np.inf], [-0.46]]), np.array([[0.27]])
    C = ozaki.matmul(A.copy(), B.copy(), slices=3, overwrite_a=True, overwrite_b=True, backend="numpy")
    assert_same_pattern(C, ieee(A, B))
    assert C[0, 0] == np.inf


def test_check_finite_refuses_before_any_product_with_the_counts(monkeypatch):
    A, B, _, _ = poisoned()
    monkeypatch.setattr(execution, "_products_and_sum", lambda *a, **kw: pytest.fail("a product started"))
    for options in ({"slices": 4}, {}):
        with pytest.raises(ValueError, match="NaN or infinity in 2 rows and B in 3 columns"):
            ozaki.matmul(A, B, check_finite=True, backend="numpy", **options)


# --------------------------------------------------------------------------- the verdict

@pytest.mark.parametrize("alpha,ratio,target", [(7, 2.0**10, "dgemm"), (5, 300.0, 1e-8), (8, 1.0, 0.5),
                                                (7, 0.0, 1e-3), (7, 3.1e17, "sgemm"), (1, 1e6, 1e-20),
                                                (7, np.inf, "dgemm")])
def test_the_verdict_word_carries_auto_slices_the_nan_flag_and_the_binade(alpha, ratio, target):
    e = np.zeros(3, dtype=np.int32)
    budget = execution._budget(target)
    try:
        want = ozaki.auto_slices(alpha, ratio, target)
    except ValueError:
        want = 0
    for bad in (False, True):
        erow = np.where(np.arange(3) == 1, BAD, 0).astype(np.int32) if bad else e
        word = int(HostOps(NP).verdict(np.array([ratio]), erow, e, alpha, budget, None)[0])
        slices, flag, spread = decode(word)
        assert (slices, flag) == (want, bad) and word == encode_verdict(want, bad, ratio)
        assert spread == (None if ratio == np.inf else (round(np.log2(ratio)) if ratio else 0))
    assert decode(int(HostOps(NP).verdict(None, e, e, alpha, budget, None)[0]))[:2] == (0, False)


def test_a_fold_batch_travels_as_its_first_diagonal_and_a_closing_mask():
    assert batch_scales([9, 9, 8, 7, 7], [False, True, True, False, True]) == (9, 0b10110)
    with pytest.raises(ValueError, match="run down by one"):
        batch_scales([9, 7], [True, True])
    with pytest.raises(ValueError, match="at most 64"):
        batch_scales([2] * 65, [False] * 65)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs the CUDA compiler (nvcc)")
def test_every_cuda_module_compiles(tmp_path):
    sources = {f"core_{s}": cuda_sources.core_source(s, b) for s, b in
               (("int8", "int32"), ("float32", "float32"), ("float16", "float32"), ("uint16", "float32"))}
    sources |= {f"bound_{s}": cuda_sources.bound_source(s) for s in ("float32", "uint16")}
    sources["branch"] = cuda_sources.branch_source()
    for name, text in sources.items():
        (tmp_path / f"{name}.cu").write_text(text)
        done = subprocess.run(["nvcc", "-arch=sm_90", "-std=c++17", "-ptx", f"{name}.cu", "-o", f"{name}.ptx"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, f"{name}:\n{done.stderr}"


# --------------------------------------------------------------------------- GPU

@pytest.mark.gpu
@pytest.mark.parametrize("options", [{"slices": 6, "slice_format": "int8"}, {"slice_format": "int8"}, {}])
def test_gpu_a_call_with_slices_or_its_defaults_does_not_wait_for_the_device(options, cupy_backend):
    """``slices=`` needs no count; the defaults (``target="dgemm"``, ``verdict="device"``) decide it on the
    device, and their first call of a workspace captures a graph: no call waits."""
    from tests.gpu.busy import busy

    cp = cupy_backend.xp
    A, B = (cp.asarray(x) for x in phi_pair(256, 256, 256))
    plan = ozaki.Plan(A, B, options=options, backend=cupy_backend)
    calls = (lambda: ozaki.matmul(A, B, backend=cupy_backend, **options), lambda: plan.execute(A, B))
    for call in calls:
        call()
        cp.cuda.get_current_stream().synchronize()
        start = time.perf_counter()
        call()
        idle = time.perf_counter() - start
        cp.cuda.get_current_stream().synchronize()
        busy(200)
        start = time.perf_counter()
        C = call()
        took = time.perf_counter() - start
        assert not cp.cuda.get_current_stream().done, "the busy kernel ended before the call returned"
        assert took < 2 * idle + 1e-3, (f"the call took {took * 1e3:.2f} ms behind a 200 ms kernel, "
                                        f"{idle * 1e3:.2f} ms on an idle stream: it waited")
        cp.cuda.get_current_stream().synchronize()
        np.testing.assert_array_equal(cp.asnumpy(C), ozaki.matmul(cp.asnumpy(A), cp.asnumpy(B), backend="numpy",
                                                                  **options))


@pytest.mark.gpu
def test_gpu_a_host_verdict_call_reads_back_one_word_and_waits_nowhere_else(cupy_backend, monkeypatch):
    """``verdict="host"``: the read is entered before the busy kernel ends (no earlier wait), it waits for it,
    and once it has returned a second busy kernel is still running when the call returns (no later wait)."""
    from tests.gpu.busy import busy

    cp = cupy_backend.xp
    A, B = (cp.asarray(x) for x in phi_pair(256, 256, 256))
    ozaki.matmul(A, B, slice_format="int8", verdict="host", backend=cupy_backend)
    cp.cuda.get_current_stream().synchronize()
    reads, real = [], execution.read_verdict

    def counted(be, word):
        entered = time.perf_counter()
        value = real(be, word)
        reads.append((entered, time.perf_counter(), word.nbytes))
        busy(200)
        return value

    monkeypatch.setattr(execution, "read_verdict", counted)
    busy(200)
    start = time.perf_counter()
    ozaki.matmul(A, B, slice_format="int8", verdict="host", backend=cupy_backend)
    end = time.perf_counter()
    assert len(reads) == 1 and reads[0][2] == 4
    entered, left, _ = reads[0]
    assert entered - start < 0.1 and left - start > 0.15, "the read must be the wait for the busy kernel"
    assert end - left < 0.1 and not cp.cuda.get_current_stream().done


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", ["fp32", "int8"])
def test_gpu_nan_and_infinity_give_cublas_pattern_and_numpys_finite_bits(fmt, cupy_backend):
    cp = cupy_backend.xp
    A, B, bad_rows, bad_cols = poisoned(70, 90, 50)
    a, b = cp.asarray(A), cp.asarray(B)
    R = cp.asnumpy(a @ b)
    rows, cols = np.delete(np.arange(70), bad_rows), np.delete(np.arange(50), bad_cols)
    for options in ({"slices": 5}, {}):
        C = cp.asnumpy(ozaki.matmul(a, b, slice_format=fmt, backend=cupy_backend, **options))
        assert_same_pattern(C, R)
        want = ozaki.matmul(A, B, slice_format=fmt, backend="numpy", **options)
        np.testing.assert_array_equal(C[np.ix_(rows, cols)], want[np.ix_(rows, cols)])


@pytest.mark.gpu
def test_gpu_a_call_compiles_only_its_configurations_modules(cupy_backend):
    from gpu.ozaki import bound_kernels, kernels

    cp = cupy_backend.xp
    kernels.core.cache_clear()
    bound_kernels._module.cache_clear()
    A, B = (cp.asarray(x) for x in phi_pair(64, 64, 64))
    ozaki.matmul(A, B, slices=3, slice_format="int8", backend=cupy_backend, out=cp.empty((64, 64)))
    assert kernels.core.cache_info().currsize == 1 and bound_kernels._module.cache_info().currsize == 0
    ozaki.matmul(A, B, slice_format="int8", backend=cupy_backend)
    assert kernels.core.cache_info().currsize == 1 and bound_kernels._module.cache_info().currsize == 1
