"""Stored accuracy audits read back: one :class:`AuditRow` per (method, point), grouped over seeds by
:func:`summarize` and fitted per Strassen level by :func:`bits_per_level` (the rows of the experiment that
:mod:`experiments.audit.bench` measures; see there for what a row holds)."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ..core.database import Measurement, ResultsDB

EXPERIMENT = "accuracy"
INPUTS = "phi"
#: A product's shape (m, k, n): A is m x k, B is k x n.
Shape = tuple[int, int, int]
#: Fields of a row beyond (method, n, phi, seed), from the stored report.
ROW_FIELDS = ("max_rel", "nrm", "zeros", "zeros_exact", "zero_max_abs", "median_rel", "max_comp",
              "max_ulps", "bits", "correctly_rounded", "nonfinite", "seconds", "reference_seconds")


def point_shape(params: Mapping[str, Any]) -> Shape:
    """(m, k, n) of stored audit parameters (a square point has only ``n``)."""
    n = int(params["n"])
    return int(params.get("m", n)), int(params.get("k", n)), n


def _shape_first(d: dict[str, Any]) -> dict[str, Any]:
    """A row or summary as a dict, its method and shape (m, k, n) first."""
    return {"method": d.pop("method"), "m": d.pop("m"), "k": d.pop("k"), "n": d.pop("n"), **d}


def _number(x: Any) -> Any:
    """JSON-safe: a non-finite float becomes None (its row carries ``nonfinite``)."""
    return None if isinstance(x, float) and not math.isfinite(x) else x


class SquareByDefault:
    """For the frozen rows below: ``m`` and ``k`` default to ``n``, a square product's."""

    def __post_init__(self) -> None:
        for dim in ("m", "k"):
            if getattr(self, dim) is None:
                object.__setattr__(self, dim, self.n)


@dataclass(frozen=True)
class AuditRow(SquareByDefault):
    """One stored audit point of one method: its inputs and the error report's fields
    (:data:`ROW_FIELDS`; None where the report has none, or a non-finite number); ``m`` and ``k``
    default to ``n`` (a square product)."""

    method: str
    n: int
    phi: float
    seed: int
    max_rel: float | None = None
    nrm: float | None = None
    zeros: int | None = None
    zeros_exact: int | None = None
    zero_max_abs: float | None = None
    median_rel: float | None = None
    max_comp: float | None = None
    max_ulps: float | None = None
    bits: float | None = None
    correctly_rounded: float | None = None
    nonfinite: int | None = None
    seconds: float | None = None
    reference_seconds: float | None = None
    m: int | None = None
    k: int | None = None

    @property
    def shape(self) -> Shape:
        return self.m, self.k, self.n

    @classmethod
    def read(cls, m: Measurement) -> AuditRow:
        p = m.params
        rows, inner, _ = point_shape(p)
        return cls(m.method, p["n"], p["phi"], p["seed"], **{f: _number(m.meta.get(f)) for f in ROW_FIELDS},
                   m=rows, k=inner)

    def as_dict(self) -> dict[str, Any]:
        return _shape_first(asdict(self))


def audit_rows(db: ResultsDB, env_key: str, *, rectangular: bool = False) -> list[AuditRow]:
    """Every stored square audit row of one environment, and the rectangular ones with ``rectangular``
    (the figures and experiments, drawn by N, take square rows only; rows on other inputs than phi's
    are left out)."""
    rows = [AuditRow.read(m) for m in db.measurements(EXPERIMENT, env_key=env_key)
            if m.params.get("inputs") == INPUTS]
    return rows if rectangular else [r for r in rows if r.m == r.k == r.n]


@dataclass(frozen=True)
class AuditSummary(SquareByDefault):
    """One (method, m x k x n, phi) over its seeds; error statistics are None when a seed's product
    was not finite (those seeds are counted in ``nonfinite_seeds``); ``m`` and ``k`` default to ``n``."""

    method: str
    n: int
    phi: float
    seeds: int
    mean_max_rel: float | None
    max_max_rel: float | None
    mean_nrm: float | None
    max_bits: float | None
    zeros: int
    zeros_exact: int
    nonfinite_seeds: int
    m: int | None = None
    k: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return _shape_first(asdict(self))


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def summarize(rows: Iterable[AuditRow]) -> list[AuditSummary]:
    """Per (method, m x k x n, phi): seeds, mean and max of the max relative error, mean nrm, worst bits.

    A group with any non-finite product has no error statistics (None) and
    counts those seeds in ``nonfinite_seeds``.
    """
    groups: dict[tuple[str, Shape, float], list[AuditRow]] = defaultdict(list)
    for r in rows:
        groups[(r.method, r.shape, r.phi)].append(r)
    out = []
    for (method, (m, k, n), phi), rs in groups.items():
        bad = sum(1 for r in rs if r.nonfinite)
        rels = [r.max_rel for r in rs if r.max_rel is not None]
        ok = not bad and len(rels) == len(rs)
        out.append(AuditSummary(
            method, n, phi, len(rs), mean_max_rel=_mean(rels) if ok else None,
            max_max_rel=max(rels) if ok else None,
            mean_nrm=_mean([r.nrm for r in rs if r.nrm is not None]) if ok else None,
            max_bits=max((r.bits for r in rs if r.bits is not None), default=None) if ok else None,
            zeros=sum(r.zeros for r in rs), zeros_exact=sum(r.zeros_exact for r in rs), nonfinite_seeds=bad,
            m=m, k=k))
    return out


LevelFits = dict[tuple[int, float], dict[str, tuple[list[tuple[int, float]], float]]]


def bits_per_level(rows: Iterable[AuditRow]) -> LevelFits:
    """Per (n, phi) and schedule: [(level, bits lost against DGEMM)] and the fitted bits per level.

    Bits lost at a level: the median over seeds of log2(max_rel / max_rel of DGEMM
    on the same inputs); level 0 is DGEMM itself (0 bits). Only the seeds that
    every Strassen method of the (n, phi) group has are used, so schedules are
    compared on the same inputs.
    """
    rows = list(rows)
    gemm = {(r.n, r.phi, r.seed): r.max_rel for r in rows if r.method == "fp64"}
    lost: dict[tuple[int, float], dict[tuple[str, int], dict[int, float]]] = defaultdict(dict)
    for r in rows:
        base = gemm.get((r.n, r.phi, r.seed))
        if not r.method.startswith("strassen-") or not base or not r.max_rel:
            continue
        schedule, level = r.method[len("strassen-"):].rsplit("-L", 1)
        lost[(r.n, r.phi)].setdefault((schedule, int(level)), {})[r.seed] = math.log2(r.max_rel / base)
    out: LevelFits = {}
    for key, methods in lost.items():
        seeds = set.intersection(*(set(v) for v in methods.values()))
        curves: dict[str, list[tuple[int, float]]] = defaultdict(lambda: [(0, 0.0)])
        for (schedule, level), by_seed in sorted(methods.items()):
            if seeds:
                curves[schedule].append((level, statistics.median(by_seed[s] for s in seeds)))
        out[key] = {s: (pts, float(np.polyfit(*zip(*pts), 1)[0])) for s, pts in curves.items()}
    return out
