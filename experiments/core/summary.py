"""What an experiment found, as data: a :class:`Summary` of headline facts and tables, its verdict
against its target, and notes.

Every ``@experiment`` returns one. ``gemmlab reproduce --json`` prints :meth:`Summary.as_dict`
per experiment (one JSON object each, raw numbers); ``SUMMARY.md`` prints
:meth:`Summary.markdown`: Markdown tables a researcher can paste into a paper or an issue,
never Python reprs. The ``scope`` says what was actually measured (sizes, formats), from the
stored rows, so that a heading never promises what a quick run did not measure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: What a table cell or a fact holds.
Cell = str | int | float | bool | None


def cell_text(value: Cell, fmt: str = "") -> str:
    """One Markdown table cell: None as n/a, booleans as yes/no, floats by ``fmt`` (default 4
    significant digits), and ``|`` escaped."""
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        return format(value, fmt) if fmt else f"{value:.4g}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def markdown_table(columns: Sequence[str], rows: Sequence[Sequence[Cell]],
                   formats: Mapping[str, str] | None = None) -> list[str]:
    """A Markdown table: header, ``| --- |`` rule, one line per row."""
    formats = formats or {}
    lines = ["| " + " | ".join(cell_text(c) for c in columns) + " |",
             "| " + " | ".join("---" for _ in columns) + " |"]
    lines += ["| " + " | ".join(cell_text(v, formats.get(c, "")) for c, v in zip(columns, row)) + " |"
              for row in rows]
    return lines


@dataclass
class Table:
    """A headline table: named columns, rows of cells (raw values; ``formats`` maps a column to
    the format spec its floats are printed with in Markdown)."""

    title: str
    columns: tuple[str, ...]
    rows: list[tuple[Cell, ...]] = field(default_factory=list)
    formats: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.columns = tuple(self.columns)
        self.rows = [tuple(r) for r in self.rows]
        for row in self.rows:
            if len(row) != len(self.columns):
                raise ValueError(f"table {self.title!r}: row {row} has {len(row)} cells for "
                                 f"{len(self.columns)} columns {self.columns}")

    def records(self) -> list[dict[str, Cell]]:
        """The rows as JSON objects keyed by column."""
        return [dict(zip(self.columns, row)) for row in self.rows]

    def column(self, name: str) -> list[Cell]:
        """The cells of one column, in row order."""
        i = self.columns.index(name)
        return [row[i] for row in self.rows]

    def markdown(self) -> list[str]:
        return [f"**{self.title}**", "", *markdown_table(self.columns, self.rows, self.formats)]


@dataclass(frozen=True)
class Check:
    """One verdict: the target, what was measured against it, and whether it was met (None: not
    judged, for example no data or a tracker that cannot count exactly)."""

    target: str
    measured: str
    met: bool | None

    def as_dict(self) -> dict[str, Any]:
        return {"target": self.target, "measured": self.measured, "met": self.met}


@dataclass
class Summary:
    """An experiment's result: ``scope`` (what was measured, from the data), headline ``facts``
    (name: value), headline ``tables``, ``checks`` (the verdict against the target; empty for a
    descriptive experiment) and ``notes``."""

    scope: str = ""
    facts: dict[str, Cell] = field(default_factory=dict)
    tables: list[Table] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def table(self, title: str) -> Table:
        """The table called ``title``."""
        for t in self.tables:
            if t.title == title:
                return t
        raise KeyError(f"no table {title!r}; tables: {[t.title for t in self.tables]}")

    def as_dict(self) -> dict[str, Any]:
        """One JSON object: ``scope``, the facts by name, each table by title as a list of records,
        ``verdict`` (the checks) and ``notes``."""
        out: dict[str, Any] = {"scope": self.scope, **self.facts}
        for t in self.tables:
            if t.title in out:
                raise ValueError(f"table title {t.title!r} repeats a fact or another table")
            out[t.title] = t.records()
        out["verdict"] = [c.as_dict() for c in self.checks]
        out["notes"] = list(self.notes)
        return out

    def markdown(self) -> list[str]:
        """Markdown lines: the facts as a two-column table, each table, the verdict table (or a
        line saying the experiment is descriptive), then the notes."""
        lines: list[str] = []
        if self.facts:
            lines += markdown_table(("quantity", "value"), list(self.facts.items())) + [""]
        for t in self.tables:
            lines += t.markdown() + [""]
        if self.checks:
            lines += ["**Verdict**", "", *markdown_table(
                ("target", "measured", "met"),
                [(c.target, c.measured, "not judged" if c.met is None else c.met) for c in self.checks]), ""]
        else:
            lines += ["**Verdict**: none; this experiment describes, it has no target.", ""]
        lines += [f"- {note}" for note in self.notes] + ([""] if self.notes else [])
        return lines


def spread(values: Sequence[Any], noun: str = "sizes", listed: int = 4) -> str:
    """Distinct values in order, for a scope or a fact: all of them when there are at most
    ``listed`` ("64, 96, 128"), else the range and the count ("128 to 2048 (8 sizes)")."""
    vals = sorted(set(values))
    if not vals:
        return "none"
    if len(vals) <= listed:
        return ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in vals)
    return f"{vals[0]} to {vals[-1]} ({len(vals)} {noun})"
