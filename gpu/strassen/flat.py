"""Flattened levels: all L levels of a sums-products-outputs schedule (Winograd's) in three passes.

Run recursively, each level writes its operand sums to memory and the level below reads them
back to form its own; the same holds for the products on the way up. At N = 16384 and two
Winograd levels that is about 37 GiB of addition traffic (297 quadrant passes of 128 MiB). Run
flat, one kernel reads A's 4^L blocks once and writes those of the 7^L left operands that are
sums (the others are views of A), one does the same for B, 7^L library GEMMs write the products,
and one kernel reads them and writes C's 4^L blocks: 177 passes, 22 GiB.

The three kernels are *programs* generated from the schedule's table (data, as everywhere in
this package): the table's sum steps are replayed level by level on registers, top level first,
and its output steps bottom level first, so each element goes through exactly the additions of
the recursive product, in the same order. With the same GEMMs the result is bitwise that of
the recursive one. A schedule can run flat when its table is its operand sums, then its
products, then its output additions (:func:`flat_blocker`): Winograd's form and Lai's 7-stream
form; the in-place schedules (RUM, Lai, Otsuka) interleave them and cannot.

A program is run by the backend's ``"strassen-flat"`` operations: one generated kernel on CuPy
(:mod:`gpu.strassen.flat_kernels`), the steps one by one on NumPy (:class:`HostFlat`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import cache

from ..backend import Array, Backend, register_ops
from .schedules import get_schedule

FAMILY = "strassen-flat"
#: The schedule ``matmul(flat=True)`` runs unless told otherwise.
FLAT_SCHEDULE = "winograd"
QUADS = ("11", "12", "21", "22")
#: (dst, op, a, b) on registers: ``dst = a op b``, or ``dst = a`` for ``op == "copy"``.
RegStep = tuple[str, str, str, "str | None"]
#: A block of a 2^L x 2^L grid, or of a stack (column 0), as (block row, block column).
Block = tuple[int, int]


@dataclass(frozen=True)
class Program:
    """Loads from an input grid, register steps, and stores to an output grid: one pass."""

    loads: tuple[tuple[str, Block], ...]
    steps: tuple[RegStep, ...]
    stores: tuple[tuple[str, Block], ...]


@dataclass(frozen=True)
class FlatPlan:
    """The three passes of an L-level flat product and its 7^L GEMMs.

    ``left[p]`` / ``right[p]``: product p's operands, ``("in", block)`` (a block of A or B) or
    ``("sum", block)`` (a block of the stacked sums); product p writes block (p, 0) of the product stack.
    """

    levels: int
    a: Program
    b: Program
    c: Program
    left: tuple[tuple[str, Block], ...]
    right: tuple[tuple[str, Block], ...]

    @property
    def products(self) -> int:
        return len(self.left)

    @property
    def stacked(self) -> tuple[int, int, int]:
        """Blocks of the stacked sums of A and of B, and of the stacked products."""
        return len(self.a.stores), len(self.b.stores), self.products


def flat_blocker(name: str) -> str | None:
    """Why schedule ``name`` cannot run flat, or None: its table must be sums of one input's
    quadrants into temporaries, then every product (of an A side by a B side), then additions
    of the products into the four C quadrants."""
    sched = get_schedule(name)
    if sched.support or sched.below or sched.bottom:
        return "it takes support from the level above or runs another schedule below"
    prods = sched.products
    if not prods or list(prods) != list(range(prods[0], prods[-1] + 1)):
        return "its products are not one run of steps between its sums and its output additions"
    sides: dict[str, str | None] = {f"{m}{q}": m for m in "AB" for q in QUADS}
    for i, step in enumerate(sched.steps[:prods[0]]):
        found = {sides.get(r) for r in step.reads}
        if len(found) != 1 or None in found or step.dst[0] in "ABC" and step.dst[1:] in QUADS:
            return f"step {i + 1} ({step}) is not a sum of one input into a temporary"
        sides[step.dst] = found.pop()
    for i in prods:
        step = sched.steps[i]
        if sides.get(step.a) != "A" or sides.get(step.b) != "B":
            return f"step {i + 1} ({step}) does not multiply an A side by a B side"
    known = {sched.steps[i].dst for i in prods}
    for i, step in enumerate(sched.steps[prods[-1] + 1:], prods[-1] + 2):
        if any(r not in known for r in step.reads) or step.dst[0] in "AB" and step.dst[1:] in QUADS:
            return f"step {i} ({step}) is not an addition of products"
        known.add(step.dst)
    if not {f"C{q}" for q in QUADS} <= known:
        return "its output additions do not write all four C quadrants"
    return None


@cache
def flat_plan(name: str, levels: int) -> FlatPlan:
    """The flat plan of ``levels`` levels of schedule ``name`` (ValueError when it cannot run flat)."""
    reason = flat_blocker(name)
    if reason is not None:
        raise ValueError(f"schedule {name!r} cannot run flat: {reason}; use schedule='winograd' or 'lai7'")
    if levels < 1:
        raise ValueError(f"a flat product has at least one level, got {levels}")
    sched = get_schedule(name)
    first = sched.products[0]
    sums, prods = sched.steps[:first], [sched.steps[i] for i in sched.products]
    outs = sched.steps[sched.products[-1] + 1:]
    a, left = _operand_program(sums, [p.a for p in prods], "A", levels)
    b, right = _operand_program(sums, [p.b for p in prods], "B", levels)
    return FlatPlan(levels, a, b, _output_program(outs, [p.dst for p in prods], levels), left, right)


def _grid(path: tuple[str, ...]) -> Block:
    """The block of a quadrant path (top level first) in the 2^L x 2^L grid."""
    i = j = 0
    for q in path:
        i, j = 2 * i + int(q[0]) - 1, 2 * j + int(q[1]) - 1
    return i, j


def _operand_program(sums, operands: list[str], side: str, levels: int):
    """The pass forming one input's operands of every product, and where each product finds its own."""
    names, steps = (f"r{i}" for i in itertools.count()), []
    loads = {path: next(names) for path in itertools.product(QUADS, repeat=levels)}

    def expand(blocks: dict, depth: int) -> list[str]:
        if depth == 0:
            return [blocks[()]]
        per_product: list[dict] = [{} for _ in operands]
        for sub in itertools.product(QUADS, repeat=depth - 1):
            env = {side + q: blocks[(q, *sub)] for q in QUADS}
            for s in sums:
                if all(r in env for r in s.reads):
                    env[s.dst] = _emit(steps, next(names), s, env)
            for k, space in enumerate(operands):
                per_product[k][sub] = env[space]
        return [r for k in range(len(operands)) for r in expand(per_product[k], depth - 1)]

    regs = expand(loads, levels)
    loaded = {reg: _grid(path) for path, reg in loads.items()}
    stored = list(dict.fromkeys(r for r in regs if r not in loaded))
    where = tuple(("in", loaded[r]) if r in loaded else ("sum", (stored.index(r), 0)) for r in regs)
    used = _used(steps, stored)
    program = Program(tuple((r, b) for r, b in loaded.items() if r in used), tuple(_live(steps, stored)),
                      tuple((r, (k, 0)) for k, r in enumerate(stored)))
    return program, where


def _output_program(outs, products: list[str], levels: int) -> Program:
    """The pass adding the stacked products (in operand order) into C's blocks."""
    names, steps = (f"r{i}" for i in itertools.count()), []
    paths = list(itertools.product(range(len(products)), repeat=levels))
    loads = {path: next(names) for path in paths}

    def combine(regs: dict, depth: int) -> dict:
        if depth == 0:
            return {(): regs[()]}
        inner = [combine({p[1:]: r for p, r in regs.items() if p[0] == k}, depth - 1) for k in range(len(products))]
        result = {}
        for sub in itertools.product(QUADS, repeat=depth - 1):
            env = {m: inner[k][sub] for k, m in enumerate(products)}
            for s in outs:
                env[s.dst] = _emit(steps, next(names), s, env)
            for q in QUADS:
                result[(q, *sub)] = env[f"C{q}"]
        return result

    blocks = combine(loads, levels)
    stores = tuple((reg, _grid(path)) for path, reg in blocks.items())
    return Program(tuple((loads[p], (k, 0)) for k, p in enumerate(paths)), tuple(_live(steps, [r for r, _ in stores])),
                   stores)


def _emit(steps: list[RegStep], reg: str, step, env: dict) -> str:
    """Append table step ``step`` as a register step writing ``reg``, its operands read from ``env``
    before ``reg`` replaces the space it writes (``C21 = C21 - M7`` reads the old C21)."""
    steps.append((reg, step.op, env[step.a], env[step.b] if step.b else None))
    return reg


def _used(steps: list[RegStep], stored: list[str]) -> set[str]:
    """Registers the stored ones depend on."""
    need, by_dst = set(stored), {s[0]: s for s in steps}
    for dst, _, a, b in reversed(steps):
        if dst in need:
            need.update(x for x in (a, b) if x)
    return need | {r for r in stored if r not in by_dst}


def _live(steps: list[RegStep], stored: list[str]) -> list[RegStep]:
    """The steps the stored registers depend on (a sum only some products use is made where needed)."""
    used = _used(steps, stored)
    return [s for s in steps if s[0] in used]


# --------------------------------------------------------------------------- running a plan

def multiply(be: Backend, name: str, A: Array, B: Array, C: Array, levels: int, buffer) -> None:
    """``C = A @ B`` by ``levels`` flat levels of schedule ``name``; ``buffer(shape, dtype, slot)``
    gives the three stacks (an executor's, so a CUDA graph finds them made)."""
    plan = flat_plan(name, levels)
    q = 2**levels
    m, k, n = A.shape[0] // q, A.shape[1] // q, B.shape[1] // q
    n_a, n_b, n_p = plan.stacked
    SA, SB, P = (stack(buffer, X, count, rows, cols, ("flat", tag)) for X, count, rows, cols, tag in
                 ((A, n_a, m, k, "A"), (B, n_b, k, n, "B"), (C, n_p, m, n, "P")))
    ops = be.ops(FAMILY)
    ops.run(plan.a, A, SA, m, k)
    ops.run(plan.b, B, SB, k, n)
    for p in range(n_p):
        be.gemm(operand(plan.left[p], A, SA, m, k), operand(plan.right[p], B, SB, k, n), block(P, (p, 0), m, n))
    ops.run(plan.c, P, C, m, n)


def stack(buffer, like: Array, count: int, rows: int, cols: int, slot: tuple) -> Array:
    """``count`` blocks of rows x cols stacked as a (count * rows) x cols matrix, in ``like``'s order."""
    if like.strides[0] >= like.strides[1]:
        return buffer((count * rows, cols), like.dtype, slot)
    return buffer((cols, count * rows), like.dtype, slot).T


def operand(where: tuple[str, Block], X: Array, S: Array, rows: int, cols: int) -> Array:
    """A product's operand: a block of the input ``X`` or of its stacked sums ``S`` (no copy)."""
    kind, at = where
    return block(S if kind == "sum" else X, at, rows, cols)


def block(X: Array, at: Block, rows: int, cols: int) -> Array:
    """Block ``at`` of rows x cols of the grid or stack ``X``."""
    i, j = at
    return X[i * rows:(i + 1) * rows, j * cols:(j + 1) * cols]


class HostFlat:
    """NumPy runs a program's steps one by one on block views (the same additions, in the same order)."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def run(self, program: Program, X: Array, Y: Array, rows: int, cols: int) -> None:
        regs = {r: block(X, at, rows, cols) for r, at in program.loads}
        for dst, op, a, b in program.steps:
            regs[dst] = regs[a].copy() if op == "copy" else regs[a] + regs[b] if op == "+" else regs[a] - regs[b]
        for r, at in program.stores:
            block(Y, at, rows, cols)[...] = regs[r]


register_ops(FAMILY, "numpy", HostFlat)
register_ops(FAMILY, "cupy", "gpu.strassen.flat_kernels:CupyFlat")
