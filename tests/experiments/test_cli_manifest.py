"""The command manifest and a fast start: every command is in the manifest and registered by the
module it names (they cannot drift apart), ``gemmlab --help`` imports no family, ``--version``,
and every command's help takes ``--json`` and ``--db`` and names no issue number."""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import experiments
from experiments import cli
from experiments.cli import portable
from experiments.core.command import COMMANDS, command
from experiments.core.manifest import ENTRIES, GROUPS, chosen, entry

ROOT = Path(__file__).resolve().parents[2]
#: What the top level of the command line must not import (numerics, plotting, the GPU, the families).
HEAVY = ("numpy", "scipy", "matplotlib", "cupy", "tqdm", "gmpy2", "gpu", "modeling", "accuracy")
FAMILIES = ("levels", "strassen", "audit", "ozaki", "ozaki2", "splitk", "outofcore", "segmented", "frontdoor")
ISSUE = re.compile(r"issue\s*#?\d", re.IGNORECASE)


def test_every_entry_is_registered_by_its_module_and_every_command_has_an_entry():
    for module in sorted({e.module for e in ENTRIES}):
        importlib.import_module(module)
    registered = {" ".join(words): cmd for words, cmd in COMMANDS.items()}
    assert sorted(registered) == sorted(e.words for e in ENTRIES)
    for e in ENTRIES:
        assert registered[e.words].handler.__module__ == e.module, e.words
        assert registered[e.words].help == e.help


def test_groups_are_declared_and_no_command_is_a_prefix_of_another():
    words = [e.words.split() for e in ENTRIES]
    assert {w[0] for w in words if len(w) == 2} == set(GROUPS)
    assert not {w[0] for w in words if len(w) == 1} & set(GROUPS)
    assert len({" ".join(w) for w in words}) == len(words)


def test_the_command_line_names_its_entry():
    assert chosen(["schedule", "analyze", "rum", "--table"]) == entry("schedule analyze")
    assert chosen(["results", "list", "--json"]) == entry("results list")
    assert chosen(["results"]) is None and chosen([]) is None and chosen(["--help"]) is None


def test_a_command_without_an_entry_or_from_another_module_is_refused():
    with pytest.raises(ValueError, match=r"no command 'results purge'.*manifest"):
        command("results purge")(lambda args, db_path: 0)
    with pytest.raises(ValueError, match=r"'info' is registered by experiments\.core\.commands"):
        command("info", options=("common", "backend"))(lambda args, db_path: 0)
    assert COMMANDS.get(("results", "purge")) is None


def test_a_command_without_json_and_db_is_refused():
    with pytest.raises(ValueError, match=r"--json and --db"):
        command("info", options=("backend",))(lambda args, db_path: 0)


def _fresh(code: str) -> dict:
    """Run ``code`` in a new interpreter importing this checkout; the JSON it prints last."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, f"exit {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    return json.loads(done.stdout.strip().splitlines()[-1])


LOADED = """
import contextlib, io, json, sys
from experiments import cli
out = io.StringIO()
with contextlib.redirect_stdout(out):
    try:
        code = cli.main({argv!r})
    except SystemExit as exc:
        code = exc.code
print(json.dumps({{"code": code, "out": out.getvalue(), "modules": sorted(sys.modules)}}))
"""


def heavy(modules: list[str]) -> list[str]:
    return [m for m in modules if m.partition(".")[0] in HEAVY
            or any(m == f"experiments.{f}" or m.startswith(f"experiments.{f}.") for f in FAMILIES)]


def test_top_level_help_lists_every_command_and_imports_no_family():
    done = _fresh(LOADED.format(argv=["--help"]))
    assert done["code"] == 0
    assert heavy(done["modules"]) == []
    assert {m for m in done["modules"] if m.startswith("experiments")} <= {
        "experiments", "experiments.cli", "experiments.core", "experiments.core.manifest"}
    listed = done["out"]
    for word in {e.words.split()[0] for e in ENTRIES}:
        assert re.search(rf"^\s+{word}\s", listed, re.MULTILINE), word


def test_listing_results_imports_no_numerics(tmp_path):
    done = _fresh(LOADED.format(argv=["results", "list", "--json", "--db", str(tmp_path / "none.sqlite")]))
    assert done["code"] == 0 and json.loads(done["out"])["runs"] == []
    assert heavy(done["modules"]) == []


def test_version_is_the_package_version_and_exits_0(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out == f"gemmlab {experiments.__version__}\n"
    tomllib = pytest.importorskip("tomllib")        # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "experiments.__version__"}


def help_of(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as exc:
        cli.main([*argv, "--help"])
    assert exc.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("words", [e.words for e in ENTRIES])
def test_each_command_takes_json_and_db_and_its_help_names_no_issue(capsys, words):
    text = help_of(capsys, *words.split())
    assert "--json" in text and "--db" in text
    assert not ISSUE.search(text), text
    assert entry(words).help.split(":")[0].split()[0] in text


@pytest.mark.parametrize("argv", [(), *((g,) for g in GROUPS)])
def test_top_level_and_group_help_name_no_issue(capsys, argv):
    assert not ISSUE.search(help_of(capsys, *argv))


def test_the_stored_command_line_names_no_machine_folders():
    assert [portable(a) for a in ["--db", "/root/out/fd.sqlite", "--out=/tmp/x/figs", "rel/x.db", "16:16:16"]] == \
        ["--db", "fd.sqlite", "--out=figs", "rel/x.db", "16:16:16"]
