"""Arguments are never silently ignored (issue 12, item 7): a backwards or empty slice range is an
argparse error, and an option given but empty is an error rather than the default."""

from __future__ import annotations

import argparse

import pytest

from experiments import cli
from experiments.core.command import counts
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
