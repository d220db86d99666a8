"""Whole Strassen products as CUDA graphs: captured per address set by the plan that runs them, replayed after.

A level-3 product issues hundreds of library calls; from Python each costs tens of microseconds
of host time, which small and medium sizes cannot hide. Captured into one CUDA graph
(``Backend.capture``: cuBLAS through per-stream handles that capture allows, fused kernels, event
waits between streams), the product replays with one launch.

A graph bakes in device addresses. A plan (:class:`gpu.strassen.Plan`) is built for an operand signature
(shapes, strides, dtypes, stream, options), so its :class:`gpu.backend.graphs.Graphs` keeps a graph per
**address set** of A, B and C, at most :data:`MAX_GRAPHS` of them, the least recently used dropped first.
Every graph of a plan runs on the plan's workspace (its executor's arena: slots per depth and stream, made on
the first pass), so a capture allocates nothing and the graphs of one plan, replayed one after another on its
stream, share it.
Replay computes exactly what the eager product computes (the same calls in the same order), bit for bit.

Modes: ``True`` captures an address set on its first call; ``"auto"`` on its second, where the product
launches at least :data:`MIN_LAUNCHES` kernels and the backend supports graphs (eagerly otherwise);
``"repeat"`` (what a configuration chosen from the device profile runs) on its second whatever the launches:
a loop that keeps its arrays replays from its second call, and arrays used once (a new output per call) run
eagerly rather than pay a capture each.
"""

from __future__ import annotations

from typing import Any

from ..backend import Backend
from ..backend.graphs import MAX_GRAPHS, MAX_SEEN, MIN_LAUNCHES, Graphs, array_key

__all__ = ["MAX_GRAPHS", "MAX_SEEN", "MIN_LAUNCHES", "MODES", "Graphs", "array_key", "check_mode"]

MODES = (True, False, "auto")


def check_mode(be: Backend, graph: Any) -> None:
    """ValueError before any work for a mode that is not one of :data:`MODES`, or ``True`` on a
    backend without graphs."""
    if not any(graph is m for m in MODES):
        raise ValueError(f"graph must be True, False or 'auto', got {graph!r}")
    if graph is True and not be.supports_graphs:
        raise ValueError(f"graph=True needs CUDA graphs: the CuPy backend with nvmath-python installed; the "
                         f"{be.name} backend runs every call eagerly (pass graph=False or graph='auto')")
