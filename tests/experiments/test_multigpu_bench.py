"""``gemmlab multigpu`` on CPU workers: every point a new cluster, one shot and steady stored per kind and worker
count, resumed; the verdict judged on GPU workers only; a wrong product stored nowhere; the figure drawn from
the stored rows; bad plans refused before any work."""

import json
import pickle

import numpy as np
import pytest

pytest.importorskip("distributed", reason="needs dask[array] and distributed (pip install -e '.[dist]')")

from distributed import Client, LocalCluster  # noqa: E402

from experiments.cli import main  # noqa: E402
from experiments.core.database import ResultsDB  # noqa: E402
from experiments.core.registry import FIGURES, load  # noqa: E402
from experiments.multigpu import bench, figures, points  # noqa: E402
from experiments.multigpu.points import Plan  # noqa: E402
from experiments.multigpu.report import ONESHOT, STEADY, MultigpuRow, checks, timelines  # noqa: E402


def test_the_command_stores_both_modes_of_every_point_and_resumes(run_json, db_path, tmp_path):
    argv = ("multigpu", "--backend", "numpy", "--sizes", "64", "--workers", "1,2", "--db", str(db_path))
    out = run_json(*argv)
    assert out["summary"]["points measured"] == 4
    found = {(r["kind"], r["workers"], r["method"]) for r in out["rows"]}
    assert found == {(k, w, m) for k in (DEFAULT, "resident") for w in (1, 2) for m in (ONESHOT, STEADY)}
    for r in out["rows"]:
        assert r["time_s"] > 0 and r["check_error"] <= 1e-14 and r["backend"] == "numpy"
        assert len(r["samples"]) == (1 if r["method"] == ONESHOT else bench.SAMPLES)
    assert [c["met"] for c in out["verdict"]] == [None] * 3
    again = run_json(*argv)
    assert again["summary"]["points measured"] == 0 and again["summary"]["points already stored"] == 4
    load()
    with ResultsDB(db_path) as db:
        paths = FIGURES[figures.NAME].render(db, tmp_path) + FIGURES[figures.TIMELINE_NAME].render(db, tmp_path)
        spans = timelines(db, db.env_keys()[0])
        lines = {line.get_label(): line for ax in figures.render_speedup(db).axes for line in ax.get_lines()}
    for kind in (DEFAULT, "resident"):
        steady, shot = lines[f"{kind} operands, steady"], lines[f"{kind} operands, one shot"]
        assert steady.get_color() == shot.get_color() and steady.get_marker() == shot.get_marker(), "one setting"
        assert (steady.get_linestyle(), shot.get_linestyle(), shot.get_markerfacecolor()) == ("-", "--", "white")
    assert lines[f"{DEFAULT} operands, steady"].get_color() != lines["resident operands, steady"].get_color()
    assert [p.suffix for p in paths] == [".png", ".pdf"] * 2 and all(p.stat().st_size > 10_000 for p in paths[::2])
    assert set(spans) == {(64, k, w) for k in (DEFAULT, "resident") for w in (1, 2)}
    for (_, _, workers), found in spans.items():
        assert found and {lane for lane, *_ in found} <= set(range(workers)) and min(s[2] for s in found) == 0
        assert {action for _, action, *_ in found} <= {"compute", "transfer"} and all(s[3] >= s[2] for s in found)
    with ResultsDB(db_path) as db:
        shots = {(m.params["kind"], m.params["workers"]): m.meta for m in db.measurements("multigpu")
                 if m.method == ONESHOT}
    for (kind, workers), meta in shots.items():
        assert meta["spans"] and len(meta["first_touch"]) == len(meta["later_touch"]) == workers, (kind, workers)
        assert np.isfinite(meta["first_task_after_s"]), "when the first task started, from the call"
    host = shots[("host", 2)]
    assert all(t["populate_bytes"] > 0 for t in host["first_touch"]), "host operands were mapped in"
    assert host["later_touch"] == host["first_touch"], "the steady calls mapped in and locked nothing again"


#: Host rows of the library's default page-locking, as rows name them.
DEFAULT = "host, lock_pages=stream"


def row(kind, workers, method, seconds):
    return MultigpuRow(method, 4096, kind, workers, seconds, backend="cupy")


def test_the_verdict_on_gpu_workers():
    rows = [row("host", 1, STEADY, 4.0), row("host", 4, STEADY, 1.01), row("host", 4, ONESHOT, 1.2),
            row("resident", 1, STEADY, 4.0), row("resident", 4, STEADY, 1.1)]
    host, resident, shot = checks(rows)
    assert host.met is True and "3.960 at N = 4096" in host.measured
    assert resident.met is False and "3.636" in resident.measured
    assert shot.met is True and "1.188" in shot.measured
    assert [c.met for c in checks([r.__class__(**{**r.as_dict(), "backend": "numpy"}) for r in rows])] == [None] * 3
    named = [row(DEFAULT, 1, STEADY, 4.0), row(DEFAULT, 4, STEADY, 1.0), row(DEFAULT, 4, ONESHOT, 2.0)]
    host, _, shot = checks(rows + named)
    assert "4.000 at N = 4096, lock_pages=stream" in host.measured and host.met is True
    assert "2.000 at N = 4096, lock_pages=stream" in shot.measured and shot.met is False


def test_a_wrong_product_is_stored_nowhere(capsys, db_path, monkeypatch):
    monkeypatch.setattr(bench, "product", lambda kind, be, client, A, B, out, lock: np.zeros((A.shape[0], B.shape[1])))
    assert main(["multigpu", "--backend", "numpy", "--sizes", "32", "--workers", "1", "--kinds", "host",
                 "--db", str(db_path)]) != 0
    assert "computed a wrong product" in capsys.readouterr().err
    with ResultsDB(db_path) as db:
        assert db.measurements("multigpu") == []


def test_host_operands_are_mapped_files_the_workers_read_and_c_a_mapped_file_they_write(run_json, db_path,
                                                                                         monkeypatch):
    """The host setting is the published runs': A and B mapped .npy files in shared memory, C a mapped file written in
    place (a NumPy array in the client's memory would be serialized to every worker on every call)."""
    seen = []
    real = bench.dask_matmul.matmul

    def spy(A, B, **kw):
        seen.append((type(A), type(B), type(kw.get("out")), A.filename, kw["out"].filename))
        return real(A, B, **kw)

    monkeypatch.setattr(bench.dask_matmul, "matmul", spy)
    out = run_json("multigpu", "--backend", "numpy", "--sizes", "48", "--workers", "1", "--kinds", "host",
                   "--db", str(db_path))
    assert out["summary"]["points measured"] == 1 and len(seen) == 1 + bench.SAMPLES + 1
    for a, b, c, fa, fc in seen:
        assert a is b is c is np.memmap and fa.endswith("A.npy") and fc.endswith("C.npy")
    folder = seen[0][3].rpartition("/")[0]
    if bench.os.path.isdir(bench.SHARED_MEMORY):
        assert folder.startswith(bench.SHARED_MEMORY)
    assert not bench.os.path.exists(folder), "the operand files are removed after the sweep"


def test_operands_that_no_folder_has_room_for_are_refused_before_anything_is_written(monkeypatch):
    monkeypatch.setattr(bench, "_free_bytes", lambda folder: 10)
    with pytest.raises(ValueError, match=r"the mapped operands need 0.0 GiB, more than .* has free; choose smaller"):
        bench.operand_folder(11)
    assert bench.operand_folder(10).name


@pytest.mark.parametrize("argv, message", [(["--kinds", "gpu"], "kinds must be some of host, resident"),
                                           (["--workers", "0"], "worker counts must be positive")])
def test_bad_plans_are_refused_before_any_work(capsys, db_path, argv, message):
    assert main(["multigpu", "--backend", "numpy", "--sizes", "32", *argv, "--db", str(db_path)]) == 2
    assert message in capsys.readouterr().err
    with ResultsDB(db_path) as db:
        assert db.runs() == []
    with pytest.raises(ValueError, match="sizes must be positive"):
        Plan((), (1,))


def test_json_rows_round_trip(run_json, db_path):
    out = run_json("multigpu", "--backend", "numpy", "--sizes", "48", "--workers", "1", "--kinds", "resident",
                   "--db", str(db_path))
    assert json.loads(json.dumps(out))["rows"][0]["kind"] == "resident"


def test_gpu_machines_keep_the_worker_counts_they_have(monkeypatch):
    plan = Plan((1024,), (1, 2, 4))
    monkeypatch.setattr(points, "devices", lambda be: 2)
    kept, left = points.fitting(None, plan)
    assert {p.workers for p in kept} == {1, 2} and left == ["4 workers: this machine has 2 GPUs"]
    monkeypatch.setattr(points, "devices", lambda be: 1)
    assert points.fitting(None, plan) == ([], ["every point: this machine has 1 GPU, nothing to spread a product "
                                                "over"])


def test_resident_operands_reach_the_workers_as_file_handles_not_as_data(tmp_path):
    """Each resident panel is read by its worker from the operand's mapped file: the graph the client sends holds
    handles of a few hundred bytes, not the operands (at N = 32768 Dask could not send the 16 GiB it pickled)."""
    A, B, _ = bench.mapped_operands(str(tmp_path), 256)
    panels = bench._panel(A, (slice(0, 128), slice(None)), np.array)
    assert len(pickle.dumps(dict(panels.__dask_graph__()))) < 4096 < A.nbytes // 2
    backend = bench.get_backend("numpy")
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        dA, dB = bench.in_place(backend, client, A, B, 2)
        assert dA.chunks == ((128, 128), (256,)) and dB.chunks == ((256,), (128, 128))
        assert np.array_equal(dA.compute(), A) and np.array_equal(dB.compute(), B)
    with pytest.raises(TypeError, match="mapped files"):
        bench._panel(np.ones((4, 4)), (slice(0, 2), slice(None)), np.array)


def test_the_protocol_is_tcp_unless_ucx_is_there_and_is_named_where_not_tcp(monkeypatch):
    """``auto`` takes UCX on GPU workers where distributed-ucxx is installed; UCX asked for where it cannot run is
    refused before any work; a UCX point's parameters and rows name it, so each protocol is its own series."""
    numpy_be, gpu_be = bench.get_backend("numpy"), type("GPU", (), {"name": "cupy"})()
    assert points.protocol(numpy_be, "auto") == points.protocol(numpy_be, "tcp") == "tcp"
    with pytest.raises(ValueError, match="protocol 'ucx' needs GPU workers .* pass --protocol tcp"):
        points.protocol(numpy_be, "ucx")
    real = points.importlib.util.find_spec
    monkeypatch.setattr(points.importlib.util, "find_spec",
                        lambda name, *rest: object() if name == "distributed_ucxx" else real(name, *rest))
    assert points.protocol(gpu_be, "auto") == points.protocol(gpu_be, "ucx") == "ucx"
    assert points.protocol(gpu_be, "tcp") == "tcp"
    tcp, ucx = (points.Point(4096, "resident", 4, p) for p in ("tcp", "ucx"))
    assert "protocol" not in points.point_params(tcp, "sustained")
    assert points.point_params(ucx, "sustained")["protocol"] == "ucx"
    rows = [row("resident", 1, STEADY, 4.0), row("resident over ucx", 1, STEADY, 4.0),
            row("resident over ucx", 4, STEADY, 1.02), row("resident", 4, STEADY, 2.0)]
    (_, resident, _) = checks(rows)
    assert resident.met is False and "2.000 at N = 4096" in resident.measured
    assert "3.922 at N = 4096 over ucx" in resident.measured
    with pytest.raises(ValueError, match="protocol must be one of auto, tcp, ucx"):
        Plan((64,), (1,), protocol="udp")


def test_the_cluster_takes_the_runs_protocol(monkeypatch):
    from gpu.multigpu import cluster

    made = {}
    monkeypatch.setattr(cluster, "LocalCUDACluster", lambda **kw: made.update(kw) or "cluster")
    monkeypatch.setattr(bench, "Client", lambda cluster: ("client", cluster))
    gpu_be = type("GPU", (), {"name": "cupy"})()
    assert bench.new_cluster(gpu_be, 2, "ucx") == ("cluster", ("client", "cluster"))
    assert made["protocol"] == "ucx" and made["n_workers"] == 2 and made["memory_limit"] == 0
    assert "gpu.multigpu.worker" in made["pre_import"], "the workers import the block task's module at their start"


def test_the_first_task_is_timed_from_the_call():
    records = [{"startstops": [{"action": "transfer", "start": 12.5, "stop": 13.0},
                               {"action": "compute", "start": 13.0, "stop": 14.0}]},
               {"startstops": [{"action": "compute", "start": 11.75, "stop": 12.0}]}, {}]
    assert bench.first_start(records, 10.0) == 1.75
    assert bench.first_start([{}], 10.0) is None


def test_a_page_locking_strategy_is_its_own_series_of_host_rows(run_json, db_path):
    """``--lock-pages`` (stream by default) reaches the workers' products, names host rows and their parameters
    (resident ones keep theirs), and resumes apart from another strategy's rows."""
    argv = ("multigpu", "--backend", "numpy", "--sizes", "64", "--workers", "1,2", "--db", str(db_path))
    run_json(*argv, "--kinds", "host", "--lock-pages", "true")
    out = run_json(*argv)
    assert {(r["kind"], r["workers"]) for r in out["rows"] if r["method"] == STEADY} == {
        (DEFAULT, 1), (DEFAULT, 2), ("resident", 1), ("resident", 2)}
    with ResultsDB(db_path) as db:
        params = [m.params for m in db.measurements("multigpu") if m.method == STEADY]
    assert sorted(p.get("lock_pages", "true") for p in params if p["kind"] == "host") == ["stream"] * 2 + ["true"] * 2
    assert all("lock_pages" not in p for p in params if p["kind"] == "resident")
    with pytest.raises(ValueError, match=r"lock_pages must be some of true, .*, stream, got \['sometimes'\]"):
        Plan((64,), (1,), locks=("sometimes",))


def test_strategies_compared_side_by_side_share_the_operands_and_each_one_shot_gets_a_new_output(
        run_json, db_path, monkeypatch):
    """``--lock-pages true,ahead`` measures both strategies per worker count, one after the other; the points of a
    size write A and B once and give each point a new C."""
    written, outs, real = [], [], bench.mapped_operands
    monkeypatch.setattr(bench, "mapped_operands", lambda folder, n: written.append(n) or real(folder, n))
    real_product = bench.product

    def spy(kind, be, client, A, B, out, lock):
        outs.append((lock, bench.os.stat(out.filename).st_ino, bool(np.any(out[:4]))))
        return real_product(kind, be, client, A, B, out, lock)
    monkeypatch.setattr(bench, "product", spy)
    out = run_json("multigpu", "--backend", "numpy", "--sizes", "40", "--workers", "1,2", "--kinds", "host",
                   "--lock-pages", "true,ahead", "--db", str(db_path))
    assert {(r["kind"], r["workers"]) for r in out["rows"] if r["method"] == STEADY} == {
        ("host", 1), ("host, lock_pages=ahead", 1), ("host", 2), ("host, lock_pages=ahead", 2)}
    assert written == [40], "A and B written once for the four points"
    firsts = [o for i, o in enumerate(outs) if i % (bench.SAMPLES + 2) == 0]
    assert [lock for lock, _, _ in firsts] == ["true", "ahead"] * 2
    assert not any(filled for _, _, filled in firsts), "each one shot writes into a new, empty C"
    with pytest.raises(ValueError, match="lock_pages must be some of"):
        Plan((64,), (1,), locks=())


def test_a_filled_output_is_one_file_written_before_its_first_one_shot(run_json, db_path, monkeypatch):
    """``--outputs new,filled``: the filled points of a size write into one C whose pages were written before the
    first of them (it stays through the size's filled points); a new point's C is a file of its own; each output
    is its own series."""
    seen, real = [], bench.product

    def spy(kind, be, client, A, B, out, lock):
        seen.append((bench.os.stat(out.filename).st_ino, bench.os.path.getsize(out.filename)))
        return real(kind, be, client, A, B, out, lock)
    monkeypatch.setattr(bench, "product", spy)
    out = run_json("multigpu", "--backend", "numpy", "--sizes", "24", "--workers", "1,2", "--kinds", "host",
                   "--outputs", "new,filled", "--db", str(db_path))
    assert {(r["kind"], r["workers"]) for r in out["rows"] if r["method"] == STEADY} == {
        (DEFAULT, 1), (DEFAULT + ", C filled", 1), (DEFAULT, 2), (DEFAULT + ", C filled", 2)}
    firsts = [ino for i, (ino, _) in enumerate(seen) if i % (bench.SAMPLES + 2) == 0]
    assert firsts[1] == firsts[3] and len({firsts[0], firsts[1], firsts[2]}) == 3
    with ResultsDB(db_path) as db:
        outputs = sorted(m.params.get("output", "new") for m in db.measurements("multigpu") if m.method == STEADY)
    assert outputs == ["filled", "filled", "new", "new"]
    with pytest.raises(ValueError, match="outputs must be some of new, filled"):
        Plan((64,), (1,), outputs=("old",))


def test_sigterm_interrupts_a_command_as_ctrl_c_does(capsys, db_path, monkeypatch):
    """A sweep stopped by SIGTERM (``timeout``) unwinds, so clusters close and operand files are removed, and
    says how to resume; the previous handler is put back."""
    import signal

    before = signal.getsignal(signal.SIGTERM)
    monkeypatch.setattr(bench, "run_points", lambda *a: signal.raise_signal(signal.SIGTERM))
    monkeypatch.setattr("experiments.multigpu.commands.run_points", lambda *a: signal.raise_signal(signal.SIGTERM))
    assert main(["multigpu", "--backend", "numpy", "--sizes", "32", "--workers", "1", "--db", str(db_path)]) == 130
    assert "interrupted" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGTERM) is before


def test_operands_are_drawn_in_bands_that_do_not_depend_on_the_threads(monkeypatch):
    monkeypatch.setattr(bench, "FILL_BAND", 1000)
    draws = []
    for threads in (1, 3):
        monkeypatch.setattr(bench, "FILL_THREADS", threads)
        x = np.full((70, 50), -1.0)
        bench.fill_uniform(x, np.random.SeedSequence(5))
        draws.append(x)
    assert np.array_equal(*draws) and 0 <= draws[0].min() and draws[0].max() < 1
    assert len(np.unique(draws[0])) == draws[0].size, "every band its own stream"

