"""Work whose parts run only where the device says so, with no wait for the device: CUDA graphs with IF nodes.

A method whose amount of work depends on its data (the Ozaki scheme's slice count) must otherwise read a value
back before it launches the work, and that read waits for everything queued before it. Captured once into a
CUDA graph, each optional part becomes an IF node (CUDA 12.4 and later): a kernel earlier in the graph reads the
data on the device and sets the node's condition (``cudaGraphSetConditional``), and the part's kernels and
cuBLAS calls run only where it is set. The host launches the graph and returns at once.

:func:`capture` builds such a graph on CuPy; :class:`HostBranches` runs the same build function on NumPy, where
a condition is a value the host computes. Either way the build function calls
``branches.only_if(set_condition, work)``: ``set_condition(handle)`` launches the kernel that sets ``handle``
(CuPy) or returns the condition (NumPy, where ``handle`` is None), and ``work()`` issues the part.

What a captured part may hold is CUDA's rule for graph bodies: kernels, cuBLAS calls on a stream that issued a
call before the capture (:mod:`gpu.backend.stream_blas`), nothing that allocates or waits.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

try:
    from cuda.bindings import driver
except ImportError:  # cuda-python comes with CuPy's CUDA 13 wheels; without it there are no IF nodes
    driver = None

#: Device code a kernel needs to set a condition (NVRTC has no declaration of the runtime's builtin).
SET_CONDITIONAL = ('extern "C" __device__ void cudaGraphSetConditional(unsigned long long handle, '
                   'unsigned int value);\n')


def _check(result: tuple) -> Any:
    """The values of a cuda.bindings call, RuntimeError naming the failure otherwise."""
    err, *values = result
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"CUDA graph with IF nodes: {err.name}")
    return values[0] if len(values) == 1 else values


def available(backend: Any) -> bool:
    """Whether ``backend`` can capture graphs with IF nodes (CuPy with per-stream cuBLAS and cuda-python)."""
    return driver is not None and getattr(backend, "supports_graphs", False)


class HostBranches:
    """``only_if`` on the host (NumPy): the condition is computed, then the work runs or not."""

    @staticmethod
    def only_if(set_condition: Callable[[Any], Any], work: Callable[[], None]) -> None:
        if set_condition(None):
            work()


class _Branches:
    """``only_if`` while ``main`` captures: an IF node after the condition's kernel, its body captured from
    ``body``."""

    def __init__(self, main: Any, body: Any, context: Any) -> None:
        self.main, self.body, self.context = main, body, context

    def _graph(self) -> tuple[Any, list, int]:
        info = _check(driver.cuStreamGetCaptureInfo(driver.CUstream(self.main.ptr)))
        return info[2], info[3], info[-1]

    def only_if(self, set_condition: Callable[[Any], Any], work: Callable[[], None]) -> None:
        graph = self._graph()[0]
        handle = _check(driver.cuGraphConditionalHandleCreate(graph, self.context, 0, 0))
        set_condition(int(handle))
        graph, deps, count = self._graph()
        params = driver.CUgraphNodeParams()
        params.type = driver.CUgraphNodeType.CU_GRAPH_NODE_TYPE_CONDITIONAL
        params.conditional.handle = handle
        params.conditional.type = driver.CUgraphConditionalNodeType.CU_GRAPH_COND_TYPE_IF
        params.conditional.size = 1
        params.conditional.ctx = self.context
        node = _check(driver.cuGraphAddNode(graph, deps, None, count, params))
        _check(driver.cuStreamUpdateCaptureDependencies(
            driver.CUstream(self.main.ptr), [node], None, 1,
            driver.CUstreamUpdateCaptureDependencies_flags.CU_STREAM_SET_CAPTURE_DEPENDENCIES))
        body = driver.CUstream(self.body.ptr)
        _check(driver.cuStreamBeginCaptureToGraph(body, params.conditional.phGraph_out[0], None, None, 0,
                                                  driver.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED))
        try:
            with self.body:
                work()
        finally:
            _check(driver.cuStreamEndCapture(body))


class Capturer:
    """A CuPy backend's two private streams for graphs with IF nodes: one captures the graph, one each body;
    one capture at a time (:func:`capturer` gives the backend's one)."""

    def __init__(self, backend: Any) -> None:
        xp = backend.xp
        self.main = xp.cuda.Stream(non_blocking=True)
        self.body = xp.cuda.Stream(non_blocking=True)
        self.lock = threading.Lock()
        for stream in (self.main, self.body):
            with stream:
                backend._handle()               # a stream's cuBLAS handle is made outside any capture

    def capture(self, build: Callable[[Any], None]) -> Any:
        """The graph of ``build(branches)``, captured without running it (a CuPy ``Graph``; ``launch()``
        replays it on the current stream). Everything ``build`` launches must have been compiled already."""
        with self.lock:
            context = _check(driver.cuCtxGetCurrent())
            self.main.begin_capture()
            try:
                with self.main:
                    build(_Branches(self.main, self.body, context))
            finally:
                graph = self.main.end_capture()
        return graph


_CAPTURERS: dict[int, Capturer] = {}
_LOCK = threading.Lock()


def capturer(backend: Any) -> Capturer:
    """The capturer of ``backend`` (made on first use; backends live as long as the process)."""
    with _LOCK:
        found = _CAPTURERS.get(id(backend))
        if found is None:
            found = _CAPTURERS[id(backend)] = Capturer(backend)
        return found


__all__ = ["SET_CONDITIONAL", "Capturer", "HostBranches", "available", "capturer"]
