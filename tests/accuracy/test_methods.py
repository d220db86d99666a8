"""The method registry: names parsed and listed, clear errors, each built-in method computes the
product to its precision (the Ozaki family included), and other packages can register families."""

import re

import numpy as np
import pytest

from accuracy import methods
from accuracy.generate import phi_matrix
from accuracy.methods import (
    OZAKI_VARIANTS,
    Method,
    default_methods,
    get_method,
    method_names,
    ozaki_method_name,
    ozaki_names,
    parse_methods,
    parse_ozaki_method,
)
from accuracy.metrics import error_report
from accuracy.reference import exact_matmul
from gpu import get_backend, ozaki
from gpu.strassen import SCHEDULES


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
                                      ("strassen-otsuka-L3", 1e-14), ("strassen-winograd-L0", 1e-15),
                                      ("strassen-defaults", 1e-14), ("auto", 1e-15), ("auto-1e-10", 1e-15)])
def test_methods_compute_the_product(backend, name, tol):
    A, B = phi_matrix(128, 128, 1.0, 1), phi_matrix(128, 128, 1.0, 2)
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


# --- the Ozaki family ---------------------------------------------------------------------------------

def test_ozaki_variants_are_the_formats_and_the_rounded_tail_forms_of_the_float_ones():
    assert OZAKI_VARIANTS[:len(ozaki.FORMATS)] == tuple(ozaki.FORMATS)
    tails = OZAKI_VARIANTS[len(ozaki.FORMATS):]
    assert tails == tuple(f + "r" for f, v in ozaki.FORMATS.items() if v.floating)
    assert "fp32r" in tails and "int8r" not in tails and "int8" in OZAKI_VARIANTS


def test_ozaki_names_round_trip_and_are_listed():
    assert ozaki_method_name("int8", 8) == "ozaki-int8-8"
    names = ozaki_names()
    assert len(names) == len(set(names)) == len(OZAKI_VARIANTS) * 12
    assert set(names) <= set(method_names())
    for name in names:
        variant, slices = parse_ozaki_method(name)
        assert ozaki_method_name(variant, slices) == name and get_method(name).name == name
    assert parse_ozaki_method("strassen-rum-L2") is None and parse_ozaki_method("ozaki-int8") is None
    assert not any(n.startswith("ozaki-") for n in default_methods())


@pytest.mark.parametrize("name,variant,slices,remainder", [("ozaki-int8-8", "int8", 8, False),
                                                          ("ozaki-fp32r-3", "fp32", 3, True),
                                                          ("ozaki-bf16-5", "bf16", 5, False)])
def test_ozaki_methods_run_the_scheme(backend, name, variant, slices, remainder):
    A, B = phi_matrix(48, 40, 1.0, 3), phi_matrix(40, 32, 1.0, 4)
    a, b = backend.asarray(A), backend.asarray(B)
    got = backend.to_numpy(get_method(name).run(backend, a, b))
    want = backend.to_numpy(ozaki.matmul(a, b, slices=slices, slice_format=variant, remainder=remainder,
                                         backend=backend))
    assert np.array_equal(got, want)
    assert np.array_equal(backend.to_numpy(a), A) and np.array_equal(backend.to_numpy(b), B)
    assert "Ozaki scheme" in get_method(name).description
    assert ("rounded tails" in get_method(name).description) == remainder


def test_ozaki_methods_reach_dgemm_accuracy_with_enough_slices():
    be = get_backend("numpy")
    A, B = phi_matrix(64, 64, 1.0, 1), phi_matrix(64, 64, 1.0, 2)
    R = exact_matmul(A, B, backend="numpy")
    dgemm = error_report(get_method("fp64").run(be, A, B), R)["nrm"]
    few, many = (error_report(get_method(f"ozaki-int8-{s}").run(be, A, B), R)["nrm"] for s in (3, 9))
    assert many <= dgemm and few > 1e6 * many          # 7 bits a slice: about 2**-42 apart


def test_ozaki_method_errors_list_the_valid_names():
    with pytest.raises(ValueError, match=r"method 'ozaki-int8r-3': unknown slice format 'int8r'.*ozaki-int8-8"):
        get_method("ozaki-int8r-3")
    with pytest.raises(ValueError, match=rf"slices must lie in 1..{ozaki.MAX_SLICES}, got 0"):
        get_method("ozaki-fp32-0")
    with pytest.raises(ValueError, match=rf"got {ozaki.MAX_SLICES + 1}"):
        get_method(f"ozaki-fp32-{ozaki.MAX_SLICES + 1}")
