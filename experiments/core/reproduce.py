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


def run_experiments(ctx: Context, selected: list[Experiment]) -> dict[str, dict[str, Any]]:
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


def write_summary(out_dir: Path, command: str, db: ResultsDB, environment: dict[str, Any],
                  summaries: dict[str, dict[str, Any]], figures: dict[str, list[Path]]) -> Path:
    """A short Markdown record of what ran, where, and what it found."""
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = ["# gemmlab reproduce: summary", "",
             f"`{command}` on {when}; results in `{db.path}`.", "",
             "## Environment", "", "| field | value |", "| --- | --- |"]
    lines += [f"| {k} | {environment[k]} |" for k in _ENV_FIELDS if k in environment]
    lines += ["", "## Experiments", ""]
    for name, summary in summaries.items():
        lines += [f"### {name}", "", EXPERIMENTS[name].description, ""]
        lines += [f"- {k}: {v}" for k, v in summary.items()] + [""]
    lines += ["## Figures", ""]
    for name, paths in figures.items():
        links = ", ".join(f"[{p.suffix[1:]}]({p.name})" for p in paths)
        lines.append(f"- {name}: {FIGURES[name].description} ({links})")
    path = out_dir / SUMMARY
    out_dir.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path
