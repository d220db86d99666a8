"""Whole Strassen products as CUDA graphs: captured once per call signature, replayed after.

A level-3 product issues hundreds of library calls; from Python each costs tens of microseconds
of host time, which small and medium sizes cannot hide. Captured into one CUDA graph
(``Backend.capture``: cuBLAS through per-stream handles that capture allows, fused kernels, event
waits between streams), the product replays with one launch.

A graph bakes in device addresses, so it is kept per **signature**: backend, schedule, levels,
streams, fusion, fringe, overwrite rights, and the address, shape, strides and dtype of A, B and C.
Its scratch buffers live in the executor's arena (slots per depth and stream) for as long as the
graph does, so nothing is allocated while it is captured or replayed, and no buffer it uses is
handed to anyone else. Replay computes exactly what the eager product computes (the same calls in
the same order), bit for bit. At most :data:`MAX_GRAPHS` graphs are kept, the least recently used
dropped first.

``graph="auto"`` captures a signature the second time it is called (the first call runs eagerly)
where the product launches at least :data:`MIN_LAUNCHES` kernels, and only on a backend that
supports graphs; everything else runs eagerly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..backend import Array, Backend
from ..backend.memo import LRU
from .executor import Executor

#: Fewest kernels a product launches before ``graph="auto"`` captures it.
MIN_LAUNCHES = 200
MAX_GRAPHS = 16
#: Signatures whose calls ``graph="auto"`` counts (least recently seen dropped first): a long run over ever
#: new arrays must not grow the count table without bound.
MAX_SEEN = 1024
MODES = (True, False, "auto")


@dataclass
class Captured:
    """A captured product and what it needs kept alive: its executor's arena of buffers."""

    graph: Any
    executor: Executor

    def replay(self) -> None:
        self.graph.launch()


_GRAPHS = LRU(MAX_GRAPHS)
_SEEN = LRU(MAX_SEEN)


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


def run(be: Backend, graph: Any, key: tuple, launches: int, make: Callable[[dict | None], Executor],
        body: Callable[[Executor], None]) -> None:
    """Run ``body(executor)`` eagerly or as the graph of ``key``, as ``graph`` and the signature's history say."""
    if graph == "auto":
        graph = be.supports_graphs and launches >= MIN_LAUNCHES and _SEEN.get(key, 0) >= 1
        _SEEN[key] = _SEEN.get(key, 0) + 1
    if not graph:
        body(make(None))
        return
    captured = _GRAPHS.get(key)
    if captured is None:
        executor = make({})
        captured = Captured(be.capture(lambda: body(executor)), executor)
        _GRAPHS[key] = captured
        return                                # the capture's eager pass computed the product
    captured.replay()


def forget() -> None:
    """Drop every kept graph and its buffers (they hold device memory)."""
    _GRAPHS.clear()
    _SEEN.clear()
