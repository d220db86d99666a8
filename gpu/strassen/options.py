"""The options of a Strassen product, as one frozen object: :class:`Options`.

``matmul`` took fifteen keywords; a product's options are now one value that can be kept, compared, hashed
(the plan cache's key) and printed, and ``matmul``'s keywords are its fields. A field left at ``None`` is not
given: ``level="auto"`` with nothing of the configuration given (``schedule``, ``fused``, ``flat``, ``graph``,
``parallel``, ``workspace``) lets the device profile choose the whole configuration
(:mod:`gpu.strassen.choose`); a configuration field given fixes it, and ``level="auto"`` then picks only the
level, from the profile's level tables (:mod:`gpu.strassen.auto`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..backend import Backend
from ..backend.plans import resolve_options
from ..profile import check_regime
from . import graphs
from .auto import MAX_LEVEL
from .plans import check_workspace
from .schedules import plan_name

FRINGES = ("peel", "pad")


@dataclasses.dataclass(frozen=True)
class Options:
    """How :func:`gpu.strassen.matmul` and :class:`gpu.strassen.Plan` multiply (see ``matmul`` for each field).

    ``schedule`` may be given as a list of schedules (a per-level plan); it is kept as its name
    (``"rum/winograd"``), so that options always hash."""

    level: int | str = "auto"
    schedule: str | None = None
    parallel: bool = False
    fused: bool | None = None
    flat: bool | None = None
    graph: bool | str | None = None
    fringe: str = "peel"
    check_finite: bool = False
    workspace: int | str | None = None
    regime: str = "sustained"
    overwrite_a: bool = False
    overwrite_b: bool = False

    def __post_init__(self) -> None:
        if self.schedule is not None and not isinstance(self.schedule, str):
            if not isinstance(self.schedule, Sequence):
                raise ValueError(f"schedule must be a schedule name or a list of them, got {self.schedule!r}")
            object.__setattr__(self, "schedule", plan_name(self.schedule))

    def __hash__(self) -> int:
        """The fields' hash, kept after the first ask: every call of ``matmul`` looks its plan up by the options."""
        kept = self.__dict__.get("_hash")
        if kept is None:
            kept = hash(tuple(getattr(self, f.name) for f in dataclasses.fields(self)))
            object.__setattr__(self, "_hash", kept)
        return kept

    @property
    def chooses(self) -> bool:
        """Whether the device profile chooses the whole configuration (see the module notes)."""
        return (self.level == "auto" and self.schedule is None and self.fused is None and self.flat is None
                and self.graph is None and not self.parallel and self.workspace is None)

    def with_configuration(self, level: int, schedule: str, fused: bool, flat: bool, graph: bool | str) -> Options:
        """These options with a configuration filled in (what a plan runs)."""
        return dataclasses.replace(self, level=level, schedule=schedule, fused=fused, flat=flat, graph=graph)


#: The options of a call that gives none.
DEFAULT = Options()


def check_options(be: Backend, o: Options) -> None:
    """ValueError before any work for options that cannot run on ``be`` or exclude each other."""
    if o.fringe not in FRINGES:
        raise ValueError(f"fringe must be one of {FRINGES}, got {o.fringe!r}")
    if o.level != "auto" and (isinstance(o.level, (bool, np.bool_)) or not isinstance(o.level, (int, np.integer))
                              or not 0 <= o.level <= MAX_LEVEL):
        raise ValueError(f"level must be an integer from 0 to {MAX_LEVEL} or 'auto', got {o.level!r}")
    if o.graph is not None:
        graphs.check_mode(be, o.graph)
    check_regime(o.regime)
    for name in ("parallel", "check_finite", "overwrite_a", "overwrite_b", "fused", "flat"):
        value = getattr(o, name)
        if value is not None and not isinstance(value, (bool, np.bool_)):
            raise ValueError(f"{name} must be True or False, got {value!r}")
    if o.flat and o.parallel:
        raise ValueError("flat=True runs its passes and GEMMs on one stream; pass parallel=False")
    if o.flat and o.workspace is not None:
        raise ValueError("flat=True runs one schedule at every level and workspace= mixes them; pass "
                         "schedule='winograd' instead of workspace=")
    if o.workspace is not None and o.schedule is not None:
        raise ValueError("pass schedule= or workspace=, not both: workspace chooses the schedule of each level")
    check_workspace(o.workspace)


def options_of(options: Any, given: dict[str, Any]) -> Options:
    """``options`` (an :class:`Options`, a dict of its fields or None) with the keywords ``given`` that are not
    None replacing its fields; TypeError naming an unknown field (the plan base's rule)."""
    if options is None and all(value is None for value in given.values()):
        return DEFAULT
    return resolve_options(Options, options, **given)
