"""Arguments are never silently ignored: a backwards or empty slice range is an
argparse error, an option given but empty is an error rather than the default, and a prediction
with no crossover in range is an answer (level 0 over that range), in text and in JSON."""

from __future__ import annotations

import argparse
import json

import pytest

from experiments import cli
from experiments.core.command import byte_size, counts
from experiments.ozaki import commands as ozaki_commands
from experiments.strassen import bench as strassen_bench


def usage_error(capsys, *argv: str) -> str:
    """stderr of an argparse error (exit 2 before any command runs)."""
    with pytest.raises(SystemExit) as exc:
        cli.main(list(argv))
    assert exc.value.code == 2
    return capsys.readouterr().err


def one_line_error(capsys, *argv: str) -> str:
    assert cli.main(list(argv)) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    return err


def test_counts_parse_ranges_and_refuse_backwards_or_empty_parts():
    assert counts("2-4,8") == [2, 3, 4, 8] and counts("5 3 3") == [3, 5] and counts("7-7") == [7]
    with pytest.raises(argparse.ArgumentTypeError, match=r"'9-2' in '9-2' runs backwards; write 2-9"):
        counts("9-2")
    with pytest.raises(argparse.ArgumentTypeError, match=r"'x' in '2,x' is not a count"):
        counts("2,x")
    for empty in ("", " , "):
        with pytest.raises(argparse.ArgumentTypeError, match="no slice counts given"):
            counts(empty)


@pytest.fixture
def no_benchmarks(monkeypatch):
    """A command that got past its argument checks would measure: fail the test instead."""
    def ran(*args, **kwargs):
        raise AssertionError("the command ran a benchmark")
    monkeypatch.setattr(ozaki_commands, "run_bench", ran)
    monkeypatch.setattr(strassen_bench, "run_plan", ran)


def test_ozaki_slices_backwards_or_empty_are_usage_errors(capsys, no_benchmarks, db_path):
    err = usage_error(capsys, "ozaki", "--backend", "numpy", "--slices", "9-2", "--db", str(db_path))
    assert "--slices" in err and "'9-2'" in err and "backwards" in err
    assert "no slice counts" in usage_error(capsys, "ozaki", "--slices", "", "--db", str(db_path))
    assert not db_path.exists()


@pytest.mark.parametrize("argv, says", [
    (["ozaki", "--sizes", ""], "sizes must be positive integers, got []"),
    (["ozaki", "--formats", ""], "--formats is empty"),
    (["ozaki", "--formats", " , "], "--formats is empty"),
    (["strassen", "--sizes", ""], "--sizes is empty"),
    (["strassen", "--levels", ""], "--levels is empty"),
])
def test_an_option_given_empty_is_an_error_not_the_default(capsys, no_benchmarks, db_path, argv, says):
    assert says in one_line_error(capsys, *argv, "--backend", "numpy", "--db", str(db_path))
    assert not db_path.exists(), "refused before the database is opened"


# --------------------------------------------------------------------------- no crossover in range

@pytest.fixture
def coefficients(tmp_path):
    """Curves whose crossover is P = 30000 (30 q1 / p1)."""
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"gemm": [1e-12, 0, 0, 0], "geam": [1e-9, 0, 0], "units": "ms"}))
    return path


def test_predict_with_no_crossover_in_range_answers_level_0(run_json, capsys, coefficients):
    argv = ("predict", "--coefficients", coefficients, "--size", "5000", "--range", "1000,20000")
    out = run_json(*argv)
    assert out["P"] is None and out["level"] == 0 and out["boundaries"] == [None, None, None]
    nc = out["no_crossover"]
    assert nc["range"] == [1000, 20000] and nc["level"] == 0 and nc["size_in_range"]
    assert nc["largest_gain"] < 0 and nc["at"] == pytest.approx(20000)
    assert out["level_recursive"] == 0 and out["speedups"]["1"] < 1, "the recursive predictor answers as usual"
    assert cli.main([str(a) for a in argv]) == 0
    text = capsys.readouterr().out
    assert "thesis rule: no crossover in [1000, 20000]: level 0 throughout (the gain stays <= 0" in text
    outside = run_json("predict", "--coefficients", coefficients, "--size", "40000", "--range", "1000,20000")
    assert outside["level"] == 0 and not outside["no_crossover"]["size_in_range"]
    assert "N = 40000 lies outside it" in outside["no_crossover"]["note"]


def test_predict_with_a_crossover_has_no_no_crossover(run_json, coefficients):
    out = run_json("predict", "--coefficients", coefficients, "--size", "70000", "--range", "1000,100000")
    assert out["P"] == pytest.approx(30000, rel=1e-6) and out["no_crossover"] is None and out["level"] == 2


def test_predict_past_the_crossover_at_the_lower_end_is_still_an_error(capsys, coefficients):
    err = one_line_error(capsys, "predict", "--coefficients", str(coefficients), "--size", "50000",
                         "--range", "40000,100000")
    assert "already past the crossover at the lower end 40000" in err


def test_fit_without_a_crossover_says_level_0(run_json, h100_db):
    out = run_json("fit", "--db", h100_db, "--device", "H100", "--range", "1024,3072")
    for fit in out["fits"].values():
        assert fit["P"] is None and fit["no_crossover"]["level"] == 0
        assert fit["no_crossover"]["range"] == [1024, 3072]
        assert fit["note"].startswith("no crossover in [1024, 3072]: level 0 throughout")


@pytest.mark.parametrize("text,expected", [("0", 0), ("512", 512), ("40G", 40 * 2**30), ("40GiB", 40 * 2**30),
                                           ("1.5g", 3 * 2**29), ("64m", 64 * 2**20), ("2T", 2 * 2**40)])
def test_byte_sizes_read_binary_units(text, expected):
    assert byte_size(text) == expected


@pytest.mark.parametrize("text", ["", "lots", "-1G", "4X", "inf", "nan"])
def test_bad_byte_sizes_are_refused_with_an_example(text):
    with pytest.raises(argparse.ArgumentTypeError, match="bytes"):
        byte_size(text)
