"""``gemmlab audit`` and the accuracy experiments: JSON rows, resume, the table, flagged
non-finite products, the per-level fit, and both figures through ``gemmlab reproduce``."""

import json
import math

import numpy as np
import pytest

from accuracy import methods
from accuracy.audit import audit_inputs, audit_point
from accuracy.generate import phi_matrix
from accuracy.reference import exact_matmul
from experiments.audit import bench as aa
from experiments.audit import figures as af
from experiments.audit.bench import AuditRow
from experiments.cli import main
from experiments.core.database import ResultsDB
from gpu import get_backend


def audit(run_json, db_path, *extra, methods="fp32,fp64,strassen-rum-L2", n="64", phi="0.1,2", seeds="1,2"):
    return run_json("audit", "--backend", "numpy", "--methods", methods, "--n", n, "--phi", phi,
                    "--seeds", seeds, "--db", str(db_path), *extra)


def test_audit_json_rows_then_resume_and_force(run_json, db_path):
    out = audit(run_json, db_path)
    assert (out["measured"], out["skipped"]) == (12, 0)
    rows = out["rows"]
    assert [(r["method"], r["phi"], r["seed"]) for r in rows[:4]] == [
        ("fp32", 0.1, 1), ("fp32", 0.1, 2), ("fp32", 2.0, 1), ("fp32", 2.0, 2)]
    for r in rows:
        assert r["n"] == 64 and r["zeros"] == 0 and r["nonfinite"] == 0
        assert 0 < r["nrm"] <= r["max_rel"] * 10 and r["max_rel"] < 1
        assert r["reference_seconds"] > 0 and 0 <= r["correctly_rounded"] <= 1
    by = {(r["method"], r["phi"], r["seed"]): r for r in rows}
    assert by[("fp32", 2.0, 1)]["max_rel"] > 1e3 * by[("fp64", 2.0, 1)]["max_rel"]
    summary = {(s["method"], s["phi"]): s for s in out["summary"]}
    fp64 = [by[("fp64", 0.1, s)]["max_rel"] for s in (1, 2)]
    assert summary[("fp64", 0.1)]["mean_max_rel"] == pytest.approx(sum(fp64) / 2)
    assert summary[("fp64", 0.1)]["max_max_rel"] == max(fp64) and summary[("fp64", 0.1)]["seeds"] == 2

    again = audit(run_json, db_path, seeds="1,2,3")
    assert (again["measured"], again["skipped"]) == (6, 12)
    assert {(r["method"], r["phi"], r["seed"]): r["max_rel"] for r in again["rows"] if r["seed"] < 3} == {
        k: r["max_rel"] for k, r in by.items()}
    forced = audit(run_json, db_path, "--force", methods="fp64", phi="2", seeds="1")
    assert (forced["measured"], forced["skipped"]) == (1, 0)


def test_stored_rows_match_a_direct_audit(run_json, db_path):
    audit(run_json, db_path, methods="strassen-rum-L1", phi="1", seeds="4")
    be = get_backend("numpy")
    direct = audit_point(be, [methods.get_method("strassen-rum-L1")], 64, 1.0, 4)["strassen-rum-L1"]
    with ResultsDB(db_path) as db:
        (stored,) = db.measurements("accuracy")
    assert stored.value == direct.report.max_rel and stored.unit == "rel"
    assert stored.params == {"n": 64, "phi": 1.0, "seed": 4, "inputs": "phi"}
    A, B = audit_inputs(32, 1.0, 4)
    assert np.array_equal(A, phi_matrix(32, 32, 1.0, (4, 0))) and not np.array_equal(A, B)


def test_table_output_and_errors(capsys, db_path):
    assert main(["audit", "--backend", "numpy", "--methods", "fp64", "--n", "16", "--phi", "1", "--seeds", "1",
                 "--db", str(db_path)]) == 0
    text = capsys.readouterr().out
    assert "fp64" in text and "mean max_rel" in text and "nrm:" in text
    assert main(["audit", "--backend", "numpy", "--methods", "fp16", "--db", str(db_path)]) == 2
    assert "unknown method 'fp16'" in capsys.readouterr().err
    assert main(["audit", "--backend", "numpy", "--n", "0", "--db", str(db_path)]) == 2
    assert "sizes must be a non-empty list of positive integers" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["audit", "--phi", "one"])
    assert "phi values must be numbers" in capsys.readouterr().err


def test_non_finite_products_are_flagged_not_hidden(run_json, db_path, monkeypatch):
    monkeypatch.setattr(methods, "METHODS", dict(methods.METHODS))

    @methods.method("broken", "DGEMM with one NaN")
    def _broken(be, A, B):
        C = A @ B
        C[0, 0] = np.nan
        return C

    out = audit(run_json, db_path, methods="broken,fp64", phi="1", seeds="1,2")
    broken = [r for r in out["rows"] if r["method"] == "broken"]
    assert all(r["max_rel"] is None and r["nrm"] is None and r["nonfinite"] == 1 for r in broken)
    (summary,) = [s for s in out["summary"] if s["method"] == "broken"]
    assert summary["mean_max_rel"] is None and summary["nonfinite_seeds"] == 2
    with ResultsDB(db_path) as db:
        stored = [m for m in db.measurements("accuracy") if m.method == "broken"]
    assert all(m.unit == "nonfinite entries" and m.value == 1 for m in stored)


def test_bits_per_level_fit():
    rows = [AuditRow("fp64", 8, 1.0, s, max_rel=2.0**-40) for s in (1, 2, 3)]
    rows += [AuditRow(f"strassen-rum-L{lv}", 8, 1.0, s, max_rel=2.0 ** (-40 + 2 * lv))
             for lv in (1, 2, 3) for s in (1, 2)]
    rows += [AuditRow("strassen-lai-L1", 8, 1.0, s, max_rel=2.0 ** (-40 + s)) for s in (1, 2, 3)]
    fits = aa.bits_per_level(rows)[(8, 1.0)]
    pts, slope = fits["rum"]
    assert pts == [(0, 0.0), (1, 2.0), (2, 4.0), (3, 6.0)] and slope == pytest.approx(2.0)
    # seed 3 has no rum rows: left out, so lai's median is over seeds 1 and 2 (same inputs as rum)
    assert fits["lai"] == ([(0, 0.0), (1, 1.5)], pytest.approx(1.5))


def test_strassen_methods_cover_every_recursible_schedule():
    names = aa.strassen_methods()
    assert names[0] == "fp64" and "strassen-rum-L4" in names and "strassen-otsuka2-L3" in names
    assert not any("low" in n for n in names)
    assert len(names) == 1 + 4 * len({n.rsplit("-L", 1)[0] for n in names[1:]})
    assert "strassen-rum-L4" not in aa.strassen_methods((1, 2, 3))


def test_reproduce_runs_both_experiments_and_draws_both_figures(run_json, db_path, tmp_path, monkeypatch):
    monkeypatch.setitem(aa.PHI_PLANS, ("numpy", True), aa.AuditPlan((128,), seeds=(1, 2)))
    monkeypatch.setitem(aa.STRASSEN_PLANS, ("numpy", True), aa.AuditPlan((128,), phis=(1.0,), seeds=(1,)))
    argv = ("reproduce", "--quick", "--backend", "numpy", "--only", "accuracy-phi", "accuracy-strassen",
            "--db", str(db_path), "--out", str(tmp_path / "figs"))
    out = run_json(*argv)
    phi = out["experiments"]["accuracy-phi"]
    assert phi["points measured"] == 5 * 3 * 2
    table = phi["mean max relative error at N=128"]
    assert [r["method"] for r in table] == methods.default_methods()
    assert all(set(r) == {"method", "phi=0.1", "phi=1", "phi=2"} and r["phi=1"] > 0 for r in table)
    strassen = out["experiments"]["accuracy-strassen"]
    fits = {r["schedule"]: r["phi=1"] for r in strassen["bits lost per level at N=128"]}
    assert "rum" in fits and all(math.isfinite(v) for v in fits.values())
    # fp64 and strassen-rum-L1..L3 at phi=1, seed 1 were stored by accuracy-phi: shared, not measured again
    assert strassen["points already stored"] == 4
    assert strassen["points measured"] == len(aa.strassen_methods((1, 2, 3))) - 4
    for name in ("accuracy-phi", "accuracy-strassen"):
        assert (tmp_path / "figs" / f"{name}.png").stat().st_size > 10_000
        assert (tmp_path / "figs" / f"{name}.pdf").exists()
    again = run_json(*argv)
    assert again["experiments"]["accuracy-phi"]["points measured"] == 0


def test_figures_without_data_draw_nothing(db_path, tmp_path):
    with ResultsDB(db_path) as db:
        assert af.render_phi(db) is None and af.render_strassen(db) is None


def test_exact_reference_is_what_the_audit_compares_to():
    """A method that returns the exact product scores zero everywhere."""
    be = get_backend("numpy")
    exact = methods.Method("exact", "the reference itself", lambda be, A, B: exact_matmul(A, B, backend=be))
    rep = audit_point(be, [exact], 24, 2.0, 1)["exact"].report
    assert rep.max_rel == 0.0 and rep.correctly_rounded == 1.0 and rep.bits == 0.0


RECT = ("--backend", "numpy", "--methods", "fp64,splitk-det", "--phi", "1", "--seeds", "1,2")


def test_rectangular_audit_stores_the_shape_and_resumes(run_json, db_path, capsys):
    out = run_json("audit", *RECT, "--shapes", "8:8192:8", "--db", str(db_path))
    assert (out["measured"], out["skipped"]) == (4, 0)
    rows = out["rows"]
    assert [(r["method"], r["m"], r["k"], r["n"], r["seed"]) for r in rows] == [
        ("fp64", 8, 8192, 8, 1), ("fp64", 8, 8192, 8, 2), ("splitk-det", 8, 8192, 8, 1), ("splitk-det", 8, 8192, 8, 2)]
    be = get_backend("numpy")
    for seed in (1, 2):
        direct = audit_point(be, [methods.get_method("fp64"), methods.get_method("splitk-det")], 0, 1.0, seed,
                             shape=(8, 8192, 8))
        for r in rows:
            if r["seed"] == seed:
                assert r["max_rel"] == direct[r["method"]].report.max_rel and 0 < r["max_rel"] < 1e-11
    assert {(s["method"], s["m"], s["k"], s["n"], s["seeds"]) for s in out["summary"]} == {
        ("fp64", 8, 8192, 8, 2), ("splitk-det", 8, 8192, 8, 2)}
    with ResultsDB(db_path) as db:
        stored = db.measurements("accuracy")
    assert {tuple(sorted(m.params.items())) for m in stored} == {
        (("inputs", "phi"), ("k", 8192), ("m", 8), ("n", 8), ("phi", 1.0), ("seed", s)) for s in (1, 2)}

    # a square audit at n = 8 is another point: measured, stored without m and k, and read back alone
    square = run_json("audit", *RECT[:3], "fp64", "--n", "8", "--phi", "1", "--seeds", "1", "--db", str(db_path))
    assert (square["measured"], square["skipped"]) == (1, 0)
    assert [(r["m"], r["k"], r["n"]) for r in square["rows"]] == [(8, 8, 8)]
    with ResultsDB(db_path) as db:
        assert [m.params for m in db.measurements("accuracy") if "m" not in m.params] == [
            {"n": 8, "phi": 1.0, "seed": 1, "inputs": "phi"}]
        env = db.env_keys()[0]
        assert [r.shape for r in aa.audit_rows(db, env)] == [(8, 8, 8)]      # figures see square rows only
        assert len(aa.audit_rows(db, env, rectangular=True)) == 5

    again = run_json("audit", *RECT, "--shapes", "8:8192:8", "--db", str(db_path))
    assert (again["measured"], again["skipped"]) == (0, 4)
    assert [r["max_rel"] for r in again["rows"]] == [r["max_rel"] for r in rows]
    capsys.readouterr()
    assert main(["audit", *RECT, "--shapes", "8:2^13:8", "--db", str(db_path)]) == 0
    text = capsys.readouterr().out
    assert "0 audited, 4 already stored" in text and "m x k x n" in text
    assert [line.split()[:2] for line in text.splitlines()[2:4]] == [["fp64", "8"], ["splitk-det", "8"]]
    assert text.count("8 x 8192 x 8") == 2


def test_shapes_refused_before_any_work(capsys, db_path):
    assert main(["audit", *RECT, "--n", "64", "--shapes", "8:8192:8", "--db", str(db_path)]) == 2
    assert "give --n (square N x N x N products) or --shapes (M:K:N products), not both" in capsys.readouterr().err
    assert main(["audit", *RECT, "--shapes", "8:8192:8,8:100:8", "--db", str(db_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gemmlab audit: error: method 'splitk-det' cannot run 8 x 100 x 8: k = 100 is small")
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not db_path.exists()          # nothing measured, not even the shape fp64 and split-K both take


@pytest.mark.parametrize("bad, message", [
    ("8x8192x8", "'8x8192x8' in '8x8192x8' is not a shape M:K:N"), ("8:8192", "'8:8192' in '8:8192' is not a shape"),
    ("8:8192:8,1:2:3:4", "'1:2:3:4' in '8:8192:8,1:2:3:4' is not a shape"), ("8:-1:8", "is not a shape"),
    ("8:k:8", "is not a shape"), ("8:0:8", "the shape '8:0:8' in '8:0:8' has a zero dimension"),
    ("8:2^99:8", "has an exponent above 62"), (" ", "no shapes given")])
def test_shape_parser_rejects_malformed_shapes(capsys, bad, message):
    with pytest.raises(SystemExit):
        main(["audit", "--shapes", bad])
    assert message in capsys.readouterr().err


def test_shape_parser_and_plan():
    from experiments.audit.commands import shapes
    assert shapes("16:2^24:16, 8:8192:8") == [(16, 2**24, 16), (8, 8192, 8)]
    plan = aa.AuditPlan((4,), phis=(1.0,), seeds=(1,), shapes=((4, 4, 4), (2, 3, 4)))
    assert plan.products() == [(4, 4, 4), (2, 3, 4)]
    assert plan.points() == [{"n": 4, "phi": 1.0, "seed": 1, "inputs": "phi"},
                             {"m": 2, "k": 3, "n": 4, "phi": 1.0, "seed": 1, "inputs": "phi"}]
    assert aa.AuditPlan((), shapes=((2, 3, 4),)).products() == [(2, 3, 4)]
    with pytest.raises(ValueError, match="sizes must be a non-empty list"):
        aa.AuditPlan(())
    with pytest.raises(ValueError, match="shapes must be"):
        aa.AuditPlan((), shapes=((2, 0, 4),))


def test_scheme_two_is_audited_and_cublas_emulation_is_skipped_off_the_gpu(db_path, capsys):
    """``ozaki2-<scaling>-<moduli>`` runs on any backend; ``cublas-emul-<bits>`` needs CuPy and nvmath-python,
    so on NumPy it is skipped with one line naming why, and the rest is audited."""
    assert main(["audit", "--backend", "numpy", "--methods", "cublas-emul-55,ozaki2-fast-16,ozaki2-accurate-8",
                 "--n", "24", "--phi", "1", "--seeds", "1", "--db", str(db_path), "--json"]) == 0
    captured = capsys.readouterr()
    assert "skipping cublas-emul-55: cuBLAS's FP64 emulation runs on the CuPy backend only" in captured.err
    errors = {r["method"]: r["max_rel"] for r in json.loads(captured.out)["rows"]}
    assert set(errors) == {"ozaki2-fast-16", "ozaki2-accurate-8"}
    assert errors["ozaki2-fast-16"] < 1e-12 < errors["ozaki2-accurate-8"]
    assert main(["audit", "--backend", "numpy", "--methods", "cublas-emul-auto", "--n", "8", "--db",
                 str(db_path)]) == 2
