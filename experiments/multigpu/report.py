"""The ``multigpu`` experiment's rows and result: per (N, kind, workers) the one-shot and the steady time, the
steady speed-up over one worker, and the one-shot time over the steady one; the verdict on the GPU targets.

Rows: method ``oneshot`` (the first product in a new cluster, operands in place: host memory, or already on
the workers for ``resident``), ``steady`` (the median of the products after it, in the same cluster) and
``timeline`` (one more product, its task stream's spans in the meta), at
parameters (n, kind, workers, regime, and protocol, ``lock_pages`` and output where not TCP, ``true`` and a new
C). A row's ``kind`` names its setting: the kind, then those three where not the default (``"resident over ucx"``,
``"host, lock_pages=ahead, C filled"``), so that each setting is its own series. On CPU
workers (threads of one process sharing its cores) the times describe the machinery, not a speed-up: the checks
are judged on GPU workers only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ..core.database import Measurement, ResultsDB
from ..core.regime import UNRECORDED
from ..core.rows import stored_rows
from ..core.summary import Check, Summary, Table

EXPERIMENT = "multigpu"
ONESHOT, STEADY, TIMELINE = "oneshot", "steady", "timeline"
MODES = (ONESHOT, STEADY)
#: The targets: steady speed-up over one worker at 4 workers (host operands, device-resident ones) and the
#: one-shot time over the steady one at 4 workers.
HOST_SPEEDUP, RESIDENT_SPEEDUP, ONESHOT_OVER_STEADY = 3.9, 3.8, 1.3


def setting(kind: str, protocol: str = "tcp", lock: str = "true", output: str = "new") -> str:
    """A kind of operands, the workers' protocol, their page-locking and C's file, as rows name them (see the
    module)."""
    named = kind if protocol == "tcp" else f"{kind} over {protocol}"
    named = named if lock == "true" else f"{named}, lock_pages={lock}"
    return named if output == "new" else f"{named}, C {output}"


def kind_of(named: str) -> str:
    """The kind of operands a setting (:func:`setting`) names: its first word."""
    return named.split()[0].rstrip(",")


def _setting(params: dict[str, Any]) -> str:
    return setting(params["kind"], params.get("protocol", "tcp"), params.get("lock_pages", "true"),
                   params.get("output", "new"))


@dataclass(frozen=True)
class MultigpuRow:
    """One mode of one point: seconds per product, its samples, and the sampled rows' check."""

    method: str
    n: int
    kind: str
    workers: int
    time_s: float
    samples: tuple[float, ...] = ()
    check_error: float | None = None
    backend: str = "numpy"
    regime: str = UNRECORDED
    telemetry: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def read(cls, m: Measurement) -> MultigpuRow:
        p, meta = m.params, m.meta
        return cls(m.method, p["n"], _setting(p), p["workers"], m.value, tuple(m.samples or ()),
                   meta.get("check_error"), meta.get("backend", "numpy"), p.get("regime", UNRECORDED),
                   dict(meta.get("telemetry") or {}))

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def multigpu_rows(db: ResultsDB, env_key: str, regime: str | None = None) -> list[MultigpuRow]:
    """The one-shot and steady rows of one environment."""
    rows = stored_rows(db, EXPERIMENT, env_key, MultigpuRow.read, MODES, lambda r: (r.n, r.kind, r.workers),
                       regime=regime)
    return [r for r in rows if r.method in MODES]


def timelines(db: ResultsDB, env_key: str) -> dict[tuple[int, str, int], list[list[Any]]]:
    """The task-stream spans of each point's recorded product, by (n, kind, workers)."""
    return {(m.params["n"], _setting(m.params), m.params["workers"]): m.meta.get("spans") or []
            for m in db.measurements(EXPERIMENT, env_key=env_key) if m.method == TIMELINE}


def by_point(rows: Sequence[MultigpuRow]) -> dict[tuple[int, str, int], dict[str, MultigpuRow]]:
    out: dict[tuple[int, str, int], dict[str, MultigpuRow]] = {}
    for r in rows:
        out.setdefault((r.n, r.kind, r.workers), {})[r.method] = r
    return out


def speedup(points: dict[tuple[int, str, int], dict[str, MultigpuRow]], n: int, kind: str, workers: int
            ) -> float | None:
    """The steady time of one worker over that of ``workers`` (None where either is missing)."""
    one, many = points.get((n, kind, 1), {}).get(STEADY), points.get((n, kind, workers), {}).get(STEADY)
    return None if one is None or many is None else one.time_s / many.time_s


def point_table(rows: Sequence[MultigpuRow]) -> Table:
    points = by_point(rows)
    cells = []
    for (n, kind, workers), modes in sorted(points.items()):
        one, steady = modes.get(ONESHOT), modes.get(STEADY)
        cells.append((n, kind, workers, one and one.time_s, steady and steady.time_s,
                      speedup(points, n, kind, workers),
                      one.time_s / steady.time_s if one and steady else None,
                      max((r.check_error or 0.0) for r in modes.values())))
    return Table("products across workers", ("N", "operands", "workers", "one shot (s)", "steady (s)",
                                             "steady speed-up over 1 worker", "one shot / steady",
                                             "sampled rows' error"),
                 cells, formats={"one shot (s)": ".4g", "steady (s)": ".4g", "steady speed-up over 1 worker": ".3f",
                                 "one shot / steady": ".2f", "sampled rows' error": ".2e"})


def _target(rows: Sequence[MultigpuRow], text: str, values: list[tuple[str, float]], need: float,
            at_least: bool) -> Check:
    if not values:
        return Check(text, "not measured (no 4-worker point and its 1-worker baseline)", None)
    shown = "; ".join(f"{v:.3f} at {w}" for w, v in values)
    if any(r.backend != "cupy" for r in rows):
        return Check(text, shown + " (CPU workers: not judged)", None)
    met = all((v >= need) if at_least else (v <= need) for _, v in values)
    return Check(text, shown, met)


def checks(rows: Sequence[MultigpuRow]) -> list[Check]:
    points = by_point(rows)
    ns, settings = sorted({r.n for r in rows}), sorted({r.kind for r in rows})

    def of(kind: str) -> list[str]:
        return [s for s in settings if kind_of(s) == kind]

    def label(n: int, where: str) -> str:
        return f"N = {n}" + where[len(kind_of(where)):]
    host = [(label(n, s), v) for s in of("host") for n in ns if (v := speedup(points, n, s, 4)) is not None]
    resident = [(label(n, s), v) for s in of("resident") for n in ns if (v := speedup(points, n, s, 4)) is not None]
    shots = [(label(n, s), m[ONESHOT].time_s / m[STEADY].time_s) for s in of("host") for n in ns
             if (m := points.get((n, s, 4), {})) and ONESHOT in m and STEADY in m]
    return [_target(rows, f"host operands, steady, 4 workers >= {HOST_SPEEDUP}x one", host, HOST_SPEEDUP, True),
            _target(rows, f"device-resident operands, 4 workers >= {RESIDENT_SPEEDUP}x one", resident,
                    RESIDENT_SPEEDUP, True),
            _target(rows, f"host operands, one shot <= {ONESHOT_OVER_STEADY}x steady, 4 workers", shots,
                    ONESHOT_OVER_STEADY, False)]


def multigpu_summary(counts: dict[str, Any], rows: Sequence[MultigpuRow]) -> Summary:
    return Summary(scope=counts.get("scope", ""),
                   facts={k: v for k, v in counts.items() if k != "scope"},
                   tables=[point_table(rows)], checks=checks(rows),
                   notes=["one shot: the first product in a new cluster (operands in host memory, or already on the "
                          "workers for resident ones); steady: the median of the products after it, back to back",
                          "host: gpu.multigpu.dask_matmul (the out-of-core engine per C block, C gathered); "
                          "resident: gpu.multigpu.resident (one GEMM per C block where the chunks are, C left there)"])
