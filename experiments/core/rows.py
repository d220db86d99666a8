"""Stored measurements read back as a family's rows: one reader and one method order for every sweep.

A family (``splitk``, ``outofcore``) stores each method of an interleaved group as its own
measurement; its row class (``read(measurement)``) says what a summary, a table and a figure
read of one. These two helpers are what each family otherwise wrote again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from .database import Measurement, ResultsDB
from .regime import of_regime


def method_order(methods: Iterable[str], known: Sequence[str]) -> list[str]:
    """``methods`` in ``known``'s order, unknown ones last (sorted)."""
    present = set(methods)
    return [m for m in known if m in present] + sorted(present - set(known))


def stored_rows(db: ResultsDB, experiment: str, env_key: str, read: Callable[[Measurement], Any],
                known: Sequence[str], key: Callable[[Any], tuple], dtype: str | None = None,
                regime: str | None = None) -> list[Any]:
    """The stored rows of ``experiment`` in one environment, of one ``dtype`` and ``regime`` where
    given (where none was measured in that regime, those stored before regimes were recorded),
    sorted by ``key`` and then by method in ``known``'s order."""
    found = db.measurements(experiment, env_key=env_key)
    found = of_regime(found, regime) if regime is not None else found
    rows = [read(m) for m in found if dtype is None or m.params["dtype"] == dtype]
    order = {name: i for i, name in enumerate(method_order((r.method for r in rows), known))}
    return sorted(rows, key=lambda r: (*key(r), order[r.method]))
