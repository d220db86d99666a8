"""CUDA kernels of split-K (CuPy only): the chunk products on a 3-D grid, and the fixed-order reduction.

Loaded by :meth:`gpu.backend.Backend.ops` for the CuPy backend only (``"splitk"``):
:class:`CudaOps` is the GPU twin of :class:`gpu.splitk.ops.HostOps`. Each kernel is
compiled by NVRTC on first use (one instantiation per :class:`Variant`) and cached by CuPy.

The chunk kernels share one signature: block (x, y, z) computes output tile (y, x) of
chunk z, A_z B_z, reading A and B through their strides (row- or column-major views
with a leading dimension: no copy), and either stores alpha A_z B_z in the chunk's slot
of the workspace or adds it into C with ``atomicAdd`` (the paper's mode); alpha is a double
for every dtype, the product alpha A_z B_z rounded once to it.

* ``splitk_dmma`` (FP64, sm_80+): FP64 tensor cores (``mma.sync.m16n8k16.f64`` on sm_90,
  ``m8n8k4`` on sm_80: :data:`ATOMS`). Each of 4 warps owns a tile of up to 32 x 32 and loads
  its fragments straight from global memory into registers (every 32-byte sector read
  whole, in any layout), :data:`DEPTH` along k at a time so that many loads are in flight,
  with a 256-byte L2 fetch where that helps (:data:`L2_FETCH`); A and B are read from DRAM once. Warps that
  the output does not need split the block's chunk between them (k-steps dealt round-robin),
  and their sums meet in shared memory in warp order, so the result is fixed by the plan.
* ``splitk_pipe`` (FP64, sm_90): the same tiles and mma, fed through :data:`STAGES` shared-memory
  buffers that ``cp.async`` fills while the warps multiply the previous one, so that the bytes in
  flight no longer cost registers (cuBLAS's small-output kernels do the same); chosen by :func:`variant`.
* ``splitk_tile`` (FP32, or FP64 before sm_80): 16 x 16 outputs per block through shared
  tiles 16 deep, one output per thread (the paper's kernel).
* ``splitk_groups`` and ``splitk_finish``: the deterministic reduction in the plan's order
  (:class:`gpu.splitk.plan.SplitPlan`), with round-to-nearest intrinsics so that no
  multiply-add is contracted: the same operations as the NumPy path; ``splitk_finish`` applies
  alpha and beta in double and rounds once (the chunk kernels store unscaled partials there). Their loops are
  unrolled so that the loads of a chain are in flight together (the additions stay in order).
* ``splitk_scale``: C = beta C before the atomic additions (a memset instead where beta is 0 and C
  is contiguous).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache
from typing import Any

import cupy
import numpy as np

from ..backend import Array, Backend
from . import source
from .occupancy import Kernel, SMLimits
from .ops import TILE
from .plan import SplitPlan

_CTYPES = {np.dtype(np.float64): "double", np.dtype(np.float32): "float"}
#: Threads per block of the element-wise kernels, and the most blocks they launch (grid-stride loops).
_THREADS, _MAX_BLOCKS = 256, 4096
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
#: Stage depth (slices of 16 per warp that splits k) of the pipelined kernel per warp grid (tiles along m and
#: n, warps along m and n), where a measurement beat the default (at least 32 deep). On the H100
#: m = n = 32 ran 0.4-2% faster at k = 2^21-2^24 with 128-deep stages (one block per SM) than with 64-deep
#: ones; with stages twice their default depth m = n = 16 gained 2% at k = 2^20 (one wave) but lost 3% at
#: 2^24 (1024-wide chunks: hence :data:`WIDE_SLICES`), and m = n = 64 lost up to 11%.
SLICES = {(2, 4, 1, 1): 2}
#: Stage depth as in :data:`SLICES`, for a plan of one wave of wide chunks (:attr:`SplitPlan.wide`), where it
#: differs: half the blocks per SM, each with stages twice as deep. Measured on the H100 (cache flushed
#: before every sample; results/published/h100-splitk-probes.json, "wide"): m = n = 16 in the atomic mode at
#: 92.8% of the copy's bandwidth against 89.8% at k = 2^20, 98.2% against 97.1% at 2^21, the same from 2^22;
#: the deterministic mode 0.8-0.9% faster at 2^20-2^21. With 1024-wide chunks the same depth lost 3% (SLICES).
WIDE_SLICES = {(1, 2, 1, 1): 2}
#: Widest ``cp.async`` of the pipelined kernel, bytes: 16 copies two FP64 elements per instruction where the
#: layout and alignment allow (:func:`flags`), 8 one.
COPY_BYTES = 16
#: Compute capability from which the pipelined kernel runs (its m16n8k16 is sm_90's). Measured on the H100
#: (device time, k = 2^20-2^24): it took m = n = 64 from 85-92% to 95-102% of the copy's bandwidth and
#: m = 8, 16, 32 up by 0-8%, but ran m = 17 at 68-75% against the register-fed kernel's 78-85%, so outputs
#: with a side that is not a multiple of 8 keep that kernel.
PIPELINED = 90

_SOURCE = source.SOURCE.replace("__TILE__", str(TILE)).replace("__WARPS__", str(WARPS))


def _warp_grid(m: int, n: int, rows: int, warp_tile: int) -> tuple[int, int, int, int]:
    """Tiles of an mma of ``rows`` x 8 outputs per warp (up to ``warp_tile`` square) along m and n, and
    warps along m and n: two along a side one warp's tiles do not cover."""
    tm, tn = min(warp_tile // rows, -(-m // rows)), min(warp_tile // 8, -(-n // 8))
    return tm, tn, 2 if m > rows * tm else 1, 2 if n > 8 * tn else 1


@dataclass(frozen=True)
class Variant:
    """One chunk kernel as data: its template instantiation, block shape, output tile and dynamic shared
    memory (bytes)."""

    name: str
    block: tuple[int, ...]
    rows: int
    cols: int
    shared: int = 0

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
        warp that splits k (``slices`` default: :data:`WIDE_SLICES` for ``wide`` chunks, :data:`SLICES`,
        else at least 32 deep per stage)."""
        tm, tn, wms, wns = _warp_grid(m, n, 16, warp_tile)
        kw = WARPS // (wms * wns)
        grid = (tm, tn, wms, wns)
        slices = slices or (wide and WIDE_SLICES.get(grid)) or SLICES.get(grid, max(1, 32 // (16 * kw)))
        rows, cols, depth = 16 * tm * wms, 8 * tn * wns, 16 * kw * slices
        stage = rows * (depth + 4) + depth * (cols + 4)
        shared = 8 * max(stages * stage, kw * rows * (cols + 1))
        return Variant(f"splitk_pipe<{tm}, {tn}, {wms}, {wns}, {slices}, {stages}>", (32 * WARPS,), rows, cols,
                       shared)


def atom(capability: int) -> tuple[int, int] | None:
    """The FP64 tensor-core instruction of a compute capability (None before sm_80)."""
    return next((a for since, a in ATOMS if capability >= since), None)


def variant(dtype: Any, m: int, n: int, wide: bool = False) -> Variant:
    """The chunk kernel for this dtype and output on the current device: tensor cores for FP64 on sm_80+,
    through the cp.async pipeline on sm_90 where both sides of the output are multiples of 8 (see
    :data:`PIPELINED`), in its ``wide`` form for one wave of wide chunks (see :data:`WIDE_SLICES`)."""
    capability = int(cupy.cuda.Device().compute_capability)
    a = atom(capability)
    if np.dtype(dtype) != np.float64 or a is None:
        return Variant.tile(dtype)
    if capability >= PIPELINED and m % 8 == 0 and n % 8 == 0:
        return Variant.pipe(m, n, wide=wide)
    return Variant.dmma(m, n, a)


@cache
def _function(name: str) -> Any:
    module = cupy.RawModule(code=_SOURCE, options=("--std=c++14",), name_expressions=(name,))
    return module.get_function(name)


def _elementwise(name: str, dtype: Any) -> Any:
    return _function(f"{name}<{_CTYPES[np.dtype(dtype)]}>")


def _strides(X: Array) -> tuple[np.int64, np.int64]:
    return tuple(np.int64(s // X.itemsize) for s in X.strides)


def _blocks(total: int) -> tuple[int]:
    return (max(1, min(_MAX_BLOCKS, -(-total // _THREADS))),)


@cache
def _chunk_function(v: Variant) -> Any:
    """The compiled chunk kernel, allowed the dynamic shared memory it needs."""
    f = _function(v.name)
    if v.shared:
        limit = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["sharedMemPerBlockOptin"]
        if v.shared + f.shared_size_bytes > limit:
            raise ValueError(f"{v.name} needs {v.shared + f.shared_size_bytes} bytes of shared memory per block; "
                             f"this device allows {limit}: use fewer stages or slices")
        f.max_dynamic_shared_size_bytes = v.shared
    return f


def resources(v: Variant) -> Kernel:
    """What one block of chunk kernel ``v`` needs, as compiled for this device: the occupancy formula's input."""
    f = _chunk_function(v)
    return Kernel(threads=int(np.prod(v.block)), shared_bytes=f.shared_size_bytes + v.shared,
                  registers_per_thread=f.num_regs, tile=v.rows, tile_n=v.cols)


def _pairs(X: Array, fast_axis: int, even_starts: bool) -> bool:
    """Whether X's rows can be copied in 16-byte pairs along ``fast_axis``: that axis has unit stride, the
    pointer is 16-byte aligned, the other stride is even and each chunk's first element along it is even."""
    s = _strides(X)
    return (COPY_BYTES == 16 and s[fast_axis] == 1 and s[1 - fast_axis] % 2 == 0 and X.data.ptr % 16 == 0
            and even_starts)


def flags(v: Variant, A: Array, B: Array, plan: SplitPlan, atomic: bool) -> int:
    """The chunk kernels' ``flags`` (source: ``ATOMIC``, ``A_PAIRS``, ``B_PAIRS``): pairs are the pipelined
    kernel's, where :func:`_pairs` allows them (A along k: every chunk starts on an even element; B along n)."""
    pairs = 0
    if v.name.startswith("splitk_pipe"):
        even = plan.unit % 2 == 0 or (plan.base % 2 == 0 and plan.extra == 0)
        pairs = 2 * _pairs(A, 1, even) + 4 * _pairs(B, 1, True)
    return int(atomic) | pairs


def launch(v: Variant, A: Array, B: Array, out: Array, strides: tuple, plan: SplitPlan, alpha: float,
           atomic: bool) -> None:
    """Run chunk kernel ``v`` over the plan's grid (see the module notes)."""
    grid = (-(-plan.n // v.cols), -(-plan.m // v.rows), plan.chunks)
    args = (A, *_strides(A), B, *_strides(B), out, *strides, np.int32(plan.m), np.int32(plan.n),
            np.int64(plan.base), np.int64(plan.extra), np.int64(plan.unit), np.float64(alpha),
            np.int32(flags(v, A, B, plan, atomic)))
    _chunk_function(v)(grid, v.block, args, shared_mem=v.shared)


class CudaOps:
    """Split-K on CuPy arrays (see the module notes)."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def limits(self) -> SMLimits:
        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        return SMLimits(threads=props["maxThreadsPerMultiProcessor"], shared_bytes=props["sharedMemPerMultiprocessor"],
                        registers=props["regsPerMultiprocessor"], blocks=props["maxBlocksPerMultiProcessor"],
                        sm_count=props["multiProcessorCount"])

    def kernel(self, dtype: Any, m: int, n: int) -> Kernel:
        """The resources of the chunk kernel an m x n output runs, as compiled for this device, and those of
        its wide form where that differs."""
        v, wide = variant(dtype, m, n), variant(dtype, m, n, wide=True)
        return replace(resources(v), wide=resources(wide) if wide != v else None)

    def partials(self, A: Array, B: Array, P: Array, plan: SplitPlan, alpha: float) -> None:
        strides = (np.int64(plan.n), np.int64(1), np.int64(plan.m * plan.n))
        launch(variant(A.dtype, plan.m, plan.n, plan.wide), A, B, P, strides, plan, alpha, False)

    def reduce(self, P: Array, C: Array, plan: SplitPlan, alpha: float, beta: float) -> None:
        outputs = plan.m * plan.n
        sizes = (np.int64(outputs), np.int64(plan.chunks), np.int64(plan.group))
        if plan.group > 1:
            _elementwise("splitk_groups", C.dtype)(_blocks(plan.groups * outputs), (_THREADS,), (P, *sizes))
        _elementwise("splitk_finish", C.dtype)(_blocks(outputs), (_THREADS,),
                                               (P, *sizes, C, *_strides(C), np.int32(plan.n), np.float64(alpha),
                                                np.float64(beta)))

    def scale(self, C: Array, beta: float) -> None:
        """C = beta C; zeros by one ``cudaMemsetAsync`` where beta is 0 and C is contiguous (on the H100 the
        kernel's launch and run cost 1-3% of the copy's bandwidth at k = 2^20-2^21 beside it); nothing where
        beta is 1."""
        if beta == 1:
            return
        if beta == 0 and (C.flags.c_contiguous or C.flags.f_contiguous):
            C.data.memset_async(0, C.nbytes)
            return
        _elementwise("splitk_scale", C.dtype)(
            _blocks(C.size), (_THREADS,), (C, *_strides(C), np.int32(C.shape[0]), np.int32(C.shape[1]),
                                           np.float64(beta)))

    def accumulate(self, A: Array, B: Array, C: Array, plan: SplitPlan, alpha: float) -> None:
        launch(variant(A.dtype, plan.m, plan.n, plan.wide), A, B, C, (*_strides(C), np.int64(0)), plan, alpha, True)
