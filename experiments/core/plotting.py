"""Figure helpers: matplotlib's object API (no pyplot state, no display needed)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

FORMATS = ("png", "pdf")


def new_figure(rows: int = 1, cols: int = 1, *, width: float = 6.4, height: float = 4.8) -> tuple[Figure, Any]:
    """A figure and its axes, laid out to fit their labels."""
    fig = Figure(figsize=(width, height), layout="constrained")
    axes = fig.subplots(rows, cols)
    return fig, axes


def save_figure(fig: Figure, out_dir: Path, name: str) -> list[Path]:
    """Write ``name.png`` and ``name.pdf`` into ``out_dir``; return their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{name}.{fmt}" for fmt in FORMATS]
    for path in paths:
        fig.savefig(path, dpi=150)
    return paths


def device_label(db, key: str) -> str:
    """How a figure names a stored environment: its device and backend."""
    env = db.environment(key)
    return f"{env.get('device', key)} [{env.get('backend', '?')}]"


def plot_marked(ax: Any, xs: Sequence[float], ys: Sequence[float], stable: Sequence[bool], fmt: str,
                **kw: Any) -> Any:
    """A line whose unstable points (no batch within tolerance) are drawn hollow on top."""
    line, = ax.plot(xs, ys, fmt, **kw)
    shaky = [(x, y) for x, y, s in zip(xs, ys, stable) if not s]
    if shaky:
        ax.plot(*zip(*shaky), fmt[0], color=line.get_color(), mfc="white", zorder=3)
    return line
