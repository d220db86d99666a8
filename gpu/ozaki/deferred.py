"""``target=`` calls whose slice count the device decides, so that the host never waits (``verdict="device"``).

The count that meets a target depends on the data, and the host launches the slice products. Read back, the
count costs a wait for all the work queued before it (the call's host time becomes its device time). Instead a
plan holds room for up to ``max_slices`` slices (:data:`MOST_DEFAULT`, or fewer where half the free memory
holds fewer) and keeps one **schedule** (:class:`Schedule`, plain data) for that many: per diagonal, largest
first, its GEMM calls and the folds of the batches they end. A count c needs exactly the diagonals 2..c+1 of it,
in the same order, because digit j of an entry does not depend on how many digits are kept, and every diagonal
starts at the same place of the operands' slices whatever the count (``top`` = the most slices).

Each call, on the stream, with no read back:

1. the exponents, the bound and the verdict word (:mod:`gpu.ozaki.bound`) into the plan's workspace;
2. the slicing of A and B, which writes only the count's digits (the kernels read the word);
3. one CUDA graph (:mod:`gpu.backend.conditional`), captured once per workspace: the accumulators zeroed, then
   per diagonal from the largest an IF node whose condition a one-thread kernel sets from the word, around
   the diagonal's GEMMs and the folds of the batches that end in it (a batch spans diagonals; its fold leaves
   out those the count does not run); diagonal 2 runs always;
4. the last fold, which writes C.

Steps 1 and 2 replay as one plain CUDA graph per address set of A, B and the workspace from that set's second
call (:mod:`gpu.backend.graphs`, mode ``"repeat"``; a first call runs them eagerly). They write only buffers the
plan holds (:class:`gpu.ozaki.bound.BoundBuffers` and the workspace), so the graph allocates nothing, and a
repeated call costs the host two graph launches and the last fold: 212 us at N = 2048 on the H200's host, against
0.4-1.3 ms with steps 1 and 2 eager (ten launches and their allocations).

The fold's arithmetic and order are those of the host-verdict call, so C is bitwise the same (each launch adds
to accumulators that start at zero, which is what a first launch does).

**Counts the schedule does not hold.** Where the data need more than the plan's most slices, or where no count
up to 64 reaches the target, the last fold writes every entry as the IEEE dot product, as the library GEMM
computes it (like cuBLAS's emulation, which falls back to native FP64 where its inputs need too many bits):
never a silently less accurate Ozaki result. :meth:`gpu.ozaki.Plan.last_verdict` says afterwards which one a
call took, and ``verdict="host"`` refuses those data instead, before any product, at the cost of the read.

On NumPy the same schedule runs, with each condition computed on the host (:class:`HostBranches`).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from itertools import groupby
from typing import Any

from ..backend import Array, Backend
from ..backend.conditional import HostBranches, available, capturer
from ..backend.graphs import Graphs
from ..backend.memo import LRU
from .bound import BoundBuffers, ratio_on_device
from .ops import FINALIZE, LOAD_ACC, LOAD_OPEN, STORE_OPEN, ops
from .plan import Chunk, OzakiPlan, WorkspaceError, _round_up, choose_alpha, plan

#: Most slices a plan holds room for by default: its graph has an IF node per diagonal, and each costs a launch
#: about 3 us of host time on an H200's host (64: 0.18-0.7 ms; 32: 0.04-0.09 ms). phi = 4 inputs need 12-14.
MOST_DEFAULT = 32
#: Share of the free memory a plan's workspace may take when it chooses its most slices.
MEMORY_SHARE = 0.5
#: Most GEMM calls a plan's graph holds when it chooses its most slices (each costs the first call's capture
#: 75 us of host time on an H200's host): 64 slices of int8, 44 of float32 at k <= 1040, 31 at k = 2048.
MAX_GEMM_CALLS = 2048
#: Graphs one plan keeps, one per workspace block (a plan that takes its workspace from the pool mostly gets
#: the same block back call after call).
MAX_GRAPHS = 4


@dataclass(frozen=True)
class Batch:
    """One fold launch and the GEMM calls before it."""

    chunks: tuple[Chunk, ...]
    flags: int

    @property
    def diagonals(self) -> list[int]:
        return [c.diagonal for c in self.chunks]

    @property
    def closes(self) -> list[bool]:
        return [c.closes for c in self.chunks]


@dataclass(frozen=True)
class Piece:
    """A run of one diagonal's GEMM calls into the buffers from slot ``first`` on, then the fold of the batch it
    ends (None where that batch goes on in the next diagonal)."""

    chunks: tuple[Chunk, ...]
    first: int
    fold: Batch | None


@dataclass(frozen=True)
class Schedule:
    """The work of up to ``plan.slices`` slices: per diagonal (largest first) its pieces; the fold of the last
    batch, which ends in diagonal 2, finalizes."""

    plan: OzakiPlan
    steps: tuple[tuple[int, tuple[Piece, ...]], ...]

    @property
    def most(self) -> int:
        return self.plan.slices

    @property
    def final(self) -> Batch:
        """The last batch, whose fold writes C."""
        return self.steps[-1][1][-1].fold


def schedule(p: OzakiPlan) -> Schedule:
    """The schedule of ``p``: its chunks in order (largest diagonal first) in batches of at most ``p.held``, each
    folded once into the accumulators (zeroed first; a diagonal cut over batches carried by the open buffer), and
    each diagonal's part of a batch a piece of that diagonal. A batch's fold sits in the diagonal of its last
    chunk, the lowest it holds, which runs whenever any of its diagonals does; the fold leaves out the diagonals
    the verdict's count does not run (their buffers are stale). So a count of c folds about c / held times, not
    once per diagonal."""
    runs = [tuple(p.chunks[i:i + p.held]) for i in range(0, len(p.chunks), p.held)]
    pieces: dict[int, list[Piece]] = {}
    for i, run in enumerate(runs):
        flags = LOAD_ACC | (LOAD_OPEN if i and not runs[i - 1][-1].closes else 0) \
            | (0 if run[-1].closes else STORE_OPEN) | (FINALIZE if i == len(runs) - 1 else 0)
        batch, first = Batch(run, flags), 0
        for d, group in groupby(run, key=lambda c: c.diagonal):
            chunks = tuple(group)
            ends = first + len(chunks) == len(run)
            pieces.setdefault(d, []).append(Piece(chunks, first, batch if ends else None))
            first += len(chunks)
    return Schedule(p, tuple((d, tuple(run)) for d, run in pieces.items()))


def gemm_calls(slices: int, ldk: int, k_block: int) -> int:
    """How many GEMM calls :func:`gpu.ozaki.plan.plan` makes for ``slices`` slices (its diagonal d, of d - 1
    slice pairs, cut into near-equal calls of at most ``k_block`` terms), without making them."""
    total = 0
    for d in range(2, slices + 2):
        length = (d - 1) * ldk
        size = _round_up(-(-length // -(-length // k_block)))
        total += -(-length // size)
    return total


def most_slices(m: int, k: int, n: int, fmt: Any, k_block: int | None, free: int,
                cap: int | None = None) -> OzakiPlan:
    """The plan of the most slices, at most ``cap`` (None: :data:`MOST_DEFAULT`, and at most
    :data:`MAX_GEMM_CALLS` GEMM calls), whose workspace fits in :data:`MEMORY_SHARE` of ``free`` beside the
    three m x n float64 accumulators; WorkspaceError where not even one slice fits."""
    budget = max(int(MEMORY_SHARE * free) - 3 * 8 * m * n, 0)
    top = cap or MOST_DEFAULT
    if cap is None:
        block, ldk = choose_alpha(fmt, k, k_block)[1], _round_up(max(k, 1))
        while top > 1 and gemm_calls(top, ldk, block) > MAX_GEMM_CALLS:
            top -= 1
    low, best = 1, None                                    # the workspace grows with the count: bisect it
    while low <= top:
        mid = (low + top) // 2
        try:
            best, low = plan(m, k, n, mid, fmt.name, k_block=k_block, memory=budget), mid + 1
        except WorkspaceError:
            top = mid - 1
    if best is None:
        raise WorkspaceError(f"not even one slice of a {m} x {k} x {n} Ozaki product fits in half the free "
                             f"memory beside its accumulators; pass slices= and verdict='host', or split the "
                             f"product into blocks of rows")
    return best


class DeviceVerdict:
    """A plan's device-verdict execution (see the module): its schedule, its layout and its graphs. It reaches
    its owner through a weak reference: a plan its caller drops is freed then, its graphs with it, not by a
    later garbage collection inside some other call, where destroying CUDA graphs waited for the device (140 ms
    behind a 200 ms kernel on the H200)."""

    def __init__(self, owner: Any, layout_type: Any, cap: int | None) -> None:
        be: Backend = owner.backend
        m, k, n = owner.shape
        self.owner, self.backend, self.family = weakref.proxy(owner), be, ops(be)
        self.bound = BoundBuffers.make(be, m, k, n, owner.format) if owner.hold else None
        free = be.memory_info()[0]
        self.schedule = schedule(most_slices(m, k, n, owner.format, owner.options.k_block, free, cap))
        self.layout = layout_type(self.schedule.plan, deferred=True)
        self.capturer = capturer(be) if available(be) else None
        self.graphs = LRU(MAX_GRAPHS)
        self.before = Graphs(be, "repeat" if self.capturer is not None and owner.hold else False, 0)
        if self.capturer is not None:
            self.family.prepare_branch()
            be.xp.zeros((2, 2)).fill(0.0)            # compiles the fill kernel outside any capture

    @property
    def most(self) -> int:
        return self.schedule.most

    def run(self, A: Array, B: Array, C: Array, work: dict[str, Array], phases: Any, phase: Any) -> Array:
        """Steps 1-4 of the module for operands of the owner's signature; ``work``: a workspace of
        :attr:`layout`. Steps 1 and 2 run as a graph per address set of A, B and the workspace from its second
        call (:mod:`gpu.backend.graphs`, mode ``"repeat"``; their buffers are the plan's), step 3 as the
        workspace's graph; the returned word is the call's own copy."""
        owner, p, word = self.owner, self.schedule.plan, work["word"]
        held = self.bound or BoundBuffers.make(self.backend, *owner.shape, owner.format)
        with phase(self.backend, phases, "split"):
            if phases is None:
                be = self.backend
                self.before.run((be.pointer(A), be.pointer(B), be.pointer(work["a"])),
                                lambda: self._before(A, B, work, held))
            else:
                self._before(A, B, work, held)
        with phase(self.backend, phases, "gemm"):
            self._graph(work)
        with phase(self.backend, phases, "sum"):
            last = self.schedule.final
            self.family.fold(work["buffers"], len(last.chunks), last.diagonals, last.closes, p.alpha, work["acc"],
                             work["comp"], work["open"], held.erow, held.ecol, last.flags, A, B, p.format, dst=C,
                             limit=word, most=self.most)
        return word.copy()

    def _before(self, A: Array, B: Array, work: dict[str, Array], held: BoundBuffers) -> None:
        """Steps 1 and 2: the lines' exponents and nonzeros, the bound, the verdict word and the slicing, into
        ``held`` and the workspace (nothing allocated)."""
        owner, family, p, word = self.owner, self.family, self.schedule.plan, work["word"]
        fmt = owner.format
        family.line_exponents(A, 1, True, fmt, out=(held.erow, held.nnz_rows))
        family.line_exponents(B, 0, True, fmt, out=(held.ecol, held.nnz_cols))
        ratio = ratio_on_device(self.backend, A, B, held.erow, held.ecol, held.nnz_rows, held.nnz_cols, fmt, held)
        family.verdict(ratio, held.erow, held.ecol, owner.alpha, owner.budget, p.format, out=word)
        family.split(A, held.erow, p, p.m, self.layout.a_layout, False, work["a"], held.ecol, limit=word)
        family.split(B.T, held.ecol, p, p.n_pad, self.layout.b_layout, False, work["b"], held.erow, limit=word)

    def release(self) -> None:
        """Drop the graphs and the bound's buffers (the owner was freed)."""
        self.graphs.clear()
        self.before.clear()
        self.bound = None

    def ready(self, work: dict[str, Array]) -> Any:
        """The graph of workspace ``work`` (CuPy; None on NumPy), captured and instantiated now if it was not:
        the capture waits for the device (CUDA allocates the IF nodes' conditions and the graph), so a plan that
        holds its workspace makes it when it is built, and its calls never wait."""
        if self.capturer is None:
            return None
        key = self.backend.pointer(work["a"])
        graph = self.graphs.get(key)
        if graph is None:
            graph = self.capturer.capture(lambda branches: self._build(branches, work))
            graph.upload(self.backend.current_stream())
            self.graphs[key] = graph
        return graph

    def _graph(self, work: dict[str, Array]) -> None:
        """The schedule up to the last fold: replayed from the workspace's graph (CuPy), or run with host
        conditions (NumPy)."""
        graph = self.ready(work)
        if graph is None:
            self._build(HostBranches, work)
        else:
            graph.launch(self.backend.current_stream())

    def _build(self, branches: Any, work: dict[str, Array]) -> None:
        """Zero the accumulators, then each diagonal's pieces, under its condition but for diagonal 2."""
        work["acc"].fill(0.0)
        work["comp"].fill(0.0)
        word = work["word"]
        for d, pieces in self.schedule.steps:
            if d == 2:
                self._pieces(pieces, work)
            else:
                branches.only_if(lambda handle, d=d: self.family.branch(word, d, self.most, handle),
                                 lambda pieces=pieces: self._pieces(pieces, work))

    def _pieces(self, pieces: tuple[Piece, ...], work: dict[str, Array]) -> None:
        """A diagonal's GEMM calls and the folds of the batches they end, but the last batch's (which
        :meth:`run` launches after the graph, into C); each fold reads the verdict word to leave out the
        diagonals its count does not run."""
        p, buffers, acc, word = self.schedule.plan, work["buffers"], work["acc"], work["word"]
        for piece in pieces:
            self.layout.calls.issue(self.backend, work, piece.chunks, piece.first)
            batch = piece.fold
            if batch is None or batch.flags & FINALIZE:
                continue
            self.family.fold(buffers, len(batch.chunks), batch.diagonals, batch.closes, p.alpha, acc, work["comp"],
                             work["open"], word, word, batch.flags, acc, acc, p.format, limit=word, most=self.most)


__all__ = ["MAX_GEMM_CALLS", "MOST_DEFAULT", "Batch", "DeviceVerdict", "Piece", "Schedule", "most_slices",
           "schedule"]
