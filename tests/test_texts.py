"""User-facing text names no lab-internal reference, checked on the source (no GPU needed).

A newcomer reads the docstrings, help strings, error messages and comments of the packages, the
READMEs and the scripts behind the published results. Two kinds of reference mean nothing to them:

* an issue number of the lab's tracker ("issue 13", "issue 17's targets", "issues 14-15"): say what it
  stands for instead (the Strassen speed-up targets, the split-K benchmark, ...);
* a path into the lab's method notes (``shared/spec/...``), which are not part of the repository:
  cite the paper itself (see the References in README.md).

Every finding is reported as ``path:line: reference``. The checker is tested on synthetic text, so
these tests can fail.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: What the check reads: the four packages' files, the READMEs and the published results' scripts.
SCOPE = ("gpu", "modeling", "accuracy", "experiments", "README.md", "results/published/README.md",
         "results/published/scripts", "paper_figs")
SUFFIXES = (".py", ".md", ".sh", ".json", ".jobs", ".txt", ".toml")
#: Data the lab measured, kept as the run wrote it (its notes are records, not documentation).
DATA = re.compile(r"^(results/published/(?!README\.md$|scripts/)|paper_figs/.*\.(png|pdf)$)")
REFERENCES = (
    (re.compile(r"\bissues?[ -]#?\d+", re.IGNORECASE), "an issue number (say what it stands for)"),
    (re.compile(r"shared/spec\b"), "a pointer to shared/spec, which is not in the repository (cite the paper)"),
)


def tracked_files() -> list[str]:
    """Repository-relative paths of the files in :data:`SCOPE`: the tracked ones where this is a git
    checkout, otherwise every file on disk there (outside caches)."""
    try:
        done = subprocess.run(["git", "ls-files", "--", *SCOPE], cwd=ROOT, capture_output=True, text=True,
                              check=True, timeout=60)
        paths = done.stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        paths = []
    if not paths:
        found = [p for s in SCOPE for p in ((ROOT / s).rglob("*") if (ROOT / s).is_dir() else [ROOT / s])]
        paths = [p.relative_to(ROOT).as_posix() for p in found if p.is_file() and "__pycache__" not in p.parts]
    return sorted(p for p in paths if p.endswith(SUFFIXES) and not DATA.match(p))


def findings(path: str, text: str) -> list[str]:
    """``path:line: reference`` for every lab-internal reference in ``text``."""
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        for pattern, what in REFERENCES:
            out += [f"{path}:{number}: {what}: {m.group(0)!r}" for m in pattern.finditer(line)]
    return out


@pytest.mark.parametrize("text, hits", [
    ('"""Split-K against cuBLAS (issue 14)."""', 1),
    ("# Issue 13 item 4: level='auto' timed as itself", 1),
    ("judged against issue 17's targets", 1),
    ("see issues 14 and 15, or Issue-16, or issue #18", 3),
    ("(``shared/spec/modeling.md`` section 3)", 1),
    ("Otsuka & Iguchi 2020, section 3; a sample issues its calls back to back", 0),
    ("the tissue 12 and reissue of 3 files", 0),
])
def test_the_checker_finds_issue_numbers_and_spec_paths(text, hits):
    assert len(findings("x.py", text)) == hits


def test_the_checker_reads_the_packages_and_the_readmes():
    files = tracked_files()
    for expected in ("gpu/__init__.py", "experiments/cli.py", "README.md", "results/published/README.md"):
        assert expected in files
    assert not [p for p in files if p.endswith(".csv") or p.startswith("results/published/h100")]


def test_user_facing_text_names_no_issue_number_or_spec_path():
    found = [f for p in tracked_files() for f in findings(p, (ROOT / p).read_text(encoding="utf-8"))]
    assert not found, "lab-internal references in user-facing text:\n" + "\n".join(found)
