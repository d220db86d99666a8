"""Leave-one-device-out validation of the transfer model: for every device with a
measured level sweep, predict its best levels with that device's own measurements removed, and judge
the prediction against the sweep.

The sweeps are the ``level-validation`` rows of the database, on environments whose device matches
exactly one hardware-table row (:func:`modeling.hardware.matches`), one sweep per configuration and
regime; a device the database has no sweep of falls back on the sweeps bundled in
``results/published`` (the H100's, so that a CPU-only run has one). The training set is
:func:`~experiments.levels.predict.training_devices` less the held-out device, and the held-out
device's host time per call is the transferred one (:func:`modeling.transfer.leave_one_out` with
``launch_ms=None``): nothing of the held-out device enters its prediction but its datasheet row.

One row is stored per (held-out device, sweep, size): the time lost at that size by using the
predicted level instead of the measured best (a fraction), with the predicted level, its range over
the ensemble, the measured best, the boundaries and their errors, the range of the crossover P over
the ensemble (the jackknife refits and the launch overheads tried: how sensitive P is to the training
set), and the training devices in meta.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from modeling import hardware, transfer

from ..core.database import ResultsDB
from ..core.plotting import (
    SMALL,
    finish,
    level_axis,
    new_figure,
    panel_title,
    shared_legend,
    size_axis,
    versions_label,
)
from ..core.regime import UNRECORDED
from ..core.registry import Context, experiment, figure
from ..core.summary import Check, Summary, Table, spread
from . import models, predict
from .experiments import TIME_LOST_TARGET_PCT

EXPERIMENT = "transfer-validation"
#: The bundled level sweeps read where the database has none of their device.
BUNDLED_SWEEPS = ("h100-level-validation.csv", "sustained/h100-levels-sustained.csv")


@dataclass(frozen=True)
class Sweep:
    """A measured level sweep of one device: {size: {level: time}} of one configuration and regime."""

    device: str                                 # hardware-table name
    label: str                                  # "rum+fused, sustained"
    times: dict[int, dict[int, float]]
    fused: bool
    schedule: str
    regime: str
    source: str


def _label(method: str, regime: str) -> str:
    return f"{method}, {'regime not recorded' if regime == UNRECORDED else regime}"


def _group(rows: Sequence[tuple[str, str, dict[str, Any], float]], device: str, source: str) -> list[Sweep]:
    """Sweeps from (method, regime, params, value) rows of ``level-validation`` (float64, level 0 at each size)."""
    found: dict[tuple[str, str], dict[int, dict[int, float]]] = defaultdict(dict)
    configs: dict[tuple[str, str], dict[str, Any]] = {}
    for method, regime, p, value in rows:
        if p.get("dtype", models.DTYPE) != models.DTYPE:
            continue
        found[(method, regime)].setdefault(int(p["size"]), {})[int(p["level"])] = float(value)
        configs[(method, regime)] = p
    out = []
    for (method, regime), times in sorted(found.items()):
        times = {n: t for n, t in sorted(times.items()) if 0 in t and len(t) > 1}
        if len(times) >= 2:
            p = configs[(method, regime)]
            out.append(Sweep(device, _label(method, regime), times, bool(p.get("fused", False)),
                             str(p.get("schedule", "rum")), regime, source))
    return out


def stored_sweeps(db: ResultsDB) -> list[Sweep]:
    """The level sweeps of the database, on environments whose device has exactly one hardware row."""
    out = []
    for key in db.env_keys():
        rows = db.measurements(models.LEVELS_EXPERIMENT, env_key=key)
        found = hardware.matches(str(db.environment(key).get("device", ""))) if rows else []
        if len(found) == 1:
            out += _group([(m.method, m.params.get("regime", UNRECORDED), m.params, m.value) for m in rows],
                          found[0].name, f"env {key}")
    return out


def bundled_sweeps() -> list[Sweep]:
    """The level sweeps of ``results/published`` (read from the CSVs, no database needed)."""
    out = []
    for name in BUNDLED_SWEEPS:
        by_device: dict[str, list[tuple[str, str, dict[str, Any], float]]] = defaultdict(list)
        for r in predict.bundled_rows(name):
            if r.experiment != models.LEVELS_EXPERIMENT:
                continue
            found = hardware.matches(str(r.environment.get("device", "")))
            if len(found) == 1:
                by_device[found[0].name].append((r.method, r.params.get("regime", UNRECORDED), r.params, r.value))
        for device, rows in by_device.items():
            out += _group(rows, device, f"results/published/{name}")
    return out


def all_sweeps(db: ResultsDB) -> list[Sweep]:
    """The database's sweeps, and the bundled ones of devices the database has none of."""
    stored = stored_sweeps(db)
    have = {s.device for s in stored}
    return stored + [s for s in bundled_sweeps() if s.device not in have]


def validate(sweep: Sweep, devices: dict[str, transfer.Device]) -> dict[str, Any]:
    """:func:`modeling.transfer.leave_one_out` of the sweep's device, trained on the others only."""
    train = {name: d for name, d in devices.items() if name != sweep.device}
    if not train:
        raise ValueError(f"no training device but the held-out {sweep.device}")
    max_level = max(max(t) for t in sweep.times.values())
    return transfer.leave_one_out(train, sweep.device, hardware.lookup(sweep.device), times=sweep.times,
                                  max_level=max_level, schedule=sweep.schedule, fused=sweep.fused)


def store(ctx: Context, sweep: Sweep, found: dict[str, Any]) -> None:
    times, best = sweep.times, found["best"]
    common = {"measured_boundaries": found["measured_boundaries"],
              "predicted_boundaries": found["predicted_boundaries"],
              "boundary_error_pct": found["boundary_error_pct"], "trained_on": found["trained_on"],
              "predicted_P_range": found["predicted_P_range"],
              "launch_us": found["launch_us"], "time_lost_sweep": found["time_lost_sweep"],
              "mispredicted": found["mispredicted"], "sweep_source": sweep.source,
              "schedule": sweep.schedule, "fused": sweep.fused}
    if sweep.regime != UNRECORDED:
        common["regime"] = sweep.regime
    for n in times:
        picked = found["predicted"][n]
        ctx.db.add(ctx.run_id, EXPERIMENT, sweep.device, {"device": sweep.device, "size": n, "sweep": sweep.label},
                   value=times[n][picked] / times[n][best[n]] - 1, unit="fraction",
                   meta={**common, "predicted_level": picked, "best_level": best[n],
                         "level_range": found["range"][n], "levels_measured": sorted(times[n])})


def _listed(values: Sequence[float | None], fmt: str = ".0f") -> str:
    return ", ".join("n/a" if v is None else format(v, fmt) for v in values) or "none"


@experiment(EXPERIMENT, "Leave-one-device-out validation of the transfer model: each measured device's best levels "
                        "predicted from the other devices only, against its measured sweep")
def run_transfer_validation(ctx: Context) -> Summary:
    sweeps = all_sweeps(ctx.db)
    if not sweeps:
        raise ValueError("no level sweep of a hardware-table GPU in the database nor in results/published")
    devices = predict.training_devices(ctx.db.path)
    tables: dict[str, list[tuple]] = defaultdict(list)
    checks, notes = [], []
    for sweep in sweeps:
        try:
            found = validate(sweep, devices)
        except ValueError as exc:
            notes.append(f"{sweep.device}, {sweep.label}: not judged ({exc})")
            continue
        store(ctx, sweep, found)
        t, picked, best = sweep.times, found["predicted"], found["best"]
        worst = max(t, key=lambda n: t[n][picked[n]] / t[n][best[n]])
        worst_pct = 100 * (t[worst][picked[worst]] / t[worst][best[worst]] - 1)
        sweep_pct = 100 * found["time_lost_sweep"]
        tables[sweep.device].append((
            sweep.label, spread(list(sweep.times)), found["mispredicted"], _listed(found["measured_boundaries"]),
            _listed(found["predicted_boundaries"]), _listed(found["predicted_P_range"] or []),
            _listed(found["boundary_error_pct"], "+.1f"), sweep_pct,
            f"{worst_pct:.2f}% at N = {worst}" if worst_pct > 0 else "none lost",
            ", ".join(found["trained_on"]), sweep.source))
        checks.append(Check(f"{sweep.device} ({sweep.label}) held out: time lost over the sweep "
                            f"<= {TIME_LOST_TARGET_PCT:g}%",
                            f"{sweep_pct:.2f}% ({found['mispredicted']} of {len(sweep.times)} sizes mispredicted)",
                            sweep_pct <= TIME_LOST_TARGET_PCT))
    columns = ("sweep", "sizes", "sizes mispredicted", "measured boundaries (N)", "predicted boundaries (N)",
               "predicted P over the ensemble (N)", "boundary error % per level", "time lost over the sweep %",
               "worst size", "trained on", "sweep from")
    return Summary(
        scope=f"{len(checks)} sweeps of {', '.join(sorted(tables)) or 'no device'} held out",
        facts={"held-out devices": ", ".join(sorted(tables)) or "none",
               "training devices available": ", ".join(devices),
               "host time per call": "transferred (the held-out device's own is not used)"},
        tables=[Table(f"{device} held out", columns, rows, formats={"time lost over the sweep %": ".3f"})
                for device, rows in tables.items()],
        checks=checks, notes=notes)


# --------------------------------------------------------------------------- figure

#: Colours: measured best, predicted level and its range, time lost.
MEASURED, PREDICTED, LOST = "black", "tab:blue", "tab:red"


def _panels(db: ResultsDB) -> dict[tuple[str, str, str], list[Any]]:
    """Stored rows by (environment, held-out device, sweep), in size order."""
    out: dict[tuple[str, str, str], list[Any]] = defaultdict(list)
    for m in db.measurements(EXPERIMENT):
        out[(m.env_key, m.params["device"], m.params["sweep"])].append(m)
    return {k: sorted(v, key=lambda m: m.params["size"]) for k, v in sorted(out.items())}


@figure(EXPERIMENT, "Leave-one-device-out: each held-out device's measured best level against the level the transfer "
                    "model predicts from the other devices, with the time lost per size")
def render_transfer_validation(db: ResultsDB) -> Figure | None:
    panels = _panels(db)
    if not panels:
        return None
    cols = min(3, len(panels))
    blocks = -(-len(panels) // cols)
    body, axes = new_figure(2 * blocks, cols, width=max(6.4, 4.6 * cols), height=5.6 * blocks)
    for i in range(blocks * cols):
        top, bottom = axes[2 * (i // cols), i % cols], axes[2 * (i // cols) + 1, i % cols]
        if i >= len(panels):
            top.remove()
            bottom.remove()
            continue
        (key, device, sweep), rows = list(panels.items())[i]
        _draw(top, bottom, device, sweep, rows)
    handles = [Line2D([], [], marker="o", color=MEASURED, mfc="none", ms=9, ls="none"),
               Line2D([], [], marker="o", color=PREDICTED, ms=5, ls="none"),
               Line2D([], [], color=PREDICTED, alpha=0.35, lw=5),
               Line2D([], [], color=MEASURED, ls="--", lw=0.8), Line2D([], [], color=PREDICTED, ls=":", lw=1.2),
               Line2D([], [], marker="s", color=LOST, ms=3)]
    labels = ["measured best level", "predicted level (pooled fit)", "predicted range (ensemble)",
              "measured boundary", "predicted boundary", "time lost at N"]
    shared_legend(body, handles=handles, labels=labels, ncol=3)
    return finish(body, db, [k for k, _, _ in panels], (EXPERIMENT,),
                  "Leave-one-device-out: the best Strassen level of each held-out device, predicted by the transfer "
                  "model from the other devices only, against its measured sweep",
                  sources=[_sweep_provenance(db, rows) for rows in panels.values()])


def _sweep_provenance(db: ResultsDB, rows: Sequence[Any]) -> list[str]:
    """The footer parts of the environment a held-out sweep was measured in (not the one that stored the
    validation: a CPU validates the H100 from its bundled sweep): its stored environment (``env KEY``) or that
    of the bundled export's level sweep, and the sweep's regime."""
    source, meta, device = rows[0].meta.get("sweep_source", ""), rows[0].meta, rows[0].params["device"]
    env: dict[str, Any] = {}
    if source.startswith("env ") and source[4:] in db.env_keys():
        env = db.environment(source[4:])
    elif source.startswith("results/published/"):
        env = next((r.environment for r in predict.bundled_rows(source.removeprefix("results/published/"))
                    if r.experiment == models.LEVELS_EXPERIMENT
                    and [h.name for h in hardware.matches(str(r.environment.get("device", "")))] == [device]), {})
    if not env:
        return [f"sweep from {source or 'an unrecorded source'} (its environment is not stored here)"]
    regime = f"regime: {meta['regime']}" if meta.get("regime") else "regime not recorded"
    return [str(env.get("device", "?")), str(env.get("backend", "?")), regime, versions_label(env)]


def _draw(top: Any, bottom: Any, device: str, sweep: str, rows: Sequence[Any]) -> None:
    sizes = [m.params["size"] for m in rows]
    meta = rows[0].meta
    best = [m.meta["best_level"] for m in rows]
    picked = [m.meta["predicted_level"] for m in rows]
    lo = [m.meta["level_range"][0] for m in rows]
    hi = [m.meta["level_range"][1] for m in rows]
    top.vlines(sizes, [a - 0.2 for a in lo], [b + 0.2 for b in hi], color=PREDICTED, alpha=0.35, lw=5)
    top.plot(sizes, best, "o", color=MEASURED, mfc="none", ms=9)
    top.plot(sizes, picked, "o", color=PREDICTED, ms=5, ls="none")
    for b in meta.get("measured_boundaries") or []:
        if b is not None and sizes[0] <= b <= sizes[-1]:
            top.axvline(b, color=MEASURED, ls="--", lw=0.8)
    for b in meta.get("predicted_boundaries") or []:
        if b is not None and sizes[0] <= b <= sizes[-1]:
            top.axvline(b, color=PREDICTED, ls=":", lw=1.2)
    levels = sorted({*best, *picked, *lo, *hi})
    level_axis(top, levels, axis="y", names={0: "0 (GEMM)"})
    errors = ", ".join("n/a" if e is None else f"{e:+.1f}%" for e in meta.get("boundary_error_pct") or []) or "none"
    top.set(ylabel="Strassen level",
            title=panel_title(f"{device} held out: {sweep}", f"trained on {', '.join(meta['trained_on'])}",
                              f"boundary error per level: {errors}"))
    lost = [100 * m.value for m in rows]
    bottom.plot(sizes, lost, "s-", color=LOST, ms=3)
    bottom.axhline(0.0, color="0.5", lw=0.6)
    bottom.set(ylabel="time lost at N (%)",
               title=f"time lost over the sweep: {100 * meta['time_lost_sweep']:.2f}% "
                     f"(target <= {TIME_LOST_TARGET_PCT:g}%)")
    bottom.set_ylim(bottom=min(0.0, min(lost)) - 0.5, top=max(1.0, max(lost)) * 1.15)
    for ax in (top, bottom):
        size_axis(ax, sizes, max_labels=6)
        ax.title.set_fontsize(SMALL + 1)
        ax.grid(True, alpha=0.3)
