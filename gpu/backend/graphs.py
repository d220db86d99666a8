"""Work captured as CUDA graphs per address set, replayed after: for plans whose calls launch many kernels.

From Python each launch or library call costs the host microseconds to tens of microseconds; a product of
hundreds of them cannot hide that at small and medium sizes. Captured into one CUDA graph
(:meth:`gpu.backend.Backend.capture`: cuBLAS through per-stream handles that capture allows, kernels, event
waits between streams), the work replays with one launch. A graph bakes in device addresses, so a plan (built
for an operand signature) keeps a graph per **address set** of its operands (:class:`Graphs`), at most
:data:`MAX_GRAPHS`, the least recently used dropped first; every graph runs on the plan's own buffers, so a
capture allocates nothing. Replay computes exactly what the eager work computes (the same calls in the same
order), bit for bit.

Modes: ``True`` captures an address set on its first call; ``"auto"`` on its second, where the work launches at
least :data:`MIN_LAUNCHES` kernels and the backend supports graphs (eagerly otherwise); ``"repeat"`` on its
second whatever the launches: a loop that keeps its arrays replays from its second call, and arrays used once
(a new output per call, say) run eagerly rather than pay a capture each.
"""

from __future__ import annotations

from collections.abc import Callable

from .interface import Array, Backend
from .memo import LRU

#: Fewest kernels a product launches before ``graph="auto"`` captures it.
MIN_LAUNCHES = 200
#: Graphs (address sets) one plan keeps.
MAX_GRAPHS = 4
#: Address sets whose calls a plan counts for ``"auto"`` and ``"repeat"`` (least recently seen dropped first).
MAX_SEEN = 64


def array_key(x: Array, be: Backend) -> tuple:
    return be.pointer(x), x.shape, x.strides, str(x.dtype)


class Graphs:
    """One plan's captured work by address set (see the module notes): at most ``size`` graphs (a plan that
    cycles through more address sets per call, as a tiled product's tile plan does, keeps one per set: fewer
    would drop each graph before its set came round again, and capture every call)."""

    def __init__(self, be: Backend, mode: bool | str, launches: int, size: int = MAX_GRAPHS) -> None:
        self.backend = be
        self.mode = mode if be.supports_graphs and (mode != "auto" or launches >= MIN_LAUNCHES) else False
        self.captured = LRU(max(1, min(size, MAX_SEEN)))
        self.seen = LRU(MAX_SEEN)

    def run(self, key: tuple, body: Callable[[], None]) -> None:
        """``body()`` (the work on the plan's operands) eagerly, or as the graph of address set ``key``."""
        if not self.mode:
            body()
            return
        graph = self.captured.get(key)
        if graph is not None:
            graph.launch()
            return
        if self.mode is True or self.seen.get(key, 0) >= 1:
            self.captured[key] = self.backend.capture(body)      # its eager pass does the work
            return
        self.seen[key] = self.seen.get(key, 0) + 1
        body()

    def clear(self) -> None:
        """Drop every graph (their buffers belong to the plan)."""
        self.captured.clear()
        self.seen.clear()
