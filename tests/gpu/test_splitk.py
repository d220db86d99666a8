"""Split-K (``gpu.splitk``): the plan, the deterministic and atomic modes on NumPy and CuPy, views
with a leading dimension, alpha and beta, and the refusals before any work."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu.splitk import MAX_OUTPUTS, MIN_K, Kernel, SMLimits, check_worth, matmul, plan, resident_blocks
from gpu.splitk.plan import ALIGN, DETERMINISTIC_WIDTH, MAX_CHUNKS, TARGET_WIDTH, aligned_count

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
    k = 156 * DETERMINISTIC_WIDTH * 2
    det, atomic = (plan(16, 16, k, K20C, PAPER_KERNEL, deterministic=d) for d in (True, False))
    assert (det.chunks, det.width, det.waves) == (2 * 156, DETERMINISTIC_WIDTH, 2)
    assert (atomic.chunks, atomic.width, atomic.waves) == (8 * 156, TARGET_WIDTH, 8)


@settings(max_examples=200, deadline=None)
@given(m=st.integers(1, 512), n=st.integers(1, 512), k=st.integers(MIN_K, 2**27), det=st.booleans())
def test_auto_plans_are_whole_waves_or_aligned_equal_chunks_of_balanced_widths(m, n, k, det):
    p = plan(m, n, k, H100, Kernel(256, 4352, 40, 16), deterministic=det)
    per_wave = -(-resident_blocks(H100, Kernel(256, 4352, 40, 16)) // (-(-m // 16) * -(-n // 16)))
    target = DETERMINISTIC_WIDTH if det else TARGET_WIDTH
    waves = per_wave * max(1, min(round(k / (per_wave * target)), MAX_CHUNKS // per_wave))
    aligned = k % p.chunks == 0 and (k // p.chunks) % ALIGN == 0 and waves / 1.5 <= p.chunks <= waves * 1.5
    assert p.chunks == min(k, waves) or aligned, (p.chunks, waves)
    assert p.chunks <= MAX_CHUNKS
    bounds = p.bounds()
    assert bounds[0][0] == 0 and bounds[-1][1] == k and len(bounds) == p.chunks
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
    assert {e - s for s, e in bounds} <= {p.base, p.base + 1}
    assert p.group * p.groups >= p.chunks > p.group * (p.groups - 1)


def test_auto_chunks_start_aligned_where_k_allows():
    kernel = Kernel(128, 107520, 154, 64, 64)                      # 2 blocks per SM: 264 per wave
    atomic = plan(64, 64, 2**24, H100, kernel, deterministic=False)
    assert (atomic.chunks, atomic.base, atomic.extra) == (16384, 1024, 0)   # not 62 waves of 16368
    det = plan(64, 64, 2**24, H100, kernel)
    assert (det.chunks, det.base, det.extra) == (4096, 4096, 0)
    odd = plan(64, 64, 10**6 + 3, H100, kernel, deterministic=False)
    assert odd.chunks == 4 * 264                                   # no aligned cut: whole waves
    assert aligned_count(2**20, 1000) == 1024 and aligned_count(2**20 + 1, 1000) == 1000


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
        poisoned = backend.asarray(np.full((8, 8), np.nan))
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
    (dict(A=np.full((4, MIN_K), np.nan)), ValueError, "NaN or infinity"),
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
    f = kernels._chunk_function(v)
    kernel = Kernel(int(np.prod(v.block)), f.shared_size_bytes + v.shared, f.num_regs, v.rows, v.cols)
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
