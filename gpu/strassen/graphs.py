"""Whole Strassen products as CUDA graphs: captured per address set by the plan that runs them, replayed after.

A level-3 product issues hundreds of library calls; from Python each costs tens of microseconds
of host time, which small and medium sizes cannot hide. Captured into one CUDA graph
(``Backend.capture``: cuBLAS through per-stream handles that capture allows, fused kernels, event
waits between streams), the product replays with one launch.

A graph bakes in device addresses. A plan (:class:`gpu.strassen.Plan`) is built for an operand signature
(shapes, strides, dtypes, stream, options), so its :class:`Graphs` keeps a graph per **address set** of A, B
and C, at most :data:`MAX_GRAPHS` of them, the least recently used dropped first. Every graph of a plan runs
on the plan's workspace (its executor's arena: slots per depth and stream, made on the first pass), so a
capture allocates nothing and the graphs of one plan, replayed one after another on its stream, share it.
Replay computes exactly what the eager product computes (the same calls in the same order), bit for bit.

Modes: ``True`` captures an address set on its first call; ``"auto"`` on its second, where the product
launches at least :data:`MIN_LAUNCHES` kernels and the backend supports graphs (eagerly otherwise);
``"repeat"`` (what a configuration chosen from the device profile runs) on its second whatever the launches:
a loop that keeps its arrays replays from its second call, and arrays used once (a new output per call) run
eagerly rather than pay a capture each.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..backend import Array, Backend
from ..backend.memo import LRU

#: Fewest kernels a product launches before ``graph="auto"`` captures it.
MIN_LAUNCHES = 200
#: Graphs (address sets) one plan keeps.
MAX_GRAPHS = 4
#: Address sets whose calls a plan counts for ``"auto"`` and ``"repeat"`` (least recently seen dropped first).
MAX_SEEN = 64
MODES = (True, False, "auto")


def check_mode(be: Backend, graph: Any) -> None:
    """ValueError before any work for a mode that is not one of :data:`MODES`, or ``True`` on a
    backend without graphs."""
    if not any(graph is m for m in MODES):
        raise ValueError(f"graph must be True, False or 'auto', got {graph!r}")
    if graph is True and not be.supports_graphs:
        raise ValueError(f"graph=True needs CUDA graphs: the CuPy backend with nvmath-python installed; the "
                         f"{be.name} backend runs every call eagerly (pass graph=False or graph='auto')")


def array_key(x: Array, be: Backend) -> tuple:
    return be.pointer(x), x.shape, x.strides, str(x.dtype)


class Graphs:
    """One plan's captured products by address set (see the module notes)."""

    def __init__(self, be: Backend, mode: bool | str, launches: int) -> None:
        self.backend = be
        self.mode = mode if be.supports_graphs and (mode != "auto" or launches >= MIN_LAUNCHES) else False
        self.captured = LRU(MAX_GRAPHS)
        self.seen = LRU(MAX_SEEN)

    def run(self, key: tuple, body: Callable[[], None]) -> None:
        """``body()`` (the product on the plan's operands) eagerly, or as the graph of address set ``key``."""
        if not self.mode:
            body()
            return
        graph = self.captured.get(key)
        if graph is not None:
            graph.launch()
            return
        if self.mode is True or self.seen.get(key, 0) >= 1:
            self.captured[key] = self.backend.capture(body)      # its eager pass computes the product
            return
        self.seen[key] = self.seen.get(key, 0) + 1
        body()

    def clear(self) -> None:
        """Drop every graph (their buffers belong to the plan's arena)."""
        self.captured.clear()
        self.seen.clear()
