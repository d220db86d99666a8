"""``gemmlab complex`` on NumPy: every method's error and time stored at every size, resumed, printed as JSON that
round-trips the stored rows; bad plans refused before anything is stored; the verdict judged on GPU rows only; the
front door at accuracy "zgemm" within ZGEMM's componentwise bound; the experiment and its figure."""

import contextlib
import io
import json

import numpy as np
import pytest

from accuracy.methods import get_method
from experiments.cli import main
from experiments.complex import bench as cb
from experiments.complex import errors as ce
from experiments.complex import report as cr
from experiments.core.database import ResultsDB
from experiments.core.registry import EXPERIMENTS, FIGURES, load
from gpu.backend import get_backend
from gpu.frontdoor.contract import U64, gamma

load()
SIZES, PHIS = (16, 24), (0.1, 1.0)
ARGV = ("complex", "--backend", "numpy", "--sizes", "16,24", "--phis", "0.1,1", "--no-progress")


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """One run of the command's default methods at two sizes and two phi, then the same run again."""
    path = tmp_path_factory.mktemp("complex") / "results.sqlite"
    return path, command_json(*ARGV, "--db", path), command_json(*ARGV, "--db", path)


def command_json(*argv):
    """``gemmlab *argv --json``'s document (stdout captured here: a module-scoped fixture has no capsys)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main([str(a) for a in (*argv, "--json")]) == 0
    return json.loads(out.getvalue())


def test_the_command_stores_every_method_at_every_size(measured):
    _, out, _ = measured
    methods = set(cb.METHODS)
    assert {(r["n"], r["method"]) for r in out["rows"]} == {(n, m) for n in SIZES for m in methods}
    count = len(cb.METHODS)
    assert out["summary"] == {"error points measured": count * 2 * 2, "error points already stored": 0,
                              "times measured": count * 2, "times already stored": 0}
    rows = {(r["n"], r["method"]): r for r in out["rows"]}
    for (n, _), r in rows.items():
        assert r["time_s"] > 0 and r["speedup_vs_zgemm"] > 0 and r["protocol"] in ("interleaved", "single run")
        assert r["backend"] == "numpy" and r["call"]
        for phi in PHIS:
            zgemm = rows[(n, cb.ZGEMM)][f"max_comp_phi{phi:g}"]
            assert 0 <= r[f"max_comp_phi{phi:g}"] < 1e-12 and r[f"zgemm_max_comp_phi{phi:g}"] == zgemm
    for n in SIZES:
        assert rows[(n, cb.ZGEMM)]["speedup_vs_zgemm"] == 1.0 and rows[(n, cb.ZGEMM)]["call"] == "numpy.matmul(A, B)"
        assert rows[(n, cb.FRONT_ZGEMM)]["call"] == "gpu.matmul(A, B, accuracy='zgemm')"
    with ResultsDB(measured[0]) as db:
        assert {m.method for m in db.measurements(cb.TIME)} == methods
        assert len(db.measurements(cb.ERROR)) == count * 4 and len(db.measurements(cb.TIME)) == count * 2


def test_a_second_run_measures_nothing_and_prints_the_same_rows(measured):
    _, out, again = measured
    count = len(cb.METHODS)
    assert again["summary"] == {"error points measured": 0, "error points already stored": count * 4,
                                "times measured": 0, "times already stored": count * 2}
    assert again["rows"] == out["rows"] and again["verdict"] == out["verdict"]


def test_json_round_trips_the_stored_rows(measured):
    path, out, _ = measured
    plan = cb.Plan(SIZES, phis=PHIS)
    with ResultsDB(path) as db:
        stored = [r.as_dict() for r in cr.bench_table(db, out["env_key"], plan, "sustained")]
    assert json.loads(json.dumps(stored)) == out["rows"]
    assert [c["met"] for c in out["verdict"]] == [None] * 3, "the verdict is never judged on NumPy rows"


def test_a_new_method_is_measured_alone_and_timed_again_beside_zgemm(tmp_path):
    argv = ("complex", "--backend", "numpy", "--sizes", "8", "--phis", "1", "--db", tmp_path / "r.sqlite")
    first = command_json(*argv, "--methods", "zgemm-4m-fp64")
    assert first["summary"]["error points measured"] == 2 and first["summary"]["times measured"] == 2
    more = command_json(*argv, "--methods", "zgemm-4m-fp64,zauto-zgemm")
    assert more["summary"] == {"error points measured": 1, "error points already stored": 2,
                               "times measured": 1, "times already stored": 2}


@pytest.mark.parametrize("option, value, message", [
    ("--sizes", "32,0", "positive integers N"),
    ("--sizes", "-8", "positive integers N"),
    ("--methods", "zgemm-3m-fp64,fp64", "'fp64' is a real method"),
    ("--methods", "zgemm-5m-fp64", "unknown method"),
    ("--methods", "ozaki2c-3m-30", "moduli must be"),
    ("--phis", "1,25", "phi values must lie in"),
    ("--rows", "0", "rows must be positive"),
])
def test_bad_plans_are_refused_before_anything_is_stored(tmp_path, capsys, option, value, message):
    path = tmp_path / "r.sqlite"
    assert main(["complex", "--backend", "numpy", "--sizes", "8", option, value, "--db", str(path)]) == 2
    assert message in capsys.readouterr().err
    if path.exists():
        with ResultsDB(path) as db:
            assert db.measurements() == [] and db.runs() == []


def test_the_plan_puts_zgemm_first_and_names_the_families():
    plan = cb.Plan((64, 32, 64), ("ozaki2c-3m-auto", "zgemm", "zauto-zgemm"))
    assert plan.sizes == (32, 64) and plan.methods == ("zgemm", "ozaki2c-3m-auto", "zauto-zgemm")
    assert cb.BENCH_DEFAULTS["numpy"].sizes == (32, 64) and cb.BENCH_DEFAULTS["cupy"].sizes == (1024, 4096, 8192,
                                                                                                16384)
    assert cb.BENCH_DEFAULTS["cupy"].methods == cb.METHODS and cb.METHODS[0] == cb.ZGEMM
    assert [cb.family(m)[0] for m in ("zgemm", "zgemm-3m-strassen-defaults", "zgemm-4m-fp64", "ozaki2c-4m-15",
                                      "zauto-dgemm")] == list(cb.FAMILIES)
    assert cb.real_of("zgemm-3m-strassen-defaults") == "strassen-defaults" and cb.front_level("zauto") == "dgemm"
    assert cb.call_text("ozaki2c-4m-auto", "cupy") == "gpu.ozaki2.complex.matmul(A, B, moduli='auto', scheme='4m')"
    assert [get_method(m).complex for m in cb.METHODS] == [True] * len(cb.METHODS)
    assert not get_method("strassen-defaults").complex


def row(n, method, speedup, err=None, zgemm=None, backend="cupy", scaled=None):
    """A row; ``scaled``: {phi: (error in 3M's scale, its documented bound)}."""
    scaled = scaled or {}
    return cr.Row(n, method, 1e-3 / speedup, speedup, "interleaved", True, backend, None,
                  {1.0: err}, {1.0: zgemm}, {p: e for p, (e, _) in scaled.items()},
                  {p: b for p, (_, b) in scaled.items()})


def test_the_verdict_on_gpu_rows():
    rows = [row(16384, "zgemm", 1.0, 4e-16, 4e-16), row(16384, "ozaki2c-3m-auto", 2.4, 5e-16, 4e-16),
            row(16384, "ozaki2c-4m-auto", 2.1, 3e-16, 4e-16),
            row(16384, "zgemm-3m-strassen-defaults", 1.7, scaled={1.0: (2e-17, 1e-14), 4.0: (5e-16, 1e-14)}),
            row(16384, "zgemm-3m-fp64", 1.9), row(4096, "zauto-zgemm", 0.99), row(16384, "zauto-zgemm", 0.97),
            row(65536, "zauto-zgemm", 0.5)]
    ozaki, strassen, front = cr.verdict(rows)
    assert ozaki.met is True and ozaki.measured.startswith("2.100x by ozaki2c-4m-auto"), "3M is the less accurate"
    assert strassen.met is True and "zgemm-3m-strassen-defaults" in strassen.measured, "3M over DGEMM is no Strassen"
    assert "within its documented bound at every phi (closest: 5.00e-16 against 1.00e-14 at phi = 4)" in \
        strassen.measured
    above = row(16384, "zgemm-3m-strassen-defaults", 1.7, scaled={1.0: (2e-17, 1e-14), 4.0: (2e-14, 1e-14)})
    assert cr.strassen_check([above]).met is False and "ABOVE" in cr.strassen_check([above]).measured
    unscaled = row(16384, "zgemm-3m-strassen-defaults", 1.7, scaled={1.0: (None, None)})
    assert cr.strassen_check([unscaled]).met is None, "speed met, the bound unmeasured: not judged"
    assert cr.strassen_check([row(16384, "zgemm-3m-strassen-defaults", 1.5)]).met is False, "too slow either way"
    assert front.met is False and front.measured == "0.990x at N = 4096; 0.970x at N = 16384", "65536 is outside"
    slower = [r if r.method != "ozaki2c-4m-auto" else row(16384, r.method, 1.9, 3e-16, 4e-16) for r in rows]
    assert cr.verdict(slower)[0].met is False
    on_cpu = [cr.Row(**{**r.__dict__, "backend": "numpy"}) for r in rows]
    assert [c.met for c in cr.verdict(on_cpu)] == [None] * 3
    assert all("not judged" in c.measured for c in cr.verdict(on_cpu))
    assert [c.met for c in cr.verdict(rows[:1])] == [None] * 3, "nothing of the targets measured"
    short = [row(1024, "zauto-zgemm", 1.0), row(16384, "zauto-zgemm", 0.99)]
    front = cr.front_check(short)
    assert front.met is None and front.measured.endswith("; N = 32768 not measured"), "an end of the range unmeasured"
    assert cr.front_check([*short, row(32768, "zauto-zgemm", 1.01)]).met is True


def test_the_front_door_at_zgemm_keeps_zgemms_componentwise_bound():
    """Each part within gamma_2k of its own scale (and u |C|), on every phi; Ozaki II complex, whose bound is
    rowcol, leaves it at phi = 4, so the check tells the two apart."""
    be, n = get_backend("numpy"), 48
    bound = gamma(2 * n) + U64
    for phi in (0.1, 1.0, 2.0, 4.0):
        found = ce.measure_errors(be, ce.error_params(n, phi, cb.SEED, n), ["zauto-zgemm", "ozaki2c-3m-auto"])
        door = found["zauto-zgemm"]
        assert door.unit == ce.COMP and door.value <= bound, f"phi = {phi}: {door.value:.2e} > {bound:.2e}"
        assert door.meta["zgemm_max_comp"] <= bound
    assert found["ozaki2c-3m-auto"].value > bound


def test_the_experiment_and_its_figure(monkeypatch, tmp_path):
    monkeypatch.setitem(cb.PARETO_PLANS, ("numpy", True), cb.Plan((16,), ("zgemm-3m-fp64", "zauto-zgemm"),
                                                                  phis=(1.0, 4.0)))
    assert cb.PARETO in EXPERIMENTS and cb.PARETO in FIGURES
    path = tmp_path / "r.sqlite"
    out = command_json("reproduce", "--quick", "--backend", "numpy", "--only", cb.PARETO, "--db", path,
                       "--out", tmp_path / "out")
    found = out["experiments"][cb.PARETO]
    assert found["error points measured"] == 6 and found["times measured"] == 3 and len(found["verdict"]) == 3
    assert (tmp_path / "out" / f"{cb.PARETO}.png").stat().st_size > 10_000


def test_the_figure_draws_every_method_of_every_size(measured, tmp_path):
    with ResultsDB(measured[0]) as db:
        paths = FIGURES[cb.PARETO].render(db, tmp_path)
        fig = FIGURES[cb.PARETO].draw(db)
    assert [p.suffix for p in paths] == [".png", ".pdf"] and paths[0].stat().st_size > 10_000
    assert [ax.get_title() for ax in fig.axes] == ["N = 16, phi = 1", "N = 24, phi = 1"]
    labels = {cb.family(m)[1] for m in cb.METHODS if m != cb.ZGEMM}
    for ax in fig.axes:
        assert {t.get_text() for t in ax.texts} == labels
        assert sum(len(ln.get_xdata()) for ln in ax.get_lines() if ln.get_label() in cb.FAMILIES) == len(cb.METHODS)
    title = " ".join(sf._suptitle.get_text() for sf in fig.subfigs if sf._suptitle)
    assert "CPU" in title and "regime sustained" in title


def test_large_points_draw_their_inputs_with_the_backends_generator(monkeypatch):
    """Above HOST_ELEMENTS the parts are drawn by the backend's generator (on the device with CuPy), each a phi
    matrix; below, the audit's host draw."""
    be = get_backend("numpy")
    small = cb.point_inputs(be, 8, 1.0)
    monkeypatch.setattr(cb, "HOST_ELEMENTS", 4 * 8 * 8 - 1)
    A, B, inputs = cb.point_inputs(be, 8, 1.0)
    assert small[2] == "phi_matrix (host)" and inputs.endswith("drawn on the device, block by block")
    assert A.dtype == B.dtype == np.complex128 and A.shape == B.shape == (8, 8)
    assert not np.array_equal(A, small[0]) and np.all(A.imag != 0)
    assert np.array_equal(A, cb.point_inputs(be, 8, 1.0)[0]), "the same seed draws the same operands"


def test_3m_over_strassen_stays_within_its_documented_bound_and_says_the_level_it_rests_on():
    """The error in 3M's scale (k a b) of 3M over Strassen on phi inputs, against gpu.zgemm.bound_3m of the
    Strassen level that ran: the name's, or the plan's at the defaults; other methods store the error alone."""
    be, n = get_backend("numpy"), 128
    for phi in (0.1, 1.0, 4.0):
        found = ce.measure_errors(be, ce.error_params(n, phi, cb.SEED, n),
                                  ["zgemm-3m-strassen-rum-L2", "zgemm-3m-strassen-defaults", "zgemm-3m-fp64"])
        named, defaults, fp64 = (found[k].meta for k in ("zgemm-3m-strassen-rum-L2", "zgemm-3m-strassen-defaults",
                                                          "zgemm-3m-fp64"))
        assert named["strassen_level"] == 2 and named["strassen_core"] == n
        assert 0 < named["err_3m_scale"] <= named["bound_3m"], phi
        assert defaults["strassen_level"] >= 0 and defaults["err_3m_scale"] <= defaults["bound_3m"]
        assert "bound_3m" not in fp64 and fp64["err_3m_scale"] > 0
    assert named["bound_3m"] < 1e-10, "a bound that says something at this size"
