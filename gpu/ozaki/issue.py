"""The GEMM calls of one fold batch, issued on addresses: the host's cost of a slice product.

A product of S slices makes up to S(S+1)/2 GEMM calls (twice that in FP32 slices at k = 2048, where a diagonal's
pairs are cut at 1040 terms), and each through :meth:`gpu.backend.Backend.gemm_ex` costs the host three views
and the checks of three layouts: about 75 us on an H200's host, which a graph's capture pays per call (0.15 s for
the 1969 calls of N = 4096) and an eager product pays per call. The calls of a batch differ only in their
addresses: chunks of one length are views of the same arrays with the same strides. So FP32 slices, whose
``gemm_ex`` is the library's SGEMM, take a :class:`gpu.backend.calls.GemmCall` per chunk length and output tile,
checked once (:attr:`Calls.calls`), and each call is issued on the chunk's addresses, computed from the arrays'
base addresses and strides: the same BLAS call on the same bytes, so the same bits. Other formats (their
``gemm_ex`` is ``cublasGemmEx`` with their own types) take the views.
"""

from __future__ import annotations

from typing import Any

from ..backend import Array, Backend
from .common import _tiles
from .plan import Chunk, OzakiPlan


class Calls:
    """The checked GEMM signatures of one layout's batches (any workspace of it: only addresses differ)."""

    def __init__(self, p: OzakiPlan) -> None:
        self.p = p
        self.tiles = _tiles(p.m, p.n_pad, p.format.tile)
        self.fast = p.format.recipe == "fp32"
        self.calls: dict[tuple[int, int, int], Any] = {}

    def issue(self, be: Backend, work: dict[str, Array], chunks: tuple[Chunk, ...] | list[Chunk],
              first: int = 0) -> None:
        """``buffers[slot] = A_cat[:, chunk] @ B_cat[:, chunk]^T`` for each chunk of a batch, slot by slot from
        ``first``."""
        a_cat, b_cat, buffers = work["a"], work["b"], work["buffers"]
        if not self.fast:
            for slot, c in enumerate(chunks, first):
                for rows, cols in self.tiles:
                    be.gemm_ex(*self._views(work, c, slot, rows, cols), recipe=self.p.format.recipe)
            return
        item = a_cat.itemsize
        pa, pb, pc = be.pointer(a_cat), be.pointer(b_cat), be.pointer(buffers)
        lda, ldb = a_cat.strides[0] // item, b_cat.strides[0] // item
        per_slot, ldc = buffers.strides[0] // buffers.itemsize, buffers.strides[1] // buffers.itemsize
        for slot, c in enumerate(chunks, first):
            for rows, cols in self.tiles:
                call = self._call(be, work, c, slot, rows, cols)
                a = pa + (rows.start * lda + c.a_start) * item
                b = pb + (cols.start * ldb + c.b_start) * item
                out = pc + (slot * per_slot + rows.start * ldc + cols.start) * buffers.itemsize
                operands = call.plan.addresses(a, b, out)
                if operands is None or call.issue is None:     # never for the workspace's disjoint parts
                    call(*self._views(work, c, slot, rows, cols))
                else:
                    call.issue(*operands, out)

    def _call(self, be: Backend, work: dict[str, Array], c: Chunk, slot: int, rows: slice, cols: slice) -> Any:
        key = (c.length, rows.stop - rows.start, cols.stop - cols.start)
        call = self.calls.get(key)
        if call is None:
            call = self.calls[key] = be.gemm_call(*self._views(work, c, slot, rows, cols))
        return call

    @staticmethod
    def _views(work: dict[str, Array], c: Chunk, slot: int, rows: slice, cols: slice) -> tuple[Array, Array, Array]:
        a = work["a"][rows, c.a_start:c.a_start + c.length]
        b = work["b"][cols, c.b_start:c.b_start + c.length]
        return a, b.T, work["buffers"][slot, rows, cols]


__all__ = ["Calls"]
