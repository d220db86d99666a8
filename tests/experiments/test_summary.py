"""What an experiment found, as tables: the :class:`Summary` structure, and
``SUMMARY.md`` written by ``gemmlab reproduce`` as Markdown a researcher can paste, with headings
that say what was measured (never a plan's promise) and each experiment's verdict and figures."""

import re

import pytest

from experiments.core import reproduce
from experiments.core.summary import Check, Summary, Table, cell_text, markdown_table, spread
from experiments.levels import calibration
from experiments.ozaki import bench as ob


def test_cells_print_as_a_reader_wants_them():
    assert [cell_text(v) for v in (None, True, False, 3, 0.000123456, "a|b")] == \
        ["n/a", "yes", "no", "3", "0.0001235", "a\\|b"]
    assert cell_text(3.14159, ".2f") == "3.14"
    assert markdown_table(("a", "b"), [(1, 2.5)], {"b": ".1f"}) == ["| a | b |", "| --- | --- |", "| 1 | 2.5 |"]
    assert spread([128, 64, 128]) == "64, 128" and spread(range(128, 2049, 128)) == "128 to 2048 (16 sizes)"
    assert spread([0.1, 1.0, 2.0], "values") == "0.1, 1, 2"


def test_a_table_refuses_rows_of_the_wrong_width():
    with pytest.raises(ValueError, match="2 cells for 3 columns"):
        Table("t", ("a", "b", "c"), [(1, 2)])


def test_summary_as_json_and_as_markdown():
    s = Summary(scope="N = 64, 128", facts={"points measured": 4},
                tables=[Table("speed-up at N=128", ("configuration", "speed-up"), [("rum", 1.234), ("lai", None)],
                              formats={"speed-up": ".2f"})],
                checks=[Check("faster than GEMM", "best 1.23x", True), Check("exact", "no exact count", None)],
                notes=["a note"])
    assert s.as_dict() == {"scope": "N = 64, 128", "points measured": 4,
                           "speed-up at N=128": [{"configuration": "rum", "speed-up": 1.234},
                                                 {"configuration": "lai", "speed-up": None}],
                           "verdict": [{"target": "faster than GEMM", "measured": "best 1.23x", "met": True},
                                       {"target": "exact", "measured": "no exact count", "met": None}],
                           "notes": ["a note"]}
    text = "\n".join(s.markdown())
    assert "| points measured | 4 |" in text and "| rum | 1.23 |" in text and "| lai | n/a |" in text
    assert "| faster than GEMM | best 1.23x | yes |" in text and "| exact | no exact count | not judged |" in text
    assert "- a note" in text and "{" not in text
    assert "none; this experiment describes" in "\n".join(Summary().markdown())
    with pytest.raises(ValueError, match="repeats"):
        Summary(facts={"t": 1}, tables=[Table("t", ("a",), [])]).as_dict()


def sections(markdown: str) -> dict[str, str]:
    """``### name: scope`` sections of SUMMARY.md, by experiment name: (heading, body)."""
    parts = re.split(r"^### ", markdown, flags=re.M)[1:]
    return {p.split("\n", 1)[0].split(":", 1)[0]: ("### " + p.split("\n", 1)[0], p.split("\n", 1)[1])
            for p in parts}


def test_reproduce_writes_tables_verdicts_and_figures_with_headings_from_the_data(run_json, db_path, tmp_path,
                                                                                 monkeypatch):
    """A quick ozaki-time that measures one size and one format says so in its heading (it used to
    promise "N = 128-4096, every format"), and no experiment prints a Python dict."""
    monkeypatch.setitem(calibration.SIZES, ("numpy", True), (32, 64, 96))
    monkeypatch.setitem(ob.TIME_PLANS, ("numpy", True), ob.BenchPlan((32,), ("fp32r",), (2,), errors=False))
    monkeypatch.setitem(ob.PARETO_PLANS, ("numpy", True), ob.BenchPlan((32,), ("fp32r",), (2, 3), phis=(1.0,)))
    out_dir = tmp_path / "figs"
    out = run_json("reproduce", "--quick", "--backend", "numpy", "--only", "calibration", "ozaki-time",
                   "ozaki-pareto", "--db", str(db_path), "--out", str(out_dir))
    text = (out_dir / "SUMMARY.md").read_text()
    assert not re.search(r"[{}]", text), "a Python dict repr in SUMMARY.md"
    found = sections(text)
    assert set(found) == {"calibration", "ozaki-time", "ozaki-pareto"}
    heading, body = found["ozaki-time"]
    assert heading == "### ozaki-time: N = 32; format fp32r; 2 slices"
    assert "4096" not in heading + body and "every format" not in heading + body
    for name, (_, body) in found.items():
        assert "| --- |" in body, f"{name}: no Markdown table"
        assert f"![{name}]({name}.png)" in body and f"[PDF]({name}.pdf)" in body, f"{name}: figure not linked"
    assert "| target | measured | met |" in found["ozaki-pareto"][1]
    assert re.search(r"\| every point stable .* \| \d+ of 3 points \| (yes|no) \|", found["calibration"][1])
    assert "| field | value |" in text and "| backend | numpy |" in text
    # the JSON keeps one object per experiment, tables as records
    time = out["experiments"]["ozaki-time"]
    assert time["scope"] == "N = 32; format fp32r; 2 slices" and time["configurations timed"] == 1
    assert [r["configuration"] for r in time["time at N=32"]] == ["ozaki-fp32r-2"]
    assert time["verdict"][0]["met"] in (True, False)
    assert out["experiments"]["calibration"]["points measured"] == 6


def test_write_summary_links_only_figures_drawn(tmp_path, db_path):
    from experiments.core.database import ResultsDB

    reproduce.select()
    summaries = {"strassen-memory": Summary(scope="N = 64", facts={"size": 64})}
    figures = {"strassen-memory": [tmp_path / "strassen-memory.png", tmp_path / "strassen-memory.pdf"]}
    with ResultsDB(db_path) as db:
        path = reproduce.write_summary(tmp_path, "gemmlab reproduce", db, {"backend": "numpy", "device": "CPU"},
                                       summaries, figures)
    text = path.read_text()
    assert "### strassen-memory: N = 64" in text and "![strassen-memory](strassen-memory.png)" in text
    assert "strassen-speedup" not in text
    assert "| strassen-memory |" in text, "the closing table of figures"


def test_write_summary_draws_each_figure_once(tmp_path, db_path):
    """outofcore-tflops shows the outofcore and the segmented experiments: drawn under the first, pointed to
    under the second (it was listed, image and all, under both)."""
    from experiments.core.database import ResultsDB

    reproduce.select()
    summaries = {"outofcore": Summary(scope="N = 384"), "segmented": Summary(scope="N = 384")}
    figures = {"outofcore-tflops": [tmp_path / "outofcore-tflops.png", tmp_path / "outofcore-tflops.pdf"]}
    with ResultsDB(db_path) as db:
        text = reproduce.write_summary(tmp_path, "gemmlab reproduce", db, {"backend": "numpy"}, summaries,
                                       figures).read_text()
    assert text.count("![outofcore-tflops](outofcore-tflops.png)") == 1
    assert text.count("*Figure `outofcore-tflops`*") == 1
    segmented = sections(text)["segmented"][1]
    assert "outofcore-tflops" in segmented and "under outofcore" in segmented
