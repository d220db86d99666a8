"""Accuracy audits: each method's error against the correctly rounded product, stored and drawn.

Every audited (method, n, phi, seed) is one row of the experiment ``accuracy``
(see :mod:`accuracy.audit` for the inputs and the reference); a rectangular
m x k x n product (split-K's tiny outputs over a huge k) adds ``m`` and ``k``
to its parameters, so it never meets a square point, whose parameters stay
(n, phi, seed, inputs). Its value is the
papers' maximum relative error (unit ``rel``); the full :mod:`accuracy.metrics`
report is kept in the row's meta. A product with NaN or infinite entries is
stored with unit ``nonfinite entries`` and their count as value, and shows as
``null`` errors with ``nonfinite`` > 0, never as a small number.

Two experiments run on this store for ``gemmlab reproduce``, and two figures
(:mod:`experiments.audit.figures`):

* ``accuracy-phi``: every default method (fp32, fp64, Strassen-RUM levels 1-3
  and whatever other packages add, the Ozaki scheme for one) at phi = 0.1, 1, 2,
  drawn as the papers' Figs. 8-16: one panel per phi and size, the maximum
  relative error per seed, one line per method.
* ``accuracy-strassen``: every recursible schedule at levels 1-4 (1-3 in a quick
  CPU run) next to DGEMM (level 0), drawn as the bits lost against DGEMM per
  level and schedule; the summary gives the fitted bits lost per level.

Stored rows come back as :class:`~experiments.audit.rows.AuditRow` records;
:func:`~experiments.audit.rows.summarize` groups them over seeds into
:class:`~experiments.audit.rows.AuditSummary` records (``gemmlab audit`` prints
those, :mod:`experiments.audit.commands`).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from accuracy.audit import Audited, audit_point, complex_inputs
from accuracy.methods import default_methods, get_method, strassen_names
from gpu.backend import Backend

from ..core.registry import Context, experiment
from ..core.summary import Summary, Table, spread
from ..core.sweep import Record, SweepOutcome, sweep
from .rows import EXPERIMENT, INPUTS, AuditRow, Shape, audit_rows, bits_per_level, point_shape, summarize

PHIS = (0.1, 1.0, 2.0)
#: Strassen levels audited (beside DGEMM as level 0); quick CPU runs stop at 3, where
#: a 128 x 128 product's 7**4 bottom GEMMs would cost more in Python than in arithmetic.
STRASSEN_LEVELS: dict[tuple[str, bool], tuple[int, ...]] = {
    ("cupy", False): (1, 2, 3, 4), ("cupy", True): (1, 2, 3, 4),
    ("numpy", False): (1, 2, 3, 4), ("numpy", True): (1, 2, 3)}


@dataclass(frozen=True)
class AuditPlan:
    """The points of an audit: every product x phi x seed; the products are the squares N x N x N
    of ``sizes``, then the ``shapes`` (m, k, n) (``sizes`` may be empty when shapes are given)."""

    sizes: tuple[int, ...]
    phis: tuple[float, ...] = PHIS
    seeds: tuple[int, ...] = (1, 2, 3)
    shapes: tuple[Shape, ...] = ()

    def __post_init__(self) -> None:
        if not all(isinstance(s, tuple) and len(s) == 3 and all(isinstance(v, int) and v > 0 for v in s)
                   for s in self.shapes):
            raise ValueError(f"audit shapes must be (m, k, n) triples of positive integers, got {list(self.shapes)}")
        sizes = self.sizes if self.sizes or not self.shapes else (1,)    # no squares: the shapes are the products
        for what, values, ok in (("sizes", sizes, lambda v: isinstance(v, int) and v > 0),
                                 ("phis", self.phis, lambda v: 0 <= v <= 20),
                                 ("seeds", self.seeds, lambda v: isinstance(v, int) and v >= 0)):
            if not values or not all(ok(v) for v in values):
                raise ValueError(f"audit {what} must be a non-empty list of "
                                 + {"sizes": "positive integers", "phis": "numbers from 0 to 20",
                                    "seeds": "non-negative integers"}[what] + f", got {list(values)}")

    def products(self) -> list[Shape]:
        """Every (m, k, n) audited, once each: the squares of ``sizes``, then ``shapes``."""
        return list(dict.fromkeys([(n, n, n) for n in self.sizes] + list(self.shapes)))

    def points(self) -> list[dict[str, Any]]:
        """The stored parameters of every point, by product, then phi, then seed."""
        return [point_params(n, phi, seed, m, k) for m, k, n in self.products()
                for phi in self.phis for seed in self.seeds]


TEN = tuple(range(1, 11))
PHI_PLANS: dict[tuple[str, bool], AuditPlan] = {
    ("cupy", False): AuditPlan((1024, 2048, 4096), seeds=TEN),
    ("cupy", True): AuditPlan((1024,)),
    ("numpy", False): AuditPlan((256, 512, 1024), seeds=TEN),
    ("numpy", True): AuditPlan((128,)),
}
STRASSEN_PLANS: dict[tuple[str, bool], AuditPlan] = {
    ("cupy", False): AuditPlan((4096,), seeds=(1, 2, 3, 4, 5)),
    ("cupy", True): AuditPlan((1024,), seeds=(1, 2)),
    ("numpy", False): AuditPlan((1024,)),
    ("numpy", True): AuditPlan((128,), seeds=(1, 2)),
}


def point_params(n: int, phi: float, seed: int, m: int | None = None, k: int | None = None) -> dict[str, Any]:
    """The stored parameters of one audit point (``inputs``: the papers' phi distribution); an
    m x k x n product that is not square adds ``m`` and ``k`` (a square one is stored as N x N x N)."""
    m, k = n if m is None else m, n if k is None else k
    shape = {} if m == k == n else {"m": int(m), "k": int(k)}
    return {**shape, "n": int(n), "phi": float(phi), "seed": int(seed), "inputs": INPUTS}


def shape_text(shape: Shape) -> str:
    """``m x k x n``."""
    return " x ".join(str(v) for v in shape)


def strassen_methods(levels: Sequence[int] = (1, 2, 3, 4)) -> list[str]:
    """DGEMM (level 0) and every schedule that can run all of ``levels``, at each of them."""
    names = strassen_names()
    schedules = [n[len("strassen-"):-len("-L1")] for n in names if n.endswith("-L1")]
    return ["fp64"] + [f"strassen-{s}-L{lv}" for s in schedules for lv in levels
                       if all(f"strassen-{s}-L{x}" in names for x in levels)]


# --------------------------------------------------------------------------- measuring

def record(audited: Audited) -> Record:
    """The stored row of one audited method (see the module notes for the units)."""
    rep = audited.report
    if not rep.finite:
        value, unit = float(rep.nonfinite), "nonfinite entries"
    elif rep.max_rel is None:
        value, unit = rep.zero_max_abs, "abs (reference all zero)"
    else:
        value, unit = rep.max_rel, "rel"
    return Record(value, unit, meta={**rep.as_dict(), "seconds": audited.seconds,
                                     "reference_seconds": audited.reference_seconds})


def measure(backend: Backend, params: Mapping[str, Any], missing: Sequence[str]) -> dict[str, Record]:
    """Audit the missing methods at one point (one reference for all of them)."""
    methods = [get_method(name) for name in missing]
    results = audit_point(backend, methods, params["n"], params["phi"], params["seed"], shape=point_shape(params))
    return {name: record(a) for name, a in results.items()}


def check_methods(methods: Sequence[str], plan: AuditPlan) -> None:
    """ValueError before anything runs: an unknown method, or one that cannot run a product of the plan
    (one line naming the method and the m x k x n shape)."""
    found = [get_method(name) for name in methods]
    for method in found:
        for shape in plan.products():
            method.check_shape(*shape)
    complex_inputs(found)


def usable_methods(be: Backend, methods: Sequence[str]) -> list[str]:
    """The methods that can run on ``be``; each optional one that cannot (cuBLAS's emulation without
    nvmath-python or off the GPU) is skipped with a one-line message on stderr. ValueError if none is left."""
    usable = []
    for name in methods:
        why = get_method(name).unavailable(be)
        if why:
            print(f"skipping {name}: {why}", file=sys.stderr)
        else:
            usable.append(name)
    if not usable:
        raise ValueError(f"none of the methods {list(methods)} can run on the {be.name} backend (see above)")
    return usable


def run_audit(ctx: Context, methods: Sequence[str], plan: AuditPlan) -> tuple[SweepOutcome, list[AuditRow]]:
    """Audit (or resume) every method at every point of the plan; the outcome and the plan's rows
    (by method in the order given, then m, k, n, phi and seed)."""
    methods = usable_methods(ctx.backend, methods)
    check_methods(methods, plan)
    points = plan.points()
    outcome = sweep(ctx, EXPERIMENT, points, list(methods), partial(measure, ctx.backend), desc="accuracy audit")
    wanted = {(point_shape(p), p["phi"], p["seed"]) for p in points}
    rows = [r for r in audit_rows(ctx.db, ctx.env_key, rectangular=bool(plan.shapes))
            if r.method in methods and (r.shape, r.phi, r.seed) in wanted]
    order = {m: i for i, m in enumerate(methods)}
    return outcome, sorted(rows, key=lambda r: (order[r.method], *r.shape, r.phi, r.seed))


# --------------------------------------------------------------------------- experiments

def phi_table(title: str, rows: Sequence[AuditRow], n: int | None, methods: Sequence[str]) -> Table:
    """Mean over seeds of the max relative error at size ``n``: one row per method, one column per phi
    (n/a: a seed's product was not finite)."""
    stats = {(s.method, s.phi): s.mean_max_rel for s in summarize(rows) if s.n == n}
    phis = sorted({phi for _, phi in stats})
    return Table(title, ("method", *(f"phi={p:g}" for p in phis)),
                 [(m, *(stats.get((m, p)) for p in phis)) for m in methods if any((m, p) in stats for p in phis)],
                 formats={f"phi={p:g}": ".3e" for p in phis})


def audit_scope(rows: Sequence[AuditRow]) -> str:
    """What an audit measured: sizes, phis, seeds and the number of methods."""
    return (f"N = {spread([r.n for r in rows])}; phi = {spread([r.phi for r in rows], 'values')}; "
            f"seeds {spread([r.seed for r in rows], 'seeds')}; {len({r.method for r in rows})} methods")


NONFINITE_NOTE = "n/a: a seed's product had NaN or infinite entries (counted, no error statistics)"


@experiment("accuracy-phi", "Max relative error of each method on the papers' phi inputs (their Figs. 8-16)")
def run_phi(ctx: Context) -> Summary:
    methods = default_methods()
    outcome, rows = run_audit(ctx, methods, PHI_PLANS[(ctx.backend.name, ctx.quick)])
    n = max((r.n for r in rows), default=None)
    return Summary(scope=audit_scope(rows),
                   facts={"points measured": outcome.measured, "points already stored": outcome.skipped},
                   tables=[phi_table(f"mean max relative error at N={n}", rows, n, methods)], notes=[NONFINITE_NOTE])


@experiment("accuracy-strassen", "Bits of accuracy Strassen-Winograd loses per level, by schedule (vs DGEMM)")
def run_strassen(ctx: Context) -> Summary:
    key = (ctx.backend.name, ctx.quick)
    outcome, rows = run_audit(ctx, strassen_methods(STRASSEN_LEVELS[key]), STRASSEN_PLANS[key])
    fits = bits_per_level(rows)
    n = max((r.n for r in rows), default=None)
    phis = sorted(phi for size, phi in fits if size == n)
    schedules = sorted({s for (size, _), by in fits.items() if size == n for s in by})
    table = Table(f"bits lost per level at N={n}", ("schedule", *(f"phi={p:g}" for p in phis)),
                  [(s, *(fits[(n, p)][s][1] if s in fits[(n, p)] else None for p in phis)) for s in schedules],
                  formats={f"phi={p:g}": ".2f" for p in phis})
    return Summary(scope=f"{audit_scope(rows)}; levels {spread(STRASSEN_LEVELS[key], 'levels')}",
                   facts={"points measured": outcome.measured, "points already stored": outcome.skipped},
                   tables=[table],
                   notes=["bits lost per level: slope of log2(max relative error / DGEMM's) against the level, "
                          "least squares through level 0 (DGEMM) and the median over seeds at each level"])
