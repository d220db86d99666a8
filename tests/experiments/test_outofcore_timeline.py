"""The out-of-core time-line: the engine's spans on NumPy, lane arithmetic, the
stored row, resuming and the figure, all without a GPU."""

import numpy as np
import pytest

from experiments.core.database import ResultsDB
from experiments.core.registry import EXPERIMENTS, FIGURES, load
from experiments.outofcore import figures, timeline
from gpu.backend import get_backend
from gpu.outofcore import LANES, Span, Timeline, matmul, plan, run
from gpu.outofcore.timeline import busy, merged, overlap


def test_lane_arithmetic_counts_overlaps_once():
    spans = [Span("GEMM", 0, 0.0, 2.0), Span("GEMM", 1, 1.0, 3.0), Span("H2D", 0, 2.5, 4.0), Span("H2D", 1, 5, 6)]
    assert merged(spans, "GEMM") == [(0.0, 3.0)]
    assert busy(spans, "GEMM") == 3.0 and busy(spans, "H2D") == 2.5 and busy(spans, "D2H") == 0.0
    assert overlap(spans, "H2D", "GEMM") == pytest.approx(0.5)
    with pytest.raises(ValueError, match="unknown lane 'disk'"):
        Timeline().add("disk", 0, lambda: (0.0, 1.0))


def test_the_engine_records_every_step_on_numpy():
    rng = np.random.default_rng(0)
    A, B = rng.random((50, 40)), rng.random((40, 30))
    p = plan(50, 40, 30, 8, device_memory=10**6, block=(20, 16), panel=15, c_buffers=2)
    C, line = np.empty((50, 30)), Timeline()
    run(get_backend("numpy"), get_backend("numpy").ops("outofcore"), p, A, B, C, line)
    assert np.allclose(C, A @ B)
    spans = line.spans()
    steps, blocks = list(p.steps()), 3 * 2
    count = {lane: sum(s.lane == lane for s in spans) for lane in LANES}
    assert count == {"mapping": 0, "locking": 0, "staging": 2 * len(steps), "H2D": 2 * len(steps),
                     "GEMM": len(steps), "D2H": blocks, "placement": blocks}
    assert all(0 <= s.start <= s.end for s in spans)
    assert [s.start for s in spans] == sorted(s.start for s in spans)
    again = np.empty((50, 30))
    assert np.array_equal(matmul(A, B, out=again, block=(20, 16), panel=15, backend="numpy"), C)


def test_the_experiment_stores_one_checked_run_resumes_and_draws(run_json, db_path, tmp_path):
    argv = ("reproduce", "--backend", "numpy", "--only", "outofcore-timeline", "--db", str(db_path), "--out",
            str(tmp_path))
    out = run_json(*argv)
    assert out["experiments"]["outofcore-timeline"]["points measured"] == 1
    assert (tmp_path / "outofcore-timeline.png").stat().st_size > 10_000
    with ResultsDB(db_path) as db:
        (m,) = db.measurements("outofcore-timeline")
        rows = timeline.timeline_rows(db, m.env_key)
        fig = figures.render_timeline(db)
    assert m.params == {"n": 768, "dtype": "float64", "regime": "sustained"} and m.meta["check_error"] < 1e-12
    assert m.value == pytest.approx(max(s[3] for s in m.meta["spans"]))
    assert set(m.meta["busy"]) == set(LANES) and m.meta["busy"]["GEMM"] > 0
    assert rows[0].block == (256, 256) and len(rows[0].spans) == len(m.meta["spans"])
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == list(reversed(LANES))
    assert "N = 768" in fig.axes[0].get_title()
    again = run_json(*argv)
    assert again["experiments"]["outofcore-timeline"]["points already stored"] == 1
    with ResultsDB(db_path) as db:
        assert len(db.measurements("outofcore-timeline")) == 1


def test_registries_and_an_empty_database(db_path):
    load()
    assert "outofcore-timeline" in EXPERIMENTS
    assert FIGURES["outofcore-timeline"].experiments == ("outofcore-timeline",)
    with ResultsDB(db_path) as db:
        assert figures.render_timeline(db) is None
