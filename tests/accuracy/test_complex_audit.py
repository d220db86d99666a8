"""Complex methods in the audit: their names, complex inputs, each part's error in the report (componentwise
against that part's own scale), a real and a complex method refused together before any run, and the command."""

import numpy as np
import pytest

from accuracy.audit import audit_inputs, audit_point
from accuracy.methods import get_method, method_names
from accuracy.metrics import error_report
from accuracy.reference import exact_matmul
from experiments.cli import main
from experiments.core.database import ResultsDB
from gpu.backend import get_backend

BE = get_backend("numpy")


def test_the_complex_families_are_named_and_run_complex_products():
    names = method_names()
    for name in ("zgemm", "zgemm-4m-fp64", "zgemm-3m-ozaki2-fast-15", "ozaki2c-3m-auto", "ozaki2c-4m-15"):
        assert name in names and get_method(name).complex
    assert get_method("zgemm-4m-strassen-winograd-L1").complex and not get_method("fp64").complex
    for bad, match in (("zgemm-4m-zgemm", "complex method"), ("zgemm-2m-fp64", "unknown method"),
                       ("ozaki2c-3m-21", "moduli must be")):
        with pytest.raises(ValueError, match=match):
            get_method(bad)


def test_complex_inputs_keep_the_real_points_real_parts():
    a, b = audit_inputs(16, 1.0, 2)
    A, B = audit_inputs(16, 1.0, 2, complex=True)
    assert A.dtype == np.complex128 and np.array_equal(A.real, a) and np.array_equal(B.real, b)
    assert not np.array_equal(A.imag, A.real) and np.all(A.imag != 0)


def test_each_parts_error_is_judged_against_its_own_scale():
    A, B = audit_inputs(12, 1.0, 1, complex=True)
    R = exact_matmul(A, B, backend="numpy")
    C = R.copy()
    C[3, 4] += complex(0.0, 1e-3 * abs(R[3, 4].imag))
    report = error_report(C, R, A, B)
    im_scale = (np.abs(A.real) @ np.abs(B.imag) + np.abs(A.imag) @ np.abs(B.real))[3, 4]
    assert report.max_comp == pytest.approx(1e-3 * abs(R[3, 4].imag) / im_scale, rel=1e-12)
    assert report.max_rel == pytest.approx(1e-3, rel=1e-12) and report.entries == 2 * R.size
    assert error_report(R, R, A, B).correctly_rounded == 1.0


def test_an_audit_point_of_complex_methods_and_a_mixed_one():
    found = audit_point(BE, [get_method("zgemm"), get_method("ozaki2c-3m-auto")], 32, 1.0, 1)
    assert found["ozaki2c-3m-auto"].report.max_comp < 1e-15 and found["zgemm"].report.max_comp < 1e-14
    with pytest.raises(ValueError, match="audit them in separate runs"):
        audit_point(BE, [get_method("zgemm"), get_method("fp64")], 8, 1.0, 1)


def test_the_command_audits_complex_methods_and_refuses_a_mix_before_any_run(run_json, db_path, capsys):
    out = run_json("audit", "--backend", "numpy", "--methods", "zgemm,zgemm-3m-fp64", "--n", "24", "--phi", "1",
                   "--seeds", "1", "--db", str(db_path))
    assert {r["method"] for r in out["rows"]} == {"zgemm", "zgemm-3m-fp64"}
    assert main(["audit", "--backend", "numpy", "--methods", "zgemm,fp64", "--n", "8", "--db", str(db_path)]) == 2
    assert "audit them in separate runs" in capsys.readouterr().err
    with ResultsDB(db_path) as db:
        assert len(db.runs()) == 1


def test_the_complex_front_door_is_named_as_the_real_one_is():
    """``zauto-<level>`` is ``gpu.matmul(A, B, accuracy=level)`` on complex operands (``zauto``: its default,
    "dgemm"), as ``auto-<level>`` is on real ones; a level the front door refuses is refused by its name."""
    names = method_names()
    assert {"zauto-zgemm", "zauto-dgemm"} <= set(names)
    A, B = audit_inputs(24, 1.0, 3, complex=True)
    R = exact_matmul(A, B, backend="numpy")
    for name in ("zauto", "zauto-zgemm", "zauto-dgemm", "zauto-1e-10"):
        method = get_method(name)
        assert method.complex and "gpu.matmul(accuracy=" in method.description
        assert error_report(method.run(BE, A, B), R, A, B).max_comp < 1e-14
    assert "accuracy='dgemm'" in get_method("zauto").description
    with pytest.raises(ValueError, match="a number in \\(0, 1\\)"):
        get_method("zauto-2e-0")
    assert not get_method("strassen-defaults").complex and get_method("zgemm-3m-strassen-defaults").complex
