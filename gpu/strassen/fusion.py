"""Fusing a schedule's additions: runs of add/sub/copy steps become one kernel.

A run of consecutive addition steps on one stream reads each space once and
writes each result once, instead of three memory passes per step. The group
is built from the table (aliases applied at the top level, so aliased names
share one value) and compiled, on CuPy, into one ``ElementwiseKernel`` that
works on strided quadrant views (:mod:`gpu.strassen.kernels`). The arithmetic
is the same, in the same order, so fused and unfused results are bitwise equal.
Whether a backend fuses is its ``"strassen-fusion"`` operations object's say
(:class:`HostFusion` on NumPy: the steps of a group run one by one).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from ..backend import Backend, register_ops
from .hazards import StreamPlan
from .liveness import live_after
from .schedules import Schedule, get_schedule

FAMILY = "strassen-fusion"


class HostFusion:
    """The CPU fuses nothing: each addition is one NumPy ufunc call already."""

    fuses = False

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def compile(self, steps: tuple, dead: frozenset[str]) -> tuple[Any, tuple[str, ...]]:
        raise NotImplementedError("the NumPy backend runs additions one by one")


register_ops(FAMILY, "numpy", HostFusion)
register_ops(FAMILY, "cupy", "gpu.strassen.kernels:CupyFusion")


@dataclass(frozen=True)
class Group:
    """Consecutive steps (0-based) run as one unit on one stream."""

    steps: tuple[int, ...]
    stream: int
    waits: tuple[int, ...]        # 0-based steps of other streams to wait for first
    recorded: bool                # another stream waits for a step of this group
    kernel: Any = None            # fused kernel, or None to run the steps one by one
    arguments: tuple[str, ...] = ()


def groups(schedule: Schedule, plan: StreamPlan | None, *, aliases: frozenset[str] = frozenset(),
           backend: Backend | None = None) -> tuple[Group, ...]:
    """The units the executor issues: single steps, or fused runs when ``backend`` is given and fuses.

    ``aliases``: the support quadrants that are, in this call, the input
    quadrants they alias; a fused kernel must treat each such pair as one value.
    """
    fusion = backend.ops(FAMILY) if backend is not None else None
    return _groups(schedule.name, plan, aliases, fusion if fusion is not None and fusion.fuses else None)


@cache
def _groups(name: str, plan: StreamPlan | None, aliases: frozenset[str], fusion: Any) -> tuple[Group, ...]:
    schedule = get_schedule(name)
    fuse = fusion is not None
    waits = {} if plan is None else {i: [] for i in range(len(schedule.steps))}
    if plan is not None:
        for w in plan.waits:
            waits[w.step - 1].append(w.after - 1)
    waited = set() if plan is None else {w.after - 1 for w in plan.waits} | {j - 1 for j in plan.join}
    out = []
    for run in runs(schedule, fuse):
        kernel, args = (None, ())
        if len(run) > 1:
            kernel, args = fusion.compile(tuple(_renamed(schedule, i, aliases) for i in run),
                                          dead_temporaries(schedule, run))
        out.append(Group(tuple(run), schedule.steps[run[0]].stream,
                         tuple(sorted({j for i in run for j in waits.get(i, ())})),
                         any(i in waited for i in run), kernel, args))
    return tuple(out)


def dead_temporaries(schedule: Schedule, run: list[int]) -> frozenset[str]:
    """Temporaries a run writes whose values nothing after the run reads: kept in registers, never stored."""
    written = {schedule.steps[i].dst for i in run} & set(schedule.temporaries)
    return frozenset(t for t in written if not live_after(schedule, run[-1], t))


def runs(schedule: Schedule, fuse: bool = True) -> list[list[int]]:
    """Steps (0-based) issued as one unit: with ``fuse``, each run of consecutive additions on
    one stream; products, and every step without ``fuse``, stand alone. Read from the table
    only, so the performance model counts the kernels a call launches without compiling any."""
    out: list[list[int]] = []
    for i, step in enumerate(schedule.steps):
        last = schedule.steps[out[-1][-1]] if out else None
        if fuse and last is not None and not step.is_product and not last.is_product and last.stream == step.stream:
            out[-1].append(i)
        else:
            out.append([i])
    return out


def _renamed(schedule: Schedule, i: int, aliases: frozenset[str]) -> tuple[str, str, str, str | None]:
    alias = {k: v for k, v in schedule.aliases.items() if k in aliases}
    s = schedule.steps[i]
    return (alias.get(s.dst, s.dst), s.op, alias.get(s.a, s.a), alias.get(s.b, s.b) if s.b else None)


def fused_source(steps: tuple[tuple[str, str, str, str | None], ...],
                 dead: frozenset[str] = frozenset()) -> tuple[list[str], list[str], str]:
    """Inputs, outputs and C++ body of a kernel running ``steps`` on one element.

    ``dead``: spaces whose final values are not stored (dead temporaries); a
    step that writes one still computes it, for the steps after it in the run.
    """
    inputs, outputs, body = [], [], []
    known: set[str] = set()
    for dst, op, a, b in steps:
        for r in (a, b):
            if r is not None and r not in known and r not in inputs:
                inputs.append(r)
        expr = f"v_{a}" if op == "copy" else f"v_{a} {op} v_{b}"
        decl = "" if dst in known or dst in inputs else "T "
        body.append(f"{decl}v_{dst} = {expr};")
        known.add(dst)
        if dst not in outputs and dst not in dead:
            outputs.append(dst)
    loads = [f"T v_{r} = {r};" for r in inputs]
    stores = [f"{w} = v_{w};" for w in outputs]
    return inputs, outputs, "\n".join(loads + body + stores)
