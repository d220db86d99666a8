"""What a Strassen-Winograd product costs, read from the schedule tables: operations and bytes.

Every count and byte figure the package and the models use comes from here, so
nothing is typed in twice: change a table and the counts, the memory model,
the refusal before work and the predictors follow.

Operation counts
----------------
The predictors need three numbers per call: the products it hands to the
level below (a, 7 for every schedule here), its addition work in units of one
quadrant-sized Geam (b: 15 for RUM, whose 15 additions each read two
quadrants and write one), and the kernels it launches itself (the host cost of
a call). Fused additions (:mod:`gpu.strassen.fusion`) read each space of a run
once and write each result once, so a fused run of k steps costs
(reads + writes) / 3 Geams in one launch. Operand copies a level makes to
protect values the level below overwrites (:func:`gpu.strassen.liveness.protected`,
Otsuka) count as additions too.

Memory
------
A call at depth d (1 = top) of an N x N product allocates one (N / 2^d)^2
buffer per temporary of the schedule that runs there; with products run one
after another, one call per depth is alive at a time, so the peak is the sum
over depths (plus operand copies a level makes to protect values the level below
would overwrite). Support quadrants that cannot alias inputs, and copies of inputs
the schedule would overwrite, are added at the top. In units of one (N/2)^2
quadrant this gives RUM 12, Lai 12 + 2 sum 4^-l -> 14.667 and Otsuka
12 + 7 sum 4^-l -> 21.333, as in Li's thesis ("Recursive Strassen algorithm focused on reusing memory
space", JAIST, 2023).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import cache

from .flat import flat_plan
from .fusion import dead_temporaries, fused_source, runs
from .liveness import clobbers, protected
from .schedules import SUPPORT, get_schedule, resolve

#: Memory passes of one Geam (C = alpha A + beta B): two reads and one write.
GEAM_PASSES = 3
#: Memory passes of an operand copy: one read and one write.
COPY_PASSES = 2


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes of one product, by purpose."""

    operands: int
    support: int
    copies: int
    temporaries: int

    @property
    def extra(self) -> int:
        """Bytes beyond A, B and C: what the method costs on top of the plain product."""
        return self.support + self.copies + self.temporaries

    @property
    def total(self) -> int:
        return self.operands + self.extra

    def as_dict(self) -> dict[str, int]:
        return {**asdict(self), "extra": self.extra, "total": self.total}


def temporaries_per_depth(schedule: str, levels: int, protect: bool = True) -> list[int]:
    """Quadrant buffers alive at once in the call at each depth 1..levels: its temporaries,
    plus the operand copies of its most protected product (:func:`gpu.strassen.liveness.protected`).

    ``protect=False`` leaves those copies out: the schedule as published (Otsuka's
    12 + 7 sum 4^-l), which the executor cannot run safely over his low level."""
    counts, name = [], schedule
    for left in range(levels, 0, -1):
        sched = resolve(name, left)
        copies = max((len(roles) for roles in protected(name, left).values()), default=0) if protect else 0
        counts.append(len(sched.temporaries) + copies)
        name = sched.products_schedule
    return counts


def support_quadrants(schedule: str, levels: int, overwrite_a: bool, overwrite_b: bool) -> int:
    """Support quadrants the top call must allocate because they may not alias an input."""
    sched = resolve(schedule, levels) if levels else None
    if sched is None or not sched.support:
        return 0
    return len(SUPPORT) - len(sched.permitted_aliases(overwrite_a, overwrite_b))


def strassen_memory(schedule: str, n: int, levels: int, itemsize: int = 8, *,
                    overwrite_a: bool = True, overwrite_b: bool = True, protect: bool = True,
                    flat: bool = False) -> MemoryEstimate:
    """Memory of an n x n x n product by ``levels`` levels of ``schedule``.

    With ``overwrite_a``/``overwrite_b`` False, inputs the schedule would
    overwrite are copied first and support quadrants that would alias them
    are allocated instead. ``protect=False``: see :func:`temporaries_per_depth`.
    ``flat``: run flat (:mod:`gpu.strassen.flat`), whose temporaries are its three stacks of
    (n / 2^L)^2 blocks (129 at two Winograd levels, 8.06 n^2 elements).
    """
    get_schedule(schedule)
    if levels and n % 2**levels:
        raise ValueError(f"n = {n} is not divisible by 2**{levels}; the model covers the square core")
    if flat and levels:
        blocks = sum(flat_plan(schedule, levels).stacked)
        return MemoryEstimate(3 * n * n * itemsize, 0, 0, blocks * (n // 2**levels) ** 2 * itemsize)
    quad = (n // 2) ** 2 * itemsize
    depths = temporaries_per_depth(schedule, levels, protect)
    temps = sum(t * (n // 2**d) ** 2 * itemsize for d, t in enumerate(depths, 1))
    hit = clobbers(schedule, levels)
    copies = sum(n * n * itemsize for m, ok in (("A", overwrite_a), ("B", overwrite_b)) if m in hit and not ok)
    support = support_quadrants(schedule, levels, overwrite_a, overwrite_b) * quad
    return MemoryEstimate(3 * n * n * itemsize, support, copies, temps)


def units(estimate: MemoryEstimate, n: int, itemsize: int = 8) -> float:
    """Total memory in units of one (n/2)^2 quadrant (12 for A, B and C alone)."""
    return estimate.total / ((n // 2) ** 2 * itemsize)


def core_side(m: int, k: int, n: int, levels: int, fringe: str = "peel") -> int:
    """Side of the square product Strassen runs on: the largest core divisible by 2^levels
    (``peel``), or every dimension padded up to a multiple of it (``pad``)."""
    if min(m, k, n) <= 0 or levels < 0:
        raise ValueError(f"need positive dimensions and levels >= 0, got {(m, k, n)} and {levels}")
    q = 2**levels
    if fringe == "peel":
        return min(m, k, n) // q * q
    if fringe == "pad":
        return -(-max(m, k, n) // q) * q
    raise ValueError(f"fringe must be 'peel' or 'pad', got {fringe!r}")


def matmul_memory(schedule: str, m: int, k: int, n: int, levels: int, itemsize: int = 8, *,
                  fringe: str = "peel", overwrite_a: bool = False, overwrite_b: bool = False,
                  flat: bool = False) -> MemoryEstimate:
    """Memory of :func:`gpu.strassen.matmul` on an m x k by k x n product of any size.

    ``peel`` runs Strassen on the core and library GEMMs on the fringe panels
    (no extra memory for them); ``pad`` copies A, B and C into zero-padded
    squares (three side^2 buffers, counted as copies) and may overwrite them.
    """
    operands = (m * k + k * n + m * n) * itemsize
    if levels == 0 or min(m, k, n) == 0:
        return MemoryEstimate(operands, 0, 0, 0)
    side = core_side(m, k, n, levels, fringe)
    if side == 0:
        return MemoryEstimate(operands, 0, 0, 0)
    if fringe == "pad":
        core = strassen_memory(schedule, side, levels, itemsize, flat=flat)
        return MemoryEstimate(operands, core.support, core.copies + 3 * side * side * itemsize, core.temporaries)
    core = strassen_memory(schedule, side, levels, itemsize, overwrite_a=overwrite_a, overwrite_b=overwrite_b,
                           flat=flat)
    return MemoryEstimate(operands, core.support, core.copies, core.temporaries)


# --------------------------------------------------------------------------- operation counts

@dataclass(frozen=True)
class LevelCounts:
    """One call with ``levels`` Strassen levels left."""

    products: int        # a: products handed to the level below (library GEMMs at the bottom)
    geams: float         # b: addition work in Geam units of one quadrant
    launches: int        # kernels the call issues itself: addition runs, copies, and the GEMMs at the bottom
    temporaries: int     # quadrant buffers it allocates (temporaries and protective copies)


@cache
def level_counts(schedule: str, levels: int, fused: bool = False) -> LevelCounts:
    """Counts of one call of ``schedule`` with ``levels`` (>= 1) levels left."""
    if levels < 1:
        raise ValueError(f"a Strassen call has at least one level left, got {levels}")
    get_schedule(schedule)
    sched = resolve(schedule, levels)
    passes, launches = 0, 0
    for run in runs(sched, fused):
        steps = [sched.steps[i] for i in run]
        if steps[0].is_product:
            launches += levels == 1
            continue
        dead = dead_temporaries(sched, run) if fused else frozenset()
        inputs, outputs, _ = fused_source(tuple((s.dst, s.op, s.a, s.b) for s in steps), dead)
        passes += len(inputs) + len(outputs)
        launches += 1
    copies = sum(len(roles) for roles in protected(schedule, levels).values()) if levels > 1 else 0
    passes += COPY_PASSES * copies
    return LevelCounts(len(sched.products), passes / GEAM_PASSES, launches + copies,
                       len(sched.temporaries) + copies)


def total_launches(schedule: str, levels: int, fused: bool = False, flat: bool = False) -> int:
    """Kernels of a whole ``levels``-level product (a single GEMM at level 0); run ``flat``, its
    7^L GEMMs and three passes."""
    if levels == 0:
        return 1
    if flat:
        return flat_plan(schedule, levels).products + 3
    c = level_counts(schedule, levels, fused)
    if levels == 1:
        return c.launches
    return c.launches + c.products * total_launches(schedule_below(schedule, levels), levels - 1, fused)


def schedule_below(schedule: str, levels: int) -> str:
    """The schedule that runs a call's products (``levels`` left at the call)."""
    return resolve(schedule, levels).products_schedule
