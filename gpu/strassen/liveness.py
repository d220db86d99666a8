"""Memory-space usage analysis (the papers' state table) of any schedule.

For each step it finds which spaces hold no live value, so a multiplication
can lend one of them to the level below as its support matrix. It reads the
schedule as it runs at the top level, with the level-1 aliases applied, as
the thesis does; supports are mapped back through the aliases for the levels
below. Steps are numbered from 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from .schedules import QUADRANTS, Schedule, get_schedule, resolve

INPUTS = tuple(q for q in QUADRANTS if q[0] in "AB")
OUTPUTS = tuple(q for q in QUADRANTS if q[0] == "C")


@dataclass(frozen=True)
class ProductReport:
    step: int
    step_text: str
    free: tuple[str, ...]
    support: str | None


@dataclass(frozen=True)
class Blocker:
    step: int
    reason: str


@dataclass(frozen=True)
class Liveness:
    schedule: str
    spaces: tuple[str, ...]
    table: tuple[tuple[int, ...], ...]
    last_use: dict[str, int]
    products: tuple[ProductReport, ...]
    blocking: tuple[Blocker, ...]

    @property
    def recursible(self) -> bool:
        return not self.blocking

    def free_at(self, step: int) -> tuple[str, ...]:
        """Spaces holding no live value during ``step`` (1-based)."""
        return tuple(s for s, used in zip(self.spaces, self.table[step]) if not used)

    def as_dict(self) -> dict:
        return {
            "schedule": self.schedule,
            "recursible": self.recursible,
            "multiplications": [{"step": p.step, "text": p.step_text, "free": list(p.free),
                                 "support": p.support} for p in self.products],
            "blocking": [{"step": b.step, "reason": b.reason} for b in self.blocking],
            "spaces": list(self.spaces),
            "table": [list(row) for row in self.table],
            "last_use": self.last_use,
        }


def _aliased(schedule: Schedule) -> list[tuple[str, tuple[str, ...]]]:
    """(written space, read spaces) per step, with the level-1 aliases applied."""
    alias = schedule.aliases
    return [(alias.get(s.dst, s.dst), tuple(alias.get(r, r) for r in s.reads)) for s in schedule.steps]


def state_table(schedule: Schedule) -> tuple[tuple[str, ...], list[list[int]], dict[str, int]]:
    """The state table: row 0 before the first step, row i after step i; 1 = in use.

    Inputs start in use, outputs and temporaries free. A read marks a space in
    use; a write marks the rows since the space's previous use free (its old
    value was dead there). After the last step, spaces other than the outputs
    are free from their last use on.
    """
    steps = _aliased(schedule)
    extra = [t for t in schedule.temporaries if t not in QUADRANTS]
    spaces = QUADRANTS + tuple(extra)
    col = {s: k for k, s in enumerate(spaces)}
    rows = [[1 if s in INPUTS else 0 for s in spaces]]
    last = {s: 0 for s in spaces}
    for i, (dst, reads) in enumerate(steps, start=1):
        rows.append(list(rows[-1]))
        for r in reads:
            rows[i][col[r]], last[r] = 1, i
        for j in range(last[dst] + 1, i):
            rows[j][col[dst]] = 0
        rows[i][col[dst]], last[dst] = 1, i
    for s in set(spaces) - set(OUTPUTS):
        for j in range(last[s] + 1, len(rows)):
            rows[j][col[s]] = 0
    return spaces, rows, last


def _writable(schedule: Schedule) -> set[str]:
    """Spaces a call may write: outputs, temporaries, aliased supports, inputs it overwrites anyway."""
    written = {dst for dst, _ in _aliased(schedule)}
    return written | set(OUTPUTS) | set(schedule.aliases.values())


def _input_writes(schedule: Schedule) -> list[Blocker]:
    """Steps that write an input quadrant as the schedule runs below the top (no aliases)."""
    return [Blocker(i, f"writes its input {s.dst}: one level down that is an operand the caller still needs")
            for i, s in enumerate(schedule.steps, start=1) if s.dst in INPUTS]


@cache
def analyze(name: str) -> Liveness:
    """Liveness, supports and recursion blockers of the schedule called ``name``."""
    schedule = get_schedule(name)
    spaces, rows, last = state_table(schedule)
    writable = _writable(schedule)
    needs_support = not schedule.temporaries or get_schedule(schedule.products_schedule).support
    products, blocking = [], []
    for i in (k + 1 for k in schedule.products):
        free = tuple(s for s, used in zip(spaces, rows[i]) if not used)
        support = next((s for s in free if s in writable), None)
        products.append(ProductReport(i, str(schedule.steps[i - 1]), free, support))
        if needs_support and support is None:
            blocking.append(Blocker(i, "no free space to lend as support to the level below"))
    blocking += _input_writes(schedule)
    blocking.sort(key=lambda b: b.step)
    return Liveness(name, spaces, tuple(tuple(r) for r in rows), last, tuple(products), tuple(blocking))


@cache
def supports(name: str) -> dict[int, str]:
    """Support of each multiplication (0-based step index), named as the schedule names it."""
    schedule = get_schedule(name)
    back = {v: k for k, v in schedule.aliases.items()}
    return {p.step - 1: back.get(p.support, p.support) for p in analyze(name).products
            if p.support is not None}


def _handed_down(schedule: Schedule, levels: int):
    """(0-based step, role, operand) of each product operand the level below overwrites."""
    below = clobbers(schedule.products_schedule, levels - 1) if levels > 1 else frozenset()
    for i, step in enumerate(schedule.steps):
        if step.is_product:
            for role, operand in (("A", step.a), ("B", step.b)):
                if role in below:
                    yield i, role, operand


@cache
def clobbers(name: str, levels: int) -> frozenset[str]:
    """Input matrices ("A", "B") that a call overwrites, directly or through its products.

    Support aliases are left out: the caller decides whether support
    quadrants alias inputs. Otsuka's low level writes A21, B12, B22, B11, and
    his high level hands input quadrants to it, so both destroy A and B.
    """
    if levels == 0:
        return frozenset()
    schedule = resolve(name, levels)
    hit = {s.dst[0] for s in schedule.steps if s.dst in INPUTS}
    hit |= {operand[0] for _, _, operand in _handed_down(schedule, levels) if operand in INPUTS}
    return frozenset(hit)


def live_after(schedule: Schedule, index: int, space: str) -> bool:
    """Whether ``space``'s value after step ``index`` (0-based) is read again (outputs always are)."""
    for step in schedule.steps[index + 1:]:
        if space in step.reads:
            return True
        if step.dst == space:
            return False
    return space in OUTPUTS


@cache
def protected(name: str, levels: int) -> dict[int, tuple[str, ...]]:
    """Operands a call must copy before a product because the level below overwrites them
    while this level still needs them: {0-based product step: operand roles ("A", "B")}.

    Empty for RUM, Lai and Winograd. Otsuka's high level over his low level
    hands W1 and W2 to it at steps 9 and 12 and reads them again afterwards.
    """
    schedule = resolve(name, levels)
    out: dict[int, tuple[str, ...]] = {}
    for i, role, operand in _handed_down(schedule, levels):
        if live_after(schedule, i, operand):
            out[i] = out.get(i, ()) + (role,)
    return out


def recursion_blocker(name: str, levels: int) -> tuple[str, Blocker] | None:
    """The first level (its schedule's name) of a ``levels``-level product that cannot run the level
    below it, with the reason; None when every level can (the bottom one never recurses)."""
    for left in range(levels, 1, -1):
        sched = resolve(name, left)
        report = analyze(sched.name)
        if not report.recursible:
            return sched.name, report.blocking[0]
        name = sched.products_schedule
    return None
