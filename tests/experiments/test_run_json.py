"""The ``run_json`` fixture of tests/conftest.py, on a stand-in for ``experiments.cli.main``."""

import json
import sys

import pytest

from experiments import cli


def fake_main(code, out="", err=""):
    calls = []

    def main(argv):
        calls.append(list(argv))
        print(out)
        print(err, file=sys.stderr)
        return code

    return main, calls


def test_run_json_appends_json_and_parses_stdout(run_json, monkeypatch):
    main, calls = fake_main(0, json.dumps({"rows": [1, 2]}))
    monkeypatch.setattr(cli, "main", main)
    assert run_json("schedule", "list", 3) == {"rows": [1, 2]}
    assert calls == [["schedule", "list", "3", "--json"]]


def test_run_json_fails_on_a_nonzero_exit_showing_both_streams(run_json, monkeypatch):
    monkeypatch.setattr(cli, "main", fake_main(2, "partial output", "gemmlab schedule: error: boom")[0])
    with pytest.raises(AssertionError, match=r"(?s)exit code 2 from gemmlab schedule nope --json.*"
                                             r"error: boom.*partial output"):
        run_json("schedule", "nope")


def test_run_json_fails_when_stdout_is_not_json(run_json, monkeypatch):
    monkeypatch.setattr(cli, "main", fake_main(0, "a table, not JSON")[0])
    with pytest.raises(AssertionError, match=r"(?s)no JSON on stdout.*a table, not JSON"):
        run_json("schedule", "list")
