"""The methods transfer model's training set, its bundled predictions (``gemmlab profile --transfer-methods``) and
its held-out validation.

The training set (:func:`training`) is every measured time of the front door's calls on a hardware-table GPU:

* a bundled profile's ``methods`` section (the H200's: each call as called, beside ``cupy.matmul`` in the same
  rounds; :func:`section_observations`);
* the H100's published device-time runs (``results/published``; its bundled profile has no methods section):
  scheme II with fast scaling and 14-16 moduli (``h100-ozaki2.csv`` and the four ``h100-ozaki2-*.json`` runs,
  whose 15 moduli are what ``moduli="auto"`` chose on these phi = 1 inputs) with the phase breakdowns, Ozaki I
  with 9 and 11 INT8 slices (``target="dgemm"`` chose 11 on the H200), and split-K's two default modes beside
  cuBLAS (``h100-splitk.csv``; the fixed 1024-wide chunks are no front-door call). These are device times, the
  H200's are as called: the cost model does not tell them apart, and split-K's ratios are used only for calls
  long enough that the two agree (:func:`modeling.methods_transfer.streams`).

:func:`write` fits :mod:`modeling.methods_transfer` on it and writes ``gpu/profiles/transfer-methods.json``: per
hardware-table GPU with no measured methods section bundled (no bundled profile, or the H100's, which holds
Strassen's tables only), its CUDA-name pattern and its predicted ``methods`` section, beside the model's parameters.
:func:`gpu.profile.methods` reads it for such a GPU.

:func:`held_out` is the validation: one training GPU's section predicted from the others alone, and the front
door's choices over the acceptance grid judged against its measured section (:mod:`modeling.methods_validation`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gpu.frontdoor.table import Timed, classify
from gpu.profile import BUNDLED_DIR, TRANSFER_METHODS_FILE, TRANSFER_METHODS_FORMAT, load_profile, regime_section
from modeling import hardware
from modeling.methods_transfer import MethodsModel, Observation, fit, predict
from modeling.methods_validation import GRID, Judged, judge

from ..core.csvio import read_export
from ..levels.predict import BUNDLED as PUBLISHED

#: The moduli and slices the front door's calls chose on phi = 1 data (``count_chosen`` 15 at N = 4096-16384 in
#: ``h200/h200-ozaki2-as-called.json``, ``slices`` 11 at 2048-8192 in ``h200/h200-ozaki1-as-called.json``): what a
#: prediction prices, and the count of a bundled section's entries.
COUNTS = {"ozaki2": 15, "ozaki": 11}
OZAKI2 = Timed.of("ozaki2", {"moduli": "auto", "target": "dgemm"})
OZAKI1 = Timed.of("ozaki", {"slice_format": "int8", "target": "dgemm"})
#: The published H100 methods that time a front-door call (or its count's neighbours), and their count.
H100_METHODS = {"ozaki2-fast-14": (OZAKI2, 14), "ozaki2-fast-15": (OZAKI2, 15), "ozaki2-fast-16": (OZAKI2, 16),
                "ozaki-int8-9": (OZAKI1, 9), "ozaki-int8-11": (OZAKI1, 11),
                "splitk-det": (Timed.of("splitk", {"deterministic": True}), None),
                "splitk-atomic": (Timed.of("splitk", {"deterministic": False}), None)}
H100_RUNS = ("h100-ozaki2-0ed7766.json", "h100-ozaki2-920a9aa.json", "h100-ozaki2-e12df79.json",
             "h100-ozaki2-e380759.json")
#: The phases of a scheme II breakdown that are not its INT8 products.
PASSES = ("scaling", "residues", "crt")


def section_observations(section: Mapping[str, Any] | None, gpu: str, source: str = "") -> list[Observation]:
    """The whole-call times of a ``methods`` section measured on ``gpu`` (a hardware-table row's name) that the
    model prices (:func:`priced`): real products (complex points are left out) of the calls it models."""
    out = []
    for point in (section or {}).get("points", ()):
        if point.get("dtype", "float64") != "float64":
            continue
        shape = tuple(int(x) for x in point["shape"])
        for entry in point.get("timed", ()):
            timed = Timed.of(entry["method"], entry.get("config"))
            if entry.get("ratio") is None or not point.get("gemm_s") or not priced(timed, shape, entry):
                continue
            seconds = entry.get("seconds") or point["gemm_s"] / entry["ratio"]
            out.append(Observation(gpu, timed, shape, float(seconds), float(point["gemm_s"]),
                                   COUNTS.get(timed.method), source=entry.get("source") or source))
    return out


def priced(timed: Timed, shape: tuple[int, int, int], entry: Mapping[str, Any]) -> bool:
    """Whether the model prices this entry: the front door's calls it models (Ozaki II and I at their DGEMM
    target with :data:`COUNTS`, so outside split-K's tiny outputs, where the counts differ and the passes over
    k dominate; split-K's two modes), timed by the protocol (not a calibration's one-call screening), and no
    Winograd level over the residues (the model has no term for their passes)."""
    if entry.get("screened"):
        return False
    if timed.method == "splitk":
        return True
    return timed in (OZAKI2, OZAKI1) and classify(*shape)[0] != "tiny"


def _paired(rows: Iterable[tuple[str, tuple[int, int, int], float]], reference: str, source: str) -> list[Observation]:
    """Observations of (method, shape, seconds) rows of one run, each beside the same run's ``reference`` time."""
    rows = list(rows)
    gemm = {shape: s for method, shape, s in rows if method == reference}
    out = []
    for method, shape, seconds in rows:
        if method in H100_METHODS and shape in gemm:
            timed, count = H100_METHODS[method]
            out.append(Observation("H100", timed, shape, seconds, gemm[shape], count, source=source))
    return out


def _shape(row: Mapping[str, Any]) -> tuple[int, int, int]:
    return int(row["m"]), int(row["k"]), int(row["n"])


def _export(directory: Path, name: str) -> list[Any]:
    """The rows of the export ``directory/name``, read as ``gemmlab results import`` reads them (none where the
    file is not there: an installed package without the repository's results)."""
    path = directory / name
    if not path.exists():
        return []
    with path.open(newline="") as f:
        return read_export(f, f"results/published/{name}")


def h100_observations(directory: Path = PUBLISHED) -> list[Observation]:
    """The H100's published times of the front door's calls (see the module notes)."""
    out: list[Observation] = []
    rows = _export(directory, "h100-ozaki2.csv")
    out += _paired(((r.method, _shape(r.params), r.value) for r in rows if r.experiment == "ozaki2-time"), "fp64",
                   "results/published/h100-ozaki2.csv")
    out += _phases(((r.method, _shape(r.params), r.params["phase"], r.value) for r in rows
                    if r.experiment == "ozaki2-breakdown"), "results/published/h100-ozaki2.csv")
    out += _paired(((r.method, _shape(r.params), r.value) for r in _export(directory, "h100-splitk.csv")
                    if r.experiment == "splitk"), "gemm", "results/published/h100-splitk.csv")
    for name in H100_RUNS:
        path = directory / name
        if not path.exists():
            continue
        doc = json.loads(path.read_text())
        for run in doc.get("runs", ()):
            out += _paired(((r["method"], _shape(r), r["time_s"]) for r in run["output"]["rows"]), "fp64",
                           f"results/published/{name}")
        phases = (doc.get("breakdown") or {}).get("phases", ())
        out += _phases(((p["method"], (p["n"],) * 3, p["phase"], p["median_s"]) for p in phases),
                       f"results/published/{name}")
    return out


def _phases(rows: Iterable[tuple[str, tuple[int, int, int], str, float]], source: str) -> list[Observation]:
    """A scheme II breakdown's fast-15 phases: its INT8 products, and the sum of the other passes."""
    found: dict[tuple[int, int, int], dict[str, float]] = {}
    for method, shape, phase, seconds in rows:
        if method == "ozaki2-fast-15":
            found.setdefault(shape, {})[phase] = seconds
    out = []
    for shape, phases in sorted(found.items()):
        if "gemm" in phases:
            out.append(Observation("H100", OZAKI2, shape, phases["gemm"], None, 15, "gemm", source))
        if all(p in phases for p in PASSES):
            out.append(Observation("H100", OZAKI2, shape, sum(phases[p] for p in PASSES), None, 15, "passes",
                                   source))
    return out


def bundled_profiles(directory: Path = BUNDLED_DIR) -> Iterator[tuple[Path, dict[str, Any]]]:
    """(file, document) of every CuPy device profile bundled in ``directory``, in file order."""
    for path in sorted(directory.glob("cupy-*.json")):
        doc = load_profile(path)
        if doc:
            yield path, doc


def bundled_observations(directory: Path = BUNDLED_DIR, regime: str = "sustained") -> list[Observation]:
    """The whole-call times of every bundled profile's ``methods`` section whose device is a hardware-table GPU."""
    out = []
    for path, doc in bundled_profiles(directory):
        found = hardware.matches(str(doc.get("device")))
        if len(found) == 1:
            out += section_observations(regime_section(doc, regime, "methods"), found[0].name, path.name)
    return out


def training(gpus: Iterable[str] | None = None) -> list[Observation]:
    """The training set (see the module notes), on ``gpus`` only where given (hardware-table names)."""
    seen = bundled_observations() + h100_observations()
    wanted = None if gpus is None else set(gpus)
    return [o for o in seen if wanted is None or o.gpu in wanted]


def trained(gpus: Iterable[str] | None = None) -> MethodsModel:
    """The model fitted on :func:`training` (``gpus`` only where given)."""
    return fit(training(gpus), COUNTS)


def measured_section(observations: Iterable[Observation], regime: str = "sustained") -> dict[str, Any]:
    """A ``methods`` section of measured whole calls (the median ratio per shape and call, at the count the
    front door's call chose): the H100's, which its bundled profile lacks, for the held-out comparison."""
    found: dict[tuple[int, int, int], dict[Timed, list[float]]] = {}
    gemm: dict[tuple[int, int, int], list[float]] = {}
    for o in observations:
        if o.ratio and (o.count is None or o.count == COUNTS[o.timed.method]):
            found.setdefault(o.shape, {}).setdefault(o.timed, []).append(o.ratio)
            gemm.setdefault(o.shape, []).append(o.gemm_s)
    points = []
    for shape in sorted(found):
        timed = [{"method": t.method, "config": t.options, "ratio": round(_median(r), 4),
                  "waits": t.method != "splitk", "samples": len(r)} for t, r in sorted(found[shape].items(),
                                                                                       key=lambda tr: tr[0].name)]
        points.append({"shape": list(shape), "gemm_s": _median(gemm[shape]), "timed": timed})
    return {"regime": regime, "points": points}


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def measured_devices(directory: Path = BUNDLED_DIR) -> list[str]:
    """The CUDA device names of the profiles bundled in ``directory`` that carry a measured methods section (the
    H200's). A GPU whose bundled profile has none (the H100's holds Strassen's tables only) gets the model's
    predicted section, as a GPU with no profile does (:func:`gpu.profile.methods`)."""
    return [str(doc.get("device")) for _, doc in bundled_profiles(directory)
            if regime_section(doc, "sustained", "methods")]


def tables(model: MethodsModel, measured_names: list[str]) -> list[dict[str, Any]]:
    """Per hardware-table GPU whose pattern matches no device of ``measured_names`` (those with a measured methods
    section): its name, pattern and predicted section."""
    return [{"name": gpu.name, "pattern": gpu.pattern, "methods": predict(model, gpu)}
            for gpu in hardware.GPUS.values()
            if not any(re.search(gpu.pattern, name, re.IGNORECASE) for name in measured_names)]


def write(directory: Path) -> Path:
    """Write ``directory/transfer-methods.json`` (see the module notes); its path."""
    model = trained()
    directory.mkdir(parents=True, exist_ok=True)
    doc = {"format": TRANSFER_METHODS_FORMAT, "version": 1,
           "written_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
           "written_by": "gemmlab profile --transfer-methods", "trained_on": list(model.trained_on),
           "model": model.as_dict(), "gpus": tables(model, measured_devices(directory))}
    path = directory / TRANSFER_METHODS_FILE
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path


#: The GPUs of the training set.
TRAINED = ("H100", "H200")


def bundled(gpu: str) -> dict[str, Any] | None:
    """The bundled profile of hardware-table GPU ``gpu``, or None."""
    for _, doc in bundled_profiles():
        if [g.name for g in hardware.matches(str(doc.get("device")))] == [gpu]:
            return doc
    return None


def measured(gpu: str, regime: str = "sustained") -> dict[str, Any]:
    """The measured ``methods`` section of training GPU ``gpu``: its bundled profile's, else one built from its
    published runs (:func:`measured_section`: the H100's)."""
    return regime_section(bundled(gpu), regime, "methods") or measured_section(training([gpu]), regime)


def held_out(target: str, configurations: bool = False, grid: Iterable[tuple[int, int, int]] = GRID) -> list[Judged]:
    """``target``'s methods section predicted from the other training GPUs alone (its own measurements never
    read), judged against its measured one over ``grid``; ``configurations``: rank both with ``target``'s bundled
    Strassen configurations (the same on both sides), else with none."""
    model = trained([g for g in TRAINED if g != target])
    conf = regime_section(bundled(target), "sustained", "configurations") if configurations else None
    return judge(measured(target), predict(model, hardware.GPUS[target]), grid, configurations=conf)
