"""Split-K in the accuracy registry: its names, its refusals, and rectangular audit points."""

import numpy as np
import pytest

from accuracy import methods
from accuracy.audit import audit_inputs, audit_point
from gpu.backend import get_backend
from gpu.splitk import MIN_K


def test_split_k_names_build_methods_and_bad_ones_list_the_valid_ones():
    assert {"splitk-det", "splitk-atomic", "splitk-det-w1024"} <= set(methods.method_names())
    assert "fixed-order" in methods.get_method("splitk-det-w512").description     # any width, not only listed ones
    assert "atomic" in methods.get_method("splitk-atomic").description
    with pytest.raises(ValueError, match="mode 'fast' is not one of det, atomic"):
        methods.get_method("splitk-fast")
    assert not set(methods.default_methods()) & set(methods.splitk_names())    # square default audits refuse it


@pytest.mark.parametrize("shape,match", [((64, 64, 64), "k = 64 is small"), ((1024, MIN_K, 1024), "output is large")])
def test_an_audit_refuses_shapes_split_k_cannot_take_before_any_work(shape, match):
    be = get_backend("numpy")
    with pytest.raises(ValueError, match=f"method 'splitk-det' cannot run .*{match}"):
        audit_point(be, [methods.get_method("splitk-det")], 0, 1.0, 1, shape=shape)


def test_rectangular_audit_points_measure_split_k_beside_dgemm():
    be = get_backend("numpy")
    names = ("fp64", "splitk-det", "splitk-atomic", "splitk-det-w256", "fp32")
    out = audit_point(be, [methods.get_method(n) for n in names], 0, 1.0, 1, shape=(16, 2**15, 16))
    rel = {n: out[n].report.max_rel for n in names}
    assert all(rel[n] < 1e-12 for n in names[:4]), rel       # a lost or doubled chunk errs by O(1)
    assert rel["fp32"] > 1e-7
    a, b = audit_inputs(0, 1.0, 1, shape=(16, 2**15, 16))
    assert a.shape == (16, 2**15) and b.shape == (2**15, 16)
    square = audit_inputs(32, 1.0, 1)
    assert np.array_equal(square[0], audit_inputs(0, 1.0, 1, shape=(32, 32, 32))[0])
