"""Layouts, overlap and call planning: the part shared by the NumPy and cuBLAS paths."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu.backend import blas


def lay(x):
    return blas.layout(x, x.ctypes.data)


def test_layout_of_c_and_f_views():
    M = np.zeros((10, 12))
    q = lay(M[2:6, 3:9])
    assert (q.order, q.ld, q.rows, q.cols) == ("C", 12, 4, 6)
    assert q.ptr == M.ctypes.data + (2 * 12 + 3) * 8
    f = lay(np.asfortranarray(M)[2:6, 3:9])
    assert (f.order, f.ld) == ("F", 10)
    t = lay(M[2:6, 3:9].T)
    assert (t.order, t.ld, t.rows, t.cols) == ("F", 12, 6, 4)


def test_layout_of_vectors_and_empty():
    M = np.zeros((10, 12))
    assert lay(M[3:4, :5]).order == "C" and lay(M[3:4, :5]).ld == 5
    col = lay(M[:, 2:3])
    assert (col.order, col.ld) == ("C", 12)
    assert lay(M[:0, :5]).ld == 5


def test_layout_refuses_non_blas_strides():
    with pytest.raises(ValueError, match="unit stride"):
        lay(np.zeros((8, 8))[::2, ::2])
    with pytest.raises(ValueError, match="unit stride"):
        lay(np.zeros((8, 8))[::-1])
    with pytest.raises(ValueError, match="2-D"):
        lay(np.zeros((2, 2, 2)))


def test_quadrants_do_not_overlap_and_shifted_blocks_do():
    M = np.zeros((8, 8))
    quads = [lay(M[i:i + 4, j:j + 4]) for i in (0, 4) for j in (0, 4)]
    for a in quads:
        for b in quads:
            assert blas.overlaps(a, b) == (a == b)
    assert blas.overlaps(quads[0], lay(M[3:5, 3:5]))
    assert not blas.overlaps(lay(M[0:2, 0:3]), lay(M[0:2, 3:6]))
    assert blas.overlaps(lay(M[0:2, 0:4]), lay(M[1:3, 3:6]))
    assert not blas.overlaps(lay(M[0:2, 0:4]), lay(M[2:4, 0:4]))


def test_transposed_blocks_and_single_lines_are_exact():
    M = np.zeros((8, 8))
    assert not blas.overlaps(lay(M[:4, :4].T), lay(M[:4, 4:]))
    assert blas.overlaps(lay(M[:4, :4].T), lay(M[3:5, 3:5]))
    N = np.zeros((3, 4))
    assert not blas.overlaps(lay(N[0:2, 2:4]), lay(N[1:2, 0:2]))
    F = np.asfortranarray(np.zeros((4, 3)))
    assert not blas.overlaps(lay(F[2:4, 0:2]), lay(F[0:2, 1:2]))
    assert blas.overlaps(lay(F[2:4, 0:2]), lay(F[0:3, 1:2]))
    assert not blas.overlaps(lay(M[:4, :4]), lay(np.zeros((4, 4))))


def addresses(x):
    """Byte addresses of every element of a view."""
    base = x.ctypes.data
    i, j = np.indices(x.shape)
    return set((base + i * x.strides[0] + j * x.strides[1]).ravel().tolist())


@st.composite
def views(draw, parent):
    """A random 2-D block of ``parent``, possibly transposed."""
    r0 = draw(st.integers(0, parent.shape[0] - 1))
    c0 = draw(st.integers(0, parent.shape[1] - 1))
    r1 = draw(st.integers(r0 + 1, parent.shape[0]))
    c1 = draw(st.integers(c0 + 1, parent.shape[1]))
    v = parent[r0:r1, c0:c1]
    return v.T if draw(st.booleans()) else v


@st.composite
def view_pairs(draw):
    rows, cols = draw(st.integers(1, 9)), draw(st.integers(1, 9))
    parent = np.zeros((rows, cols), order=draw(st.sampled_from("CF")))
    return draw(views(parent)), draw(views(parent))


@settings(max_examples=400, deadline=None)
@given(view_pairs())
def test_overlaps_matches_the_real_element_addresses(pair):
    a, b = pair
    truth = bool(addresses(a) & addresses(b))
    assert blas.overlaps(lay(a), lay(b)) == truth


def test_plan_gemm_row_major_swaps_operands():
    A, B, C = np.zeros((3, 5)), np.zeros((5, 7)), np.zeros((3, 7))
    call = blas.plan_gemm(lay(A), lay(B), lay(C))
    assert (call.m, call.n, call.k) == (7, 3, 5)
    assert (call.a, call.b) == (B.ctypes.data, A.ctypes.data)
    assert (call.transa, call.transb) == (blas.OP_N, blas.OP_N)
    Cf = np.asfortranarray(C)
    call = blas.plan_gemm(lay(A), lay(B), lay(Cf))
    assert (call.m, call.n, call.transa, call.a) == (3, 7, blas.OP_T, A.ctypes.data)


def test_plan_geam_allows_exact_alias_only():
    M = np.zeros((8, 8))
    a, b = lay(M[:4, :4]), lay(M[4:, :4])
    assert blas.plan_geam(a, b, a) is not None
    with pytest.raises(ValueError, match="partly overlaps"):
        blas.plan_geam(a, b, lay(M[2:6, :4]))
    assert blas.plan_geam(lay(M[:0, :4]), lay(M[:0, :4]), lay(M[:0, :4])) is None


def test_common_dtype_is_required():
    assert blas.check_dtypes(("A", np.zeros(1)), ("B", np.zeros(1))) == np.float64
    with pytest.raises(TypeError, match="A: float64, B: float32"):
        blas.check_dtypes(("A", np.zeros(1)), ("B", np.zeros(1, np.float32)))
