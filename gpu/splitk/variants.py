"""Split-K's chunk kernels as data (:class:`Variant`), and which one an output runs on a compute capability.

Pure Python, importable without CuPy: :mod:`gpu.splitk.kernels` compiles and launches the variants (its
module notes say what each kernel does), and tests and scripts name them without a device.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .ops import TILE

_CTYPES = {np.dtype(np.float64): "double", np.dtype(np.float32): "float"}
#: Warps per block of the tensor-core kernel, and how deep along k each warp loads before it multiplies.
WARPS, DEPTH = 4, 16
#: Side of the largest output tile one warp owns.
WARP_TILE = 32
#: L2 fetch size (bytes) of fragment loads where a block's warps split k, so that neighbouring warps read
#: neighbouring 128-byte steps of a row: on the H100 it took m = n = 16 and 32 at k = 2^24 from 94-96% to
#: 99-100% of the copy's bandwidth; where one warp owns each output tile (m, n > 32) it cost up to 10%,
#: so those fragment loads keep the default (0).
L2_FETCH = 256
#: The FP64 tensor-core instruction per compute capability, as (row halves H, k quarters J): an 8 H x 8 x 4 J
#: product (sm_90: ``mma.m16n8k16``, twice the m8n8k4 rate of sm_80).
ATOMS = ((90, (2, 4)), (80, (1, 1)))
#: Shared-memory stages of the pipelined kernel.
STAGES = 3
#: The pipelined kernel's shape per output class, where a measurement beat the default (16 deep per warp that
#: splits k, at least 32 per stage; :data:`STAGES`; :data:`WARP_TILE`), keyed by the class's warp grid at the
#: default warp tile (tiles along m and n, warps along m and n). Measured on the H200 (device time against
#: cuBLAS, cache flushed before every sample, deterministic mode; results/published/h200/h200-splitk-tune.json,
#: from results/published/scripts/splitk_tune.py): m = n = 32 (grid (2, 4, 1, 1)) with 16-wide warp tiles
#: (four warps each owning a quarter of the output, none splitting k), 16 deep and 4 stages ran at 0.910x and
#: 0.938x cuBLAS at k = 2^22 and 2^24 against 0.890x and 0.877x for the H100's choice (32-wide, 128-deep
#: stages), which kept a 1.5% lead at 2^20 only; m = n = 64 (grid (2, 4, 2, 2)) 16 deep ran at 0.883x, 0.878x
#: and 0.916x at k = 2^20, 2^22 and 2^24 against 0.878x, 0.863x and 0.864x for 32 deep. (On the H100 the
#: 128-deep stages had run m = n = 32 0.4-2% faster than 64-deep ones at k = 2^21-2^24.)
TUNED = {(2, 4, 1, 1): {"warp_tile": 16, "slices": 1, "stages": 4}, (2, 4, 2, 2): {"slices": 1}}
#: Shared-memory stages of the bulk-copy kernel, and its stage depth: at least :data:`BULK_DEPTH` along k.
BULK_STAGES, BULK_DEPTH = 4, 64
#: The bulk-copy kernel's shape per output class (keyed as :data:`TUNED`), where a measurement beat the default.
#: Chosen on the H200 by the whole default call made back to back beside cuBLAS, as the targets judge it
#: (results/published/h200/h200-splitk-shapes-as-called-1.json and -2.json, from
#: results/published/scripts/splitk_shapes_as_called.py, two runs): m = n = 16 with 6 stages of 64 (two blocks
#: per SM) 1.036-1.037x at k = 2^24 against 1.017-1.025x for 4 stages of 128 (the shape device time with the cache
#: flushed had chosen, h200-splitk-bulk-tune.json), 1.169-1.175x against 1.156-1.167x at 2^22, the same at 2^20;
#: m = n = 32 with 3 stages (two blocks per SM) 0.995-1.009x at 2^24 and 0.996-1.002x at 2^22 against
#: 0.985-0.991x and 0.994-0.996x for 4, 1.061-1.068x against 1.062-1.084x at 2^20; m = n = 64 keeps 2 slices and
#: 3 stages, ahead of 6 stages in the second run at all three k and of 4 slices in the first.
BULK_TUNED = {(1, 2, 1, 1): {"stages": 6}, (2, 4, 1, 1): {"stages": 3}, (2, 4, 2, 2): {"slices": 2, "stages": 3}}
#: Compute capability from which the bulk-copy kernel runs (tensor maps and ``cp.async.bulk.tensor``: sm_90).
#: Measured on the H200 in its default shapes, one wave: 0.97-1.25x cuBLAS at m = n = 16-64, k = 2^20-2^24
#: (deterministic mode), against 0.90-1.15x for the pipelined kernel as the default ran it in the same groups.
BULK = 90
#: Stage depth (slices of 16 per warp that splits k), for a plan of one wave of wide chunks
#: (:attr:`SplitPlan.wide`), where it differs: half the blocks per SM, each with stages twice as deep.
#: Measured on the H100 (cache flushed before every sample; results/published/h100-splitk-probes.json, "wide"):
#: m = n = 16 in the atomic mode at 92.8% of the copy's bandwidth against 89.8% at k = 2^20, 98.2% against
#: 97.1% at 2^21, the same from 2^22; the deterministic mode 0.8-0.9% faster at 2^20-2^21. With 1024-wide
#: chunks the same depth lost 3%. On the H200 the wide form ran m = n = 16 at 1.179x cuBLAS at k = 2^20
#: against 1.088x for the narrow one (splitk_tune.py).
WIDE_SLICES = {(1, 2, 1, 1): 2}
#: Compute capability from which the pipelined kernel runs (its m16n8k16 is sm_90's). Measured on the H100
#: (device time, k = 2^20-2^24): it took m = n = 64 from 85-92% to 95-102% of the copy's bandwidth and
#: m = 8, 16, 32 up by 0-8%, but ran m = 17 at 68-75% against the register-fed kernel's 78-85%, so outputs
#: with a side that is not a multiple of 8 keep that kernel.
PIPELINED = 90



def _warp_grid(m: int, n: int, rows: int, warp_tile: int) -> tuple[int, int, int, int]:
    """Tiles of an mma of ``rows`` x 8 outputs per warp (up to ``warp_tile`` square) along m and n, and
    warps along m and n: two along a side one warp's tiles do not cover."""
    tm, tn = min(warp_tile // rows, -(-m // rows)), min(warp_tile // 8, -(-n // 8))
    return tm, tn, 2 if m > rows * tm else 1, 2 if n > 8 * tn else 1


@dataclass(frozen=True)
class Variant:
    """One chunk kernel as data: its template instantiation, block shape, output tile, dynamic shared memory
    (bytes) and, for the staged kernels, the elements along k of one stage."""

    name: str
    block: tuple[int, ...]
    rows: int
    cols: int
    shared: int = 0
    depth: int = 0

    @staticmethod
    def tile(dtype: Any) -> Variant:
        """The shared-memory kernel: 16 x 16 outputs per block, one per thread."""
        return Variant(f"splitk_tile<{_CTYPES[np.dtype(dtype)]}>", (TILE, TILE), TILE, TILE)

    @staticmethod
    def dmma(m: int, n: int, atom: tuple[int, int], depth: int = DEPTH, warp_tile: int = WARP_TILE,
             l2: int | None = None) -> Variant:
        """The FP64 tensor-core kernel for an m x n output with instruction ``atom`` (see :data:`ATOMS`):
        warp tiles up to ``warp_tile`` square, two warps along a side longer than one warp tile, the
        block's other warps splitting k; ``depth`` k loaded per warp before it multiplies; ``l2``:
        bytes the L2 fetches per miss of a fragment load (0: the default; None: :data:`L2_FETCH`
        where the block's warps split k, else 0)."""
        h, j = atom
        tm, tn, wms, wns = _warp_grid(m, n, 8 * h, warp_tile)
        l2 = (L2_FETCH if wms * wns < WARPS else 0) if l2 is None else l2
        return Variant(f"splitk_dmma<{h}, {j}, {tm}, {tn}, {wms}, {wns}, {max(1, depth // (4 * j))}, {l2}>",
                       (32 * WARPS,), 8 * h * tm * wms, 8 * tn * wns)

    @staticmethod
    def pipe(m: int, n: int, slices: int | None = None, stages: int = STAGES, warp_tile: int = WARP_TILE,
             wide: bool = False) -> Variant:
        """The pipelined FP64 tensor-core kernel (sm_90): the tile of :meth:`Variant.dmma` with m16n8k16,
        fed through ``stages`` shared-memory buffers filled by ``cp.async``, each ``16 x slices`` deep per
        warp that splits k (``slices`` default: :data:`WIDE_SLICES` for ``wide`` chunks, else at least 32 deep
        per stage)."""
        return _staged("splitk_pipe", m, n, warp_tile, stages, WARPS, 0,
                       lambda grid, kw: slices or (wide and WIDE_SLICES.get(grid)) or max(1, 32 // (16 * kw)))

    @staticmethod
    def bulk(m: int, n: int, slices: int | None = None, stages: int = BULK_STAGES,
             warp_tile: int = WARP_TILE) -> Variant:
        """The bulk-copy FP64 tensor-core kernel (sm_90; :mod:`gpu.splitk.bulk_source`): the tile of :meth:`pipe`
        fed by one more warp's tensor-map boxes (one of A and one of B per stage) into ``stages`` stages, each
        ``16 x slices`` deep per warp that splits k (``slices`` default: at least :data:`BULK_DEPTH` deep), behind
        an mbarrier pair per stage. It runs where the operands can be mapped
        (:func:`gpu.splitk.kernels.ChunkLaunch`), :meth:`tuned` where not."""
        return _staged("splitk_bulk", m, n, warp_tile, stages, WARPS + 1, -(-2 * stages // 16) * 16,
                       lambda grid, kw: slices or max(1, BULK_DEPTH // (16 * kw)))

    @property
    def pairs(self) -> bool:
        """Whether the kernel copies rows in 16-byte pairs where the operands allow (the ``*_PAIRS`` flags)."""
        return self.name.startswith(("splitk_pipe", "splitk_bulk"))

    @property
    def maps(self) -> bool:
        """Whether the kernel reads A and B through tensor maps (the bulk kernel: :mod:`gpu.splitk.tensormap`)."""
        return self.name.startswith("splitk_bulk")

    @staticmethod
    def tuned_bulk(m: int, n: int) -> Variant:
        """:meth:`bulk` in the shape :data:`BULK_TUNED` gives the output's class, else the default one."""
        return Variant.bulk(m, n, **BULK_TUNED.get(_warp_grid(m, n, 16, WARP_TILE), {}))

    @staticmethod
    def tuned(m: int, n: int, wide: bool = False) -> Variant:
        """:meth:`pipe` in the shape :data:`TUNED` gives the output's class, else the default one."""
        return Variant.pipe(m, n, wide=wide, **TUNED.get(_warp_grid(m, n, 16, WARP_TILE), {}))


def _staged(kernel: str, m: int, n: int, warp_tile: int, stages: int, warps: int, barriers: int,
            slices: Callable[[tuple[int, int, int, int], int], int]) -> Variant:
    """A staged kernel (``splitk_pipe``, ``splitk_bulk``) for an m x n output: the warp grid of m16n8k16 tiles
    up to ``warp_tile`` square, the other warps splitting k, ``slices(grid, warps splitting k)`` slices of 16
    per stage, each stage A's rows and B's rows padded by four doubles; its shared memory the larger of the
    stages and the epilogue's partial tiles, after ``barriers`` doubles of mbarriers; ``warps`` per block."""
    tm, tn, wms, wns = grid = _warp_grid(m, n, 16, warp_tile)
    kw = WARPS // (wms * wns)
    sl = slices(grid, kw)
    rows, cols, depth = 16 * tm * wms, 8 * tn * wns, 16 * kw * sl
    stage = rows * (depth + 4) + depth * (cols + 4)
    shared = 8 * (barriers + max(stages * stage, kw * rows * (cols + 1)))
    return Variant(f"{kernel}<{tm}, {tn}, {wms}, {wns}, {sl}, {stages}>", (32 * warps,), rows, cols, shared, depth)


def atom(capability: int) -> tuple[int, int] | None:
    """The FP64 tensor-core instruction of a compute capability (None before sm_80)."""
    return next((a for since, a in ATOMS if capability >= since), None)


def choose(dtype: Any, m: int, n: int, capability: int, wide: bool = False) -> Variant:
    """The chunk kernel for this dtype and output on a device of ``capability`` (90 for sm_90): tensor cores
    for FP64 on sm_80+; where both sides of the output are multiples of 8 from :data:`PIPELINED`, the staged
    kernels: fed by tensor-map boxes where the TMA exists (:data:`BULK`; calls whose operands cannot be mapped
    go to the cp.async one, :meth:`Variant.tuned`), else through the cp.async pipeline, in its ``wide`` form for
    one wave of wide chunks (see :data:`WIDE_SLICES`)."""
    a = atom(capability)
    if np.dtype(dtype) != np.float64 or a is None:
        return Variant.tile(dtype)
    if capability >= PIPELINED and m % 8 == 0 and n % 8 == 0:
        return Variant.tuned_bulk(m, n) if capability >= BULK else Variant.tuned(m, n, wide=wide)
    return Variant.dmma(m, n, a)
