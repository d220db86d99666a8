"""``gemmlab reproduce``: run every registered experiment, then render every figure.

Figures are drawn from the results database only, so ``gemmlab figures``
redraws them from stored measurements (for example a committed GPU run)
without measuring anything.
"""

from __future__ import annotations

import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .database import ResultsDB
from .registry import EXPERIMENTS, FIGURES, Context, Experiment, load
from .summary import Summary, markdown_table

SUMMARY = "SUMMARY.md"
_ENV_FIELDS = ("device", "backend", "sm_count", "memory_bytes", "driver", "cuda_runtime", "cublas",
               "cupy", "numpy", "scipy", "blas", "cpu", "cpu_count", "python", "git_commit")


def select(names: list[str] | None = None) -> list[Experiment]:
    """The registered experiments to run, in registry order: all, or those named."""
    load()
    unknown = set(names or ()) - set(EXPERIMENTS)
    if unknown:
        raise ValueError(f"unknown experiments {sorted(unknown)}; registered: {sorted(EXPERIMENTS)}")
    return [e for e in EXPERIMENTS.values() if not names or e.name in names]


def run_experiments(ctx: Context, selected: list[Experiment]) -> dict[str, Summary]:
    """Run the selected experiments and collect their summaries."""
    summaries = {}
    for i, exp in enumerate(selected, 1):
        if ctx.progress:
            print(f"[{i}/{len(selected)}] {exp.name}: {exp.description}", file=sys.stderr)
        summaries[exp.name] = exp.run(ctx)
    return summaries


def render_figures(db: ResultsDB, out_dir: Path) -> dict[str, list[Path]]:
    """Render every registered figure from stored results; figures without data are skipped."""
    load()
    return {name: paths for name, fig in FIGURES.items() if (paths := fig.render(db, out_dir))}


def figure_lines(name: str, paths: list[Path]) -> list[str]:
    """A rendered figure in Markdown: its description, the PNG inline and a link to the PDF."""
    files = {p.suffix[1:]: p.name for p in paths}
    lines = [f"*Figure `{name}`*: {FIGURES[name].description}.", ""]
    if "png" in files:
        lines += [f"![{name}]({files['png']})", ""]
    links = ", ".join(f"[{fmt.upper()}]({file})" for fmt, file in files.items())
    return lines + [f"Files: {links}", ""]


def write_summary(out_dir: Path, command: str, db: ResultsDB, environment: dict[str, Any],
                  summaries: dict[str, Summary], figures: dict[str, list[Path]]) -> Path:
    """``SUMMARY.md``: the environment, then per experiment its scope (what it measured, from the
    data), headline tables, verdict against its target and figures, then every figure drawn."""
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = ["# gemmlab reproduce: summary", "",
             f"`{command}` on {when}; results in `{db.path}`.", "",
             "## Environment", "",
             *markdown_table(("field", "value"), [(k, environment[k]) for k in _ENV_FIELDS if k in environment]),
             "", "## Experiments", ""]
    shown: dict[str, str] = {}
    for name, summary in summaries.items():
        lines += [f"### {name}: {summary.scope}" if summary.scope else f"### {name}", "",
                  f"{EXPERIMENTS[name].description}.", "", *summary.markdown()]
        for fig, paths in figures.items():
            if name not in FIGURES[fig].experiments:
                continue
            if fig in shown:        # a figure of several experiments is drawn once, under the first
                lines += [f"These results are drawn in figure `{fig}` too (above, under {shown[fig]}).", ""]
            else:
                shown[fig] = name
                lines += figure_lines(fig, paths)
    lines += ["## Figures", "", *markdown_table(
        ("figure", "shows", "files"),
        [(name, FIGURES[name].description, " ".join(f"[{p.suffix[1:]}]({p.name})" for p in paths))
         for name, paths in figures.items()])]
    path = out_dir / SUMMARY
    out_dir.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path
