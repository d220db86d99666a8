"""The accuracy figures: the papers' Figs. 8-16 (``accuracy-phi``) and the bits Strassen-Winograd
loses per level against DGEMM (``accuracy-strassen``), drawn from stored audit rows only."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np

from accuracy.methods import default_methods

from ..core.database import ResultsDB
from ..core.plotting import device_label, new_figure, save_figure
from ..core.registry import figure
from .bench import audit_rows, bits_per_level


def _phi_figure_methods(methods: Iterable[str]) -> list[str]:
    """Default methods first, then any other non-Strassen method (other packages' schemes)."""
    present = set(methods)
    first = [m for m in default_methods() if m in present]
    return first + sorted(m for m in present - set(first) if not m.startswith("strassen-"))


@figure("accuracy-phi", "Max relative error per seed, one line per method, one panel per phi and N (Figs. 8-16)")
def render_phi(db: ResultsDB, out_dir: Path) -> list[Path]:
    groups = [(key, rows) for key in db.env_keys() if (rows := audit_rows(db, key))]
    panels = [(key, n, phi, [r for r in rows if r.n == n and r.phi == phi])
              for key, rows in groups for n in sorted({r.n for r in rows})
              for phi in sorted({r.phi for r in rows})]
    panels = [p for p in panels if _phi_figure_methods(r.method for r in p[3])]
    if not panels:
        return []
    cols = len({p[2] for p in panels})
    rows_n = -(-len(panels) // cols)
    fig, axes = new_figure(rows_n, cols, width=4.2 * cols, height=3.4 * rows_n)
    axes = np.array(axes, dtype=object).reshape(-1)
    for ax, (key, n, phi, rows) in zip(axes, panels):
        for method in _phi_figure_methods(r.method for r in rows):
            pts = sorted((r.seed, r.max_rel) for r in rows if r.method == method and r.max_rel)
            if pts:
                ax.plot(*zip(*pts), "o-", ms=3, label=method)
        ax.set_yscale("log")
        ax.set(xlabel="seed", ylabel="max relative error", title=f"phi = {phi:g}, N = {n}\n{device_label(db, key)}")
        ax.title.set_fontsize(8)
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=6)
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    fig.suptitle("Maximum relative error against the correctly rounded product", fontsize=9)
    return save_figure(fig, out_dir, "accuracy-phi")


@figure("accuracy-strassen", "Bits lost against DGEMM per Strassen level, one line per schedule, one panel per phi")
def render_strassen(db: ResultsDB, out_dir: Path) -> list[Path]:
    panels = [(key, size, phi, schedules) for key in db.env_keys()
              for (size, phi), schedules in sorted(bits_per_level(audit_rows(db, key)).items())]
    if not panels:
        return []
    fig, axes = new_figure(1, len(panels), width=4.4 * len(panels), height=4.0)
    axes = np.array(axes, dtype=object).reshape(-1)
    for ax, (key, size, phi, schedules) in zip(axes, panels):
        for schedule, (pts, slope) in sorted(schedules.items()):
            ax.plot(*zip(*pts), "o-", ms=3, label=f"{schedule} ({slope:.2f} bits/level)")
        ax.set(xlabel="Strassen level (0: DGEMM)", ylabel="bits lost against DGEMM (median over seeds)",
               title=f"phi = {phi:g}, N = {size}\n{device_label(db, key)}")
        ax.title.set_fontsize(8)
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=6)
    fig.suptitle("Strassen-Winograd: log2(max relative error / DGEMM's) by level", fontsize=9)
    return save_figure(fig, out_dir, "accuracy-strassen")
