"""Ozaki scheme II's benchmark on NumPy: the ``gemmlab ozaki2`` command (rows, resume, --force,
unknown and unavailable methods), the slow-method rule, the verdict computed from stored rows, the
breakdown's phases and INT8 rate, the experiments through ``gemmlab reproduce``, and both figures drawn
from synthetic stored rows."""

import itertools

import numpy as np
import pytest
from matplotlib.text import Text

from experiments.cli import main
from experiments.core.database import ResultsDB
from experiments.core.lab import Operands
from experiments.core.registry import EXPERIMENTS, FIGURES, load, recorded_run
from experiments.ozaki import bench as scheme1
from experiments.ozaki2 import bench as b2
from experiments.ozaki2 import breakdown as bd
from experiments.ozaki2 import figures as f2
from experiments.ozaki2 import table as t2
from experiments.ozaki2 import timing as tm
from experiments.ozaki2.timing import run_timing, time_rows
from gpu import ozaki2
from gpu.backend import get_backend

load()
METHODS = "fp32,ozaki-int8-3,ozaki2-accurate-8,ozaki2-fast-20"
ARGV = ("ozaki2", "--backend", "numpy", "--sizes", "24", "--shapes", "8:40:12", "--methods", METHODS, "--phi", "0.1,1")
ENV = {"backend": "numpy", "device": "CPU: Test", "cpu": "Test", "numpy": "2.4.6"}


def test_plan_names_and_defaults():
    plan = b2.Plan(((8, 8, 8), (8, 8, 8), (2, 9, 3)), ("fp32", "ozaki2-fast-9", "fp32"))
    assert plan.methods == ("fp64", "fp32", "ozaki2-fast-9") and plan.shapes == ((8, 8, 8), (2, 9, 3))
    for kw, match in (({"shapes": ()}, "products"), ({"methods": ("ozaki2-fast-30",)}, "modulus count"),
                      ({"methods": ("nope",)}, "unknown method"), ({"phis": (25.0,)}, "phi"), ({"rows": 0}, "rows"),
                      ({"slow_factor": 0}, "slow_factor")):
        with pytest.raises(ValueError, match=match):
            b2.Plan(**{"shapes": ((8, 8, 8),), "methods": (), **kw})
    cpu, gpu = b2.BENCH_DEFAULTS["numpy"], b2.BENCH_DEFAULTS["cupy"]
    assert max(max(s) for s in cpu.shapes) <= 128 and not any(m.startswith("cublas") for m in cpu.methods)
    assert (1024, 2**18, 1024) in gpu.shapes and {"cublas-emul-auto", "ozaki2-fast-20", "ozaki-int8-12"} <= set(
        gpu.methods)
    assert b2.family("ozaki2-fast-14") == ("scheme II fast", "14") and b2.family("cublas-emul-auto")[0] == \
        "cuBLAS emulation" and b2.family("ozaki-int8-8") == ("scheme I", "int8-8")
    names = ["ozaki2-fast-12", "cublas-emul-31", "ozaki2-fast-8", "fp32", "ozaki-int8-10", "ozaki-int8-9", "fp64"]
    assert sorted(names, key=b2.sort_key) == ["fp64", "fp32", "ozaki-int8-9", "ozaki-int8-10", "ozaki2-fast-8",
                                              "ozaki2-fast-12", "cublas-emul-31"]
    with pytest.raises(ValueError, match="choose smaller"):
        b2.check_memory(get_backend("numpy"), b2.Plan(((10**6, 10**6, 10**6),), ()))


def test_cli_measures_stores_resumes_and_forces(run_json, db_path):
    out = run_json(*ARGV, "--db", db_path)
    names = ["fp64", "fp32", "ozaki-int8-3", "ozaki2-accurate-8", "ozaki2-fast-20", t2.DEFAULTS]
    assert [(r["shape"], r["method"]) for r in out["rows"]] == list(itertools.product(["N = 24", "8 x 40 x 12"], names))
    rows = {(r["shape"], r["method"]): r for r in out["rows"]}
    assert all(r["time_s"] > 0 and r["max_rel_phi0.1"] is not None and r["max_rel_phi1"] is not None
               for r in out["rows"] if r["method"] != t2.DEFAULTS)
    for r in out["rows"]:       # every row but SGEMM's and the slow ones' (timed by one run) has its call as called
        untimed = r["method"] == "fp32" or r["protocol"] == "single run"
        assert (r["as_called_s"] is None) == untimed and (r["host_s"] is None) == untimed
    defaults = rows[("N = 24", t2.DEFAULTS)]
    assert defaults["time_s"] == defaults["as_called_s"] and defaults["max_rel_phi1"] is None
    assert defaults["speedup_vs_dgemm"] == defaults["ratio_as_called"] and defaults["protocol"] == "as called"
    for shape in ("N = 24", "8 x 40 x 12"):
        dgemm = rows[(shape, "fp64")]
        assert dgemm["speedup_vs_dgemm"] == 1.0
        assert rows[(shape, "ozaki2-fast-20")]["max_rel_phi1"] <= dgemm["max_rel_phi1"] < \
            rows[(shape, "ozaki2-accurate-8")]["max_rel_phi1"]
    assert out["summary"] == {"error points measured": 20, "error points already stored": 0, "times measured": 10,
                              "times already stored": 0}
    assert [b["best"] for b in out["best"]] == ["ozaki2-fast-20", "ozaki2-fast-20"]
    assert [c["met"] for c in out["verdict"]] == [None] * 4, "N = 16384 and 8192 were not measured"
    again = run_json(*ARGV, "--db", db_path)
    assert again["summary"] == {"error points measured": 0, "error points already stored": 20, "times measured": 0,
                                "times already stored": 10}
    assert again["rows"] == out["rows"]
    forced = run_json(*ARGV, "--db", db_path, "--force")
    assert forced["summary"]["error points measured"] == 20 and forced["summary"]["times measured"] == 10
    with ResultsDB(db_path) as db:
        current = db.measurements(b2.TIME) + db.measurements(b2.ERROR)
        everything = db.measurements(b2.TIME, latest=False) + db.measurements(b2.ERROR, latest=False)
        newest = max(run["id"] for run in db.runs())
    assert len(current) == 32 and len(everything) == 64 and {m.run_id for m in current} == {newest}
    time = next(m for m in current if m.experiment == b2.TIME and m.method == "ozaki2-fast-20")
    assert time.params == {"m": 24, "k": 24, "n": 24, "regime": "sustained"} and time.meta["regime"] == "sustained"
    dgemm = next(m for m in current if m.experiment == b2.TIME and m.method == "fp64" and m.params["m"] == 24)
    assert dgemm.meta["call"] == dgemm.meta["reference_call"] == "numpy.matmul(A, B, out=C)"
    assert dgemm.meta["device_s"] == dgemm.value and dgemm.meta["ratio_as_called"] == 1.0
    defaults = next(m for m in current if m.method == t2.DEFAULTS and m.params["m"] == 24)
    assert defaults.meta["call"] == "ozaki2.matmul(A, B, out=C)" and defaults.meta["device_s"] is None
    assert defaults.meta["ratio_as_called"] == pytest.approx(dgemm.meta["as_called_s"] / defaults.value)
    err = next(m for m in current if m.experiment == b2.ERROR and m.params["m"] == 8)
    assert err.params == {"m": 8, "k": 40, "n": 12, "phi": err.params["phi"], "seed": 1, "rows": 8}
    assert err.meta["inputs"] == scheme1.HOST_INPUTS


def test_each_method_is_timed_as_called_through_its_public_call():
    be = get_backend("numpy")
    ops = Operands.given(be, np.eye(4), np.eye(4))
    texts = {name: tm.public_call(be, ops, ops.C, name) for name in
             ("ozaki2-fast-20", "ozaki2-accurate-14-w1", "ozaki-int8-3", "cublas-emul-55", t2.DEFAULTS, "fp64",
              "fp32")}
    assert texts["ozaki2-fast-20"].text == "ozaki2.matmul(A, B, out=C, moduli=20, scaling='fast')"
    assert texts["ozaki2-accurate-14-w1"].text == "ozaki2.matmul(A, B, out=C, moduli=14, scaling='accurate', level=1)"
    assert texts["ozaki-int8-3"].text == "ozaki.matmul(A, B, out=C, slices=3, slice_format='int8', remainder=False)"
    assert texts["cublas-emul-55"].text == "ozaki2.emulation.matmul(A, B, out=C, mantissa_bits=55)"
    assert texts[t2.DEFAULTS].text == "ozaki2.matmul(A, B, out=C)" and texts["fp64"] is texts["fp32"] is None
    texts["ozaki2-fast-20"].fn()
    assert np.allclose(ops.C, np.eye(4))


def test_unknown_and_unavailable_methods(capsys, db_path):
    base = ["ozaki2", "--backend", "numpy", "--sizes", "16", "--phi", "1", "--db", str(db_path)]
    assert main([*base, "--methods", "fp32,ozaki3-fast-8"]) == 2
    assert "unknown method 'ozaki3-fast-8'" in capsys.readouterr().err
    assert main([*base, "--methods", "ozaki2-fast-21"]) == 2
    assert "the modulus count must lie in 1..20" in capsys.readouterr().err
    assert main([*base, "--methods", "cublas-emul-55,ozaki2-fast-8", "--json"]) == 0
    captured = capsys.readouterr()
    assert "skipping cublas-emul-55: cuBLAS's FP64 emulation runs on the CuPy backend only" in captured.err
    assert "cublas" not in captured.out and "ozaki2-fast-8" in captured.out
    assert main([*base, "--methods", "fp32"]) == 0
    assert "speed-up vs DGEMM" in capsys.readouterr().out


def test_sampled_rows_and_device_inputs_above_full_rows(monkeypatch, run_json, db_path):
    monkeypatch.setattr(scheme1, "FULL_ROWS_MAX", 16)
    monkeypatch.setattr(scheme1, "SAMPLED_ROWS", 8)
    run_json("ozaki2", "--backend", "numpy", "--sizes", "24", "--methods", "ozaki2-fast-9", "--phi", "1",
             "--no-timing", "--db", db_path)
    with ResultsDB(db_path) as db:
        stored = db.measurements(b2.ERROR)
        assert not db.measurements(b2.TIME)
    assert {(m.method, m.params["rows"], m.meta["inputs"]) for m in stored} == {
        (name, 8, scheme1.DEVICE_INPUTS) for name in ("fp64", "ozaki2-fast-9")}


@pytest.mark.parametrize("slow_factor, protocol", [(1e-9, "single run"), (1e9, "interleaved")])
def test_methods_slower_than_the_slow_factor_are_timed_by_one_run(slow_factor, protocol, db_path):
    be = get_backend("numpy")
    plan = b2.Plan(((16, 16, 16),), ("fp32", "ozaki2-accurate-8"), slow_factor=slow_factor, errors=False)
    with ResultsDB(db_path) as db, recorded_run(be, db, "test", progress=False) as ctx:
        run_timing(ctx, plan)
        rows = {r.method: r for r in time_rows(db, ctx.env_key)}
        samples = {m.method: len(m.samples) for m in db.measurements(b2.TIME)}
    assert rows["fp64"].protocol == "interleaved" and samples["fp64"] >= 10
    for name in ("fp32", "ozaki2-accurate-8"):
        assert rows[name].protocol == protocol
        assert (samples[name] == 1 and not rows[name].stable) if protocol == "single run" else samples[name] >= 10
        assert rows[name].speedup_vs_dgemm == pytest.approx(rows[name].dgemm_s / rows[name].time_s)


def store_synthetic(db, shapes=((8192,) * 3, (16384,) * 3), phis=(1.0, 4.0), as_called=True):
    """Stored times and errors (the targets' sizes, made-up numbers): at N = 16384 ozaki2-fast-14 is as
    accurate as DGEMM at 1.5x (1.45x as called), at N = 8192 the only one as accurate is 1.02x; the best at
    phi = 4 differs; the defaults, as called, 1.41x at N = 16384 and 1.1x at 8192. ``as_called=False``: rows
    as stored before the as-called times were."""
    run = db.start_run("synthetic", ENV, "cpu-test")
    speed = {"fp64": 1.0, "fp32": 2.0, "ozaki-int8-8": 0.9, "ozaki2-fast-10": 2.5, "ozaki2-fast-14": 1.5,
             "ozaki2-accurate-15": 1.3, "cublas-emul-55": 1.1}
    for (m, k, n), (name, s) in itertools.product(shapes, speed.items()):
        s = 1.02 if n == 8192 and name == "ozaki2-accurate-15" else s
        called = {"as_called_s": 1.0 / (s - 0.05), "host_s": 1e-4, "ratio_as_called": s - 0.05} if as_called else {}
        db.add(run, b2.TIME, name, {"m": m, "k": k, "n": n, "regime": "sustained"}, value=1.0 / s, unit="s",
               samples=[1.0 / s], meta={"regime": "sustained", "dgemm_s": 1.0, "speedup_vs_dgemm": s,
                                        "stable": name != "ozaki-int8-8", **called,
                                        "protocol": "single run" if name == "ozaki-int8-8" else "interleaved"})
        if as_called and name == "fp64":
            r = 1.41 if n == 16384 else 1.1
            db.add(run, b2.TIME, t2.DEFAULTS, {"m": m, "k": k, "n": n, "regime": "sustained"}, value=1.0 / r,
                   unit="s", samples=[1.0 / r], meta={"regime": "sustained", "dgemm_s": 1.0, "speedup_vs_dgemm": r,
                                                      "as_called_s": 1.0 / r, "host_s": 1e-3, "ratio_as_called": r,
                                                      "protocol": "as called"})
    errors = {"fp64": 1e-15, "fp32": 1e-5, "ozaki-int8-8": 1e-14, "ozaki2-fast-10": 1e-12, "ozaki2-fast-14": 9e-16,
              "ozaki2-accurate-15": 0.0, "cublas-emul-55": 2e-16}
    for (m, k, n), phi, (name, e) in itertools.product(shapes, phis, errors.items()):
        e = 5e-15 if n == 8192 and name == "ozaki2-fast-14" else e * (1 + phi)
        db.add(run, b2.ERROR, name, {"m": m, "k": k, "n": n, "phi": phi, "seed": 1, "rows": 512}, value=e,
               unit="rel", meta={"max_rel": e})
    return "cpu-test"


def test_the_verdict_is_computed_from_stored_rows(db_path):
    with ResultsDB(db_path) as db:
        key = store_synthetic(db)
        plan = b2.Plan(((8192,) * 3, (16384,) * 3, (64,) * 3), ("fp32", "ozaki2-fast-14", "ozaki2-fast-10",
                                                                    "ozaki2-accurate-15", "ozaki-int8-8"),
                       phis=(1.0, 4.0))
        rows = t2.bench_table(db, key, plan, "sustained")
    stability = {(r.shape[0], r.method): r.as_dict()["stable"] for r in rows}
    assert stability[(16384, "ozaki-int8-8")] is False and stability[(16384, "ozaki2-fast-14")] is True
    assert stability[(64, "fp32")] is None                      # not measured
    big, small = t2.best_scheme2(rows, (16384,) * 3), t2.best_scheme2(rows, (8192,) * 3)
    assert big["as_accurate_as_dgemm"] == ["ozaki2-accurate-15", "ozaki2-fast-14"] and big["best"] == "ozaki2-fast-14"
    assert small["best"] == "ozaki2-accurate-15" and small["best_speedup_vs_dgemm"] == pytest.approx(1.02)
    assert "note" in t2.best_scheme2(rows, (64,) * 3), "N = 64 has no DGEMM error"
    checks = t2.verdict(rows)
    assert [c.met for c in checks] == [True, False, True, False]
    assert "ozaki2-fast-14: 1.450x DGEMM as called (1.500x by the device's clock)" in checks[0].measured
    assert "N = 16384" in checks[0].target
    assert "ozaki2-accurate-15: 0.970x DGEMM as called" in checks[1].measured and ">= 1.05x" in checks[1].target
    assert checks[2].measured == "1.410x" and "at its defaults, as called, >= 1.4x DGEMM" in checks[2].target
    assert checks[3].measured == "1.100x" and ">= 1.2x" in checks[3].target
    assert t2.verdict(rows, {16384: 1.6})[0].met is False and t2.verdict(rows, {4096: 1.0})[0].met is None
    table = t2.best_table(rows)
    assert table.column("configuration") == ["ozaki2-accurate-15", "ozaki2-fast-14", None]


def test_rows_stored_before_the_as_called_times_are_not_judged_as_called(db_path):
    with ResultsDB(db_path) as db:
        key = store_synthetic(db, as_called=False)
        plan = b2.Plan(((8192,) * 3, (16384,) * 3), ("ozaki2-fast-14", "ozaki2-accurate-15"), phis=(1.0,))
        rows = t2.bench_table(db, key, plan, "sustained")
    assert all(r.as_called_s is None and r.ratio_as_called is None for r in rows)
    checks = t2.verdict(rows)
    assert [c.met for c in checks] == [None] * 4
    assert checks[0].measured == "not measured as called (ozaki2-fast-14: 1.500x DGEMM by the device's clock)"
    assert checks[2].measured == "not measured as called"


SMALL_PARETO = b2.Plan(((16, 16, 16),), ("fp32", "ozaki-int8-3", "ozaki2-accurate-8", "ozaki2-fast-12"),
                       phis=(0.1, 1.0))
SMALL_BREAKDOWN = (((16, 16, 16), (2, 140000, 3)), ("ozaki2-accurate-15", "ozaki2-fast-14"))


def test_experiments_through_reproduce_store_phases_and_draw(run_json, monkeypatch, db_path, tmp_path):
    monkeypatch.setitem(b2.PARETO_PLANS, ("numpy", True), SMALL_PARETO)
    monkeypatch.setitem(b2.BREAKDOWN_PLANS, ("numpy", True), SMALL_BREAKDOWN)
    assert {b2.PARETO, b2.BREAKDOWN} <= set(EXPERIMENTS) and {b2.PARETO, b2.BREAKDOWN} <= set(FIGURES)
    out = run_json("reproduce", "--quick", "--backend", "numpy", "--only", b2.PARETO, b2.BREAKDOWN, "--db", db_path,
                   "--out", tmp_path)
    pareto, phases = out["experiments"][b2.PARETO], out["experiments"][b2.BREAKDOWN]
    assert pareto["error points measured"] == 10 and pareto["times measured"] == 5
    assert len(pareto["time and error per product and method"]) == 6 and len(pareto["verdict"]) == 4
    assert {(r["configuration"], r["product"]) for r in phases["share of time per phase"]} == set(
        itertools.product(SMALL_BREAKDOWN[1], ("N = 16", "2 x 140000 x 3")))
    with ResultsDB(db_path) as db:
        stored = db.measurements(b2.BREAKDOWN)
    by_point = {(m.method, m.params["k"], m.params["phase"]): m for m in stored}
    assert {p for _, k, p in by_point if k == 16} == set(bd.ALWAYS)
    assert {p for _, k, p in by_point if k == 140000} == {*bd.ALWAYS, "reduce"}, "k beyond 2^17 - 1 adds the reduction"
    gemm = by_point[("ozaki2-fast-14", 140000, "gemm")]
    assert gemm.meta["int8_ops"] == 14 * 2 * 2 * 140000 * 3 and len(gemm.samples) == bd.RUNS
    assert gemm.meta["int8_ops_per_s"] == pytest.approx(gemm.meta["int8_ops"] / gemm.value)
    assert gemm.value == pytest.approx(float(np.median(gemm.samples))) and gemm.meta["regime"] == "sustained"
    for name in (b2.PARETO, b2.BREAKDOWN):
        assert (tmp_path / f"{name}.png").is_file() and f"### {name}" in (tmp_path / "SUMMARY.md").read_text()
    again = run_json("reproduce", "--quick", "--backend", "numpy", "--only", b2.BREAKDOWN, "--db", db_path,
                     "--out", tmp_path)
    assert again["experiments"][b2.BREAKDOWN]["points measured"] == 0


def test_pareto_figure_from_stored_rows(db_path):
    with ResultsDB(db_path) as db:
        store_synthetic(db)
        fig = FIGURES[b2.PARETO].draw(db)
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in axes] == ["N = 8192, phi = 1", "N = 16384, phi = 1"], "the timing inputs' phi"
    lines = {ln.get_label(): ln for ln in axes[0].get_lines() if not ln.get_label().startswith("_")}
    assert set(lines) == set(b2.FAMILIES) - {"other", "scheme II fine"}   # every family the rows hold
    assert len({str(ln.get_color()) for ln in lines.values()}) == len(lines), "two families share a colour"
    fast = lines["scheme II fast"]
    assert list(fast.get_xdata()) == [2.5, 1.5] and fast.get_linestyle() == "-", "joined by modulus count"
    assert lines["cuBLAS emulation"].get_linestyle() == lines["DGEMM"].get_linestyle() == "None", "unjoined"
    assert lines["scheme II accurate"].get_ydata()[0] == f2.EXACT, "an error of 0 is drawn at 2^-54"
    assert {t.get_text() for t in axes[0].texts} == {"fast-10", "fast-14", "emul-55", "accurate-15"}, \
        "the front only: ozaki-int8-8 is slower and less accurate than fast-14"
    legend = [t.get_text() for leg in fig.subfigs[0].legends for t in leg.get_texts()]
    assert "hollow: timed by one run or unstable" in legend and "scheme II accurate" in legend
    footer = [t.get_text() for t in fig.findobj(Text) if t.get_gid() == "provenance"]
    assert footer == ["CPU: Test · numpy · regime: sustained · NumPy 2.4.6"]
    note = [t.get_text() for t in fig.findobj(Text) if t.get_gid() == "figure-note"]
    assert len(note) == 1 and note[0].startswith("Errors on phi = 4 are stored but not drawn")


def test_pareto_figure_draws_each_winograd_level_as_a_series_of_its_own(db_path):
    """Levels over the residues are series of their own in their family's colour, each joined in count order (a
    level-1 point between level 0's counts would zigzag the family's line otherwise)."""
    levels = {"ozaki2-fast-14-w1": (1.6, 9e-16), "ozaki2-fast-10-w1": (2.7, 1e-12), "ozaki2-fast-14-w2": (1.4, 9e-16)}
    with ResultsDB(db_path) as db:
        store_synthetic(db, shapes=((16384,) * 3,), phis=(1.0,))
        run = db.start_run("synthetic levels", ENV, "cpu-test")
        for name, (s, e) in levels.items():
            db.add(run, b2.TIME, name, {"m": 16384, "k": 16384, "n": 16384, "regime": "sustained"}, value=1.0 / s,
                   unit="s", samples=[1.0 / s], meta={"regime": "sustained", "dgemm_s": 1.0, "speedup_vs_dgemm": s})
            db.add(run, b2.ERROR, name, {"m": 16384, "k": 16384, "n": 16384, "phi": 1.0, "seed": 1, "rows": 512},
                   value=e, unit="rel", meta={"max_rel": e})
        fig = FIGURES[b2.PARETO].draw(db)
    lines = {ln.get_label(): ln for ln in fig.axes[0].get_lines() if not ln.get_label().startswith("_")}
    fast, one, two = (lines[k] for k in ("scheme II fast", "scheme II fast, level 1", "scheme II fast, level 2"))
    assert [list(ln.get_xdata()) for ln in (fast, one, two)] == [[2.5, 1.5], [2.7, 1.6], [1.4]]
    assert fast.get_color() == one.get_color() == two.get_color()
    assert len({ln.get_linestyle() for ln in (fast, one, two)}) == 3
    assert len({ln.get_marker() for ln in (fast, one, two)}) == 3
    assert {"fast-14 w1", "fast-10 w1"} <= {t.get_text() for t in fig.axes[0].texts}
    legend = [t.get_text() for leg in fig.subfigs[0].legends for t in leg.get_texts()]
    assert legend.index("scheme II fast") < legend.index("scheme II fast, level 1") < legend.index(
        "scheme II fast, level 2")


def test_breakdown_figure_stacks_phases_and_names_the_rate(db_path):
    with ResultsDB(db_path) as db:
        run = db.start_run("synthetic", ENV, "cpu-test")
        for name, moduli, gemm in (("ozaki2-accurate-15", 15, 0.002), ("ozaki2-fast-14", 14, 0.001)):
            for phase, s in (("scaling", 0.001), ("residues", 0.0005), ("gemm", gemm), ("crt", 0.0005)):
                meta = {"int8_ops_per_s": moduli * 2 * 512**3 / s} if phase == "gemm" else {}
                db.add(run, b2.BREAKDOWN, name, {"m": 512, "k": 512, "n": 512, "phase": phase, "regime": "sustained"},
                       value=s, unit="s", meta={"regime": "sustained", **meta})
        rows = bd.breakdown_rows(db, "cpu-test")
        fig = FIGURES[b2.BREAKDOWN].draw(db)
    assert [r.total_s for r in rows] == pytest.approx([0.004, 0.003])
    ax = fig.axes[0]
    tops: dict[int, list[float]] = {}
    for bar in ax.patches:
        tops.setdefault(round(bar.get_x() + bar.get_width() / 2), []).append(bar.get_y() + bar.get_height())
    assert tops == {0: pytest.approx([1.0, 1.5, 3.5, 4.0]), 1: pytest.approx([1.0, 1.5, 2.5, 3.0])}, \
        "phases stacked in order, in ms"
    assert [t.get_text() for t in ax.texts] == ["INT8 GEMM\n2.01 TOP/s", "INT8 GEMM\n3.76 TOP/s"]
    assert [bd.rate_text(r) for r in (1.3504e15, 2.5e9, 612.4e9, None)] == ["1350 TOP/s", "2.5 GOP/s", "612 GOP/s",
                                                                            "n/a"]


def test_timing_groups_hold_what_the_plan_cache_and_memory_hold():
    """Each group's scheme II plans stay cached and fit beside each other: at most GROUP_PLANS configurations (the
    defaults take the cache's last place), their fastest layouts' bytes within the room; other methods go first."""
    shape = (16384,) * 3
    fast = [f"ozaki2-fast-{c}" for c in range(8, 21)]
    groups = tm.timing_groups(shape, ["fp32", *fast, "ozaki-int8-8"], room=float("inf"))
    assert groups[0][:2] == ["fp32", "ozaki-int8-8"] and [g[2:] if i == 0 else g for i, g in enumerate(groups)] == [
        fast[:7], fast[7:]]
    assert tm.GROUP_PLANS == ozaki2.api.MAX_PLANS - 1 == 7
    level = ["ozaki2-fast-14-w1", "ozaki2-fast-15-w1", "ozaki2-fast-16"]
    sizes = {m: tm.plan_bytes(shape, m) for m in [*level, tm.DEFAULTS]}
    assert sizes["ozaki2-fast-15-w1"] > 3 * sizes["ozaki2-fast-16"], "the fused level's sums and 7 products"
    room = sizes[tm.DEFAULTS] + sizes["ozaki2-fast-14-w1"] + sizes["ozaki2-fast-15-w1"] + sizes["ozaki2-fast-16"] - 1
    assert tm.timing_groups(shape, level, room) == [level[:2], level[2:]]
    room = sizes["ozaki2-fast-15-w1"] + sizes["ozaki2-fast-16"]
    assert tm.timing_groups(shape, level, room) == [level[:1], level[1:]], "later groups leave out the defaults"
    room = sizes[tm.DEFAULTS] + sizes["ozaki2-fast-14-w1"] - 1
    assert tm.timing_groups(shape, level, room) == [[], level[:1], level[1:2], level[2:]], "none beside the defaults"
    assert tm.timing_groups(shape, ["fp32", *level], 1.0) == [["fp32"], *[[m] for m in level]], "one alone"
    assert tm.timing_groups(shape, ["fp32"], 1.0) == [["fp32"]] and tm.timing_groups(shape, [], 1.0) == [[]]


def test_the_sweep_times_each_group_apart_and_stores_every_row(monkeypatch, run_json, db_path):
    seen = []
    measure = tm.measure_group
    monkeypatch.setattr(tm, "GROUP_PLANS", 1)
    monkeypatch.setattr(tm, "measure_group", lambda ctx, shape, ops, out, group, plan, defaults: (
        seen.append((list(group), defaults)), measure(ctx, shape, ops, out, group, plan, defaults)))
    run_json("ozaki2", "--backend", "numpy", "--sizes", "16", "--methods", "ozaki2-fast-8,ozaki2-fast-9", "--phi",
             "1", "--no-errors", "--db", db_path)
    assert seen == [(["fp64", "ozaki2-fast-8"], True), (["ozaki2-fast-9"], False)], "the defaults in the first alone"
    with ResultsDB(db_path) as db:
        stored = {m.method for m in db.measurements(b2.TIME)}
    assert stored == {"fp64", "ozaki2-fast-8", "ozaki2-fast-9", t2.DEFAULTS}
    seen.clear()
    monkeypatch.setattr(tm, "plan_bytes", lambda shape, name: 2**60)
    run_json("ozaki2", "--backend", "numpy", "--sizes", "16", "--methods", "ozaki2-fast-8,ozaki2-fast-9", "--phi",
             "1", "--no-errors", "--db", db_path, "--force")
    assert seen == [(["fp64"], True), (["ozaki2-fast-8"], False), (["ozaki2-fast-9"], False)], "none fits beside"


def test_the_breakdown_stores_every_phase_a_run_reports(run_json, monkeypatch, db_path, tmp_path):
    """A fused level-1 run reports its operand sums as a phase of their own: stored, so the phases sum to the run."""
    monkeypatch.setitem(b2.BREAKDOWN_PLANS, ("numpy", True), (((64, 64, 64),), ("ozaki2-fast-15-w1",)))
    samples, _ = bd.measure_phases(get_backend("numpy"), (64, 64, 64), "ozaki2-fast-15-w1", "sustained", runs=1)
    assert set(samples[0]) <= set(bd.PHASES) and "sums" in samples[0]
    run_json("reproduce", "--quick", "--backend", "numpy", "--only", b2.BREAKDOWN, "--db", db_path, "--out", tmp_path)
    with ResultsDB(db_path) as db:
        stored = {m.params["phase"]: m for m in db.measurements(b2.BREAKDOWN)}
    assert set(stored) == {"scaling", "residues", "sums", "gemm", "crt"}
    assert stored["gemm"].meta["level"] == 1 and stored["gemm"].meta["int8_ops"] == 15 * 2 * 64**3 * 7 / 8
