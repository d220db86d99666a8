"""``gemmlab frontdoor`` on NumPy: the grid and its memory, the error in the contract's scale, the command storing,
resuming after an interruption and printing, a refused point, bad arguments, the experiment, the figure from
the stored rows, and the verdict on made-up rows."""

import json
from dataclasses import replace

import numpy as np
import pytest

import gpu
from experiments.cli import main
from experiments.core.ascalled import Call
from experiments.core.database import ResultsDB
from experiments.core.registry import FIGURES, load
from experiments.frontdoor import bench, errors, figures, groups, points
from experiments.frontdoor.points import PLANS, Plan, plan_points, point_bytes
from experiments.frontdoor.report import checks, floor_check
from experiments.frontdoor.rows import FRONTDOOR, LIBRARY, REFUSED, FrontdoorRow, of_points
from gpu.backend import get_backend
from gpu.frontdoor import Guarantee, as_accuracy

GiB = 2**30
#: Two shapes small enough that a point's group (the library GEMM, the front door, two Ozaki candidates) takes
#: a fraction of a second on NumPy.
SHAPES, ACCURACIES = "16:16:16,4:256:4", "dgemm,sgemm"


# --------------------------------------------------------------------------- the grid

def test_the_gpu_grid_is_the_issues_and_shapes_that_do_not_fit_are_left_out_with_a_reason():
    grid = PLANS[("cupy", False)]
    assert {s[0] for s in grid.shapes if s[0] == s[1] == s[2]} == set(points.SQUARES)
    assert {(m, k, n) for m, k, n in grid.shapes if m * n <= 64 * 64} == {
        (m, 2**e, m) for m in (16, 64) for e in (16, 20, 24)}
    assert {(4096, 65536, 4096), (32768, 4096, 32768)} <= set(grid.shapes)
    assert grid.accuracies == ("dgemm", 1e-10, "sgemm") and len(grid.points()) == 3 * len(grid.shapes)
    assert all(m * k * n <= 128**3 for m, k, n in PLANS[("numpy", False)].shapes), "a CPU run takes seconds"
    fits, left = plan_points(grid.shapes, 40 * GiB)
    assert (49152,) * 3 not in fits and (64, 2**24, 64) in fits and len(fits) + len(left) == len(grid.shapes)
    for shape in grid.shapes:
        assert (shape in fits) == (point_bytes(shape) <= 0.9 * 40 * GiB)
    assert any(reason.startswith("N = 49152: A, B and two outputs need 72.0 GiB") for reason in left)


def test_custom_plans_take_the_given_shapes_and_levels_and_refuse_empty_lists_and_exact():
    be = get_backend("numpy")
    assert points.custom_plan(be, None, None) == PLANS[("numpy", False)]
    plan = points.custom_plan(be, [(8, 8, 8), (8, 8, 8)], [as_accuracy(1e-10), as_accuracy("dgemm")])
    assert plan == Plan(((8, 8, 8),), (1e-10, "dgemm"))
    for shapes, accs, message in (([], None, "--shape is empty"), (None, [], "--accuracy is empty"),
                                  (None, [as_accuracy("exact")], "nothing to compare")):
        with pytest.raises(ValueError, match=message):
            points.custom_plan(be, shapes, accs)


# --------------------------------------------------------------------------- the error in the contract's scale

def test_each_scale_is_the_contracts_and_the_error_is_the_t_the_sample_needs():
    be = get_backend("numpy")
    A, B, source = errors.phi_inputs(be, (5, 7, 3), 2.0)
    assert source == errors.HOST_INPUTS and A.shape == (5, 7) and B.shape == (7, 3)
    rows = A[[0, 4]]
    assert np.allclose(errors.scale_of(be, "entry", A, B, rows), np.abs(rows) @ np.abs(B))
    assert np.allclose(errors.scale_of(be, "rowcol", A, B, rows),
                       np.outer(np.linalg.norm(rows, axis=1), np.linalg.norm(B, axis=0)))
    assert errors.scale_of(be, "matrix", A, B, rows) == pytest.approx(7 * np.abs(A).max() * np.abs(B).max())
    R, S = np.ones((2, 3)), np.full((2, 3), 4.0)
    C = R.copy()
    C[1, 2] += 1e-10
    assert errors.contract_error(be, C, R, S, 7) == pytest.approx(1e-10 / 4)
    assert errors.contract_error(be, R, R, S, 7) == 0.0
    C[0, 0] = np.nan
    assert errors.contract_error(be, C, R, S, 7) == np.inf
    need = as_accuracy("dgemm").required(7)
    bound = errors.error_bound("dgemm", 7, Guarantee("entry", need.t / 8))
    assert bound["bound_t"] == need.t / 8 and bound["contract_t"] == need.t and bound["scale"] == "rowcol"
    assert errors.error_bound("sgemm", 7, None)["bound_t"] == as_accuracy("sgemm").required(7).t


def test_a_front_door_that_breaks_its_bound_is_reported_as_a_miss(monkeypatch):
    """The error check can fail: a product off by 1e-9 of its scale on every row misses the dgemm bound."""
    be = get_backend("numpy")
    true_matmul = gpu.matmul

    def off(A, B, **kw):
        return true_matmul(A, B, **kw) + 1e-9 * np.abs(A).max() * np.abs(B).max() * A.shape[1]

    monkeypatch.setattr(errors.gpu, "matmul", off)
    found = errors.measure_errors(be, (16, 16, 16), ["dgemm", "sgemm"], phis=(1.0,))
    assert [e["phi"] for e in found["dgemm"]] == [1.0] and found["dgemm"][0]["rows"] == 16
    bad, fine = (door_row(1.0, 1.0, accuracy=acc, shape=(16, 16, 16), bound=errors.error_bound(acc, 16, None),
                          errors=({"phi": 1.0, "measured": found[acc][0]["measured"]},)) for acc in ("dgemm", "sgemm"))
    assert [c.met for c in checks([bad, fine])] == [True, True, False, None]
    assert "N = 16, accuracy dgemm, phi = 1" in checks([bad, fine])[2].measured


# --------------------------------------------------------------------------- the command, end to end

def stored(db_path):
    with ResultsDB(db_path) as db:
        return db.measurements("frontdoor"), db.runs()


def test_the_command_stores_every_call_resumes_after_an_interruption_and_draws_the_figure(
        run_json, db_path, monkeypatch, capsys, tmp_path):
    argv = ("frontdoor", "--backend", "numpy", "--shape", SHAPES, "--accuracy", ACCURACIES, "--db", str(db_path))
    real = bench.measure_shape

    def interrupted(ctx, shape, levels):
        if shape != (16, 16, 16):
            raise KeyboardInterrupt
        return real(ctx, shape, levels)

    monkeypatch.setattr(bench, "measure_shape", interrupted)
    assert main(list(argv)) == 130
    first, runs = stored(db_path)
    assert runs[0]["status"] == "interrupted" and {(m.params["m"], m.params["accuracy"]) for m in first} == {
        (16, "dgemm"), (16, "sgemm")}
    monkeypatch.setattr(bench, "measure_shape", real)
    out = run_json(*argv)
    assert (out["summary"]["points measured"], out["summary"]["points already stored"]) == (2, 2)
    again = run_json(*argv)
    assert (again["summary"]["points measured"], again["summary"]["points already stored"]) == (0, 4)
    assert again["rows"] == out["rows"] and [r["status"] for r in stored(db_path)[1]] == ["finished", "finished",
                                                                                           "interrupted"]
    measurements, _ = stored(db_path)
    assert {m.id for m in first} <= {m.id for m in measurements}, "the interrupted run's points were kept"
    be = get_backend("numpy")
    for shape in ((16, 16, 16), (4, 256, 4)):
        A, B, _ = errors.phi_inputs(be, shape, errors.TIME_PHI)
        for acc in ("dgemm", "sgemm"):
            mine = {r["method"]: r for r in out["rows"] if (r["m"], r["k"], r["n"], r["accuracy"]) == (*shape, acc)}
            door, plan = mine[FRONTDOOR], gpu.plan(A, B, accuracy=acc, backend=be)
            assert door["runs"] == plan.chosen.name and door["explain"] == plan.explain()
            assert list(door["candidates"]) == [r.name for r in plan.ranking.entries]
            assert set(mine) == {LIBRARY, FRONTDOOR, *door["timed"]} and len(door["timed"]) == groups.OTHERS
            for r in mine.values():
                assert r["time_s"] == r["as_called_s"] > 0 and r["host_s"] > 0 and r["device_s"] > 0
                assert r["ratio_as_called"] == pytest.approx(mine[LIBRARY]["as_called_s"] / r["as_called_s"])
            others = {n: r["as_called_s"] for n, r in mine.items() if n != FRONTDOOR}
            assert door["fastest"] == min(others, key=others.get)
            assert door["over_fastest"] == pytest.approx(min(others.values()) / door["as_called_s"])
            need = as_accuracy(acc).required(shape[1])
            assert door["bound"]["contract_t"] == need.t and door["bound"]["scale"] == need.scale
            assert [e["phi"] for e in door["errors"]] == list(errors.PHIS)
            assert all(0 <= e["measured"] <= door["bound"]["bound_t"] for e in door["errors"])
    assert [c["met"] for c in out["verdict"]][2] is True, "the library GEMM keeps its own bound"
    assert main(list(argv)) == 0
    text = capsys.readouterr().out
    assert "x library as called" in text and "every error of the front door" in text
    with ResultsDB(db_path) as db:
        fig = figures.render_choice(db)
        paths = FIGURES[figures.NAME].render(db, tmp_path)
    assert [ax.get_title() for ax in fig.axes] == ["accuracy dgemm", "accuracy sgemm"]
    for ax, acc in zip(fig.axes, ("dgemm", "sgemm")):
        stars = [ln for ln in ax.get_lines() if ln.get_marker() == "*"]
        drawn = sorted(y for ln in stars for y in ln.get_ydata())
        assert drawn == sorted(r["ratio_as_called"] for r in out["rows"]
                               if r["method"] == FRONTDOOR and r["accuracy"] == acc)
        assert len(ax.get_xticks()) == 2 and ax.get_xticklabels()[1].get_text() == "4×256×4"
    assert paths[0].suffix == ".png" and paths[0].stat().st_size > 10_000 and paths[1].suffix == ".pdf"


def test_a_point_the_front_door_refuses_is_stored_as_refused_and_not_judged(run_json, db_path):
    argv = ("frontdoor", "--backend", "numpy", "--shape", "16:16:16", "--accuracy", "1e-18", "--db", str(db_path))
    out = run_json(*argv)
    (row,) = out["rows"]
    assert row["method"] == FRONTDOOR and row["time_s"] is None and "no method keeps" in row["refused"][FRONTDOOR]
    assert [c["met"] for c in out["verdict"]] == [None] * 4 and "1 points refused" in out["verdict"][0]["measured"]
    assert stored(db_path)[0][0].unit == REFUSED
    assert run_json(*argv)["summary"]["points measured"] == 0


def test_bad_arguments_are_refused_before_any_work(capsys, db_path):
    base = ["frontdoor", "--backend", "numpy", "--db", str(db_path)]
    for extra, message in ((["--shape", "10:10"], "a shape reads M:K:N"), (["--accuracy", "fp64"], "accuracy must be"),
                           (["--accuracy", "2"], "a number in (0, 1)")):
        with pytest.raises(SystemExit):
            main([*base, *extra])
        assert message in capsys.readouterr().err
    for extra, message in ((["--shape", ","], "--shape is empty"), (["--accuracy", "exact"], "nothing to compare")):
        assert main([*base, *extra]) == 2
        assert message in capsys.readouterr().err
    assert stored(db_path) == ([], []), "argument errors must not leave runs behind"


def test_the_experiment_summarises_its_points_and_draws_its_figure(run_json, db_path, tmp_path, monkeypatch):
    monkeypatch.setitem(PLANS, ("numpy", True), Plan(((8, 8, 8),), ("dgemm",)))
    monkeypatch.setattr(groups, "OTHERS", 1)
    load()
    out = run_json("reproduce", "--quick", "--backend", "numpy", "--only", "frontdoor", "--db", str(db_path),
                   "--out", str(tmp_path))
    found = out["experiments"]["frontdoor"]
    assert found["scope"] == "N = 8; accuracy dgemm" and found["points measured"] == 1
    (point,) = found["the front door as called"]
    assert point["runs"] == "gemm (the library GEMM)" and point["x library"] > 0
    assert {r["method"] for r in found["every call timed"]} == {LIBRARY, FRONTDOOR, "ozaki2(moduli='auto', "
                                                                                    "target='dgemm')"}
    assert len(found["verdict"]) == 4 and (tmp_path / "frontdoor-choice.png").stat().st_size > 10_000
    assert "### frontdoor: N = 8" in (tmp_path / "SUMMARY.md").read_text()


# --------------------------------------------------------------------------- the verdict on made-up rows

def door_row(ratio, over, accuracy="dgemm", shape=(4096, 4096, 4096), **kw):
    m, k, n = shape
    return FrontdoorRow(FRONTDOOR, "ozaki2", m, k, n, accuracy, "sustained", 1e-3, True, "gpu.matmul(A, B)", 1e-3,
                        1e-5, ratio, 1e-3, ratio, runs="ozaki2", fastest="library", over_fastest=over, **kw)


def test_the_verdict_passes_misses_with_numbers_and_leaves_unmeasured_points_not_judged():
    bound = {"bound_t": 1e-15, "slack": 2.3e-16}
    good = door_row(1.3, 1.01, errors=({"phi": 1.0, "measured": 3e-16},), bound=bound)
    assert [c.met for c in checks([good])] == [True, True, True, None]
    slow = door_row(0.97, 0.9, shape=(8192, 8192, 8192), errors=({"phi": 4.0, "measured": 2e-15},), bound=bound)
    verdict = checks([good, slow])
    assert [c.met for c in verdict] == [False, False, False, None]
    assert "0.970x at N = 8192, accuracy dgemm" in verdict[0].measured
    assert "1.111x library's time at N = 8192" in verdict[1].measured
    assert "2e-15 > 1e-15 at N = 8192, accuracy dgemm, phi = 4" in verdict[2].measured
    unmeasured = door_row(1.0, 1.0, errors=({"phi": 1.0, "measured": None, "why": "short of memory"},), bound=bound)
    assert [c.met for c in checks([unmeasured])] == [True, True, None, None]
    refused = replace(door_row(None, None), time_s=None, refused={FRONTDOOR: "no method keeps 1e-18"})
    assert [c.met for c in checks([refused])] == [None] * 4 and [c.met for c in checks([])] == [None] * 4


def test_the_choice_with_the_profile_hidden_is_judged_by_its_measured_time():
    same = door_row(1.3, 1.0, hidden="ozaki2", hidden_lost=0.0)
    close = door_row(1.3, 1.0, shape=(8192, 8192, 8192), hidden="library", hidden_lost=0.02)
    assert checks([same, close])[3].met is True
    assert "the same choice at 1 of 2 points; worst +2.0%" in checks([same, close])[3].measured
    far = door_row(1.3, 1.0, shape=(16384, 16384, 16384), hidden="library", hidden_lost=0.25)
    untimed = door_row(1.3, 1.0, shape=(2048, 2048, 2048), hidden="ozaki2", hidden_lost=None)
    verdict = checks([same, far, untimed])[3]
    assert verdict.met is False and "+25.0% at N = 16384, accuracy dgemm (library against ozaki2)" in verdict.measured
    assert "1 points whose hidden choice was not timed, not judged" in verdict.measured


def test_a_candidate_row_left_by_an_interrupted_group_is_not_its_points():
    door = door_row(1.2, 1.0, timed=("ozaki(target='dgemm')",))
    lib = replace(door, method=LIBRARY, family="gemm")
    kept, stale = (replace(door, method=name, family="ozaki") for name in ("ozaki(target='dgemm')", "strassen L1"))
    alone = replace(lib, m=2048, k=2048, n=2048)
    assert of_points([lib, door, kept, stale, alone]) == [lib, door, kept]
    assert json.loads(json.dumps(door.as_dict()))["over_fastest"] == 1.0


def test_a_shapes_levels_are_timed_in_one_group_each_candidate_built_once(run_json, db_path, monkeypatch):
    built = []
    real = groups.family_call
    monkeypatch.setattr(groups, "family_call", lambda be, A, B, r: (built.append(r.name), real(be, A, B, r))[1])
    out = run_json("frontdoor", "--backend", "numpy", "--shape", "16:16:16", "--accuracy", "dgemm,1e-10,sgemm",
                   "--db", str(db_path))
    assert built and len(built) == len(set(built)), "a candidate named by several levels is built once"
    library = {r["as_called_s"] for r in out["rows"] if r["method"] == LIBRARY}
    doors = [r for r in out["rows"] if r["method"] == FRONTDOOR]
    assert len(library) == 1 and len(doors) == 3, "one library timing for the shape, the front door per level"
    assert {r["call"] for r in doors} == {f"gpu.matmul(A, B, accuracy={a!r})" for a in ("dgemm", 1e-10, "sgemm")}


def test_a_candidate_estimated_below_half_the_library_gemm_is_not_timed_and_says_why():
    fast, slow, unknown, far = (gpu.frontdoor.Ranked(name, "ozaki2", {}, ratio, keeps=True, elsewhere=where)
                                for name, ratio, where in (("fast", 1.2, None), ("slow", 0.2, None),
                                                           ("unknown", None, None), ("far", None, 0.3)))
    chosen = gpu.frontdoor.Ranked("chosen", "gemm")

    class Everything(groups.Built):
        def get(self, be, A, B, r):
            return bench.Call(r.name, lambda: None)

    calls, _, refused = groups.candidates(None, None, None, [fast, slow, unknown, far], chosen, Everything(), 3)
    assert list(calls) == ["fast", "unknown"]
    assert refused["slow"] == "not timed: estimated 0.2x the library GEMM, below 0.5x"
    assert "0.3x the library GEMM (its median over the shapes measured)" in refused["far"]


def test_a_shape_large_beside_the_device_is_timed_level_by_level(run_json, db_path, monkeypatch):
    monkeypatch.setattr(bench, "TOGETHER", 0.0)
    freed = []
    real = bench.free_kept_plans
    monkeypatch.setattr(bench, "free_kept_plans", lambda *a, **k: (freed.append(1), real(*a, **k))[1])
    out = run_json("frontdoor", "--backend", "numpy", "--shape", "16:16:16", "--accuracy", "dgemm,sgemm",
                   "--db", str(db_path))
    library = [m for m in stored(db_path)[0] if m.method == LIBRARY]
    assert len([r for r in out["rows"] if r["method"] == LIBRARY]) == len(library) == 2
    assert library[0].samples != library[1].samples, "one group per level, each timing the library GEMM"
    assert len(freed) >= 2, "every plan freed between levels"


def test_a_shape_large_beside_the_device_times_no_candidate_beside_the_front_door(run_json, db_path, monkeypatch):
    """Where the operands take more than BESIDE of the device, the candidates' plans would hold workspaces the front
    door's call needs: none is timed, and the front door's row names each with why."""
    def methods(shape):
        out = run_json("frontdoor", "--backend", "numpy", "--shape", shape, "--accuracy", "sgemm", "--db",
                       str(db_path))
        return {r["method"] for r in out["rows"]} - {FRONTDOOR, LIBRARY}

    assert methods("64:64:64"), "candidates are timed beside the front door at this shape"
    monkeypatch.setattr(groups, "BESIDE", 0.0)
    assert not methods("48:48:48")
    refused = ResultsDB(db_path).measurements(bench.EXPERIMENT, method=FRONTDOOR)[-1].meta["refused"]
    assert refused and all("not timed: beside the front door's plan" in why for why in refused.values()), refused


def test_the_fastest_call_beside_the_front_door_keeps_the_points_accuracy():
    """Where the library GEMM does not keep the accuracy (1e-10 over k = 2^20: its gamma_k is 1.2e-10), the front
    door is judged against the fastest candidate it timed, not against the library; rows stored before the bench
    kept that flag read it from the ranking's line of the library in the explanation."""
    from experiments.core.database import Measurement
    from experiments.frontdoor.rows import FrontdoorRow, keeping_fastest

    line = ("-  gemm (the library GEMM)                        1.000   1.12 ms  {bound} entry    {keeps}     the "
            "reference")
    params = {"m": 64, "k": 2**20, "n": 64, "accuracy": "1e-10", "regime": "sustained"}

    def row(method, value, **meta):
        return FrontdoorRow.read(Measurement(1, 1, "frontdoor", method, params, "e", value, "s", [value], meta, ""))

    for keeps, meta in (("no", {}), ("yes", {}), (None, {"library_keeps": False})):
        explain = "" if keeps is None else line.format(bound="1.2e-10", keeps=keeps)
        door = row(FRONTDOOR, 2.1e-4, runs="splitk(deterministic=False)", timed=["splitk(deterministic=True)"],
                   explain=explain, fastest=LIBRARY, frontdoor_over_fastest=1.0 / 2.1, **meta)
        rows = keeping_fastest([row(LIBRARY, 1.0e-4), door, row("splitk(deterministic=True)", 2.0e-4)])
        judged = rows[1]
        if keeps == "yes":
            assert (judged.fastest, judged.over_fastest) == (LIBRARY, pytest.approx(1.0 / 2.1))
        else:
            assert (judged.fastest, judged.over_fastest) == ("splitk(deterministic=True)", pytest.approx(2.0 / 2.1))
    slow = row(FRONTDOOR, 2.1e-4, runs="splitk(deterministic=False)", ratio_as_called=1 / 2.1, library_keeps=False)
    floor = floor_check([slow])
    assert floor.met is False and "the library GEMM does not keep the accuracy there" in floor.measured


def test_a_candidate_short_of_memory_on_its_first_call_is_dropped_with_why_and_the_front_door_never_is():
    """Each plan fit when built, alone; the group's other plans may have filled their workspaces since: such a
    candidate is dropped, named, and returned for the caller to time alone. The front door's own call is never
    dropped: a refusal before any work is a :class:`groups.Refused`, running out of memory propagates."""
    be = get_backend("numpy")
    A, B = np.ones((4, 3)), np.ones((3, 5))

    def short():
        raise MemoryError("Out of memory allocating 9,663,676,416 bytes")

    def group(door):
        calls = {FRONTDOOR: Call("gpu.matmul(A, B)", door), "ozaki": Call("ozaki", short),
                 "fine": Call("fine", lambda: A @ B)}
        return groups.Group("dgemm", None, "", (), calls, {})
    reference = Call("numpy.matmul(A, B)", lambda: A @ B)
    g = group(lambda: A @ B)
    assert groups.check_calls(be, A, B, g, reference, "4:3:5") == ["ozaki"]
    assert set(g.public) == {FRONTDOOR, "fine"} and g.refused["ozaki"].startswith("short of device memory")
    with pytest.raises(MemoryError):
        groups.check_calls(be, A, B, group(short), reference, "4:3:5")
