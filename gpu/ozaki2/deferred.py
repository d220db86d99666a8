"""``moduli="auto"`` with no read of the count (``verdict="device"``, the default on the GPU).

The normwise count (:mod:`gpu.ozaki2.normwise`) is computed on the device from the scaling's one read of A and
B, and the host launches one set of INT8 GEMMs per modulus: read back, the count costs a wait for all the work
queued before it, so the host cannot run ahead of the device. Instead a plan keeps, per address set of A, B
and C that it has seen before, one CUDA graph (:mod:`gpu.backend.conditional`) that holds:

1. the line statistics of A's rows and B's columns, and the count, into the plan's buffers;
2. per count c of the plan's **window** (the counts its calls have needed so far, each compiled by an eager
   call first), an IF node whose condition a one-thread kernel sets from the count: the whole product at c
   moduli, for the counts from the window's next count below c (exclusive) up to c (more moduli only tighten
   the bound);
3. an IF node for counts above the window: the product at the most moduli (:data:`MAX_MODULI`), which meets
   any target that some count meets;
4. an IF node for count 0 (no count up to the most meets the target): C is the library GEMM's (IEEE values),
   as cuBLAS's FP64 emulation falls back to native FP64 where its inputs need too many bits.

Each count is the one the read path would pick, and each IF body is that path's work, so C is bitwise the read
path's wherever the count is in the window. A count above the window gives the most moduli's C (more accurate
than the count's, never less). After each replay the count is copied to pinned host memory without a wait;
a later call that finds a count beyond the window in it runs once eagerly (reading its count), so that the next
capture holds that count too. :attr:`gpu.ozaki2.Plan.last_count` reads the last call's count (waiting for it).

The first call of an address set runs eagerly and reads its count, as the graphs of :mod:`gpu.backend.graphs`
replay only address sets seen before; the first capture also runs the most moduli's product once eagerly, so
that every kernel its IF body launches is compiled before the capture. ``verdict="host"`` keeps the read on
every call, and refuses data that no count serves (ValueError), as before.
"""

from __future__ import annotations

import weakref
from typing import Any

from ..backend import Array
from ..backend.conditional import available, capturer
from ..backend.graphs import MAX_SEEN, array_key
from ..backend.memo import LRU
from .moduli import MAX_MODULI
from .ops import ops

#: Counts 1..MAX_MODULI as bits of a mask (bit c: count c).
ALL_COUNTS = ((1 << (MAX_MODULI + 1)) - 1) & ~1


def masks(window: tuple[int, ...]) -> list[tuple[int, int]]:
    """(mask of counts, the count whose product serves them) for each IF node of :data:`window` (sorted):
    each window count serves the counts above the one below it, :data:`MAX_MODULI` those above the window."""
    out, low = [], 0
    for c in window:
        out.append((ALL_COUNTS & ((1 << (c + 1)) - 1) & ~((1 << (low + 1)) - 1), c))
        low = c
    above = ALL_COUNTS & ~((1 << (low + 1)) - 1)
    if above:
        out.append((above, MAX_MODULI))
    return out


def deferred(plan: Any) -> DeferredCount | None:
    """The deferred count of ``plan`` where it applies (``moduli="auto"`` with the normwise bound and
    ``verdict="device"``, where the plan replays graphs (the fast scaling, no ``check_finite``, a product that is
    not empty), on a backend that captures IF nodes, with no Winograd level outside the fused form), else None."""
    opts = plan.options
    if not (plan.normwise and opts.verdict == "device" and plan._graphs.mode and available(plan.backend)):
        return None
    if opts.level and not plan.work.direct:
        return None                          # the levels' passes take scratch per call: no graph holds them
    return DeferredCount(plan)


class DeferredCount:
    """A plan's calls without the count's read (see the module): the window, the graphs per address set and
    window, and the pinned copy of the last replay's count. It reaches its plan through a weak reference (a
    dropped plan is freed at once, its graphs with it)."""

    def __init__(self, plan: Any) -> None:
        self.plan, self.backend = weakref.proxy(plan), plan.backend
        self.window: tuple[int, ...] = ()
        self.graphs, self.seen = LRU(plan._graphs.captured.size), LRU(MAX_SEEN)     # a tile plan: one per tile
        self.warm = self.stale = False
        self.copy = ops(plan.backend).count_copy()
        self.copying = False

    def note(self, count: int) -> None:
        """Add a count that an eager call read (its kernels are compiled now) to the window."""
        if count and count not in self.window:
            self.window = tuple(sorted({*self.window, count}))
        self.copying = self.stale = False

    def pending(self) -> bool:
        """Whether the last call's count is still to be read from its copy."""
        return self.copying

    def wait(self) -> int:
        """The last replayed call's count (waits for its copy); one beyond the window marks the window
        :attr:`stale`, so that the next call runs eagerly and adds it."""
        count = self.plan.last_count = self.copy.wait()
        self.copying = False
        self.stale = self.stale or (count != 0 and count not in self.window)
        return count

    def run(self, family: Any, A: Array, B: Array, C: Array) -> bool:
        """The call as the graph of its address set and the window; False where the caller must run it eagerly
        (and read its count): no window yet, a new count seen in the last copy, or an address set seen first."""
        be = self.backend
        if self.copying and self.copy.done():
            self.wait()
        addresses = (array_key(A, be), array_key(B, be), array_key(C, be))
        seen, self.seen[addresses] = self.seen.get(addresses), 1
        if not self.window or self.stale:
            return False
        key = (addresses, self.window)
        graph = self.graphs.get(key)
        if graph is None:
            if not seen:
                return False
            graph = self.graphs[key] = self._capture(family, A, B, C)
        stream = be.current_stream()
        graph.launch(stream)
        self._copy_count(stream)
        return True

    def _capture(self, family: Any, A: Array, B: Array, C: Array) -> Any:
        """The graph of the window for these addresses (the most moduli's kernels compiled first, eagerly)."""
        be = self.backend
        if not self.warm:
            rows, cols = self.plan._stats(family, A, B)
            self._product(family, MAX_MODULI, A, B, C, rows, cols)
            be.gemm(A, B, C)
            self.warm = True
        graph = capturer(be).capture(lambda branches: self._build(branches, family, A, B, C))
        graph.upload(be.current_stream())
        return graph

    def _build(self, branches: Any, family: Any, A: Array, B: Array, C: Array) -> None:
        """Steps 1-4 of the module, as captured."""
        plan, be = self.plan, self.backend
        rows, cols = plan._stats(family, A, B)
        word = family.count_word(rows, cols, plan.k, plan.goal, plan.count_buffers)
        for mask, count in masks(self.window) + [(1, 0)]:
            branches.only_if(lambda handle, mask=mask: family.if_count(word, handle, mask),
                             lambda count=count: self._product(family, count, A, B, C, rows, cols)
                             if count else be.gemm(A, B, C))

    def _product(self, family: Any, count: int, A: Array, B: Array, C: Array, rows: Any, cols: Any) -> None:
        """The product at ``count`` moduli after the line statistics: the plan's shifts, then its rest."""
        plan = self.plan
        part = plan.part(count)
        shift_a, shift_b = plan._shifts(family, part, rows, cols, None)
        plan._rest(family, part, A, B, C, shift_a, shift_b, rows, cols)

    def _copy_count(self, stream: Any) -> None:
        """The count of the call just queued, into pinned host memory, with no wait."""
        self.copy.start(self.plan.count_buffers[2], stream)
        self.copying = True

    def release(self) -> None:
        """Drop the graphs (the plan was freed)."""
        self.graphs.clear()
        self.seen.clear()
        self.window, self.copying = (), False


__all__ = ["ALL_COUNTS", "DeferredCount", "deferred", "masks"]
