"""``gemmlab reproduce --papers``: each paper's published numbers beside the committed measurements.

The ratios and the matching rules are checked on tiny synthetic rows; the comparisons, figures and the
table are built once from the committed exports (no GPU, no database) and checked against numbers read
off those exports; the committed table must be what the code writes today."""

import contextlib
import io
import json
import math
from pathlib import Path

import pytest

from experiments import cli
from experiments.core.csvio import ExportRow
from experiments.papers import compare, exports, methods, report, sweeps
from experiments.papers.compare import Comparison
from modeling import published as pub

ROOT = Path(__file__).resolve().parents[2]
H100 = {"device": "NVIDIA H100 80GB HBM3", "backend": "cupy"}


def export_row(experiment, method, params, value=1.0, **meta):
    return ExportRow(1, experiment, method, params, "env", value, "s", [], meta, "2026-01-01", H100)


def comparison(**fields):
    base = {"paper": "p", "quantity": "q", "point": "", "paper_device": "V100", "paper_value": 2.0,
            "paper_high": None, "statistic": "value", "device": "H100", "value": 1.0, "high": None, "match": "same N",
            "regime": "sustained", "source": "f.csv", "citation": "c"}
    return Comparison(**{**base, **fields})


# --- ratios and matching on synthetic rows ------------------------------------------------------------

def test_ratio_is_ours_over_the_papers_over_both_ranges():
    assert compare.ratio((1.0, 1.0), (2.0, 2.0)) == (0.5, 0.5)
    assert compare.ratio((0.14, 0.15), (0.27, 0.28)) == pytest.approx((0.14 / 0.28, 0.15 / 0.27))
    assert compare.ratio((2.09, 2.09), (0.0, 2.0)) == (1.045, None)         # a range from 0 has no upper ratio
    assert compare.ratio((-0.1, -0.1), (0.2, 0.2)) == (-0.5, -0.5)


def test_comparison_texts_and_the_not_measured_row():
    c = comparison(value=1.113, paper_value=1.124)
    assert (c.paper_text, c.ours_text, c.ratio_text) == ("1.124", "1.113", "0.990")
    ranged = comparison(paper_value=0.27, paper_high=0.28, statistic="range", value=0.132, high=0.147, fmt=".1%")
    assert (ranged.paper_text, ranged.ours_text, ranged.ratio_text) == ("27.0% to 28.0%", "13.2% to 14.7%",
                                                                        "0.471 to 0.544")
    assert comparison(statistic="above", paper_value=1, fmt=".3g").paper_text == "> 1"
    assert comparison(paper_value=0, paper_high=2, statistic="range", value=2.09).ratio_text == ">= 1.045"
    missing = comparison(**compare.not_measured("no Lai timing"))
    assert (missing.ours_text, missing.ratio_text, missing.ratio) == ("not measured", "not measured", None)
    assert missing.match == "not measured: no Lai timing" and missing.as_dict()["ratio"] is None


def test_level_sweep_interpolates_the_boundary_between_measured_sizes():
    # level 1 time over level 0: 1.1 at 4096, 0.9 at 8192; log gain crosses 0 where 1.1^(1-t) 0.9^t = 1
    rows = [export_row("level-validation", "rum+fused", {"size": n, "level": lv, "dtype": "float64"}, t,
                       speedup=1 / t)
            for n, times in ((4096, (1.0, 1.1)), (8192, (1.0, 0.9)), (16384, (1.0, 0.8))) for lv, t in enumerate(times)]
    sw = sweeps.level_sweep(rows)
    t = math.log(1.1) / (math.log(1.1) - math.log(0.9))
    assert sw.boundary(1) == pytest.approx((4096 + t * 4096, 4096, 8192))
    assert sw.boundary(2) is None and sw.at(16384) == pytest.approx((1.25, 1)) and sw.at(2048, 1) is None
    assert (sw.device, sw.regime, sw.method) == ("H100", "regime not recorded", "rum+fused")


class FakeExports(exports.Exports):
    def __init__(self, rows):
        super().__init__(Path("/nonexistent"))
        self._rows = {"h100-splitk": rows}


def test_splitk_compares_only_the_papers_shapes_and_inner_dimensions():
    speedups = {2**14: 5.0, 2**16: 1.5, 2**17: 1.9, 2**20: 1.2, 2**21: 3.0, 1_000_003: 4.0}
    rows = [export_row("splitk", method, {"m": m, "n": m, "k": k}, speedup=s * (1 if m == 16 else 0.6),
                       regime="sustained")
            for method in methods.SPLITK for m in (16, 32) for k, s in speedups.items()]
    found = {(c.point, c.source.split("(")[1][:-1]): c for c in methods.hattori(FakeExports(rows))}
    up_to = found["m = n = 16, k = 2^16-2^20", "splitk-atomic-w1024"]
    assert (up_to.value, up_to.ratio, up_to.paper_text) == (1.9, (0.95, 0.95), "up to 2")
    every = found["m = n = 32, k = 2^16-2^20", "splitk-atomic"]     # smallest in range: 0.6 x 1.2
    assert every.value == pytest.approx(0.72) and every.paper_text == "> 1" and "fails" in every.note
    assert "ours at k = 2^20" in every.match and "(3 sizes)" in every.match


# --- built from the committed exports, once ----------------------------------------------------------

@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """``gemmlab reproduce --papers --json`` run once, with the backend unreachable and the figures kept."""
    out, db = tmp_path_factory.mktemp("papers"), tmp_path_factory.mktemp("db") / "never.sqlite"
    drawn = {}
    save = report.save_figure

    def keep(fig, out_dir, name):
        drawn[name] = fig
        return save(fig, out_dir, name)

    def no_gpu(*args, **kwargs):
        raise AssertionError("--papers asked for a backend")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(report, "save_figure", keep)
        mp.setattr("experiments.core.commands.get_backend", no_gpu)
        stdout = io.StringIO()
        with contextlib.redirect_stdout(stdout):
            code = cli.main(["reproduce", "--papers", "--out", str(out), "--db", str(db), "--json"])
    assert code == 0
    return {"doc": json.loads(stdout.getvalue()), "out": out / "papers", "db": db, "figures": drawn}


def test_papers_run_writes_figures_and_table_and_no_database(built):
    out, doc = built["out"], built["doc"]
    assert not built["db"].exists() and not list(out.parent.rglob("*.sqlite"))
    assert set(doc["papers"]) == {p.key for p in report.PAPERS} == set(pub.PAPERS)
    for paper in report.PAPERS:
        assert (out / f"{paper.figure}.png").stat().st_size > 10_000 and (out / f"{paper.figure}.pdf").is_file()
    assert Path(doc["table"]) == out / "README.md"


def rows_of(built, paper):
    return built["doc"]["papers"][paper]


def find(rows, **match):
    (row,) = [r for r in rows if all(r[k] == v for k, v in match.items())]
    return row


def test_otsuka_and_thesis_rows_match_the_committed_sweeps(built):
    otsuka = rows_of(built, "otsuka2020")
    h100 = find(otsuka, quantity="speed-up over DGEMM, level 2", device="H100")
    assert h100["value"] == pytest.approx(1.113, abs=5e-4) and h100["ratio"][0] == pytest.approx(1.113 / 1.124, 1e-3)
    assert find(otsuka, quantity="crossover with DGEMM (level 1)", device="H200")["value"] == pytest.approx(6580, 1)
    thesis = rows_of(built, "thesis2023")
    assert find(thesis, quantity="level 2 overtakes 1")["match"].startswith("interpolated between measured N = 10240")
    lai = find(thesis, quantity="peak memory, lai level 4, in (N/2)^2 quadrants")
    assert lai["paper_value"] == pytest.approx(29.32 / 2) and lai["value"] == pytest.approx(14.65625)
    parallel = find(thesis, quantity="crossover with DGEMM (level 1)", paper_value=4000)
    assert parallel["ours_text"] == parallel["ratio_text"] == "not measured" and parallel["ratio"] is None


def test_methods_rows_match_the_committed_exports(built):
    splitk = find(rows_of(built, "hattori2016"), quantity="speed-up over cuBLAS DGEMM, largest over k: "
                                                            "splitk-atomic-w1024")
    assert splitk["value"] == pytest.approx(1.688, abs=1e-3) and splitk["device"] == "H100"
    loss = find(rows_of(built, "sakai2016"), quantity="kernel speed lost to index translation")
    assert (loss["value"], loss["high"]) == pytest.approx((1 - 1 / 1.1522, 1 - 1 / 1.1722), abs=1e-4)
    digits = find(rows_of(built, "nanai2021"), quantity="decimal digits gained over SGEMM, phi = 0.1",
                  point="2 splits")
    assert digits["value"] == pytest.approx(math.log10(33.0231 / 0.267695), abs=1e-4)
    assert digits["ratio_text"].startswith(">= ")


def test_every_published_number_is_compared_or_said_not_measured(built):
    shown = {(r["paper"], r["paper_device"], r["citation"]) for rows in built["doc"]["papers"].values() for r in rows}
    data = pub.load()
    compared = [*data.speedups, *data.boundaries, *data.splitk, *data.decomposition, *data.ozaki,
                *(f for f in data.figures if f.quantity != "register_file_per_sm")]
    assert all((r.paper, r.device, str(r.source)) in shown for r in compared)
    for rows in built["doc"]["papers"].values():
        for r in rows:
            assert (r["value"] is None) == (r["ratio"] is None) == r["match"].startswith("not measured")


def test_each_figure_names_the_papers_device_and_ours(built):
    for paper in report.PAPERS:
        fig = built["figures"][paper.figure]
        footer = next(t.get_text() for sub in fig.subfigs for t in sub.texts if t.get_gid() == "provenance")
        assert "NVIDIA H100" in footer and "transcribed from the paper" in footer
        axes = [ax for ax in fig.get_axes() if ax.get_visible()]
        assert len(axes) >= 2 and all(len(ax.get_lines()) + len(ax.patches) + len(ax.collections) >= 2 for ax in axes)
    otsuka = built["figures"]["otsuka2020-speedup"]
    stars = [(tuple(line.get_xdata()), tuple(line.get_ydata())) for ax in otsuka.get_axes() for line in ax.get_lines()
             if line.get_marker() == "*"]
    assert stars == [((5200,), (1.0,)), ((14336,), (1.124,))]


def test_the_committed_table_is_what_the_code_writes(built):
    committed = ROOT / "paper_figs" / "papers" / "README.md"
    assert committed.read_text() == (built["out"] / "README.md").read_text()


def test_papers_refuses_the_measuring_options(tmp_path, capsys):
    code = cli.main(["reproduce", "--papers", "--only", "strassen-speedup", "--out", str(tmp_path)])
    assert code != 0
    assert "--papers draws the committed measurements and measures nothing, so --only cannot apply" in \
        capsys.readouterr().err
    assert not (tmp_path / "papers").exists()
