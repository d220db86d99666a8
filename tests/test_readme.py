"""README.md's examples run as written: every Python block executes on its own, in a fresh interpreter (this
machine's backend, no device profile), and every ``gemmlab`` command line in a shell block is one the command line
parses (options and values as printed)."""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.cli import build_parser

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```$", re.M | re.S)


def blocks(language: str) -> list[str]:
    return [body for lang, body in BLOCK.findall(README.read_text()) if lang == language]


def commands() -> list[list[str]]:
    """Each ``gemmlab`` command of the shell blocks as argv (a loop's body and ``.venv/bin/gemmlab`` included)."""
    found = []
    for body in blocks("sh"):
        for line in body.splitlines():
            line = line.split(" #")[0].strip()
            for part in re.split(r";|\bdo\b|\bdone\b|&&", line):
                words = shlex.split(part.strip().replace('"$f"', "FILE"))
                if words and words[0].endswith("gemmlab"):
                    found.append(words[1:])
    return found


def test_the_readme_has_its_examples():
    assert len(blocks("python")) >= 8 and len(commands()) >= 10


@pytest.mark.parametrize("index", range(len(blocks("python"))))
def test_python_block_runs_as_written(index, tmp_path):
    env = {**os.environ, "GEMMLAB_PROFILES": str(tmp_path / "profiles"),
           "PYTHONPATH": os.pathsep.join([str(README.parent), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", blocks("python")[index]], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"README.md python block {index + 1} failed:\n{done.stderr[-3000:]}"


@pytest.mark.parametrize("argv", commands(), ids=lambda argv: " ".join(argv[:3]))
def test_shell_command_parses(argv):
    if argv in (["--version"], ["--help"]):
        return
    args = build_parser(argv).parse_args(argv)
    assert callable(args.handler)


def layout_rows() -> dict[str, str]:
    """The layout table's rows that name one package folder (``gpu/ozaki2/``, ``accuracy/``, ...), by folder."""
    rows = {}
    for line in README.read_text().splitlines():
        found = re.match(r"\| `((?:gpu/[a-z0-9_]+|accuracy|modeling|experiments/core)/)` \|", line)
        if found:
            rows[found.group(1)] = line
    return rows


@pytest.mark.parametrize("folder", sorted(layout_rows()))
def test_the_layout_table_names_every_module_of_a_package(folder):
    """A reader looks a module up in its package's row: a module added without a word there is missing from the map
    (eleven of scheme II's modules were, among them ``memory`` and ``deferred``)."""
    row = layout_rows()[folder]
    modules = sorted(p.stem for p in (README.parent / folder).glob("*.py") if p.stem != "__init__")
    missing = [m for m in modules if not re.search(rf"`{m}(`|\.py`|\.)", row)]
    assert not missing, f"README.md's layout row for {folder} does not name {missing}"
