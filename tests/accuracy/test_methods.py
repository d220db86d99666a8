"""The method registry: names parsed and listed, clear errors, each built-in method computes the
product to its precision, and other packages can register families."""

import re

import numpy as np
import pytest

from accuracy import methods
from accuracy.generate import phi_matrix
from accuracy.methods import (
    Method,
    default_methods,
    get_method,
    method_names,
    parse_methods,
)
from accuracy.metrics import error_report
from accuracy.reference import exact_matmul
from gpu import get_backend
from gpu.schedules import SCHEDULES


def test_names_cover_every_schedule_and_level_it_can_run():
    names = method_names()
    assert names[:2] == ["fp32", "fp64"]
    for schedule in SCHEDULES:
        assert f"strassen-{schedule}-L1" in names
    assert "strassen-rum-L4" in names and "strassen-rum-L0" in names
    assert "strassen-otsuka-low-L2" not in names               # cannot recurse
    assert default_methods() == ["fp32", "fp64", "strassen-rum-L1", "strassen-rum-L2", "strassen-rum-L3"]


def test_clear_errors():
    with pytest.raises(ValueError, match="unknown method 'fp16'.*strassen-<schedule>-L<level>"):
        get_method("fp16")
    with pytest.raises(ValueError, match="cannot recurse.*strassen-rum-L0"):
        get_method("strassen-otsuka-low-L2")
    with pytest.raises(ValueError, match="unknown schedule 'nope'"):
        get_method("strassen-nope-L1")
    with pytest.raises(ValueError, match="level 7 is outside 0..4"):
        get_method("strassen-rum-L7")
    with pytest.raises(ValueError, match="no method named"):
        parse_methods(" , ")


def test_parse_keeps_order_and_drops_repeats():
    assert [m.name for m in parse_methods("fp64, strassen-lai-L2 fp64,fp32")] == ["fp64", "strassen-lai-L2", "fp32"]


@pytest.mark.parametrize("name,tol", [("fp32", 1e-6), ("fp64", 1e-15), ("strassen-rum-L2", 1e-14),
                                      ("strassen-otsuka-L3", 1e-14), ("strassen-winograd-L0", 1e-15)])
def test_methods_compute_the_product(backend, name, tol):
    A, B = phi_matrix(64, 64, 1.0, 1), phi_matrix(64, 64, 1.0, 2)
    R = exact_matmul(A, B, backend="numpy")
    a, b = backend.asarray(A), backend.asarray(B)
    C = np.asarray(backend.to_numpy(get_method(name).run(backend, a, b)), dtype=np.float64)
    assert 0 < error_report(C, R)["nrm"] < tol
    assert np.array_equal(backend.to_numpy(a), A) and np.array_equal(backend.to_numpy(b), B)


def test_levels_change_the_result():
    """strassen-rum-L2 really runs two levels (its rounding differs from DGEMM's)."""
    be = get_backend("numpy")
    A, B = phi_matrix(64, 64, 1.0, 1), phi_matrix(64, 64, 1.0, 2)
    plain = get_method("fp64").run(be, A, B)
    assert np.array_equal(get_method("strassen-rum-L0").run(be, A, B), plain)
    assert not np.array_equal(get_method("strassen-rum-L2").run(be, A, B), plain)


def test_other_packages_register_families(monkeypatch):
    monkeypatch.setattr(methods, "FAMILIES", list(methods.FAMILIES))
    monkeypatch.setattr(methods, "METHODS", dict(methods.METHODS))

    @methods.family(r"scaled-(?P<k>\d+)", "scaled-<k>", lambda: ["scaled-1", "scaled-2"], defaults=("scaled-2",))
    def _build(match: re.Match) -> Method:
        k = int(match["k"])
        if k > 2:
            raise ValueError("k must be 1 or 2")
        return Method(match.group(0), "k times A @ B", lambda be, A, B: k * (A @ B))

    @methods.method("twice", "2 A @ B", default=False)
    def _twice(be, A, B):
        return 2 * (A @ B)

    assert get_method("scaled-2").run(None, np.eye(2), np.eye(2))[0, 0] == 2
    assert "scaled-1" in method_names() and "twice" in method_names()
    assert default_methods()[-1] == "scaled-2"
    with pytest.raises(ValueError, match="k must be 1 or 2.*scaled-1, scaled-2"):
        get_method("scaled-3")
