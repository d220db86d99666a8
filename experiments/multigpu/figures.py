"""The ``multigpu`` figures, drawn from stored rows only: steady and one-shot speed-up over one worker's steady
time against the number of workers, one panel per N, a line per operand kind and mode (a setting's colour and
marker, solid and filled for steady, dashed and hollow for one shot), beside the ideal (``multigpu-speedup``);
and one product's task stream on the most workers measured, each worker's compute and transfers against time
(``multigpu-timeline``)."""

from __future__ import annotations

from matplotlib.figure import Figure

from ..core.database import ResultsDB
from ..core.plotting import SMALL, finish, panel_devices, panel_grid, panel_title, series_styles, shared_legend
from ..core.registry import figure
from .report import EXPERIMENT, ONESHOT, STEADY, by_point, kind_of, multigpu_rows, timelines

NAME = "multigpu-speedup"


@figure(NAME, "Speed-up over one worker's steady time against the number of workers (1, 2, 4), one shot and "
              "steady, for host operands and device-resident dask arrays, one panel per N", experiments=(EXPERIMENT,))
def render_speedup(db: ResultsDB) -> Figure | None:
    panels = []
    for key in db.env_keys():
        rows = multigpu_rows(db, key)
        for n in sorted({r.n for r in rows}):
            panels.append((key, n, [r for r in rows if r.n == n]))
    panels = [p for p in panels if len({r.workers for r in p[2]}) > 1]
    if not panels:
        return None
    keys = list(dict.fromkeys(p[0] for p in panels))
    devices = panel_devices(db, keys, [EXPERIMENT])
    settings = sorted({r.kind for p in panels for r in p[2]}, key=lambda s: (kind_of(s) != "host", s))
    series = [(kind, mode) for kind in settings for mode in (STEADY, ONESHOT)]
    colours = series_styles(settings)                  # a setting's two modes share its colour and marker
    styles = {(kind, mode): {**colours[kind], "linestyle": "-" if mode == STEADY else "--",
                             "markerfacecolor": colours[kind]["color"] if mode == STEADY else "white"}
              for kind, mode in series}
    body, axes = panel_grid(len(panels))
    for ax, (key, n, rows) in zip(axes, panels):
        points = by_point(rows)
        most = max(r.workers for r in rows)
        ax.plot([1, most], [1, most], color="0.6", linestyle=":", label="ideal (linear)")
        drawn: dict[tuple, list[tuple[str, str]]] = {}
        unbased = []
        for kind, mode in series:
            base = points.get((n, kind, 1), {}).get(STEADY)
            mine = sorted(((w, m[mode].time_s) for (nn, k, w), m in points.items() if nn == n and k == kind
                           and mode in m), key=lambda wt: wt[0])
            if base is not None and mine:
                drawn.setdefault((tuple(w for w, _ in mine), tuple(base.time_s / t for _, t in mine)), []).append(
                    (kind, mode))
            elif mine and mode == STEADY:
                unbased.append(kind)
        if unbased:                                      # measured, but with no 1-worker point to divide by
            ax.text(0.02, 0.98, "not drawn (no 1-worker point):\n" + "\n".join(unbased), transform=ax.transAxes,
                    fontsize=SMALL, va="top", color="0.3")
        for (xs, ys), names in drawn.items():          # series of identical data named together, drawn once
            kinds = " = ".join(kind for kind, _ in names)
            modes = " = ".join(dict.fromkeys(mode.replace("oneshot", "one shot") for _, mode in names))
            ax.plot(xs, ys, **styles[names[0]], label=f"{kinds} operands, {modes}")
        ax.set_xticks(sorted({r.workers for r in rows}))
        ax.set_xlabel("workers (GPUs)", fontsize=SMALL + 1)
        ax.set_ylabel("speed-up over one worker, steady", fontsize=SMALL + 1)
        ax.grid(True, alpha=0.3)
        ax.set_title(panel_title(f"N = {n}", devices[key]), fontsize=SMALL + 2)
    shared_legend(body, axes)
    return finish(body, db, keys, [EXPERIMENT], "Products across Dask workers: speed-up over one worker, one shot "
                                                "and steady, host operands and device-resident dask arrays")


TIMELINE_NAME = "multigpu-timeline"
#: Colours of a span's action.
ACTIONS = {"compute": "tab:blue", "transfer": "tab:orange"}


@figure(TIMELINE_NAME, "The task stream of one product on the most workers measured, per N and kind of operands: "
                       "each worker's compute and transfers against time", experiments=(EXPERIMENT,))
def render_timeline(db: ResultsDB) -> Figure | None:
    panels = []
    for key in db.env_keys():
        found = timelines(db, key)
        for n, kind in sorted({(n, kind) for n, kind, _ in found}):
            workers = max(w for nn, k, w in found if (nn, k) == (n, kind))
            if found[(n, kind, workers)]:
                panels.append((key, n, kind, workers, found[(n, kind, workers)]))
    if not panels:
        return None
    keys = list(dict.fromkeys(p[0] for p in panels))
    devices = panel_devices(db, keys, [EXPERIMENT])
    body, axes = panel_grid(len(panels), max_cols=2)
    for ax, (key, n, kind, workers, spans) in zip(axes, panels):
        for action, colour in ACTIONS.items():
            for lane in range(workers):
                bars = [(start, max(stop - start, 1e-9)) for w, a, start, stop, _ in spans if w == lane and a == action]
                ax.broken_barh(bars, (lane - 0.35, 0.7), color=colour, label=action if lane == 0 else None)
        ax.set_yticks(range(workers), [f"worker {w}" for w in range(workers)])
        ax.set_xlabel("seconds from the first task", fontsize=SMALL + 1)
        ax.grid(True, axis="x", alpha=0.3)
        ax.set_title(panel_title(f"N = {n}, {workers} workers\n{kind} operands", devices[key]), fontsize=SMALL + 2)
    shared_legend(body, axes)
    return finish(body, db, keys, [EXPERIMENT], "One product's task stream across Dask workers: compute and "
                                                "transfers per worker")
