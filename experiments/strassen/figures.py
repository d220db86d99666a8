"""The Strassen figures, after the papers' Figs. 5.7, 3.10 and 3.11: speed-up against N per
configuration, time and speed-up against level, and extra memory against the model."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from gpu.strassen.schedules import PLAN_SEPARATOR

from ..core.database import ResultsDB
from ..core.labels import members, merge_coincident
from ..core.plotting import (
    finish,
    legend_entries,
    level_axis,
    new_figure,
    panel_devices,
    panel_grid,
    panel_title,
    plot_marked,
    series_styles,
    shared_legend,
    size_axis,
    wrap,
)
from ..core.registry import figure
from . import memory
from .bench import method_order
from .memory import byte_unit, memory_table
from .rows import EXPERIMENT, SpeedupRow, speedup_table


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


def _stability_key() -> Line2D:
    """A legend entry for the hollow markers of unstable points."""
    return Line2D([], [], marker="o", color="0.35", mfc="white", linestyle="none", label="hollow: no stable batch")


def _label(*parts: str) -> str:
    return ", ".join(p for p in parts if p)


#: The panel of the per-level plans (``rum/rum/winograd``...): which plan is chosen differs by size and level.
MIX_PANEL = "per-level mix"


def panel_of(method: str) -> str:
    """The speed-up panel a stored method is drawn in: its own, or one for every per-level plan (same options)."""
    schedule, plus, options = method.partition("+")
    return MIX_PANEL + plus + options if PLAN_SEPARATOR in schedule else method


def _name_plans(ax: Any, rows: Sequence[SpeedupRow]) -> None:
    """Each point's plan beside it, on the side facing the panel's middle so that no name leaves the panel;
    one name for the points of a size whose levels chose the same plan (they lie close: their names overlapped)."""
    last, named = max(r.size for r in rows), set()
    for r in sorted(rows, key=lambda q: -q.speedup):
        if (r.size, r.schedule) in named:
            continue
        named.add((r.size, r.schedule))
        right = r.size == last and len({q.size for q in rows}) > 1
        ax.annotate(r.schedule, (r.size, r.speedup), textcoords="offset points", xytext=(-5 if right else 5, -9),
                    ha="right" if right else "left", fontsize=6)


#: The panel of the configurations a group measured at one size only: a point per level, by configuration.
ONE_SIZE = "measured at one size"


def speedup_panels(groups: dict[tuple[str, Any], list[SpeedupRow]]) -> tuple[list[tuple[Any, ...]], list[str]]:
    """(env, group, panel name, rows) per configuration panel of every group: a panel against N where the
    configuration spans two sizes or more, and one :data:`ONE_SIZE` panel per group for those measured at
    one size (a point per level). A group's lone point makes no panel: it is returned as a note."""
    names = list(dict.fromkeys(panel_of(m) for m in method_order(r.method for rows in groups.values() for r in rows)))
    panels, notes = [], []
    for (key, group), rows in groups.items():
        mine = {name: [r for r in rows if panel_of(r.method) == name] for name in names}
        lone = [r for found in mine.values() if len({r.size for r in found}) == 1 for r in found]
        panels += [(key, group, name, found) for name, found in mine.items() if len({r.size for r in found}) > 1]
        if len(lone) > 1:
            panels.append((key, group, ONE_SIZE, lone))
        notes += [f"{r.method} ({group}) measured at N = {r.size}, level {r.level} only: {r.speedup:.3f}x"
                  for r in lone if len(lone) == 1]
    return panels, notes


def _draw_one_size(ax: Any, rows: Sequence[SpeedupRow], styles: dict) -> None:
    """The points of configurations measured at one size: one column per configuration, levels side by side."""
    methods = list(dict.fromkeys(method_order(r.method for r in rows)))
    levels = sorted({r.level for r in rows})
    for level in levels:
        pts = [r for r in rows if r.level == level]
        shift = 0.12 * (levels.index(level) - (len(levels) - 1) / 2)
        plot_marked(ax, [methods.index(r.method) + shift for r in pts], [r.speedup for r in pts],
                    [r.stable for r in pts], "", linestyle="none", label=f"level {level}", **styles[level])
    ax.set_xticks(range(len(methods)))
    ax.set_xticklabels([f"{m}\nN = {next(r.size for r in rows if r.method == m)}" for m in methods], fontsize=6)
    ax.set_xlim(-0.6, len(methods) - 0.4)
    ax.set_xlabel("configuration")


@figure(EXPERIMENT, "Strassen speed-up over GEMM against N, one line per level, one panel per configuration")
def render_speedup(db: ResultsDB) -> Figure | None:
    groups = _grouped(db, speedup_table, lambda r: r.group)
    panels, notes = speedup_panels(groups)
    if not panels:
        return None
    devices = panel_devices(db, [p[0] for p in panels], [EXPERIMENT])
    dtypes = {p[1] for p in panels}
    styles = series_styles(sorted({r.level for p in panels for r in p[3]}))
    body, axes = panel_grid(len(panels), panel_width=3.6, panel_height=2.9, sharey=len(groups) == 1)
    for ax, (key, dtype, method, mine) in zip(axes, panels):
        ax.set_title(panel_title(method, _label(devices[key], dtype if len(dtypes) > 1 else "")), fontsize=8)
        ax.axhline(1.0, color="black", lw=0.8, ls=":")
        if method == ONE_SIZE:
            _draw_one_size(ax, mine, styles)
        else:
            for level in sorted({r.level for r in mine}):
                pts = [r for r in mine if r.level == level]
                plot_marked(ax, [r.size for r in pts], [r.speedup for r in pts], [r.stable for r in pts], "-",
                            label=f"level {level}", **styles[level])
            if method.startswith(MIX_PANEL):
                _name_plans(ax, mine)
            size_axis(ax, [r.size for r in mine])
        ax.set_ylabel("speed-up over GEMM")
        ax.grid(True, alpha=0.3)
    handles, labels = legend_entries(axes)
    shared_legend(body, handles=[*handles, _stability_key()], labels=[*labels, "hollow: no stable batch"])
    return finish(body, db, devices, [EXPERIMENT], f"Strassen-Winograd speed-up over the library GEMM by "
                  f"configuration ({', '.join(sorted(dtypes))}; interleaved timings; dotted: GEMM)",
                  note="; ".join(notes) or None)


#: The level figure draws a row of panels (time, speed-up) at each of a group's largest sizes with two levels or more.
LEVEL_SIZES = 3


def level_sizes(rows: Sequence[SpeedupRow], count: int = LEVEL_SIZES) -> list[int]:
    """The largest ``count`` sizes at which some configuration has two levels or more stored, largest first."""
    levels: dict[tuple[int, str], set[int]] = defaultdict(set)
    for r in rows:
        levels[(r.size, r.method)].add(r.level)
    deep = {n for (n, _), stored in levels.items() if len(stored) >= 2}
    return sorted(deep, reverse=True)[:count]


def level_curves(rows: Sequence[SpeedupRow], n: int) -> dict[str, list[tuple[int, float, float]]]:
    """Per method stored at size ``n``: (level, time s, speed-up) by level, its groups' GEMM as level 0."""
    curves = {}
    for method in method_order(r.method for r in rows if r.size == n):
        at_n = sorted((r for r in rows if r.method == method and r.size == n), key=lambda r: r.level)
        gemm = statistics.median(r.gemm_s for r in at_n)
        curves[method] = [(0, gemm, 1.0)] + [(r.level, r.time_s, r.speedup) for r in at_n]
    return curves


def _level_row(ax_t: Any, ax_s: Any, curves: dict[str, list[tuple[int, float, float]]], styles: dict,
               where: str) -> None:
    levels = [0]
    for method, pts in curves.items():
        lv, times, speedups = zip(*pts)
        levels += lv
        ax_t.plot(lv, [1e3 * t for t in times], "-", label=method, **styles[method])
        ax_s.plot(lv, speedups, "-", label=method, **styles[method])
    where = wrap(where, 3.8, 9)
    ax_t.set(ylabel="time (ms)", title=panel_title("time against level", where))
    ax_s.axhline(1.0, color="black", lw=0.8, ls=":")
    ax_s.set(ylabel="speed-up over GEMM", title=panel_title("speed-up against level", where))
    for ax in (ax_t, ax_s):
        level_axis(ax, levels, names={0: "0 (GEMM)"})
        ax.set_xlabel("Strassen level")
        ax.title.set_fontsize(9)
        ax.grid(True, alpha=0.3)


@figure("strassen-level", "Strassen time and speed-up against level at the largest stored sizes, per configuration",
        experiments=(EXPERIMENT,))
def render_level(db: ResultsDB) -> Figure | None:
    groups = _grouped(db, speedup_table, lambda r: r.group)
    panels = [(key, dtype, n, rows) for (key, dtype), rows in groups.items() for n in level_sizes(rows)]
    if not panels:
        return None
    devices = panel_devices(db, [key for key, *_ in panels], [EXPERIMENT])
    styles = series_styles(method_order(r.method for rows in groups.values() for r in rows))
    body, axes = new_figure(len(panels), 2, width=9.0, height=3.1 * len(panels))
    for (ax_t, ax_s), (key, dtype, n, rows) in zip(axes, panels):
        _level_row(ax_t, ax_s, level_curves(rows, n), styles, _label(devices[key], dtype, f"N = {n}"))
    shared_legend(body, axes.reshape(-1), title="configuration")
    return finish(body, db, devices, [EXPERIMENT], "Strassen-Winograd time and speed-up against the level")


#: Schedules whose measured peaks agree within this share at every level (and models exactly) are drawn as one.
SAME_PEAK = 0.01


def memory_series(rows: Sequence[Any], schedules: Sequence[str]) -> dict[str, list[Any]]:
    """Per schedule of ``schedules`` stored in ``rows``, its rows by level; schedules of the same model and
    measured peaks within :data:`SAME_PEAK` at every level are joined under one name (``rum = rum2``, or
    ``rum ≈ rum2`` where a tracker's peaks differ a little), drawn once."""
    found = {s: sorted((r for r in rows if r.schedule == s), key=lambda r: r.level) for s in schedules}
    found = {s: pts for s, pts in found.items() if pts}
    models = merge_coincident({s: [(r.level, r.model) for r in pts] for s, pts in found.items()})
    out = {}
    for same_model in models:
        group = members(same_model)
        peaks = merge_coincident({s: [r.measured for r in found[s]] for s in group}, rtol=SAME_PEAK)
        out.update({name: found[members(name)[0]] for name in peaks})
    return out


@figure(memory.EXPERIMENT, "Measured peak extra memory against the model, by level, one line per schedule")
def render_memory(db: ResultsDB) -> Figure | None:
    groups = _grouped(db, memory_table, lambda r: (r.size, r.dtype))
    if not groups:
        return None
    devices = panel_devices(db, [key for key, _ in groups], [memory.EXPERIMENT])
    schedules = [s for s in memory.SCHEDULES if any(r.schedule == s for rows in groups.values() for r in rows)]
    schedules += sorted({r.schedule for rows in groups.values() for r in rows} - set(schedules))
    series = {key: memory_series(rows, schedules) for key, rows in groups.items()}
    styles = series_styles(name for found in series.values() for name in found)
    body, axes = panel_grid(len(groups), panel_width=4.6, panel_height=3.6)
    for ax, ((key, (n, dtype)), rows) in zip(axes, groups.items()):
        scale, unit = byte_unit(max(max(r.measured, r.model) for r in rows))
        for name, pts in series[(key, (n, dtype))].items():
            levels = [r.level for r in pts]
            ax.plot(levels, [r.model / scale for r in pts], "--", lw=1.2, color=styles[name]["color"], label="_model")
            ax.plot(levels, [r.measured / scale for r in pts], linestyle="none", ms=7, mfc="none", mew=1.5,
                    label=name, **styles[name])
        exact = "exact allocator count" if all(r.exact for r in rows) else "tracker peak, incl. library overheads"
        agree = ", the model equal to every peak" if all(r.measured == r.model for r in rows) else ""
        ax.set(ylabel=f"extra memory beyond A, B, C ({unit})", xlabel="Strassen level",
               title=panel_title(_label(devices[key], f"N = {n}", dtype), f"({exact}{agree})"))
        ax.title.set_fontsize(8)
        level_axis(ax, [r.level for r in rows])
        ax.grid(True, alpha=0.3)
    handles, labels = legend_entries(axes)
    styles_key = [Line2D([], [], color="0.3", marker="o", mfc="none", ls="none"), Line2D([], [], color="0.3", ls="--")]
    shared_legend(body, handles=[*handles, *styles_key], labels=[*labels, "measured peak", "model"])
    names = [name for found in series.values() for name in found]
    joined = ["a = b: schedules of equal memory"] if any(" = " in n for n in names) else []
    joined += [f"a ≈ b: the same model, peaks within {100 * SAME_PEAK:g}%"] if any(" ≈ " in n for n in names) else []
    return finish(body, db, devices, [memory.EXPERIMENT], "; ".join(["Strassen extra memory (inputs preserved): "
                  "measured peak (markers) against the model (dashed)", *joined]))
