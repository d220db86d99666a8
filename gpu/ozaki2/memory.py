"""The memory plan of one scheme II product, made before any work: its workspace block, C, and the rest.

The workspace (:mod:`gpu.ozaki2.workspace`) is allocated first, as one block: the faster direct layout
where the device holds it with :data:`HEADROOM` to spare (room for cuBLAS's own workspace), else the
planes. C comes next (a C allocated before the block could split a cached block that a previous call's
workspace left free), then the bytes the call allocates outside the block are asked for
(:func:`gpu.backend.checks.require_memory`): the operations' vectors and scratch
(``ops.scratch_bytes``: a few bytes per line on the GPU, NumPy's temporaries on the CPU) and
``moduli="auto"``'s bound (:func:`auto_bytes`). Each step raises :class:`~gpu.backend.MemoryPlanError`
before any product where the device cannot give it. On a repeated call that fits, CuPy's pool serves the
block and C from its cache with no wait for the device; where it holds the bytes only in cached blocks too
small, it hands its wholly free chunks back to the driver first (a wait: the rare path).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..backend import Array, Backend, MemoryPlanError, require_memory
from ..backend.checks import gib, reserve
from ..ozaki.plan import HEADROOM, _round_up
from .moduli import MAX_MODULI
from .ops import ops
from .workspace import Workspace, layout

ADVICE = "pass fewer moduli, out=, or split the product into blocks of rows"


@dataclass(frozen=True)
class Carved:
    """A product's workspace: its layout, the block it is carved from, and the product's columns n."""

    layout: Workspace
    block: Array
    n: int

    @property
    def direct(self) -> bool:
        return self.layout.direct

    def view(self, name: str) -> Array:
        return self.layout.view(self.block, name)

    def region(self, name: str) -> Array:
        return self.layout.region(self.block, name)


def auto_bytes(m: int, k: int, n: int) -> int:
    """Bytes of ``moduli="auto"``'s bound (:func:`gpu.ozaki2.auto.predicted_error`) at its peak: |A| and |B|
    scaled, with their unscaled copies while they are made, and six m x n float64 arrays (|A~||B~|, its
    rounded-down copy, and the terms of E_ij's numerator and quotient)."""
    return 16 * (m * k + k * n) + 48 * m * n


def beyond_bytes(be: Backend, m: int, k: int, n: int, count: int | None, scaling: str, out_given: bool) -> int:
    """Bytes the call allocates outside its block: C unless ``out`` is given, the operations' vectors and
    scratch, and ``moduli="auto"``'s bound (``count`` None)."""
    counted = count or MAX_MODULI
    return ((0 if out_given else 8 * m * n) + ops(be).scratch_bytes(m, k, n, counted, scaling)
            + (auto_bytes(m, k, n) if count is None else 0))


def layouts(m: int, k: int, n: int, count: int, scaling: str, block: int) -> list[Workspace]:
    """The layouts the call may take, fastest first: direct where the INT8 GEMMs take k in one block."""
    planes = layout(m, k, n, count, scaling, direct=False)
    return [layout(m, k, n, count, scaling, direct=True), planes] if _round_up(max(k, 1)) <= block else [planes]


def reserve_workspace(be: Backend, m: int, k: int, n: int, count: int | None, scaling: str, block: int,
                      C: Array | None) -> tuple[Carved, Array]:
    """The workspace block and C (``C`` itself where given), or MemoryPlanError before any work (module)."""
    what = f"Ozaki scheme II on {m} x {k} x {n} with {count or f'up to {MAX_MODULI}'} moduli"
    beyond = beyond_bytes(be, m, k, n, count, scaling, C is not None)
    options = layouts(m, k, n, count or MAX_MODULI, scaling, block)
    free = be.memory_info()[0]
    faster, least = [ws for ws in options[:-1] if ws.nbytes + beyond <= HEADROOM * free], options[-1]
    if least.nbytes + beyond > free:
        raise MemoryPlanError(f"{what} needs {gib(least.nbytes + beyond)} (workspace {gib(least.nbytes)}, output "
                              f"and scratch {gib(beyond)}) but {gib(free)} are free on the {be.name} device; {ADVICE}")
    for ws in faster:
        try:
            return _take(be, ws, m, k, n, count, scaling, C, what)
        except MemoryPlanError:
            continue
    return _take(be, least, m, k, n, count, scaling, C, what)


def _take(be: Backend, ws: Workspace, m: int, k: int, n: int, count: int | None, scaling: str, C: Array | None,
          what: str) -> tuple[Carved, Array]:
    """Layout ``ws``'s block, then C, then room for the rest, each or MemoryPlanError (what was taken is
    dropped with it)."""
    carved = Carved(ws, reserve(be, ws.nbytes, what, ADVICE), n)
    if C is None:
        try:
            C = be.xp.empty((m, n), dtype=np.float64)
        except MemoryError as exc:
            raise MemoryPlanError(f"{what}: the {gib(8 * m * n)} output does not fit beside the workspace of "
                                  f"{gib(ws.nbytes)}; {ADVICE}") from exc
    require_memory(be, beyond_bytes(be, m, k, n, count, scaling, out_given=True),
                   f"{what}, beside its workspace of {gib(ws.nbytes)} and its output,", ADVICE)
    return carved, C


def peak_bytes(be: Backend, m: int, k: int, n: int, count: int | None, scaling: str, direct: bool,
               out_given: bool = False) -> int:
    """The most bytes a call allocates by this plan in the given layout: its block and everything beyond it
    (``count`` None: ``moduli="auto"``, whose block is sized for the most moduli)."""
    return (layout(m, k, n, count or MAX_MODULI, scaling, direct).nbytes
            + beyond_bytes(be, m, k, n, count, scaling, out_given))
