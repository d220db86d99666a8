"""The transfer model's level tables for GPUs with no profile: ``gemmlab profile --transfer-levels``.

``level="auto"`` on a GPU with neither its own profile nor a bundled one reads ``gpu/profiles/
transfer-levels.json`` (:func:`gpu.profile.transfer_levels`): for each GPU of the hardware table
(:mod:`modeling.hardware`) with no bundled profile, its CUDA-name pattern and, for RUM plain and with fused
additions, the level table of the transfer model's pooled fit (:mod:`modeling.transfer`: the recursive
predictor on Gemm and Geam learned from the measured GPUs and applied to its datasheet), computed as a
device's own tables are (:func:`modeling.profile.level_table`) but with no measurement of it to bound the
levels. The tables are data; the library evaluates no model. A default call there runs RUM with fused
additions at its table's level (:data:`gpu.strassen.decide.FALLBACK`): the transfer model prices schedules
and fusion, not flat products or graphs, so it offers no other configuration.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gpu.profile import BUNDLED_DIR, FORMAT, TRANSFER_FILE, TRANSFER_FORMAT, TRANSFER_METHODS_FILE, load_profile
from gpu.strassen.auto import profile_key
from modeling import hardware, transfer
from modeling.profile import deepest_level, level_table

from .predict import training_devices

#: The configurations the tables cover: RUM, plain and with fused additions.
CONFIGS = (("rum", False), ("rum", True))


def bundled_devices(directory: Path = BUNDLED_DIR) -> list[str]:
    """The CUDA device names of the profiles bundled in ``directory``."""
    names = []
    for path in sorted(directory.glob("*.json")):
        doc = load_profile(path) if path.name not in (TRANSFER_FILE, TRANSFER_METHODS_FILE) else None
        if doc and doc.get("format") == FORMAT:
            names.append(str(doc.get("device")))
    return names


def tables(db_path: Path, bundled: list[str]) -> list[dict[str, Any]]:
    """Per hardware-table GPU whose pattern matches no bundled device: its name, pattern and level tables."""
    devices = training_devices(db_path)
    out = []
    for gpu in hardware.GPUS.values():
        if any(re.search(gpu.pattern, name, re.IGNORECASE) for name in bundled):
            continue
        learned = transfer.fit_transfer(devices, target=gpu)
        levels = {profile_key(schedule, fused): level_table(learned.central.model(gpu, schedule, fused),
                                                            deepest_level(schedule))
                  for schedule, fused in CONFIGS}
        out.append({"name": gpu.name, "pattern": gpu.pattern, "levels": levels})
    return out


def write(directory: Path, db_path: Path) -> Path:
    """Write ``directory/transfer-levels.json`` (see the module notes); its path."""
    import json

    directory.mkdir(parents=True, exist_ok=True)
    doc = {"format": TRANSFER_FORMAT, "version": 1,
           "written_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
           "written_by": "gemmlab profile --transfer-levels",
           "trained_on": sorted(training_devices(db_path)),
           "gpus": tables(db_path, bundled_devices(directory))}
    path = directory / TRANSFER_FILE
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path
