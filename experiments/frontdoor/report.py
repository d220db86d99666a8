"""The ``frontdoor`` experiment's result: the front door as called at every (shape, accuracy) point against the
library GEMM and the candidates timed beside it, its error on phi inputs, and the verdict.

Checks, each judged on every point measured (a point the front door refused is listed, not judged):

* the front door as called is never below :data:`~experiments.frontdoor.rows.LIBRARY_FLOOR` times the library
  GEMM as called (the ratio of their as-called times, same rounds);
* it is within :data:`~experiments.frontdoor.rows.FASTEST_MARGIN` of the fastest call timed beside it (its time
  at most 1.05 times the fastest's);
* every error it made on the phi inputs is within its bound (:mod:`experiments.frontdoor.errors`: the chosen
  method's proven t, at most the accuracy's, plus the reference's resolution);
* its choice with the device's profile hidden (:mod:`experiments.frontdoor.hidden`: the transfer model fitted on
  the other GPUs) costs at most :data:`~experiments.frontdoor.rows.HIDDEN_MARGIN` more time than its own.

Each check reads a pass, a miss with the numbers of every point that missed, or "not judged" (None) where
nothing it needs was measured.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from ..core.summary import Check, Summary, Table
from .points import shape_text
from .rows import FASTEST_MARGIN, FRONTDOOR, HIDDEN_MARGIN, LIBRARY_FLOOR, FrontdoorRow

#: Misses a check names one by one, at most.
LISTED = 6


def where(r: FrontdoorRow) -> str:
    return f"{shape_text(r.shape)}, accuracy {r.accuracy}"


def _listed(parts: Sequence[str]) -> str:
    more = len(parts) - LISTED
    return "; ".join(parts[:LISTED]) + (f"; and {more} more" if more > 0 else "")


def doors(rows: Sequence[FrontdoorRow]) -> list[FrontdoorRow]:
    """The front door's row of every point it ran."""
    return [r for r in rows if r.method == FRONTDOOR and not r.was_refused]


def refused_text(rows: Sequence[FrontdoorRow]) -> str:
    refused = [r for r in rows if r.was_refused]
    return f"; {len(refused)} points refused by the front door, not judged ({_listed([where(r) for r in refused])})" \
        if refused else ""


def floor_check(rows: Sequence[FrontdoorRow]) -> Check:
    judged = [r for r in doors(rows) if r.ratio_as_called is not None]
    target = f"the front door as called >= {LIBRARY_FLOOR}x the library GEMM as called, at every point"
    if not judged:
        return Check(target, "not measured as called" + refused_text(rows), None)
    low = min(judged, key=lambda r: r.ratio_as_called)
    misses = [f"{r.ratio_as_called:.3f}x at {where(r)} (runs {r.runs}"
              + ("; the library GEMM does not keep the accuracy there)" if not r.library_keeps else ")")
              for r in judged if r.ratio_as_called < LIBRARY_FLOOR]
    text = f"lowest {low.ratio_as_called:.3f}x ({where(low)}) over {len(judged)} points"
    text += f"; below at {len(misses)}: {_listed(misses)}" if misses else ""
    return Check(target, text + refused_text(rows), not misses)


def fastest_check(rows: Sequence[FrontdoorRow]) -> Check:
    judged = [r for r in doors(rows) if r.over_fastest]
    target = f"the front door within {FASTEST_MARGIN:.0%} of the fastest call timed beside it, at every point"
    if not judged:
        return Check(target, "not measured" + refused_text(rows), None)

    def slower(r: FrontdoorRow) -> float:
        return 1.0 / r.over_fastest        # the front door's time over the fastest other call's

    worst = max(judged, key=slower)
    misses = [f"{slower(r):.3f}x {r.fastest}'s time at {where(r)} (runs {r.runs})" for r in judged
              if slower(r) > 1 + FASTEST_MARGIN]
    text = (f"at most {slower(worst):.3f}x the fastest's time ({worst.fastest}, {where(worst)}) over "
            f"{len(judged)} points")
    text += f"; beyond at {len(misses)}: {_listed(misses)}" if misses else ""
    return Check(target, text + refused_text(rows), not misses)


def error_check(rows: Sequence[FrontdoorRow]) -> Check:
    target = ("every error of the front door on phi inputs within its bound (the chosen method's proven t, at most "
              "the accuracy's, in the accuracy's scale)")
    found = [(r, e) for r in doors(rows) for e in r.errors if r.bound.get("bound_t") is not None]
    measured = [(r, e) for r, e in found if e.get("measured") is not None]
    unmeasured = len(found) - len(measured)
    note = f"; {unmeasured} products not made, not judged" if unmeasured else ""
    if not measured:
        return Check(target, "not measured" + note + refused_text(rows), None)

    def share(item: tuple[FrontdoorRow, Mapping[str, Any]]) -> float:
        r, e = item
        return e["measured"] / r.bound["bound_t"] if r.bound["bound_t"] > 0 else float(e["measured"] > 0) * 1e300

    r, e = max(measured, key=share)
    misses = [f"{e['measured']:.3g} > {r.bound['bound_t']:.3g} at {where(r)}, phi = {e['phi']:g} (runs {r.runs})"
              for r, e in measured if not e["measured"] <= r.bound["bound_t"] + r.bound.get("slack", 0.0)]
    text = (f"largest {e['measured']:.3g} against a bound of {r.bound['bound_t']:.3g} ({where(r)}, phi = "
            f"{e['phi']:g}) over {len(measured)} products")
    text += f"; beyond at {len(misses)}: {_listed(misses)}" if misses else ""
    return Check(target, text + note + refused_text(rows), not misses)


def hidden_check(rows: Sequence[FrontdoorRow]) -> Check:
    target = (f"with this device's profile hidden, the choice (transfer model) loses at most {HIDDEN_MARGIN:.0%} "
              "of the front door's time, at every point")
    ran = [r for r in doors(rows) if r.hidden is not None]
    judged = [r for r in ran if r.hidden_lost is not None]
    note = f"; {len(ran) - len(judged)} points whose hidden choice was not timed, not judged" \
        if len(judged) < len(ran) else ""
    if not judged:
        return Check(target, "not measured (no profile hidden on this device)" + note, None)
    worst = max(judged, key=lambda r: r.hidden_lost)
    same = sum(r.hidden == r.runs for r in judged)
    misses = [f"{r.hidden_lost:+.1%} at {where(r)} ({r.hidden} against {r.runs})" for r in judged
              if r.hidden_lost > HIDDEN_MARGIN]
    text = (f"the same choice at {same} of {len(judged)} points; worst {worst.hidden_lost:+.1%} ({worst.hidden} "
            f"against {worst.runs}, {where(worst)})")
    text += f"; beyond at {len(misses)}: {_listed(misses)}" if misses else ""
    return Check(target, text + note, not misses)


def checks(rows: Sequence[FrontdoorRow]) -> list[Check]:
    """The verdict (see the module notes)."""
    return [floor_check(rows), fastest_check(rows), error_check(rows), hidden_check(rows)]


def point_table(rows: Sequence[FrontdoorRow]) -> Table:
    """One row per point: what the front door ran, its time and ratios, and its worst error against its bound."""
    cells = []
    for r in (r for r in rows if r.method == FRONTDOOR):
        cells.append((shape_text(r.shape), r.accuracy, r.runs or "refused: " + r.refused.get(FRONTDOOR, ""),
                      None if r.as_called_s is None else 1e3 * r.as_called_s, r.ratio_as_called, r.fastest,
                      None if not r.over_fastest else 1 / r.over_fastest, r.error_max, r.bound.get("bound_t"),
                      r.hidden, r.hidden_lost))
    return Table("the front door as called", ("shape", "accuracy", "runs", "as called (ms)", "x library",
                                              "fastest other", "time / fastest's", "max error", "bound",
                                              "profile hidden: runs", "time lost"),
                 cells, formats={"as called (ms)": ".4g", "x library": ".3f", "time / fastest's": ".3f",
                                 "max error": ".2e", "bound": ".2e", "time lost": "+.1%"})


def call_table(rows: Sequence[FrontdoorRow]) -> Table:
    """Every timed call: as called, host time of one call, device time, speed-up over the library as called."""
    return Table("every call timed", ("shape", "accuracy", "method", "family", "as called (ms)", "host (us)",
                                      "device (ms)", "x library as called"),
                 [(shape_text(r.shape), r.accuracy, r.method, r.family, 1e3 * r.as_called_s,
                   None if r.host_s is None else 1e6 * r.host_s, None if r.device_s is None else 1e3 * r.device_s,
                   r.ratio_as_called) for r in rows if r.as_called_s is not None],
                 formats={"as called (ms)": ".4g", "host (us)": ".1f", "device (ms)": ".4g",
                          "x library as called": ".3f"})


def error_table(rows: Sequence[FrontdoorRow]) -> Table:
    """The front door's error per phi at each point, beside its bound."""
    phis = sorted({e["phi"] for r in doors(rows) for e in r.errors})
    columns = [f"phi = {p:g}" for p in phis]
    cells = [(shape_text(r.shape), r.accuracy, r.runs, r.bound.get("scale"),
              *({e["phi"]: e.get("measured") for e in r.errors}.get(p) for p in phis), r.bound.get("bound_t"))
             for r in doors(rows)]
    return Table("error in the accuracy's scale, by phi", ("shape", "accuracy", "runs", "scale", *columns, "bound"),
                 cells, formats={**{c: ".2e" for c in columns}, "bound": ".2e"})


def frontdoor_summary(counts: Mapping[str, Any], rows: Sequence[FrontdoorRow]) -> Summary:
    """The points, every call, the errors, and the verdict."""
    chosen = Counter(r.runs for r in doors(rows))
    left = counts.get("shapes left out (memory)") or []
    return Summary(
        scope=f"{counts['shapes']}; accuracy {counts['accuracies']}",
        facts={"points measured": counts["points measured"], "points already stored": counts["points already stored"],
               "shapes left out (memory)": "; ".join(left) or "none",
               "points refused by the front door": sum(r.was_refused for r in rows),
               "what the front door ran": ", ".join(f"{name} at {n}" for name, n in chosen.most_common()) or None},
        tables=[point_table(rows), call_table(rows), error_table(rows)],
        checks=checks(rows),
        notes=["as called: each call in a loop of calls back to back, then one synchronise, by the host's clock, "
               "interleaved in the same rounds; every call makes a new output; device: one call by the device's "
               "clock, its launch counted",
               "candidates: the best two eligible ones of the front door's ranking besides the one it runs, and "
               "its choice with this device's profile hidden, each through its own family plan "
               "(plan.execute(A, B))",
               "errors: on sampled rows of C against exact_matmul of those rows, max over the entries of "
               "(|C - R| - eta)+ / S in the accuracy's scale S, on phi inputs; the timing operands are phi = 1",
               "the library GEMM is cuBLAS on a GPU and the CPU BLAS on NumPy"])
