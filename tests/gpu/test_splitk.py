"""Split-K (``gpu.splitk``): the plan, the deterministic and atomic modes on NumPy and CuPy, views
with a leading dimension, alpha and beta, and the refusals before any work."""

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu.splitk import MAX_OUTPUTS, MIN_K, Kernel, SMLimits, check_worth, matmul, plan, resident_blocks
from gpu.splitk.plan import ALIGN, DETERMINISTIC_WIDTH, MAX_CHUNKS, NARROW_WAVES, TARGET_WIDTH, SplitPlan

K20C = SMLimits(threads=2048, shared_bytes=49152, registers=65536, blocks=16, sm_count=13)
PAPER_KERNEL = Kernel(threads=64, shared_bytes=4096, registers_per_thread=55, tile=16)
H100 = SMLimits(threads=2048, shared_bytes=233472, registers=65536, blocks=32, sm_count=132)
EPS = {np.dtype(np.float64): 2.0**-53, np.dtype(np.float32): 2.0**-24}


def host(be, x):
    return np.array(be.to_numpy(x))


def reference(A, B, alpha=1.0, beta=0.0, C=None):
    """alpha A B + beta C in extended precision, and the magnitude |alpha| |A| |B| + |beta| |C|."""
    a, b = A.astype(np.longdouble), B.astype(np.longdouble)
    exact, size = alpha * (a @ b), abs(alpha) * (np.abs(a) @ np.abs(b))
    if C is not None and beta:
        exact, size = exact + beta * C.astype(np.longdouble), size + abs(beta) * np.abs(C.astype(np.longdouble))
    return exact, size


def assert_within_bound(got, A, B, split_width, chunks, alpha=1.0, beta=0.0, C=None):
    """|C - exact| <= gamma_(width + chunks + 2) (|alpha| |A| |B| + |beta| |C|): a chunk's sum has
    ``width`` terms and the reduction at most ``chunks``, not k."""
    exact, size = reference(A, B, alpha, beta, C)
    n = split_width + chunks + 2
    u = EPS[np.dtype(got.dtype)]
    err = np.abs(got.astype(np.longdouble) - exact)
    assert np.all(err <= n * u / (1 - n * u) * size), float((err / np.maximum(size, 1e-300)).max())


def operands(be, m, k, n, seed, dtype=np.float64, layout="C"):
    """A (m x k) and B (k x n) on the device: row-major ("C"), transposed views, so column-major
    ("T"), or views into larger arrays, with a leading dimension beyond the width ("V")."""
    rng = np.random.default_rng(seed)
    A, B = rng.uniform(-1, 1, (m, k)).astype(dtype), rng.uniform(-1, 1, (k, n)).astype(dtype)
    if layout == "C":
        return be.asarray(A), be.asarray(B)
    if layout == "T":
        return be.asarray(np.ascontiguousarray(A.T)).T, be.asarray(np.ascontiguousarray(B.T)).T
    bigA, bigB = be.xp.zeros((m + 3, k + 5), dtype=dtype), be.xp.zeros((k + 1, n + 7), dtype=dtype)
    bigA[2:2 + m, 3:3 + k] = be.asarray(A)
    bigB[1:, 4:4 + n] = be.asarray(B)
    return bigA[2:2 + m, 3:3 + k], bigB[1:, 4:4 + n]


# --- the plan -------------------------------------------------------------------------------------

def test_the_occupancy_formula_gives_the_papers_k20c_figures():
    assert resident_blocks(K20C, PAPER_KERNEL) == 156
    p = plan(16, 16, 156 * TARGET_WIDTH, K20C, PAPER_KERNEL, deterministic=False)   # the paper's atomic mode
    assert (p.chunks, p.width, p.waves) == (156, TARGET_WIDTH, 1)
    assert plan(32, 32, 2**20 + 1, K20C, PAPER_KERNEL).chunks % 39 == 0     # whole waves of 39 (no aligned cut)


def test_the_deterministic_mode_aims_at_wider_chunks_in_whole_waves():
    k = 156 * DETERMINISTIC_WIDTH * 8
    det, atomic = (plan(16, 16, k, K20C, PAPER_KERNEL, deterministic=d) for d in (True, False))
    assert (det.chunks, det.width, det.waves) == (8 * 156, DETERMINISTIC_WIDTH, 8)
    assert (atomic.chunks, atomic.width, atomic.waves) == (32 * 156, TARGET_WIDTH, 32)


def test_the_atomic_mode_cuts_narrow_chunks_only_where_they_make_many_waves():
    many, few = (156 * TARGET_WIDTH * w for w in (NARROW_WAVES, NARROW_WAVES - 1))
    assert plan(16, 16, many, K20C, PAPER_KERNEL, deterministic=False).waves == NARROW_WAVES
    one = plan(16, 16, few, K20C, PAPER_KERNEL, deterministic=False)
    assert (one.chunks, one.waves, one.width) == (156, 1, TARGET_WIDTH * (NARROW_WAVES - 1))


@settings(max_examples=200, deadline=None)
@given(m=st.integers(1, 512), n=st.integers(1, 512), k=st.integers(MIN_K, 2**27), det=st.booleans())
def test_auto_plans_are_whole_waves_of_balanced_chunks_that_start_aligned_where_k_allows(m, n, k, det):
    p = plan(m, n, k, H100, Kernel(256, 4352, 40, 16), deterministic=det)
    per_wave = -(-resident_blocks(H100, Kernel(256, 4352, 40, 16)) // (-(-m // 16) * -(-n // 16)))
    target = DETERMINISTIC_WIDTH if det else TARGET_WIDTH
    waves = max(1, min(round(k / (per_wave * target)), MAX_CHUNKS // per_wave))
    waves = 1 if not det and waves < NARROW_WAVES else waves
    assert p.chunks == min(k, per_wave * waves) <= MAX_CHUNKS
    assert p.unit == (ALIGN if k % ALIGN == 0 and p.chunks <= k // ALIGN else 1)
    bounds = p.bounds()
    assert bounds[0][0] == 0 and bounds[-1][1] == k and len(bounds) == p.chunks
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
    assert all(s % p.unit == 0 for s, _ in bounds)
    assert {e - s for s, e in bounds} <= {p.unit * p.base, p.unit * (p.base + 1)}
    assert max(e - s for s, e in bounds) == p.width
    assert p.group * p.groups >= p.chunks > p.group * (p.groups - 1)


def test_an_auto_plan_of_one_wave_runs_the_wide_form_of_the_kernel():
    wide = Kernel(128, 98304, 104, 16)                                       # 2 blocks per SM: 264 per wave
    kernel = Kernel(128, 49152, 104, 16, wide=wide)                          # 4 blocks per SM: 528 per wave
    cases = {(2**20, False): (264, True), (2**24, False): (31 * 528, False),
             (2**20, True): (264, True), (2**24, True): (8 * 528, False)}
    for (k, det), expected in cases.items():
        p = plan(16, 16, k, H100, kernel, deterministic=det)
        assert (p.chunks, p.wide) == expected and p.as_dict()["wide"] == p.wide
    assert not plan(16, 16, 2**20, H100, kernel, chunks=264, deterministic=False).wide    # explicit chunks
    assert not plan(16, 16, 2**20, H100, kernel, chunk_width=4096, deterministic=False).wide
    assert (plan(16, 16, 2**20, H100, replace(kernel, wide=None), deterministic=False).chunks, ) == (528, )


def test_auto_chunks_are_whole_waves_that_start_aligned_where_k_allows():
    kernel = Kernel(128, 107520, 154, 64, 64)                      # 2 blocks per SM: 264 per wave
    atomic = plan(64, 64, 2**24, H100, kernel, deterministic=False)
    assert (atomic.chunks, atomic.unit, atomic.base, atomic.extra) == (62 * 264, ALIGN, 16, 256)   # not 16384
    assert atomic.bounds()[256] == (256 * 17 * ALIGN, (256 * 17 + 16) * ALIGN)
    one = plan(64, 64, 2**20, H100, kernel, deterministic=False)
    assert (one.chunks, one.unit, one.base, one.extra) == (264, ALIGN, 62, 16)
    det = plan(64, 64, 2**24, H100, kernel)
    assert (det.chunks, det.unit) == (16 * 264, ALIGN)
    odd = plan(64, 64, 10**6 + 3, H100, kernel)
    assert (odd.chunks, odd.unit) == (264, 1)                      # no aligned cut: balanced elements
    assert plan(64, 64, 2**20, H100, kernel, chunks=1000).unit == 1     # a given count is cut exactly


def test_a_plan_refuses_units_that_do_not_cut_k():
    with pytest.raises(ValueError, match="cannot cut"):
        SplitPlan(16, 16, 1000, 10, 4, unit=64)
    with pytest.raises(ValueError, match="cannot cut"):
        SplitPlan(16, 16, 1024, 17, 5, unit=64)


def test_chunk_width_and_chunks_choose_the_same_partition():
    a = plan(16, 16, 10**6 + 3, H100, PAPER_KERNEL, chunks=977)
    b = plan(16, 16, 10**6 + 3, H100, PAPER_KERNEL, chunk_width=a.width)
    assert a.bounds() == b.bounds()


# --- products -------------------------------------------------------------------------------------

@pytest.mark.parametrize("layout", ["C", "T", "V"])
@pytest.mark.parametrize("m,k,n", [(17, MIN_K + 3, 50), (16, 3 * MIN_K, 16), (64, MIN_K, 1), (1, 5 * MIN_K + 1, 33)])
@pytest.mark.parametrize("deterministic", [True, False])
def test_products_agree_with_an_extended_precision_reference(backend, layout, m, k, n, deterministic):
    A, B = operands(backend, m, k, n, 1, layout=layout)
    a0, b0 = host(backend, A), host(backend, B)
    C = matmul(A, B, backend=backend, deterministic=deterministic)
    split = plan(m, n, k, backend.ops("splitk").limits(), backend.ops("splitk").kernel(A.dtype, m, n))
    assert_within_bound(host(backend, C), a0, b0, split.width, split.chunks)
    assert np.array_equal(host(backend, A), a0) and np.array_equal(host(backend, B), b0)


def test_float32_products(backend):
    A, B = operands(backend, 20, MIN_K * 2, 12, 2, dtype=np.float32)
    C = matmul(A, B, chunks=8, backend=backend)
    assert C.dtype == np.float32
    assert_within_bound(host(backend, C), host(backend, A), host(backend, B), MIN_K // 4, 8)


def test_the_deterministic_mode_repeats_its_bits(backend):
    A, B = operands(backend, 32, 3 * MIN_K + 7, 24, 3)
    first = host(backend, matmul(A, B, chunks=37, backend=backend))
    for _ in range(3):
        assert np.array_equal(host(backend, matmul(A, B, chunks=37, backend=backend)), first)
    width = -(-(3 * MIN_K + 7) // 37)
    same = plan(32, 24, 3 * MIN_K + 7, H100, PAPER_KERNEL, chunk_width=width)
    if same.chunks == 37:
        assert np.array_equal(host(backend, matmul(A, B, chunk_width=width, backend=backend)), first)


def test_alpha_beta_and_out(backend):
    A, B = operands(backend, 8, MIN_K, 8, 4)
    C0 = np.random.default_rng(5).uniform(-1, 1, (8, 8))
    for deterministic in (True, False):
        out = backend.asarray(C0.copy())
        got = matmul(A, B, alpha=-2.0, beta=0.5, out=out, deterministic=deterministic, backend=backend)
        assert got is out
        assert_within_bound(host(backend, got), host(backend, A), host(backend, B), MIN_K, 64, -2.0, 0.5, C0)
        for poisoned in (backend.asarray(np.full((8, 8), np.nan)), backend.asarray(np.full((8, 16), np.nan))[:, :8]):
            clean = matmul(A, B, out=poisoned, deterministic=deterministic, backend=backend)   # beta = 0 ignores C
            assert np.isfinite(host(backend, clean)).all()


# --- refusals before any work ---------------------------------------------------------------------

BAD = [
    (dict(A=np.ones((4, MIN_K), np.float32), B=np.ones((MIN_K, 4))), TypeError, "share one dtype"),
    (dict(A=np.ones((4, MIN_K)), B=np.ones((MIN_K + 1, 4))), ValueError, "columns must equal"),
    (dict(A=np.ones((4, MIN_K - 1)), B=np.ones((MIN_K - 1, 4))), ValueError, "k = 4095 is small"),
    (dict(A=np.ones((1024, MIN_K)), B=np.ones((MIN_K, 1024))), ValueError, "output is large"),
    (dict(alpha=np.inf), ValueError, "alpha must be finite"),
    (dict(alpha="two"), TypeError, "alpha must be a real number"),
    (dict(beta=1.0), ValueError, "pass that C as out="),
    (dict(out=np.ones((4, 5))), ValueError, "out has shape"),
    (dict(chunks=0), ValueError, "chunks must be a positive"),
    (dict(chunks=4, chunk_width=1024), ValueError, "not both"),
    (dict(chunks=MAX_CHUNKS + 1, A=np.ones((4, 2**17)), B=np.ones((2**17, 4))), ValueError, "a CUDA grid holds"),
    (dict(A=np.full((4, MIN_K), np.nan), check_finite=True), ValueError, "NaN or infinity"),
]


@pytest.mark.parametrize("kwargs,error,match", BAD, ids=[b[2] for b in BAD])
def test_bad_input_is_refused_with_the_way_out(kwargs, error, match):
    args = {"A": np.ones((4, MIN_K)), "B": np.ones((MIN_K, 4)), **kwargs}
    A, B = args.pop("A"), args.pop("B")
    with pytest.raises(error, match=match):
        matmul(A, B, backend="numpy", **args)


def test_the_refusal_rule_names_the_library_gemm():
    with pytest.raises(ValueError, match=r"A @ B"):
        check_worth(4, 4, 100)
    check_worth(512, 512, MIN_K)
    assert 512 * 512 == MAX_OUTPUTS


# --- every chunk kernel, whatever variant() would pick ---------------------------------------------

VARIANTS = {
    "tile": lambda m, n: ("tile", np.float64),
    "dmma-m8n8k4": lambda m, n: ("dmma", m, n, (1, 1)),
    "dmma-m16n8k16": lambda m, n: ("dmma", m, n, (2, 4)),
    "pipe": lambda m, n: ("pipe", m, n),
    "pipe-deep": lambda m, n: ("pipe", m, n, 2, 4, 16),
    "pipe-wide": lambda m, n: ("pipe", m, n, None, 3, 32, True),
}


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["C", "T", "V"])
@pytest.mark.parametrize("m,k,n", [(17, MIN_K + 3, 50), (16, 3 * MIN_K + 1, 16), (64, 2 * MIN_K, 64), (8, MIN_K, 1)])
@pytest.mark.parametrize("kind", sorted(VARIANTS))
@pytest.mark.parametrize("deterministic", [True, False])
def test_every_chunk_kernel_agrees_with_the_reference(cupy_backend, kind, layout, m, k, n, deterministic):
    from gpu.splitk import kernels
    from gpu.splitk.api import run

    be = cupy_backend
    spec = VARIANTS[kind](m, n)
    v = getattr(kernels.Variant, spec[0])(*spec[1:])
    kernel = kernels.resources(v)
    split = plan(m, n, k, be.ops("splitk").limits(), kernel, chunks=7, deterministic=deterministic)
    A, B = operands(be, m, k, n, 11, layout=layout)
    C = be.xp.full((m, n), np.nan)

    class Fixed(kernels.CudaOps):
        def partials(self, A, B, P, plan, alpha):
            kernels.launch(v, A, B, P, (np.int64(plan.n), np.int64(1), np.int64(plan.m * plan.n)), plan, alpha,
                           False)

        def accumulate(self, A, B, C, plan, alpha):
            kernels.launch(v, A, B, C, (*kernels._strides(C), np.int64(0)), plan, alpha, True)

    run(be, Fixed(be), split, A, B, C, 1.0, 0.0)
    assert_within_bound(host(be, C), host(be, A), host(be, B), split.width, split.chunks)


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["C", "T", "V"])
@pytest.mark.parametrize("m,k,n", [(16, 10 * MIN_K, 50), (64, 2 * MIN_K + 6, 40), (8, MIN_K, 1)])
@pytest.mark.parametrize("chunks", ["auto", 7])
def test_pair_copies_give_the_bits_of_single_copies(cupy_backend, monkeypatch, layout, m, k, n, chunks):
    """The pipelined kernel's 16-byte copies (A along k, B along n; fringes zero-filled) change only how
    the stages are filled: the deterministic result is bitwise that of 8-byte copies."""
    from gpu.splitk import kernels
    from gpu.splitk.api import run

    be = cupy_backend
    v = kernels.Variant.pipe(m, n)
    kernel = kernels.resources(v)
    split = plan(m, n, k, be.ops("splitk").limits(), kernel, chunks=chunks)
    A, B = operands(be, m, k, n, 13, layout=layout)

    class Pipe(kernels.CudaOps):
        def partials(self, A, B, P, plan, alpha):
            kernels.launch(v, A, B, P, (np.int64(plan.n), np.int64(1), np.int64(plan.m * plan.n)), plan, alpha,
                           False)

    def product(copy_bytes):
        monkeypatch.setattr(kernels, "COPY_BYTES", copy_bytes)
        C = be.xp.full((m, n), np.nan)
        run(be, Pipe(be), split, A, B, C, 1.0, 0.0)
        return host(be, C), kernels.flags(v, A, B, split, False)

    (wide, wide_flags), (narrow, narrow_flags) = product(16), product(8)
    even = split.unit % 2 == 0 or (split.base % 2 == 0 and split.extra == 0)

    def rows_in_pairs(X):
        return X.strides[1] == 8 and X.strides[0] % 16 == 0 and X.data.ptr % 16 == 0

    assert wide_flags == 2 * (rows_in_pairs(A) and even) + 4 * rows_in_pairs(B) and narrow_flags == 0
    if layout == "C" and split.unit == ALIGN:
        assert wide_flags == 2 + 4 * (n % 2 == 0)
    assert split.unit == ALIGN or (m, chunks) != (16, "auto"), "the first case copies A in pairs too"
    assert np.array_equal(wide, narrow)
    assert_within_bound(wide, host(be, A), host(be, B), split.width, split.chunks)


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["C", "T"])
@pytest.mark.parametrize("m,k,n,chunks", [(16, 10 * MIN_K + 128, 16, "auto"), (40, 3 * MIN_K + 96, 24, 7),
                                          (64, 2 * MIN_K, 64, "auto"), (32, 5 * MIN_K + 32, 32, 5)])
@pytest.mark.parametrize("slices,stages", [(1, 3), (2, 3)])
def test_the_bulk_kernel_gives_the_bits_of_the_pipelined_one(cupy_backend, layout, m, k, n, chunks, slices, stages):
    """The bulk-copy kernel changes only how stages are filled (tensor-map boxes, zeros past the matrix, k past
    a chunk masked): with the pipelined kernel's tile and depth, its partials are those bits; where the operands' rows
    do not lie along k in A and n in B ("T"), or a chunk starts on an odd element, it hands the call to the
    pipelined kernel."""
    from gpu.splitk import kernels

    be = cupy_backend
    if int(be.xp.cuda.Device().compute_capability) < 90:
        pytest.skip("the bulk-copy kernel needs sm_90")
    bulk, pipe = kernels.Variant.bulk(m, n, slices, stages), kernels.Variant.pipe(m, n, slices, 3)
    split = plan(m, n, k, be.ops("splitk").limits(), kernels.resources(bulk), chunks=chunks)
    A, B = operands(be, m, k, n, 17, layout=layout)
    into = (np.int64(n), np.int64(1), np.int64(m * n))

    def partials(v):
        P = be.xp.full((split.chunks, m, n), np.nan)
        launch = kernels.ChunkLaunch(v, split, A, B, into, False)
        launch(A, B, P, 1.0)
        return host(be, P), launch

    got, launch = partials(bulk)
    even = split.unit % 2 == 0 or (split.base % 2 == 0 and split.extra == 0)
    assert (launch.boxes is not None) == (layout == "C" and even)
    want, _ = partials(pipe if launch.boxes else kernels.Variant.tuned(m, n, wide=split.wide))
    assert np.array_equal(got, want)
    assert_within_bound(got.sum(axis=0), host(be, A), host(be, B), split.width, split.chunks)


@pytest.mark.gpu
@pytest.mark.parametrize("deterministic", [True, False])
def test_one_wave_auto_plans_run_the_wide_form_where_the_kernel_has_one(cupy_backend, deterministic):
    from gpu.splitk import kernels

    be = cupy_backend
    ops = be.ops("splitk")
    kernel = ops.kernel(np.float64, 16, 16)
    split = plan(16, 16, 2**20, ops.limits(), kernel, deterministic=deterministic)
    has_wide = kernels.variant(np.float64, 16, 16, wide=True) != kernels.variant(np.float64, 16, 16)
    assert (kernel.wide is not None) == has_wide and split.wide == has_wide and split.waves == 1
    A, B = operands(be, 16, 2**20, 16, 23)
    C = matmul(A, B, deterministic=deterministic)
    assert_within_bound(host(be, C), host(be, A), host(be, B), split.width, split.chunks)
