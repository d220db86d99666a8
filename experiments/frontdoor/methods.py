"""A device profile's ``methods`` section (:mod:`gpu.frontdoor.table`) from as-called result files.

The device scripts write their as-called measurements as ``records`` (``results/published/scripts``:
``splitk_as_called.py``, ``ozaki2_as_called.py``, ``ozaki1_as_called.py``; the shape is in
``as_called_tables.py``): each public call timed in loops of back-to-back calls beside ``cupy.matmul`` in the
same rounds, with the ratio of their times. The calls a front-door candidate makes become its entries:

* ``ozaki2.matmul(A, B)`` (the default: ``moduli="auto"``, target ``"dgemm"``; it reads the count back), and the
  same over one or two Winograd levels (``level=1``, ``level=2``), which the front door takes where it measured
  faster;
* ``splitk.matmul(A, B)`` (deterministic) and ``splitk.matmul(A, B, deterministic=False)``;
* ``ozaki.matmul(A, B, slice_format='int8')`` (target ``"dgemm"``; it reads its verdict back).

Calls with a fixed count or slices are left out: they carry no bound before the data are seen, so the front door
never runs them. Each entry keeps the file and the commit it came from. A call timed at one shape by several files
(runs) becomes one entry: the median of their ratios and times, the sum of their samples, every source named. The
spread between runs is larger than within one (split-K at 16 x 2^24 x 16 on the H200: 1.009x-1.075x the library
GEMM over five runs), and a later file must not silently replace an earlier one.

Written into a profile that already has a methods section (:func:`add_methods`), the files' entries take the place
of the section's entries of the same call at the same shape, and every other entry stays: the H200's section also
holds ``gemmlab calibrate --methods`` rows (Ozaki II's levels, Ozaki I, the complex products) that no as-called
file times.
"""

from __future__ import annotations

import copy
import json
import statistics
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from gpu.profile import load_profile, profile_path, save_profile

#: The public calls the front door's candidates make, as the records name them: (method, config, waits).
CALLS = {
    "ozaki2.matmul(A, B)": ("ozaki2", {"moduli": "auto", "target": "dgemm"}, True),
    "ozaki2.matmul(A, B, level=1)": ("ozaki2", {"moduli": "auto", "target": "dgemm", "level": 1}, True),
    "ozaki2.matmul(A, B, level=2)": ("ozaki2", {"moduli": "auto", "target": "dgemm", "level": 2}, True),
    "splitk.matmul(A, B)": ("splitk", {"deterministic": True}, False),
    "splitk.matmul(A, B, deterministic=False)": ("splitk", {"deterministic": False}, False),
    "ozaki.matmul(A, B, slice_format='int8')": ("ozaki", {"slice_format": "int8", "target": "dgemm"}, True),
}


def shape_of(record: Mapping[str, Any]) -> tuple[int, int, int]:
    if "size" in record:
        return (int(record["size"]),) * 3
    return int(record["m"]), int(record["k"]), int(record["n"])


def split_of(record: Mapping[str, Any]) -> dict[str, list[int]]:
    """``{"split": [chunk width, chunks]}`` where the record's call states the split it ran (split-K's default:
    ``splitk_as_called.py`` records its plan), else nothing: a ranking made away from the device proves split-K's
    bound on that split (:mod:`gpu.frontdoor.table`), on the widest one a device could take where none is known."""
    config = record.get("config") or {}
    return {"split": [int(config["width"]), int(config["chunks"])]} if "width" in config and "chunks" in config else {}


def section(documents: Iterable[tuple[str, Mapping[str, Any]]], regime: str = "sustained") -> dict[str, Any]:
    """The methods section of (file name, as-called document) pairs (see the module notes)."""
    points: dict[tuple[int, int, int], dict[str, Any]] = {}
    for name, doc in documents:
        commit = (doc.get("environment") or {}).get("git_commit")
        for record in doc.get("records", ()):
            if record.get("call") not in CALLS or record.get("ratio_as_called") is None:
                continue
            method, config, waits = CALLS[record["call"]]
            shape = shape_of(record)
            point = points.setdefault(shape, {"shape": list(shape), "gemm_s": record.get("reference_s"),
                                              "reference": record.get("reference_call"), "timed": []})
            point["timed"].append({"method": method, "config": config, "ratio": round(record["ratio_as_called"], 4),
                                   "seconds": record.get("as_called_s"), "host_s": record.get("host_s"),
                                   "waits": waits, "samples": record.get("samples"),
                                   "source": f"{name} ({commit})" if commit else name, **split_of(record)})
    for point in points.values():
        point["timed"] = combined(point["timed"])
    return {"regime": regime, "written_by": "gemmlab profile --methods",
            "points": [points[key] for key in sorted(points)]}


def combined(timed: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``timed`` with the entries of one call (method and options) from several runs made one (see the module
    notes), in the order first seen."""
    runs: dict[str, list[dict[str, Any]]] = {}
    for entry in timed:
        runs.setdefault(_call_key(entry), []).append(entry)
    return [entries[0] if len(entries) == 1 else _merged(entries) for entries in runs.values()]


def _merged(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """One call's entries from several runs as one: the medians, the samples summed, every source named."""
    def median(field: str) -> float | None:
        values = [e[field] for e in entries if e.get(field) is not None]
        return statistics.median(values) if values else None
    return {**entries[0], "ratio": round(median("ratio"), 4), "seconds": median("seconds"), "host_s": median("host_s"),
            "samples": sum(e.get("samples") or 0 for e in entries), "runs": len(entries),
            "source": "; ".join(e["source"] for e in entries)}


def device_of(documents: Iterable[tuple[str, Mapping[str, Any]]]) -> tuple[str, str]:
    """(backend, device) the documents were measured on; ValueError where they differ or say none."""
    seen = {((doc.get("environment") or {}).get("backend"), (doc.get("environment") or {}).get("device"))
            for _, doc in documents}
    if len(seen) != 1 or None in next(iter(seen)):
        raise ValueError(f"the files must come from one device, and say which; they name {sorted(map(str, seen))}")
    return next(iter(seen))


def add_methods(files: Iterable[Path], regime: str = "sustained", directory: Path | None = None) -> Path:
    """Write the methods section of ``files`` into their device's profile in ``directory`` (the user's profile
    folder where None), keeping everything else the profile holds; the profile's path."""
    documents = [(Path(f).name, json.loads(Path(f).read_text())) for f in files]
    backend, device = device_of(documents)
    doc = copy.deepcopy(load_profile(profile_path(backend, device, directory)))   # the read is cached: no edits
    if doc is None:
        raise ValueError(f"no profile of {device} ({backend}) in {directory or 'the profile folder'}: write one "
                         "first (gemmlab calibrate, or gemmlab profile from stored results)")
    regimes = doc.setdefault("regimes", {regime: {"levels": doc.get("levels", {})}})
    held = regimes.setdefault(regime, {"levels": doc.get("levels", {})})
    new = section(documents, regime)
    held["methods"] = over(held["methods"], new, [name for name, _ in documents]) if held.get("methods") else new
    return save_profile(doc, directory)


def over(old: Mapping[str, Any], new: Mapping[str, Any], files: list[str]) -> dict[str, Any]:
    """Methods section ``new`` (from ``files``) laid over ``old``: at a shape both hold, an entry of ``new`` takes
    the place of ``old``'s entry of the same call (method and options; :func:`_replaced`), and ``old``'s other
    entries stay, in their order; shapes of either alone are kept as they are; ``old``'s other fields stay. A point
    is its shape and its operands' dtype (complex points time other calls)."""
    points = {_point_key(p): copy.deepcopy(dict(p)) for p in old.get("points", ())}
    for p in new["points"]:
        key = _point_key(p)
        if key not in points:
            points[key] = copy.deepcopy(dict(p))
            continue
        fresh = {_call_key(t): t for t in p["timed"]}
        kept = [_replaced(t, fresh.pop(_call_key(t), None)) for t in points[key]["timed"]]
        points[key] = {**points[key], "gemm_s": p.get("gemm_s"), "reference": p.get("reference"),
                       "timed": kept + list(fresh.values())}
    written = f"{old.get('written_by', 'an earlier section')}; then gemmlab profile --methods {', '.join(files)} " \
              "(their calls' entries in place of the same calls' at the same shapes)"
    return {**old, "written_by": written, "points": [points[key] for key in sorted(points)]}


def _replaced(old: Mapping[str, Any], new: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """The entry that stands for one call: ``new`` where the files time it, keeping ``old``'s split where ``new``
    states none (the atomic call's records do not carry the split it ran; the split is what its proven bound rests
    on away from the device), else ``old``."""
    if new is None:
        return old
    return {**new, "split": old["split"]} if "split" in old and "split" not in new else new


def _point_key(point: Mapping[str, Any]) -> tuple:
    return (*point["shape"], point.get("dtype", "float64"))


def _call_key(entry: Mapping[str, Any]) -> str:
    return json.dumps([entry["method"], entry["config"]], sort_keys=True)
