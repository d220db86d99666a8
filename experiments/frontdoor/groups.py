"""What one point of the ``frontdoor`` experiment times: the front door's call, its best other candidates and its
choice with the profile hidden, each built, checked once, and named as stored.

All the accuracy levels of a shape are timed in one interleaved group (:func:`experiments.frontdoor.bench.
measure_shape`): the library GEMM once, the front door once per level (:func:`timed_key`), and each candidate
once, built once for the shape however many levels name it (:class:`Built`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

import gpu
from gpu.backend import Array, Backend, MemoryPlanError
from gpu.backend.plans import MatmulPlan
from gpu.frontdoor import Ranked
from gpu.frontdoor.frontplan import family_plan

from ..core.ascalled import Call
from ..core.lab import Operands, require_correct
from .hidden import hidden_choice
from .points import DTYPE, accuracy_text, point_bytes
from .rows import FRONTDOOR, LIBRARY

#: Candidates timed besides the one the front door runs and the library GEMM, at most.
OTHERS = 2
#: A candidate whose estimate (or, unmeasured on the shape, its median elsewhere) is below this ratio to the
#: library GEMM is not timed: the
#: library GEMM, always timed, is the faster by 2x on the profile's measurement (an Ozaki I call at N = 12288 took
#: 5.1 s on the H200, 75 times the library GEMM, and its settling rounds took 33 s of one point).
SLOWEST = 0.5
#: A shape whose operands (:func:`~experiments.frontdoor.points.point_bytes`) take more than this share of the
#: device's memory times no other candidate beside the front door: their plans would hold workspaces the front
#: door's call needs. On the H200 at N = 32768 (operands 34 GB of 141) Ozaki II's level-0 plan and the level-1
#: candidate's could not both be held: the front door read 1.011x the library GEMM in that group and 1.565x in a
#: process of its own (``results/published/h200/h200-frontdoor-alone.json``). The choice with the profile hidden is
#: no exception: timed beside the front door's level 1 there, its level-0 plan left the front door 1.600x with
#: 665 ms of host time a call (its plan rebuilt at every call) against 1.70x for the hidden choice.
BESIDE = 1 / 8
#: Why a candidate is not timed beside the front door at such a size.
NOT_BESIDE = (f"not timed: beside the front door's plan at this size (operands over {BESIDE:.3g} of the device) its "
              "workspace would take what the front door's call needs")
#: Errors a family raises where it refuses a product before any work.
REFUSALS = (MemoryPlanError, ValueError, TypeError)


@dataclass
class FrontOperands(Operands):
    """A (m x k) and B (k x n) of one point; every call makes its own output (C is an empty placeholder)."""

    def needs_flush(self) -> bool:
        """Flush the cache before each sample where A, B and an output fit in twice its size."""
        nbytes = self.A.nbytes + self.B.nbytes + self.A.shape[0] * self.B.shape[1] * self.A.itemsize
        return nbytes < 2 * self.backend.cache_bytes()


@dataclass
class Built:
    """The candidates' calls of one shape, each built once (its plan freed with the shape), and those that
    refused with why."""

    calls: dict[str, tuple[Call, str]] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)
    plans: list[MatmulPlan] = field(default_factory=list)

    def get(self, be: Backend, A: Array, B: Array, r: Ranked) -> Call | None:
        """Candidate ``r``'s call, built on first asking; None where its family refused the product."""
        if r.name not in self.calls and r.name not in self.refused:
            try:
                call, plan = family_call(be, A, B, r)
            except REFUSALS as err:
                self.refused[r.name] = str(err)
                return None
            self.calls[r.name] = (call, r.family)
            self.plans.append(plan)
        found = self.calls.get(r.name)
        return None if found is None else found[0]

    def free(self) -> None:
        for plan in self.plans:
            plan.free()
        self.plans.clear()
        self.calls.clear()


@dataclass
class Group:
    """What one point times: the front door's choice and why, the calls, what refused, and the call that times
    its choice with the profile hidden."""

    level: Any
    chosen: Ranked
    explain: str
    candidates: tuple[str, ...]
    public: dict[str, Call]
    families: dict[str, str]
    plans: list[MatmulPlan] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)
    hidden: tuple[str, str] | None = None      # the choice with the profile hidden, and the call timing it
    library_keeps: bool = True                 # whether the library GEMM keeps the point's accuracy

    def free(self) -> None:
        for plan in self.plans:
            plan.free()
        self.plans.clear()


class Refused(Exception):
    """The front door refused a point before any work; its message says why."""


def timed_key(group: Group, name: str) -> str:
    """The name call ``name`` of ``group`` is timed under in its shape's group: the front door's is per level."""
    return f"{FRONTDOOR} {accuracy_text(group.level)}" if name == FRONTDOOR else name


def family_call(be: Backend, A: Array, B: Array, r: Ranked) -> tuple[Call, MatmulPlan]:
    """Candidate ``r`` as a call of its own family plan, and the plan (refusals raise as the family's)."""
    plan = family_plan(r, A, B, None, be, None)
    options = ", ".join(f"{k}={v!r}" for k, v in r.options.items())
    return Call(f"{r.family}.Plan(A, B, options={{{options}}}).execute(A, B)", partial(plan.execute, A, B)), plan


def candidates(be: Backend, A: Array, B: Array, entries: Sequence[Ranked], chosen: Ranked, built: Built,
               others: int = OTHERS) -> tuple[dict[str, Call], dict[str, str], dict[str, str]]:
    """The best ``others`` eligible candidates besides ``chosen`` and the library GEMM, each as a call of its
    own family plan: (calls, families, refused with why). A candidate whose family refuses the product, or
    estimated below :data:`SLOWEST`, is passed over for the next."""
    calls, families, refused = {}, {}, {}
    for r in entries:
        if len(calls) >= others:
            break
        if not r.eligible or r.family == "gemm" or r.name == chosen.name:
            continue
        estimate = r.ratio if r.ratio is not None else r.elsewhere
        if estimate is not None and estimate < SLOWEST:
            refused[r.name] = f"not timed: estimated {estimate:.3g}x the library GEMM" + \
                ("" if r.ratio is not None else " (its median over the shapes measured)") + f", below {SLOWEST}x"
            continue
        call = built.get(be, A, B, r)
        if call is None:
            refused[r.name] = built.refused[r.name]
            continue
        calls[r.name], families[r.name] = call, r.family
    return calls, families, refused


def add_hidden(be: Backend, A: Array, B: Array, group: Group, built: Built, alone: bool = False) -> None:
    """Time what the front door would choose with this device's profile hidden (:mod:`.hidden`): the call of the
    group that runs it already, or its family plan's call added to the group (not where the front door runs
    ``alone``: the choice is then named as not timed, and its loss is not judged); ``group.hidden`` names it."""
    m, k = A.shape
    found = hidden_choice(be, m, k, B.shape[1], group.level)
    if found is None:
        return
    if found.family == "gemm" or found.name == group.chosen.name or found.name in group.public:
        key = FRONTDOOR if found.name == group.chosen.name else LIBRARY if found.family == "gemm" else found.name
        group.hidden = (found.name, key)
        return
    group.hidden = (found.name, found.name)
    if alone:
        group.refused[found.name] = NOT_BESIDE
        return
    call = built.get(be, A, B, found)
    if call is None:
        group.refused[found.name] = built.refused[found.name]
        return
    group.public[found.name], group.families[found.name] = call, found.family


def prepare(be: Backend, A: Array, B: Array, level: Any, built: Built) -> Group:
    """The front door's choice for (A, B, ``level``) and the calls of the point, the candidates' taken from
    ``built`` (none where the operands take more than :data:`BESIDE` of the device: each is then named as not
    timed, with why); :class:`Refused` where ``gpu.plan`` refuses before any work."""
    try:
        probe = gpu.plan(A, B, accuracy=level, backend=be)
    except REFUSALS as err:
        raise Refused(str(err)) from None
    chosen, text, entries = probe.chosen, probe.explain(), probe.ranking.entries
    probe.free()
    public = {FRONTDOOR: Call(f"gpu.matmul(A, B, accuracy={level!r})",
                              partial(gpu.matmul, A, B, accuracy=level, backend=be))}
    alone = point_bytes((A.shape[0], A.shape[1], B.shape[1])) > BESIDE * be.memory_info()[1]
    calls, families, refused = candidates(be, A, B, entries, chosen, built, 0 if alone else OTHERS)
    if alone:
        refused.update({r.name: NOT_BESIDE for r in entries
                        if r.eligible and r.family != "gemm" and r.name != chosen.name})
    refused.update({r.name: why for r, why in probe.refused})
    group = Group(level, chosen, text, tuple(r.name for r in entries), {**public, **calls},
                  {FRONTDOOR: chosen.family, LIBRARY: "gemm", **families}, [], refused,
                  library_keeps=any(r.family == "gemm" and r.keeps for r in entries))
    add_hidden(be, A, B, group, built, alone)
    return group


def product_error(be: Backend, A: Array, B: Array, C: Array) -> float:
    """Relative error of ``C x`` against ``A (B x)`` for a random x in [0, 1)."""
    xp = be.xp
    x = xp.random.default_rng(0).random(B.shape[1])
    expected = A @ (B @ x)
    return float(xp.linalg.norm(C @ x - expected) / xp.linalg.norm(expected))


def check_calls(be: Backend, A: Array, B: Array, group: Group, reference: Call, where: str) -> list[str]:
    """Each call made once, its product checked (RuntimeError where wrong: nothing is stored); a candidate
    that refuses on its first call is dropped, and the front door refusing raises :class:`Refused`. A candidate
    short of device memory on its first call (its plan fit when built, alone; the group's other plans have
    filled their workspaces since) is dropped too, and its name returned, so that the caller can time it alone."""
    tolerance = np.finfo(DTYPE).eps ** 0.5
    require_correct(product_error(be, A, B, reference.fn()), f"{reference.text} at {where}", tolerance)
    short = []
    for name, call in list(group.public.items()):
        try:
            C = call.fn()
        except (*REFUSALS, MemoryError) as err:
            if name == FRONTDOOR:
                if isinstance(err, REFUSALS):
                    raise Refused(str(err)) from None
                raise
            memory = isinstance(err, (MemoryError, MemoryPlanError))
            short += [name] if memory else []
            group.refused[name] = f"short of device memory beside the other calls' plans: {err}" if memory else str(err)
            del group.public[name]
            continue
        require_correct(product_error(be, A, B, C), f"{call.text} at {where}", tolerance)
        del C                                  # one output at a time
    return short
