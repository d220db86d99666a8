"""``gemmlab fit`` and ``gemmlab predict``: the fitted curves of a stored calibration, and the best
level for a size by the thesis rule and the recursive predictor, from one of three sources:

* a stored calibration (``--env``, ``--device`` or this machine's device);
* the coefficients of a JSON file (``--coefficients``);
* a hardware-table GPU (``--gpu``), no measurement of it needed: the transfer model
  (:mod:`modeling.transfer`) where the GPU has no calibration in the database (nor bundled in
  ``results/published``): curves learned from every calibrated GPU the database holds, the bundled
  H100 calibration and the usable published fits, with the median of their measured launch
  overheads (tens of microseconds per call); for a GPU that has a calibration, Otsuka's analytic model
  from its peak rates with no launch overhead (its ``--device`` prediction is the better one there).

Every speed-up is held to its level's operation-count bound (:func:`modeling.crossover.speedup_bound`),
and each level is marked where its figures extrapolate the calibrated curves (``extrapolated``).
The models' levels are brought to one answer with the range they span (:mod:`experiments.levels.answer`),
with the GPU's memory checked where it is known. Where the thesis rule finds no crossover in the
search range (Strassen never pays off for good there), that is its answer, level 0 throughout the
range, not an error: ``P`` is None and ``no_crossover`` holds the range, the largest gain and a note
(:func:`no_crossover`). Stored results are read with the database opened read-only.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from gpu.backend import get_backend
from gpu.strassen import Config, choose_plan, deepest_level, level_schedules, plan_extra
from modeling import crossover, fits, hardware, transfer
from modeling.analytic import analytic_model
from modeling.crossover import speedup_bound
from modeling.recursive import RecursiveModel

from ..core.csvio import ExportRow, read_export
from ..core.database import ResultsDB
from . import calibration, models
from .answer import Memory, answer, levels_of

#: Where predictions from given coefficients or the analytic model search their crossovers.
DEFAULT_SEARCH = (64.0, 131072.0)
#: The bundled H100 measurements a transfer prediction learns from where the database has none.
BUNDLED = Path(__file__).resolve().parents[2] / "results" / "published"
BUNDLED_CALIBRATION = ("h100-calibration.csv", "h100-level-validation.csv")
#: The in-context calibration of the same bundled H100 (the calls inside a Strassen level).
BUNDLED_CONTEXT = "h100-calibration-context.csv"


@dataclass(frozen=True)
class Source:
    """Where a prediction's curves come from: stored (env, device or this backend's device), a
    coefficients file, or a hardware-table GPU; ``size_range``: calibrated sizes to fit and search."""

    backend: str = "auto"
    env: str | None = None
    device: str | None = None
    coefficients: Path | None = None
    gpu: str | None = None
    size_range: tuple[float, float] | None = None
    weighting: str = "relative"
    regime: str = "sustained"


def stored_key(db: ResultsDB, source: Source) -> str:
    """The calibrated environment of the source: its key, device name, or this machine's device."""
    current = None
    if source.env is None and source.device is None:
        current = get_backend(source.backend).device_info()
    return models.select_env(db, source.env, source.device, current)


def fit_report(db_path: Path, source: Source) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Both weightings' fits of a stored calibration with their crossover P: the payload and table rows."""
    with ResultsDB(db_path, readonly=True) as db:
        key = stored_key(db, source)
        device = db.environment(key).get("device", key)
        fitted = {w: models.time_model(db, key, w, source.size_range, regime=source.regime) for w in fits.WEIGHTINGS}
    payload: dict[str, Any] = {"env_key": key, "device": device, "units": "ms", "fits": {},
                               "sizes": fitted["relative"].size_range}
    rows = []
    for w, model in fitted.items():
        extra: dict[str, Any] = {}
        try:
            found = crossover.find_crossover_point(model, *(source.size_range or (None, None)))
        except ValueError as exc:
            found, extra["note"] = None, str(exc)
        if isinstance(found, crossover.NoCrossover):
            extra["no_crossover"] = no_crossover(found)
            found, extra["note"] = None, extra["no_crossover"]["note"]
        payload["fits"][w] = {**model.as_dict(), "P": found, **extra}
        for curve in ("gemm", "geam"):
            f = getattr(model, curve)
            rows.append({"weighting": w, "curve": curve, "coefficients": " ".join(f"{c:+.6e}" for c in f.coef),
                         "sse": f.sse, "r2": f.r2, "rel_rms": f.rel_rms})
    return payload, rows


def prediction_models(db_path: Path, source: Source, config: Config, launch_ms: float | None
                      ) -> tuple[Callable[[float], float], RecursiveModel, dict[str, Any]]:
    """(one-level speed-up function of x, recursive model, what they came from)."""
    if source.gpu:
        gpu = hardware.lookup(source.gpu)
        devices = training_devices(db_path)
        if gpu.name not in devices:
            return transfer_models(gpu, devices, source, config, launch_ms)
        model = replace(analytic_model(gpu, config.schedule, config.fused), launch_ms=launch_ms or 0.0)
        return (lambda x: model.speedup(x, 1)), model, {
            "source": f"analytic model of {gpu.name}", "kind": "analytic", "gpu": gpu.as_dict(),
            "range": source.size_range or DEFAULT_SEARCH, "launch_overhead_us": 1e3 * model.launch_ms,
            "launch_overhead_source": "given" if launch_ms is not None else "none (0): the analytic model has none",
            "_memory": (gpu.name, gpu.memory_bytes, "datasheet")}
    if source.coefficients:
        doc = json.loads(source.coefficients.read_text())
        tm = fits.from_coefficients(doc, str(source.coefficients))
        h = launch_ms if launch_ms is not None else float(doc.get("launch_us", 0.0)) / 1e3
        model = RecursiveModel(tm.gemm, tm.geam, config.schedule, config.fused, h)
        info = {"source": f"coefficients in {source.coefficients}", "kind": "coefficients",
                "range": source.size_range or DEFAULT_SEARCH, "launch_overhead_us": 1e3 * h}
    else:
        with ResultsDB(db_path, readonly=True) as db:
            key = stored_key(db, source)
            tm = models.time_model(db, key, source.weighting, source.size_range, regime=source.regime)
            model, origin = models.stored_predictor(db, key, config, source.regime)
            found = models.stored_evidence(db, key, config, source.regime)
            env = db.environment(key)
        if launch_ms is not None:
            model, origin = replace(model, launch_ms=launch_ms), "given"
        lo, hi = crossover.search_range(tm, *(source.size_range or (None, None)))
        info = {"source": tm.source, "kind": "stored", "env_key": key, "range": (lo, hi),
                "launch_overhead_us": 1e3 * model.launch_ms, "launch_overhead_source": origin, "fits": tm.as_dict(),
                "calibrated_range": found.calibrated, "_evidence": found, "_memory": env_memory(env)}
    return (lambda x: crossover.speedup(tm, x, config.schedule)), model, info


def bundled_rows(name: str) -> list[ExportRow]:
    """The rows of the export ``results/published/<name>`` (none where the file is not there), read
    and checked as ``gemmlab results import`` reads them."""
    path = BUNDLED / name
    if not path.exists():
        return []
    with path.open(newline="") as f:
        return read_export(f, f"results/published/{name}")


def _points(rows: list[ExportRow], experiment: str) -> list[dict[str, Any]]:
    """Calibration rows (``size``, ``gemm_s``, ``geam_s``) of one FP64 calibration experiment, by size."""
    found: dict[int, dict[str, Any]] = {}
    for r in rows:
        if r.experiment == experiment and r.params.get("dtype") == "float64":
            found.setdefault(r.params["size"], {"size": r.params["size"]})[f"{r.method}_s"] = r.value
    return [found[n] for n in sorted(found) if {"gemm_s", "geam_s"} <= set(found[n])]


def bundled_device() -> transfer.Device | None:
    """The H100 of ``results/published`` (calibration, in-context calibration and measured launch
    overhead), read from the CSVs."""
    exports = {name: bundled_rows(name) for name in BUNDLED_CALIBRATION}
    complete = _points(exports[BUNDLED_CALIBRATION[0]], calibration.EXPERIMENT)
    launch = [1e3 * r.value for found in exports.values() for r in found if r.experiment == models.OVERHEAD_EXPERIMENT]
    if len(complete) < 2:
        return None
    return transfer.calibrated_device(hardware.lookup("H100"), complete, launch[-1] if launch else None,
                                      f"bundled calibration results/published/{BUNDLED_CALIBRATION[0]}",
                                      _points(bundled_rows(BUNDLED_CONTEXT), calibration.CONTEXT_EXPERIMENT))


def training_devices(db_path: Path) -> dict[str, transfer.Device]:
    """Every device the transfer model may learn from: the usable published fits, the bundled H100, and
    the newest calibration of each hardware-table GPU in the database (which replaces the others)."""
    devices = transfer.published_devices()
    bundled = bundled_device()
    if bundled is not None:
        devices[bundled.name] = bundled
    if not db_path.exists():
        return devices
    with ResultsDB(db_path, readonly=True) as db:
        for key, env in reversed(models.calibrated_envs(db)):       # oldest first: the newest wins
            found = hardware.matches(str(env.get("device", "")))
            rows = models.calibration_rows(db, key)
            if len(found) != 1 or len(rows) < 2:
                continue
            launch = models.stored_overheads(db, key)
            h = launch.get("rum", min(launch.values())) if launch else None
            context = models.calibration_rows(db, key, experiment=calibration.CONTEXT_EXPERIMENT)
            devices[found[0].name] = transfer.calibrated_device(found[0], rows, h, f"calibration of env {key}", context)
    return devices


def transfer_models(gpu: hardware.GPU, devices: dict[str, transfer.Device], source: Source, config: Config,
                    launch_ms: float | None) -> tuple[Callable[[float], float], RecursiveModel, dict[str, Any]]:
    """The transfer model's recursive predictor of ``gpu`` (the pooled fit) and its ensemble."""
    learned = transfer.fit_transfer(devices, target=gpu)
    model = learned.central.model(gpu, config.schedule, config.fused, launch_ms)
    bare = replace(model, launch_ms=0.0)
    info = {"source": f"transfer model of {gpu.name} (trained on {', '.join(devices)}); no measurement of it",
            "kind": "transfer", "gpu": gpu.as_dict(), "range": source.size_range or DEFAULT_SEARCH,
            "_memory": (gpu.name, gpu.memory_bytes, "datasheet"),
            "launch_overhead_us": 1e3 * model.launch_ms,
            "launch_overhead_source": "given" if launch_ms is not None else "transferred",
            "_transfer": (learned, gpu)}
    return (lambda x: bare.speedup(x, 1)), model, info


def predict(db_path: Path, source: Source, size: int, config: Config, max_level: int = 4,
            launch_ms: float | None = None, workspace: int | None = None) -> dict[str, Any]:
    """Crossover P, level boundaries and the best level at ``size`` by both predictors, each level's
    speed-up (held to its operation-count bound, marked where it extrapolates the calibrated curves),
    the GPU's memory where it is known, and one answer (:func:`experiments.levels.answer.answer`); with
    ``workspace``, each level's plan within that many bytes and its predicted time (:func:`plan_prediction`)."""
    if size <= 0 or not 1 <= max_level <= 10:
        raise ValueError(f"need --size > 0 and --max-level in 1..10, got {size} and {max_level}")
    one_level, model, info = prediction_models(db_path, source, config, launch_ms)
    learned, found_ev, held = info.pop("_transfer", None), info.pop("_evidence", None), info.pop("_memory", None)
    lo, hi = info["range"]
    thesis = thesis_prediction(one_level, lo, hi, size, max_level)
    levels = range(max_level + 1)
    rec = model.boundaries(max_level, lo, 2 ** max_level * hi)
    extra: dict[str, Any] = {}
    others = {"thesis rule": thesis["level"], "recursive": model.level(size, levels_of(size, max_level))}
    if learned is not None:
        found = learned[0].predict(learned[1], size, max_level, config.schedule, config.fused)
        spread = learned[0].boundaries(learned[1], max_level, lo, 2 ** max_level * hi, config.schedule, config.fused)
        ends = [[b[i] for b in spread.values() if b[i] is not None] for i in range(max_level)]
        extra = {"level_range": found["level_range"], "level_text": found["level_text"],
                 "transfer": {**found["transfer"], "levels_by_fit": found["by_member"],
                              "boundaries_recursive_range": [[min(e), max(e)] if e else None for e in ends]}}
        others.update({f"transfer ensemble ({end})": lv for end, lv in zip(("shallowest", "deepest"),
                                                                             found["level_range"])})
        if launch_ms is not None:
            extra["transfer"]["note"] = "the given launch overhead replaces the transferred one in every fit"
    memory = Memory.of(*held, size, levels, config.schedule) if held else None
    chosen = answer(info["kind"], model, size, max_level, others, found_ev, memory)
    return {"size": size, "schedule": config.schedule, "fused": config.fused, **info, **thesis,
            "thesis_extrapolated": not lo <= size <= hi if info["kind"] == "stored" else None,
            "level_recursive": model.level(size, levels), "P_recursive": rec[0],
            "boundaries_recursive": rec[1:], "speedup_one_level": one_level(size),
            "times_ms": {lv: model.time(size, lv) for lv in levels},
            "speedups": {lv: model.speedup(size, lv) for lv in levels},
            "speedup_bound": {lv: speedup_bound(config.schedule, lv, config.fused) for lv in levels},
            "capped": [lv for lv in levels if model.capped(size, lv)],
            "extrapolated": {lv: model.extrapolated(size, lv) for lv in levels},
            "memory": None if memory is None else memory.as_dict(), "answer": chosen.as_dict(),
            "workspace": None if workspace is None else plan_prediction(model, size, max_level, workspace), **extra}


def thesis_prediction(one_level: Callable[[float], float], lo: float, hi: float, size: int, max_level: int
                      ) -> dict[str, Any]:
    """The thesis rule: P where the one-level speed-up reaches 1 in [lo, hi], its boundaries 2P, 4P, ... and
    the level at ``size``; level 0 throughout where there is no crossover in the range."""
    found = crossover.find_crossing(lambda x: one_level(x) - 1.0, lo, hi, "SpeedUp(x) = 1")
    if isinstance(found, crossover.NoCrossover):
        return {"P": None, "boundaries": [None] * (max_level - 1), "level": 0,
                "no_crossover": no_crossover(found, size)}
    return {"P": found, "boundaries": crossover.thesis_boundaries(found, max_level)[1:],
            "level": crossover.thesis_level(size, found, max_level), "no_crossover": None}


def env_memory(env: dict[str, Any]) -> tuple[str, float, str] | None:
    """A stored environment's GPU and its memory: as CUDA reported it, else its hardware-table row's;
    None for a CPU or a GPU of neither."""
    if env.get("backend") != "cupy":
        return None
    name = str(env.get("device", "GPU"))
    if env.get("memory_bytes"):
        return name, float(env["memory_bytes"]), "as CUDA reports it"
    rows = hardware.matches(name)
    return (name, rows[0].memory_bytes, "datasheet") if len(rows) == 1 else None


def plan_prediction(model: RecursiveModel, size: int, max_level: int, workspace: int) -> dict[str, Any]:
    """Per level, the plan :func:`gpu.strassen.plans.choose_plan` makes for an n x n x n product
    within ``workspace`` bytes (inputs kept, as ``matmul`` does by default), priced by the
    recursive model and the memory model, and the best level among them."""
    rows: dict[int, dict[str, Any]] = {}
    for lv in range(min(max_level, deepest_level(size, size, size)) + 1):
        plan = choose_plan(size, size, size, lv, workspace, fused=model.fused) if lv else model.schedule
        priced = replace(model, schedule=plan)
        rows[lv] = {"plan": plan, "schedules": list(level_schedules(plan, lv)), "time_ms": priced.time(size, lv),
                    "speedup": priced.speedup(size, lv),
                    "extra_bytes": plan_extra(plan, size, size, size, lv, 8, "peel", False, False)}
    best = min(rows, key=lambda lv: rows[lv]["time_ms"])
    return {"bytes": workspace, "level": best, "plan": rows[best]["plan"], "levels": rows}


def no_crossover(found: crossover.NoCrossover, size: float | None = None) -> dict[str, Any]:
    """The thesis rule's answer where the crossover is not in the range: level 0 throughout it.
    With ``size``: whether that size lies in the range (outside it, the fits extrapolate)."""
    note = f"no crossover in [{found.lo:.0f}, {found.hi:.0f}]: level 0 throughout ({found.detail})"
    out: dict[str, Any] = {**found.as_dict(), "level": 0}
    if size is not None:
        out["size_in_range"] = found.lo <= size <= found.hi
        if not out["size_in_range"]:
            note += f"; N = {size:.0f} lies outside it, where the fitted curves extrapolate"
    return {**out, "note": note}
