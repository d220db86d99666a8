"""Strassen-Winograd schedules as data.

A schedule is a table of steps ``dst = a op b`` over named quadrant spaces
(``A11`` .. ``C22``, support quadrants ``S11`` .. ``S22`` and temporaries),
each on a stream. ``*`` is a product at the next level (a library GEMM at the
bottom). Everything else is read from these tables: the temporaries a call
allocates, the liveness analysis and the supports it lends, the cross-stream
waits, the memory model and the operation counts. The tables are the
corrected versions of the schedules printed by Lai et al. (2013), Otsuka & Iguchi
(2020) and Li's thesis (2023) (checked numerically by the tests); steps are numbered
from 1 as there (see the References in README.md).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache

QUADRANTS = tuple(f"{m}{i}{j}" for m in "ABC" for i in "12" for j in "12")
SUPPORT = ("S11", "S12", "S21", "S22")
OPS = ("+", "-", "*", "copy")


@dataclass(frozen=True)
class Step:
    """``dst = a op b`` on stream ``stream`` (``b`` is None for a copy)."""

    dst: str
    op: str
    a: str
    b: str | None = None
    stream: int = 1

    @property
    def reads(self) -> tuple[str, ...]:
        return (self.a,) if self.b is None else (self.a, self.b)

    @property
    def is_product(self) -> bool:
        return self.op == "*"

    def __str__(self) -> str:
        rhs = self.a if self.op == "copy" else f"{self.a} {self.op} {self.b}"
        return f"{self.dst} = {rhs}"


@dataclass(frozen=True)
class Schedule:
    """One level of a Strassen-Winograd product.

    ``support``: the call takes a support matrix (quadrants S11..S22) lent by
    the level above. ``aliases``: at the top level, where no level above can
    lend one, support quadrants alias input quadrants (RUM). ``below``: the
    schedule of the products one level down (default: this one); ``bottom``:
    the schedule that runs instead of this one at the deepest Strassen level
    (Otsuka's low level under his high level).
    """

    name: str
    description: str
    steps: tuple[Step, ...]
    support: bool = False
    aliases: Mapping[str, str] = field(default_factory=dict)
    below: str | None = None
    bottom: str | None = None

    @property
    def temporaries(self) -> tuple[str, ...]:
        """Quadrant-sized spaces the call allocates itself, in order of first use."""
        named = set(QUADRANTS) | (set(SUPPORT) if self.support else set())
        seen: dict[str, None] = {}
        for step in self.steps:
            for space in (step.dst, *step.reads):
                if space not in named:
                    seen.setdefault(space)
        return tuple(seen)

    @property
    def streams(self) -> tuple[int, ...]:
        return tuple(sorted({s.stream for s in self.steps}))

    @property
    def products(self) -> tuple[int, ...]:
        """Indices (0-based) of the multiplication steps."""
        return tuple(i for i, s in enumerate(self.steps) if s.is_product)

    def permitted_aliases(self, overwrite_a: bool, overwrite_b: bool) -> dict[str, str]:
        """The level-1 aliases a caller allows: support quadrant -> input quadrant it may reuse."""
        allowed = {"A": overwrite_a, "B": overwrite_b}
        return {s: q for s, q in self.aliases.items() if allowed[q[0]]}

    @property
    def products_schedule(self) -> str:
        """Name of the schedule that runs this call's products one level down."""
        return self.below or self.name


_LINE = re.compile(r"^\s*(\w+)\s*=\s*(\w+)(?:\s*([-+*])\s*(\w+)|\s*\(copy\))?\s*$")


def parse(table: str, streams: tuple[int, ...] | None = None) -> tuple[Step, ...]:
    """Steps from lines ``X = Y op Z`` or ``X = Y (copy)``, with optional stream per step."""
    steps = []
    for line in filter(str.strip, table.splitlines()):
        match = _LINE.match(line)
        if not match:
            raise ValueError(f"cannot read schedule line {line!r}")
        dst, a, op, b = match.groups()
        steps.append(Step(dst, op or "copy", a, b))
    if streams is not None:
        if len(streams) != len(steps):
            raise ValueError(f"{len(streams)} streams given for {len(steps)} steps")
        steps = [Step(s.dst, s.op, s.a, s.b, k) for s, k in zip(steps, streams)]
    return tuple(steps)


# Winograd's operand sums and seven products, shared by the printed form, Lai's 7-stream form and winograd2.
WINOGRAD_SUMS = """
    S1 = A21 + A22
    S2 = S1 - A11
    S3 = A11 - A21
    S4 = A12 - S2
    S5 = B12 - B11
    S6 = B22 - S5
    S7 = B22 - B12
    S8 = S6 - B21
"""
WINOGRAD_PRODUCTS = WINOGRAD_SUMS + """
    M1 = S2 * S6
    M2 = A11 * B11
    M3 = A12 * B21
    M4 = S3 * S7
    M5 = S1 * S5
    M6 = S4 * B22
    M7 = A22 * S8
"""

WINOGRAD = parse(WINOGRAD_PRODUCTS + """
    V1 = M1 + M2
    V2 = V1 + M4
    V3 = M5 + M6
    C11 = M2 + M3
    C12 = V1 + V3
    C21 = V2 - M7
    C22 = V2 + M5
""")

# The plain form with the V's folded into C (15 temporaries): product k, and the sums only
# it needs, on stream k; sums two products share are made on the stream of the first.
LAI7 = parse(WINOGRAD_PRODUCTS + """
    C12 = M1 + M2
    C11 = M2 + M3
    C21 = C12 + M4
    C22 = C21 + M5
    C21 = C21 - M7
    C12 = C12 + M5
    C12 = C12 + M6
""", (5, 1, 4, 6, 5, 1, 4, 7, 1, 2, 3, 4, 5, 6, 7, 1, 1, 1, 1, 1, 1, 1))

# Winograd's form with sums and output additions on stream 2 beside the products on stream 1 (only C21's last
# waits for the last product). Under the H100's power cap it gained nothing: overlap saves no energy.
WINOGRAD2 = parse(WINOGRAD_SUMS + """
    M2 = A11 * B11
    M3 = A12 * B21
    M1 = S2 * S6
    C11 = M2 + M3
    V1 = M1 + M2
    M4 = S3 * S7
    M5 = S1 * S5
    V2 = V1 + M4
    C22 = V2 + M5
    M6 = S4 * B22
    V3 = M5 + M6
    C12 = V1 + V3
    M7 = A22 * S8
    C21 = V2 - M7
""", (2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 2, 2, 1, 1, 2, 2, 1, 2, 2, 1, 2))

LAI = parse("""
    T1 = A11 - A21
    T2 = B22 - B12
    C21 = T1 * T2
    T1 = A21 + A22
    T2 = B12 - B11
    C22 = T1 * T2
    T1 = T1 - A11
    T2 = B22 - T2
    C11 = T1 * T2
    T1 = A12 - T1
    C12 = T1 * B22
    C12 = C12 + C22
    T1 = A11 * B11
    C11 = C11 + T1
    C12 = C12 + C11
    C11 = C11 + C21
    T2 = T2 - B21
    C21 = A22 * T2
    C21 = C11 - C21
    C22 = C22 + C11
    C11 = A12 * B21
    C11 = T1 + C11
""")

OTSUKA_HIGH = parse("""
    S1 = A11 (copy)
    S2 = A21 (copy)
    S3 = B12 (copy)
    W1 = S1 - S2
    W2 = B22 - S3
    M1 = W1 * W2
    W1 = S2 + A22
    W2 = S3 - B11
    S2 = W1 * W2
    W1 = W1 - S1
    W2 = B22 - W2
    S3 = W1 * W2
    W1 = A12 - W1
    M2 = W1 * B22
    M2 = M2 + S2
    W1 = S1 * B11
    S3 = W1 + S3
    C12 = M2 + S3
    S3 = S3 + M1
    W2 = W2 - B21
    M1 = A22 * W2
    C21 = S3 - M1
    C22 = S2 + S3
    S3 = A12 * B21
    C11 = W1 + S3
""")

OTSUKA_LOW_TABLE = """
    C22 = A11 - A21
    C11 = B22 - B12
    C21 = C22 * C11
    A21 = A21 + A22
    C11 = B12 - B11
    C22 = A21 * C11
    A21 = A21 - A11
    B12 = B22 - C11
    C11 = A21 * B12
    A21 = A12 - A21
    C12 = A21 * B22
    C12 = C12 + C22
    B22 = A11 * B11
    C11 = C11 + B22
    C12 = C12 + C11
    C11 = C11 + C21
    B11 = B12 - B21
    C21 = A22 * B11
    C21 = C11 - C21
    C22 = C22 + C11
    C11 = A12 * B21
    C11 = B22 + C11
"""
OTSUKA_LOW = parse(OTSUKA_LOW_TABLE)
# Otsuka's pairing of the low level's products on two streams: (3, 6), (9, 11), (13, 18), 21.
OTSUKA_LOW_2 = parse(OTSUKA_LOW_TABLE, (1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 1, 1, 1, 1, 1, 2, 2, 1, 1, 1, 1))

RUM_TABLE = """
    C11 = A11 - A21
    C12 = B22 - B12
    C21 = C11 * C12
    C12 = A21 + A22
    S22 = B12 - B11
    C22 = C12 * S22
    C12 = C12 - A11
    S12 = A11 * B11
    S22 = B22 - S22
    C11 = C12 * S22
    S11 = A12 - C12
    C12 = S11 * B22
    C12 = C12 + C22
    C11 = C11 + S12
    C12 = C12 + C11
    C11 = C11 + C21
    S22 = S22 - B21
    C21 = A22 * S22
    C21 = C11 - C21
    C22 = C22 + C11
    C11 = A12 * B21
    C11 = S12 + C11
"""
RUM_ALIASES = {"S11": "A11", "S12": "A21", "S21": "B11", "S22": "B12"}
RUM_2STREAM = (1, 2, 2, 2, 1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2, 1, 2, 2, 1, 1, 1)

SCHEDULES: dict[str, Schedule] = {s.name: s for s in (
    Schedule("winograd", "Winograd's form as printed, 18 temporaries per level", WINOGRAD),
    Schedule("lai7", "Lai et al.: the plain form, 15 temporaries, one stream per product", LAI7),
    Schedule("winograd2", "Winograd's form, its additions on a second stream beside the products", WINOGRAD2),
    Schedule("lai", "Lai et al. (2013): two temporaries per level, inputs preserved", LAI),
    Schedule("otsuka-high", "Otsuka (2020) high level alone: 7 temporaries", OTSUKA_HIGH),
    Schedule("otsuka-low", "Otsuka (2020) low level alone: no temporaries, overwrites A21 B12 B22 B11",
             OTSUKA_LOW),
    Schedule("otsuka2-low", "Otsuka's low level with its products paired on two streams", OTSUKA_LOW_2),
    Schedule("otsuka", "Otsuka (2020): high level L-1 times, low level at the bottom", OTSUKA_HIGH,
             bottom="otsuka-low"),
    Schedule("otsuka2", "Otsuka (2020) with the low level's products paired on two streams",
             OTSUKA_HIGH, bottom="otsuka2-low"),
    Schedule("rum", "Strassen-RUM (2023): no temporaries at any level, support lent from above",
             parse(RUM_TABLE), support=True, aliases=RUM_ALIASES),
    Schedule("rum2", "Strassen-RUM on two streams with partial synchronisation",
             parse(RUM_TABLE, RUM_2STREAM), support=True, aliases=RUM_ALIASES),
)}


#: Schedules whose top level lends itself support aliased to input quadrants (no temporaries).
RUM_SCHEDULES = ("rum", "rum2")


@dataclass(frozen=True)
class Config:
    """One way to run a schedule: on CUDA streams or not, with fused additions or not, its levels
    flattened or not (:mod:`gpu.strassen.flat`), eagerly or replayed as a CUDA graph."""

    schedule: str
    parallel: bool = False
    fused: bool = False
    graph: bool = False
    flat: bool = False

    @property
    def name(self) -> str:
        """The stored method name: ``rum``, ``rum+fused``, ``rum2-parallel+fused``, ``rum+fused+graph``,
        ``winograd+flat``, ..."""
        return (self.schedule + ("-parallel" if self.parallel else "") + ("+fused" if self.fused else "")
                + ("+flat" if self.flat else "") + ("+graph" if self.graph else ""))

    @property
    def is_rum(self) -> bool:
        return self.schedule in RUM_SCHEDULES


def resolve(name: str, levels: int) -> Schedule:
    """The schedule that runs a call with ``levels`` Strassen levels left (Otsuka's bottom rule)."""
    schedule = get_schedule(name)
    return get_schedule(schedule.bottom) if levels == 1 and schedule.bottom else schedule


def get_schedule(name: str) -> Schedule:
    """The schedule called ``name``, a per-level plan (``"rum/winograd"``, see :func:`plan_name`)
    included; ValueError listing the known ones otherwise."""
    if PLAN_SEPARATOR in name:
        return _chained(name)
    try:
        return SCHEDULES[name]
    except KeyError:
        raise ValueError(f"unknown schedule {name!r}; known: {', '.join(SCHEDULES)}, or a per-level plan "
                         f"such as 'rum/winograd'") from None


# --------------------------------------------------------------------------- per-level plans

#: Separates the schedules of a per-level plan, top level first: ``"rum/rum/winograd"``.
PLAN_SEPARATOR = "/"


def plan_name(schedules: str | Sequence[str]) -> str:
    """The name of a per-level plan: its schedules top level first, the last one running every level
    below it, so trailing repeats are dropped (``("rum", "winograd", "winograd")`` is
    ``"rum/winograd"``, and ``("rum", "rum")`` is ``"rum"``)."""
    parts = schedules.split(PLAN_SEPARATOR) if isinstance(schedules, str) else list(schedules)
    if not parts or not all(isinstance(p, str) and p for p in parts):
        raise ValueError(f"a plan is a non-empty list of schedule names, got {schedules!r}")
    while len(parts) > 1 and parts[-1] == parts[-2]:
        parts.pop()
    return PLAN_SEPARATOR.join(parts)


def level_schedules(name: str, levels: int) -> tuple[str, ...]:
    """The schedule each of ``levels`` levels runs, top level first (a plan's own, or Otsuka's
    bottom rule's)."""
    out = []
    for left in range(levels, 0, -1):
        sched = resolve(name, left)
        out.append(sched.name.split(PLAN_SEPARATOR)[0])
        name = sched.products_schedule
    return tuple(out)


@cache
def _chained(name: str) -> Schedule:
    """A plan as a schedule: its first schedule's table, with the rest of the plan running its
    products; so the executor, the liveness analysis, the costs and the models read a plan as
    they read any schedule."""
    parts = name.split(PLAN_SEPARATOR)
    if plan_name(parts) != name:
        raise ValueError(f"plan {name!r} is not in its canonical form {plan_name(parts)!r}")
    for part in parts:
        if get_schedule(part).bottom or get_schedule(part).below:
            raise ValueError(f"schedule {part!r} brings its own level below and cannot be part of a plan")
    head = SCHEDULES[parts[0]]
    rest = PLAN_SEPARATOR.join(parts[1:])
    return replace(head, name=name, description=f"per-level plan {' over '.join(parts)}", below=rest)
