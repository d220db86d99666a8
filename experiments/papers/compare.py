"""One published number beside the toolkit's measurement of the same thing: :class:`Comparison`.

The ratio is ours over the paper's. A paper's number may be a range ("27-28%": ours over each end gives
a range of ratios), a bound ("up to 2x", "faster in every setting": > 1) or approximate ("about 2x"); ours
may be a range too, over sizes the paper does not separate. Where our data hold no counterpart the
comparison says "not measured" and carries no ratio: nothing is filled in.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

NOT_MEASURED = "not measured"
#: How a paper's number is shown, by its statistic (``value``..``high`` formatted).
SHOWN = {"value": "{}", "max": "up to {}", "min": "at least {}", "about": "about {}", "range": "{}", "above": "> {}"}


def ratio(ours: tuple[float, float], paper: tuple[float, float]) -> tuple[float, float | None]:
    """Ours over the paper's, as (lowest, highest) over both ranges; the highest is None (unbounded)
    where the paper's range reaches 0."""
    lo = ours[0] / paper[1] if paper[1] else math.inf
    hi = ours[1] / paper[0] if paper[0] else None
    return (lo, hi) if hi is None or lo <= hi else (hi, lo)


def shown(value: float, high: float | None, fmt: str) -> str:
    """``value`` or ``value-high`` in ``fmt`` (a range printed once when both ends read the same)."""
    lo = format(value, fmt)
    hi = format(high, fmt) if high is not None else lo
    return lo if hi == lo else f"{lo} to {hi}"


@dataclass(frozen=True)
class Comparison:
    """A published number (``paper_value``..``paper_high`` on ``paper_device``) and ours on ``device``
    (``value``..``high``, None where not measured), with how the two points were matched."""

    paper: str
    quantity: str
    point: str
    paper_device: str
    paper_value: float
    paper_high: float | None
    statistic: str
    device: str
    value: float | None
    high: float | None
    match: str
    regime: str
    source: str
    citation: str
    where: str = ""
    fmt: str = ".3f"
    note: str = ""

    @property
    def measured(self) -> bool:
        return self.value is not None

    @property
    def ratio(self) -> tuple[float, float | None] | None:
        if self.value is None:
            return None
        ours = (self.value, self.high if self.high is not None else self.value)
        return ratio(ours, (self.paper_value, self.paper_high if self.paper_high is not None else self.paper_value))

    @property
    def paper_text(self) -> str:
        return SHOWN[self.statistic].format(shown(self.paper_value, self.paper_high, self.fmt))

    @property
    def ours_text(self) -> str:
        return shown(self.value, self.high, self.fmt) if self.value is not None else NOT_MEASURED

    @property
    def ratio_text(self) -> str:
        """Ours over the paper's to three decimals ("0.990", "0.520 to 0.540", ">= 1.045"), or "not measured"."""
        found = self.ratio
        if found is None:
            return NOT_MEASURED
        lo, hi = found
        if hi is None:
            return f">= {lo:.3f}"
        return shown(lo, hi, ".3f")

    def as_dict(self) -> dict[str, Any]:
        found = self.ratio
        return {**asdict(self), "paper_text": self.paper_text, "ours_text": self.ours_text,
                "ratio": None if found is None else list(found), "ratio_text": self.ratio_text}


def not_measured(why: str) -> dict[str, Any]:
    """The fields of a comparison with no counterpart in our data: ``why`` is its ``match``."""
    return {"value": None, "high": None, "match": f"{NOT_MEASURED}: {why}"}
