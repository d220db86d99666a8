"""Each seed paper reproduced side by side: its published numbers beside the toolkit's measurements.

``gemmlab reproduce --papers`` (:func:`reproduce_papers`) reads the committed GPU exports of
``results/published`` (:mod:`~experiments.papers.exports`, through the lab's CSV reader) and the papers'
numbers of ``modeling/published.json`` (:mod:`modeling.published`), and writes into ``<out>/papers``:

* one figure per paper (PNG and PDF), the paper's numbers drawn on the axes of ours, every device named
  (:mod:`~experiments.papers.figures_strassen`, :mod:`~experiments.papers.figures_methods`);
* ``README.md``: per paper, at each published point, the paper's number, ours, ours over the paper's and
  how the two were matched, or "not measured" (:mod:`~experiments.papers.strassen`,
  :mod:`~experiments.papers.methods`, :mod:`~experiments.papers.compare`).

Nothing is measured and no database is opened, so it runs anywhere the repository is checked out.
"""

from __future__ import annotations

import argparse

from ..core.command import emit, table
from .report import PAPERS, Report, build

__all__ = ["PAPERS", "Report", "build", "reproduce_papers"]

COLUMNS = (("paper", "paper", ""), ("quantity", "quantity", ""), ("point", "point", ""),
           ("paper_text", "published", ""), ("paper_device", "on", ""), ("ours_text", "ours", ""),
           ("device", "on", ""), ("ratio_text", "ours/paper", ""))


def reproduce_papers(args: argparse.Namespace) -> int:
    """The ``--papers`` branch of ``gemmlab reproduce``: refuses the measuring options, then builds."""
    given = [name for name in ("only", "quick", "force") if getattr(args, name, None)]
    if given:
        named = ", ".join("--" + g for g in given)
        raise ValueError(f"--papers draws the committed measurements and measures nothing, so {named} cannot "
                         f"apply; leave {'them' if len(given) > 1 else 'it'} out, or run gemmlab reproduce without "
                         f"--papers to measure")
    report = build(args.out / "papers")
    rows = [c.as_dict() for found in report.comparisons.values() for c in found]
    emit(args, report.as_dict(), lambda: "\n".join(
        [table(rows, COLUMNS), "", f"table: {report.table}",
         *(f"figure: {', '.join(map(str, paths))}" for paths in report.figures.values())]))
    return 0
