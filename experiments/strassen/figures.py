"""The Strassen figures, after the papers' Figs. 5.7, 3.10 and 3.11: speed-up against N per
configuration, time and speed-up against level, and extra memory against the model."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..core.database import ResultsDB
from ..core.plotting import device_label, new_figure, plot_marked, save_figure
from ..core.registry import figure
from . import memory
from .bench import CONFIGS, EXPERIMENT, SpeedupRow, speedup_table
from .memory import byte_unit, memory_table


def method_order(methods: Iterable[str]) -> list[str]:
    """Methods in CONFIGS order, unknown ones after."""
    known = [c.name for c in CONFIGS]
    present = set(methods)
    return [m for m in known if m in present] + sorted(present - set(known))


def _grouped(db: ResultsDB, table: Callable[[ResultsDB, str], list[Any]],
             by: Callable[[Any], Any]) -> dict[tuple[str, Any], list[Any]]:
    """Rows of every environment (most recent first), grouped by (env_key, by(row))."""
    groups: dict[tuple[str, Any], list[Any]] = {}
    for key in db.env_keys():
        mine: dict[Any, list[Any]] = defaultdict(list)
        for row in table(db, key):
            mine[by(row)].append(row)
        groups.update({(key, value): mine[value] for value in sorted(mine)})
    return groups


def _size_axis(ax: Any, sizes: Sequence[int]) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(set(sizes)))
    ax.set_xticklabels([str(n) for n in sorted(set(sizes))], rotation=45, fontsize=7)
    ax.minorticks_off()


@figure(EXPERIMENT, "Strassen speed-up over GEMM against N, one line per level, one panel per configuration")
def render_speedup(db: ResultsDB, out_dir: Path) -> list[Path]:
    groups = _grouped(db, speedup_table, lambda r: r.dtype)
    if not groups:
        return []
    methods = method_order(r.method for rows in groups.values() for r in rows)
    fig, axes = new_figure(len(groups), len(methods), width=3.1 * len(methods), height=3.0 * len(groups))
    axes = np.array(axes, dtype=object).reshape(len(groups), len(methods))
    for row_axes, ((key, dtype), rows) in zip(axes, groups.items()):
        device = device_label(db, key)
        for ax, method in zip(row_axes, methods):
            mine = [r for r in rows if r.method == method]
            ax.set_title(f"{method}\n{device} {dtype}", fontsize=8)
            ax.axhline(1.0, color="black", lw=0.8, ls=":")
            for level in sorted({r.level for r in mine}):
                pts = [r for r in mine if r.level == level]
                plot_marked(ax, [r.size for r in pts], [r.speedup for r in pts], [r.stable for r in pts],
                      "o-", label=f"level {level}")
            if mine:
                _size_axis(ax, [r.size for r in mine])
                ax.legend(fontsize=7)
            ax.set(xlabel="N", ylabel="speed-up over GEMM")
            ax.grid(True, alpha=0.3)
    fig.suptitle("Strassen-Winograd speed-up over the library GEMM (interleaved timings; "
                 "hollow: unstable batch)", fontsize=9)
    return save_figure(fig, out_dir, EXPERIMENT)


def level_curves(rows: Sequence[SpeedupRow]) -> dict[str, tuple[int, list[tuple[int, float, float]]]]:
    """Per method: its largest stored N and (level, time s, speed-up) there, GEMM as level 0."""
    curves = {}
    for method in method_order(r.method for r in rows):
        mine = [r for r in rows if r.method == method]
        n = max(r.size for r in mine)
        at_n = sorted((r for r in mine if r.size == n), key=lambda r: r.level)
        gemm = statistics.median(r.gemm_s for r in at_n)
        curves[method] = (n, [(0, gemm, 1.0)] + [(r.level, r.time_s, r.speedup) for r in at_n])
    return curves


@figure("strassen-level", "Strassen time and speed-up against level at the largest stored N, per configuration")
def render_level(db: ResultsDB, out_dir: Path) -> list[Path]:
    groups = _grouped(db, speedup_table, lambda r: r.dtype)
    if not groups:
        return []
    fig, axes = new_figure(len(groups), 2, width=11, height=4.0 * len(groups))
    axes = np.array(axes, dtype=object).reshape(len(groups), 2)
    for (ax_t, ax_s), ((key, dtype), rows) in zip(axes, groups.items()):
        device = device_label(db, key)
        for method, (n, pts) in level_curves(rows).items():
            levels, times, speedups = zip(*pts)
            line, = ax_t.plot(levels, [1e3 * t for t in times], "o-", label=f"{method} (N={n})")
            ax_s.plot(levels, speedups, "o-", color=line.get_color(), label=f"{method} (N={n})")
        ax_t.set(xlabel="level (0: GEMM)", ylabel="time (ms)", title=f"time against level, {device} {dtype}")
        ax_t.set_yscale("log")
        ax_s.axhline(1.0, color="black", lw=0.8, ls=":")
        ax_s.set(xlabel="level (0: GEMM)", ylabel="speed-up over GEMM",
                 title=f"speed-up against level, {device} {dtype}")
        for ax in (ax_t, ax_s):
            ax.xaxis.get_major_locator().set_params(integer=True)
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=7)
    return save_figure(fig, out_dir, "strassen-level")


@figure(memory.EXPERIMENT, "Measured peak extra memory against the model, by level, one line per schedule")
def render_memory(db: ResultsDB, out_dir: Path) -> list[Path]:
    groups = _grouped(db, memory_table, lambda r: (r.size, r.dtype))
    if not groups:
        return []
    fig, axes = new_figure(1, len(groups), width=5.5 * len(groups), height=4.4)
    axes = np.array(axes, dtype=object).reshape(-1)
    for ax, ((key, (n, dtype)), rows) in zip(axes, groups.items()):
        scale, unit = byte_unit(max(max(r.measured, r.model) for r in rows))
        for schedule in [s for s in memory.SCHEDULES if any(r.schedule == s for r in rows)] + sorted(
                {r.schedule for r in rows} - set(memory.SCHEDULES)):
            pts = sorted((r for r in rows if r.schedule == schedule), key=lambda r: r.level)
            levels = [r.level for r in pts]
            line, = ax.plot(levels, [r.measured / scale for r in pts], "o-", label=f"{schedule} measured")
            ax.plot(levels, [r.model / scale for r in pts], "x--", color=line.get_color(),
                    label=f"{schedule} model")
        exact = "exact allocator count" if all(r.exact for r in rows) else "tracker peak, incl. library overheads"
        ax.set(xlabel="level", ylabel=f"extra memory beyond A, B, C ({unit})",
               title=f"{device_label(db, key)}, N={n} {dtype}\n({exact})")
        ax.title.set_fontsize(8)
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
    return save_figure(fig, out_dir, memory.EXPERIMENT)
