"""The toolkit's committed GPU measurements, read from ``results/published`` with the lab's CSV reader,
and the papers' devices beside them for the figures' footers.

:class:`Exports` reads each export once (checked, as ``gemmlab results import`` reads it) and answers the
two questions :func:`experiments.core.plotting.finish` asks of a results database (an environment record,
and the measurements of an experiment in it), so that the paper figures carry the same footer as every
other figure (device, backend, regime, library versions) without a database being opened or written.
A paper's device is an environment too (:meth:`Exports.add_paper`): its footer line names the paper and
the library version the paper states.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from modeling import hardware

from ..core.csvio import ExportRow, open_text, read_export

#: Where the committed exports live (``results/published`` at the repository root).
PUBLISHED = Path(__file__).resolve().parents[2] / "results" / "published"
#: The exports the paper comparisons read, by role.
FILES = {
    "h100-levels": "sustained/h100-levels-sustained.csv",
    "h200-levels": "h200/h200-levels-sustained.csv",
    "h100-strassen": "h100-strassen-speedup.csv",
    "h100-memory": "h100-strassen-memory.csv",
    "h100-splitk": "h100-splitk.csv",
    "h100-segmented": "h100-segmented.csv",
    "h100-ozaki": "h100-ozaki.csv",
}
PAPER_BACKEND = "numbers transcribed from the paper"


class Exports:
    """The committed exports under ``root`` (read on first use) and the paper devices added to them."""

    def __init__(self, root: Path = PUBLISHED) -> None:
        self.root = Path(root)
        self._rows: dict[str, list[ExportRow]] = {}
        self._papers: dict[str, dict[str, Any]] = {}

    def rows(self, role: str, experiment: str | None = None) -> list[ExportRow]:
        """The rows of one export (:data:`FILES`), of one experiment or all; FileNotFoundError naming the
        file and how to get it where it is missing."""
        if role not in self._rows:
            path = self.root / FILES[role]
            if not path.is_file():
                raise FileNotFoundError(f"{path} is missing: the paper comparisons read the committed exports of "
                                        f"results/published; restore it with git checkout -- {FILES[role]}")
            with open_text(path, "r") as fh:
                self._rows[role] = read_export(fh, FILES[role])
        return [r for r in self._rows[role] if experiment in (None, r.experiment)]

    def add_paper(self, key: str, device: str, citation: str, library: str) -> str:
        """A paper's device as an environment named ``key`` (its footer: the device, the paper, the library
        version it states, e.g. ``CUDA 10.1``); returns ``key``."""
        env: dict[str, Any] = {"device": f"{device} ({citation})", "backend": PAPER_BACKEND}
        for name, field in (("cuBLAS", "cublas"), ("CUDA", "cuda_runtime")):
            found = re.search(rf"\b{name}\s+([\d.]+)", library)
            if found:
                env[field] = found.group(1)
        self._papers[key] = env
        return key

    def drawn(self, rows: Iterable[ExportRow]) -> Drawn:
        """The footer's view of a figure: the environments and measurements of the rows it draws only
        (a figure of sustained points does not name the cold ones stored beside them)."""
        return Drawn(self, list(rows))

    # --- what plotting.finish asks of a database ------------------------------------------------------

    def environment(self, key: str) -> dict[str, Any]:
        if key in self._papers:
            return self._papers[key]
        for rows in self._rows.values():
            for r in rows:
                if r.env_key == key:
                    return r.environment
        raise KeyError(f"no environment {key!r} in the exports read")

    def measurements(self, experiment: str, env_key: str | None = None) -> list[ExportRow]:
        return [r for rows in self._rows.values() for r in rows
                if r.experiment == experiment and env_key in (None, r.env_key)]


class Drawn:
    """The rows one figure draws, answering :func:`experiments.core.plotting.finish` as a database would."""

    def __init__(self, exports: Exports, rows: list[ExportRow]) -> None:
        self.exports, self.rows = exports, rows

    def environment(self, key: str) -> dict[str, Any]:
        return self.exports.environment(key)

    def measurements(self, experiment: str, env_key: str | None = None) -> list[ExportRow]:
        return [r for r in self.rows if r.experiment == experiment and env_key in (None, r.env_key)]

    @property
    def keys(self) -> list[str]:
        return env_keys(self.rows)


def device(rows: Iterable[ExportRow]) -> str:
    """The hardware table's short name of the rows' device (``H100``), else the recorded name."""
    names = {r.environment.get("device", "") for r in rows}
    if len(names) != 1:
        raise ValueError(f"expected rows of one device, got {sorted(names)}")
    (name,) = names
    try:
        return hardware.lookup(name).name
    except ValueError:
        return name or "unknown device"


def regime(rows: Iterable[ExportRow]) -> str:
    """The power regime the rows record (``sustained``, ``cold``), or "regime not recorded"."""
    found = sorted({str(r.meta.get("regime") or r.params.get("regime") or "") for r in rows} - {""})
    return ", ".join(found) if found else "regime not recorded"


def env_keys(rows: Iterable[ExportRow]) -> list[str]:
    return list(dict.fromkeys(r.env_key for r in rows))
