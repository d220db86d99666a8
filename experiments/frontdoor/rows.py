"""Stored ``frontdoor`` points as rows: what the summary, the command's table and the figure read.

Every (shape, accuracy) point is one interleaved group, each timed call stored as its own row (parameters m, k,
n, accuracy, dtype, regime): :data:`LIBRARY` (the library GEMM as a user calls it, the reference),
:data:`FRONTDOOR` (``gpu.matmul`` as called) and each candidate timed beside them, named as the ranking names
it. A row's value is its as-called time (seconds per call in a loop of calls); its meta keeps the host time of
one call and the device time (:mod:`experiments.core.ascalled`). The front door's row is stored last and
holds the point's verdict: what ran and why, the candidates timed and refused, the fastest timed call, and the
error on phi inputs against its bound; a point the front door refused (no method keeps the accuracy on that
shape, say) is one front-door row of unit :data:`REFUSED` saying why.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from ..core.ascalled import as_called_fields
from ..core.database import Measurement, ResultsDB
from ..core.regime import UNRECORDED
from ..core.rows import stored_rows
from .points import Shape, accuracy_order, shape_order

EXPERIMENT = "frontdoor"
LIBRARY, FRONTDOOR = "library", "frontdoor"
#: The unit of a point the front door refused before any work (its value is 0).
REFUSED = "refused"
#: The front door as called must reach this fraction of the library GEMM as called...
LIBRARY_FLOOR = 0.98
#: ... and be within this fraction of the fastest call timed beside it.
FASTEST_MARGIN = 0.05
#: The choice made with the device's profile hidden may cost at most this fraction more time.
HIDDEN_MARGIN = 0.03


@dataclass(frozen=True)
class FrontdoorRow:
    """One timed call at one (shape, accuracy) point, or a point the front door refused."""

    method: str
    family: str
    m: int
    k: int
    n: int
    accuracy: str
    regime: str = UNRECORDED
    time_s: float | None = None              # as called: seconds per call in a loop of calls (None: refused)
    stable: bool = True
    call: str | None = None
    as_called_s: float | None = None
    host_s: float | None = None              # host time of one call
    ratio_as_called: float | None = None     # the library GEMM as called over this call, in the same rounds
    device_s: float | None = None            # one call by the device's clock
    ratio_device: float | None = None
    runs: str | None = None                  # front door: the candidate it ran
    explain: str | None = None               # front door: its ranking and why the winner won
    candidates: tuple[str, ...] = ()         # front door: every candidate ranked
    timed: tuple[str, ...] = ()              # front door: the candidates timed beside it
    refused: Mapping[str, str] = field(default_factory=dict)   # what refused (a candidate, or the front door)
    fastest: str | None = None               # front door: the fastest other call timed
    over_fastest: float | None = None        # front door: the fastest other call's time over its own
    errors: tuple[Mapping[str, Any], ...] = ()   # front door: per phi, the error in the contract's scale
    bound: Mapping[str, Any] = field(default_factory=dict)     # front door: the bound the errors are judged by
    hidden: str | None = None                # front door: its choice with this device's profile hidden
    hidden_lost: float | None = None         # ... that choice's time over the front door's, minus one
    library_keeps: bool = True               # front door: whether the library GEMM keeps the point's accuracy

    @classmethod
    def read(cls, m: Measurement) -> FrontdoorRow:
        p, meta = m.params, m.meta
        return cls(m.method, meta.get("family", "gemm"), p["m"], p["k"], p["n"], p["accuracy"],
                   p.get("regime", UNRECORDED), m.value if m.unit == "s" else None, bool(meta.get("stable", True)),
                   **as_called_fields(meta), device_s=meta.get("device_s"), ratio_device=meta.get("ratio_device"),
                   runs=meta.get("runs"), explain=meta.get("explain"), candidates=tuple(meta.get("candidates", ())),
                   timed=tuple(meta.get("timed", ())), refused=dict(meta.get("refused") or {}),
                   fastest=meta.get("fastest"), over_fastest=meta.get("frontdoor_over_fastest"),
                   errors=tuple(meta.get("errors", ())), bound=dict(meta.get("bound") or {}),
                   hidden=(meta.get("hidden") or {}).get("runs"), hidden_lost=_lost(meta),
                   library_keeps=_library_keeps(meta))

    @property
    def shape(self) -> Shape:
        return self.m, self.k, self.n

    @property
    def point(self) -> tuple[Shape, str]:
        return self.shape, self.accuracy

    @property
    def was_refused(self) -> bool:
        return self.method == FRONTDOOR and self.time_s is None

    @property
    def error_max(self) -> float | None:
        """The largest error measured over the phi inputs (None where none was)."""
        found = [e["measured"] for e in self.errors if e.get("measured") is not None]
        return max(found) if found else None

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "error_max": self.error_max, "bound_t": self.bound.get("bound_t")}


def _lost(meta: Mapping[str, Any]) -> float | None:
    """The time the choice with the profile hidden loses: none where it is the front door's own choice (rows
    stored before the bench timed that case by the front door's call read the library GEMM's there)."""
    hidden = meta.get("hidden") or {}
    return 0.0 if hidden.get("runs") is not None and hidden.get("runs") == meta.get("runs") else hidden.get("lost")


#: How the front door's ranking names the library GEMM.
LIBRARY_LINE = "gemm (the library GEMM)"


def _library_keeps(meta: Mapping[str, Any]) -> bool:
    """Whether the library GEMM keeps the point's accuracy: stored by the bench, else read from the ranking's line
    of the library in the front door's explanation (rows stored before the bench kept it)."""
    if "library_keeps" in meta:
        return bool(meta["library_keeps"])
    for line in (meta.get("explain") or "").splitlines():
        if LIBRARY_LINE in line:
            return next((t for t in line.split(LIBRARY_LINE, 1)[1].split() if t in ("yes", "no")), "yes") == "yes"
    return True


def keeping_fastest(rows: list[FrontdoorRow]) -> list[FrontdoorRow]:
    """The front-door rows with :attr:`~FrontdoorRow.fastest` and ``over_fastest`` taken over the calls timed
    beside it that keep the point's accuracy: the candidates it timed, and the library GEMM where it keeps it (the
    target is the fastest method the toolkit has *at that accuracy*)."""
    by_point = points_of(rows)
    out = []
    for r in rows:
        if r.method == FRONTDOOR and r.time_s and not r.library_keeps:
            calls = by_point[(r.shape, r.accuracy, r.regime)]
            times = {name: calls[name].time_s for name in r.timed if name in calls and calls[name].time_s}
            best = min(times, key=times.__getitem__) if times else None
            r = replace(r, fastest=best, over_fastest=None if best is None else times[best] / r.time_s)
        out.append(r)
    return out


def order_key(r: FrontdoorRow) -> tuple:
    return shape_order(r.shape), accuracy_order(r.accuracy)


def frontdoor_rows(db: ResultsDB, env_key: str, regime: str | None = None) -> list[FrontdoorRow]:
    """Stored points of one environment (of one ``regime`` where given), by shape, accuracy and call: the
    library GEMM, the front door, then the candidates its row names as timed (a candidate row left by an
    interrupted group of other candidates is not its point's)."""
    rows = stored_rows(db, EXPERIMENT, env_key, FrontdoorRow.read, (LIBRARY, FRONTDOOR), order_key, regime=regime)
    return keeping_fastest(of_points(rows))


def of_points(rows: Iterable[FrontdoorRow]) -> list[FrontdoorRow]:
    """The rows of complete points: those whose front-door row is stored, and of those the calls it timed."""
    rows = list(rows)
    doors = {(r.point, r.regime): r for r in rows if r.method == FRONTDOOR}
    kept = []
    for r in rows:
        door = doors.get((r.point, r.regime))
        if door is None or (door.was_refused and r is not door):
            continue
        if r.method in (LIBRARY, FRONTDOOR) or r.method in door.timed:
            kept.append(r)
    return kept


def points_of(rows: Iterable[FrontdoorRow]) -> dict[tuple[Shape, str, str], dict[str, FrontdoorRow]]:
    """Rows by (shape, accuracy, regime), then by method."""
    out: dict[tuple[Shape, str, str], dict[str, FrontdoorRow]] = {}
    for r in rows:
        out.setdefault((r.shape, r.accuracy, r.regime), {})[r.method] = r
    return out
