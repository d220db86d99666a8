"""Figure helpers shared by every family: matplotlib's object API (no pyplot state, no display).

Every figure of the lab is built the same way, so that every figure reads the same:

* :func:`new_figure` and :func:`panel_grid` lay panels out on a grid of at most :data:`MAX_COLS`
  columns (constrained layout), above a footer that :func:`finish` fills;
* :func:`series_styles` gives every series of a figure its own colour and marker (a 10-colour
  cycle would repeat colours beyond ten series);
* :func:`shared_legend` puts one legend below the grid, :func:`side_legend` one beside a panel:
  legends never cover data;
* :func:`size_axis`, :func:`level_axis` and :func:`log_axis` keep tick labels readable (sizes on a
  log2 axis thinned so that labels do not overlap, levels as integers);
* :func:`finish` writes the title, wrapped to fit the canvas, and under the figure a note of what
  it leaves out (a panel of one point, a phi not drawn) and the :func:`provenance` line of every
  environment the data came from: device, backend, measurement regime and library versions, read
  from the stored environment record and measurements;
* :func:`panel_devices` names each environment in its panels' titles where a figure draws several,
  two of one device told apart (their regime, else the day recorded).

:mod:`experiments.core.labels` keeps coincident series and crowded point labels in sight.

Draw functions return the root :class:`~matplotlib.figure.Figure` (tests inspect it);
:func:`save_figure` writes it as PNG and PDF.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Hashable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure, SubFigure
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter, NullLocator

FORMATS = ("png", "pdf")
#: At most this many panels side by side; more go on further rows.
MAX_COLS = 3
#: Font size of legends and of the footer; titles are a little larger.
SMALL, TITLE = 7, 9
#: ``gid`` of the footer text, so that tests (and readers of the PDF) can find it.
PROVENANCE = "provenance"
#: ``gid`` of the footer's note (what a figure leaves out, and why).
NOTE = "figure-note"
#: Library versions named in the footer, by the record's keys: on a GPU, and on a CPU.
GPU_VERSIONS = (("cuBLAS", "cublas"), ("CUDA", "cuda_runtime"), ("CuPy", "cupy"), ("driver", "driver"),
                ("NumPy", "numpy"))
CPU_VERSIONS = (("BLAS", "blas"), ("NumPy", "numpy"), ("SciPy", "scipy"))
MARKERS = "osD^vP*X<>ph"
_FOOTER_PAD = 8 / 72        # inches around the footer text


def new_figure(rows: int = 1, cols: int = 1, *, width: float = 6.4, height: float = 4.8,
               **subplot_kw: Any) -> tuple[SubFigure, np.ndarray]:
    """A figure body of ``rows`` x ``cols`` panels (a 2-D array of axes) above a footer for
    :func:`finish`; ``width`` and ``height`` are the body's inches."""
    root = Figure(figsize=(width, height + _FOOTER_PAD), layout="constrained")
    FigureCanvasAgg(root)
    body, _ = root.subfigures(2, 1, height_ratios=[height, _FOOTER_PAD], hspace=0)
    axes = body.subplots(rows, cols, squeeze=False, **subplot_kw)
    return body, axes


def panel_grid(count: int, *, panel_width: float = 4.2, panel_height: float = 3.4, max_cols: int = MAX_COLS,
               min_width: float = 6.4, **subplot_kw: Any) -> tuple[SubFigure, list[Any]]:
    """``count`` panels on a grid of at most ``max_cols`` columns, in reading order (unused cells
    removed): a figure of 9 panels is 3 x 3, never 1 x 9."""
    cols = max(1, min(max_cols, count))
    rows = -(-count // cols)
    body, axes = new_figure(rows, cols, width=max(min_width, panel_width * cols), height=panel_height * rows,
                            **subplot_kw)
    flat = list(axes.reshape(-1))
    for ax in flat[count:]:
        ax.remove()
    return body, flat[:count]


def wrap(text: str, width_in: float, fontsize: float) -> str:
    """``text`` wrapped to lines that fit ``width_in`` inches at ``fontsize`` points (estimated)."""
    chars = max(20, int(width_in * 72 / (0.55 * fontsize)))
    return "\n".join(textwrap.fill(line, chars) for line in text.split("\n"))


def _wrap_parts(parts: Sequence[str], chars: int, sep: str = " · ") -> list[str]:
    """Parts joined by ``sep`` into lines of at most ``chars`` characters (a part is never split)."""
    lines: list[str] = []
    for part in parts:
        if lines and len(lines[-1]) + len(sep) + len(part) <= chars:
            lines[-1] += sep + part
        else:
            lines.append(part)
    return lines


def regime_label(db: Any, key: str, experiments: Iterable[str]) -> str:
    """The measurement regime (``meta["regime"]``, or ``params["regime"]`` where the point is keyed by it:
    sustained or cold power state) of the stored points of ``experiments`` on ``key``; "regime not recorded"
    where no point stores one."""
    values = [m.meta.get("regime") or m.params.get("regime") for exp in experiments
              for m in db.measurements(exp, env_key=key)]
    named = sorted({str(v) for v in values if v})
    if not named:
        return "regime not recorded"
    missing = " (some points not recorded)" if any(not v for v in values) else ""
    return f"regime: {', '.join(named)}{missing}"


def versions_label(env: dict[str, Any]) -> str:
    """The library versions of an environment record: cuBLAS, CUDA, CuPy, driver and NumPy on a
    GPU; BLAS, NumPy and SciPy on a CPU."""
    gpu = env.get("backend", "numpy") != "numpy" or "cublas" in env
    names = [f"{label} {env[k]}" for label, k in (GPU_VERSIONS if gpu else CPU_VERSIONS) if env.get(k)]
    return ", ".join(names) or "library versions not recorded"


def provenance_parts(db: Any, key: str, experiments: Iterable[str]) -> list[str]:
    """Device, backend, regime and library versions of ``key``, as the parts of a footer line."""
    env = db.environment(key)
    device = env.get("device") or env.get("cpu") or key
    return [str(device), str(env.get("backend", "?")), regime_label(db, key, experiments), versions_label(env)]


def provenance(db: Any, key: str, experiments: Iterable[str]) -> str:
    """The footer line of one environment, e.g. ``NVIDIA H100 80GB HBM3 · cupy · regime: sustained ·
    cuBLAS 13.1.0, CUDA 13.2, CuPy 14.2.0, driver 580.159.04, NumPy 2.5.2``."""
    return " · ".join(provenance_parts(db, key, experiments))


def device_label(db: Any, key: str) -> str:
    """A short name of a stored environment for panel titles: its device and backend."""
    env = db.environment(key)
    return f"{env.get('device', key)} [{env.get('backend', '?')}]"


def panel_devices(db: Any, keys: Iterable[str], experiments: Iterable[str] = ()) -> dict[str, str]:
    """Per environment, the device name a panel title needs: none when the figure draws one
    environment (the footer names it), the :func:`device_label` when it draws several. Two
    environments of one device (say a calibration and a later sustained run) are told apart by what
    differs: the regime of their points of ``experiments``, else the day recorded, else the key."""
    keys = list(dict.fromkeys(keys))
    if len(keys) < 2:
        return {k: "" for k in keys}
    labels = {k: device_label(db, k) for k in keys}
    experiments = list(experiments)
    for label in {v for v in labels.values() if list(labels.values()).count(v) > 1}:
        same = [k for k in keys if labels[k] == label]
        for tell in (lambda k: regime_label(db, k, experiments) if experiments else "",
                     lambda k: f"recorded {str(db.environment(k).get('recorded_at', ''))[:10]}",
                     lambda k: f"env {k}"):
            told = {k: tell(k) for k in same}
            if len(set(told.values())) == len(same):
                labels.update({k: f"{label}, {told[k]}" for k in same})
                break
    return labels


def panel_title(*parts: str) -> str:
    """Non-empty parts, one per line."""
    return "\n".join(p for p in parts if p)


def finish(body: SubFigure, db: Any, keys: Iterable[str], experiments: Iterable[str],
           title: str | None = None, *, note: str | None = None,
           sources: Sequence[Sequence[str]] | None = None) -> Figure:
    """Title the figure (wrapped to its width) and write in the footer, which grows to fit, the
    ``note`` (what the figure leaves out, and why), then the provenance of every environment drawn;
    returns the root figure. ``sources`` replaces the environments' provenance parts where the data
    drawn were measured elsewhere than the environment that stored them (a held-out device's sweep)."""
    root = body.figure
    width, _ = root.get_size_inches()
    if title:
        body.suptitle(wrap(title, width - 0.3, TITLE), fontsize=TITLE)
    experiments = list(experiments)
    chars = max(30, int((width - 0.3) * 72 / (0.55 * SMALL)))
    parts = sources if sources is not None else [provenance_parts(db, key, experiments) for key in dict.fromkeys(keys)]
    lines = list(dict.fromkeys(line for p in parts for line in _wrap_parts(list(p), chars)))
    noted = wrap(note, width - 0.3, SMALL).split("\n") if note else []
    footer = root.subfigs[1]
    line_h = SMALL * 1.3 / 72
    foot_h = (len(lines) + len(noted)) * line_h + _FOOTER_PAD
    if noted:           # the note on top, the provenance under it
        footer.text(0.5, 1 - 0.5 * _FOOTER_PAD / foot_h, "\n".join(noted), ha="center", va="top", fontsize=SMALL,
                    style="italic", gid=NOTE)
    footer.text(0.5, 0.5 * _FOOTER_PAD / foot_h if noted else 0.5, "\n".join(lines), ha="center",
                va="bottom" if noted else "center", fontsize=SMALL, color="0.25", gid=PROVENANCE)
    grid = body._subplotspec.get_gridspec()  # no public accessor on SubFigure
    body_h = root.get_size_inches()[1] * grid.get_height_ratios()[0] / sum(grid.get_height_ratios())
    grid.set_height_ratios([body_h, foot_h])
    root.set_size_inches(width, body_h + foot_h)
    return root


def save_figure(fig: Figure | None, out_dir: Path, name: str) -> list[Path]:
    """Write ``name.png`` and ``name.pdf`` into ``out_dir``; return their paths (none without a figure)."""
    if fig is None:
        return []
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{name}.{fmt}" for fmt in FORMATS]
    for path in paths:
        fig.savefig(path, dpi=150)
    return paths


def series_styles(names: Iterable[Hashable]) -> dict[Hashable, dict[str, Any]]:
    """A distinct colour and marker per series, in order: tab10's colours up to ten series, tab20's
    (dark shades first) up to twenty, then the colours again with the next marker."""
    names = list(dict.fromkeys(names))
    colors = list(colormaps["tab10"].colors) if len(names) <= 10 else \
        list(colormaps["tab20"].colors[0::2]) + list(colormaps["tab20"].colors[1::2])
    return {name: {"color": colors[i % len(colors)], "marker": MARKERS[(i + i // len(colors)) % len(MARKERS)]}
            for i, name in enumerate(names)}


def legend_entries(axes: Iterable[Any]) -> tuple[list[Any], list[str]]:
    """Legend handles of the axes, one per label (the first drawn), in drawing order."""
    seen: dict[str, Any] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(label, handle)
    return list(seen.values()), list(seen)


def shared_legend(body: SubFigure, axes: Iterable[Any] = (), *, handles: Sequence[Any] | None = None,
                  labels: Sequence[str] | None = None, ncol: int | None = None, title: str | None = None) -> Any:
    """One legend for the whole figure, below the grid (series that repeat across panels are
    named once); returns it, or None when there is nothing to name."""
    if handles is None:
        handles, labels = legend_entries(axes)
    if not handles:
        return None
    room = body.figure.get_size_inches()[0] * 72 - 20
    widths = [SMALL * 0.6 * len(str(label)) + 30 for label in labels]    # points per entry, estimated
    fit = len(widths) if sum(widths) <= room else max(1, int(room / max(widths)))
    return body.legend(handles, labels, loc="outside lower center", ncol=ncol or fit,
                       fontsize=SMALL, frameon=False, title=title, title_fontsize=SMALL)


def side_legend(ax: Any, **kw: Any) -> Any:
    """The panel's legend beside it, to the right, outside the data."""
    return ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, fontsize=SMALL,
                     frameon=False, **kw)


#: Neighbouring size labels differ by at least this factor.
MIN_RATIO = 1.4


def thinned(values: Iterable[float], max_labels: int = 7) -> list[float]:
    """Sorted distinct positive values thinned so that neighbours lie at least 1/(max_labels - 1)
    of the log range apart, and at least :data:`MIN_RATIO` apart: tick labels that do not overlap
    (12288 and 16384 did in a panel of 8192-24576). The first and last are kept, then powers of two
    are preferred."""
    vals = sorted({float(v) for v in values if v > 0})
    if len(vals) <= 2:
        return vals
    gap = max(math.log2(vals[-1] / vals[0]) / max(1, max_labels - 1), math.log2(MIN_RATIO))
    kept = [vals[0], vals[-1]]
    inner = sorted(vals[1:-1], key=lambda v: (not math.log2(v).is_integer(), v))
    for v in inner:
        if all(abs(math.log2(v / k)) >= gap for k in kept):
            kept.append(v)
    return sorted(kept)


def size_axis(ax: Any, sizes: Iterable[int], axis: str = "x", max_labels: int = 8, label: str | None = "N") -> None:
    """A log2 matrix-size axis labelled at measured sizes (thinned to ``max_labels``), as integers."""
    ticks = thinned(sizes, max_labels)
    target = ax.xaxis if axis == "x" else ax.yaxis
    (ax.set_xscale if axis == "x" else ax.set_yscale)("log", base=2)
    target.set_major_locator(FixedLocator(ticks))
    target.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.0f}"))
    target.set_minor_locator(NullLocator())
    if axis == "x" and len(ticks) > 4:
        ax.tick_params(axis="x", labelrotation=45)
        for text in ax.get_xticklabels():
            text.set_horizontalalignment("right")
    if label:
        (ax.set_xlabel if axis == "x" else ax.set_ylabel)(label)


def level_axis(ax: Any, levels: Iterable[int], axis: str = "x", names: dict[int, str] | None = None) -> None:
    """An axis of Strassen levels: ticks at the integer levels only (a category each), padded by
    half a level, so that no fractional level is ever labelled."""
    levels = sorted({int(v) for v in levels})
    if not levels:
        return
    target = ax.xaxis if axis == "x" else ax.yaxis
    target.set_major_locator(FixedLocator(levels))
    target.set_major_formatter(FuncFormatter(lambda v, _: (names or {}).get(round(v), f"{v:.0f}")))
    target.set_minor_locator(NullLocator())
    (ax.set_xlim if axis == "x" else ax.set_ylim)(levels[0] - 0.5, levels[-1] + 0.5)


#: Where a log axis spans less than this factor, its ticks are denser (:func:`log_axis`): at 1, 2 and 5 a decade, a
#: speed-up axis from 0.8 to 2.8 showed only 1 and 2, and a point at 2.65 could not be read off it.
NARROW_SPAN = 5.0


def log_axis(ax: Any, axis: str = "y") -> None:
    """A log axis with labels at major ticks only (minor labels overlap); where the data span less
    than three decades, ticks at 1, 2 and 5 of each decade labelled as plain numbers, and where they span less
    than :data:`NARROW_SPAN`, at 1, 1.5, 2, 2.5, 3, 4, ... 9."""
    target = ax.xaxis if axis == "x" else ax.yaxis
    (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
    lo, hi = (ax.get_xlim() if axis == "x" else ax.get_ylim())
    if lo > 0 and hi / lo < 1000:
        subs = (1.0, 1.5, 2.0, 2.5, *range(3, 10)) if hi / lo < NARROW_SPAN else (1.0, 2.0, 5.0)
        target.set_major_locator(LogLocator(base=10, subs=tuple(float(s) for s in subs)))
        target.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    target.set_minor_formatter(NullFormatter())


def plot_marked(ax: Any, xs: Sequence[float], ys: Sequence[float], stable: Sequence[bool], fmt: str,
                **kw: Any) -> Any:
    """A line (``fmt``; "" for keywords alone) whose unstable points (no batch within tolerance) are
    drawn hollow on top."""
    line, = ax.plot(xs, ys, fmt, **kw) if fmt else ax.plot(xs, ys, **kw)
    shaky = [(x, y) for x, y, s in zip(xs, ys, stable) if not s]
    if shaky:
        ax.plot(*zip(*shaky), linestyle="none", marker=line.get_marker(), color=line.get_color(), mfc="white",
                zorder=3)
    return line
