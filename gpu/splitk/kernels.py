"""CUDA kernels of split-K (CuPy only): the chunk products on a 3-D grid, and the fixed-order reduction.

Loaded by :meth:`gpu.backend.Backend.ops` for the CuPy backend only (``"splitk"``):
:class:`CudaOps` is the GPU twin of :class:`gpu.splitk.ops.HostOps`. A plan compiles the
template instantiations it launches and no other, together in one NVRTC run
(:meth:`CudaOps.split`, :mod:`gpu.splitk.compiled`; each chunk kernel is a :class:`Variant`), and
binds them (:meth:`CudaOps.bind`: a :class:`Launcher` whose launches are sized once), so that a
call only launches. CuPy keeps the compiled binaries on disk for the next process.

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
  flight no longer cost registers (cuBLAS's small-output kernels do the same).
* ``splitk_bulk`` (FP64, sm_90): the same tiles and mma, fed by the TMA: a producer thread copies
  each stage as one tensor-map box of A and one of B into an mbarrier ring
  (:mod:`gpu.splitk.bulk_source`, :mod:`gpu.splitk.tensormap`); where the operands cannot be mapped,
  :class:`ChunkLaunch` hands the call to ``splitk_pipe``. The default on sm_90 (:func:`variant`).
* ``splitk_tile`` (FP32, or FP64 before sm_80): 16 x 16 outputs per block through shared
  tiles 16 deep, one output per thread (the paper's kernel).
* ``splitk_reduce``: the deterministic reduction in the plan's order, in one launch
  (:class:`gpu.splitk.plan.SplitPlan`), with round-to-nearest intrinsics so that no
  multiply-add is contracted: the same operations as the NumPy path; it applies
  alpha and beta in double and rounds once (the chunk kernels store unscaled partials there). Its group loop is
  unrolled so that the loads of a chain are in flight together (the additions stay in order).
* ``splitk_scale``: C = beta C before the atomic additions (a memset instead where beta is 0 and C
  is contiguous).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import cupy
import numpy as np
from cupy.cuda.function import CPointer

from ..backend import Array, Backend
from ..backend.memo import LRU
from . import tensormap
from .compiled import (  # noqa: F401  (re-exported for scripts and tests)
    _chunk_function,
    _elementwise,
    _properties,
    compile_names,
    reduction_names,
    resources,
    resources_of,
    variant,
)
from .occupancy import Kernel, SMLimits
from .plan import SplitPlan
from .plan import plan as split_plan
from .variants import (  # noqa: F401  (the variants' names, re-exported for scripts and tests)
    _CTYPES,
    ATOMS,
    DEPTH,
    L2_FETCH,
    PIPELINED,
    STAGES,
    TUNED,
    WARP_TILE,
    WARPS,
    WIDE_SLICES,
    Variant,
    atom,
    choose,
)

#: Threads per block of the element-wise kernels, and the most blocks they launch (grid-stride loops).
_THREADS, _MAX_BLOCKS = 256, 4096
#: The ``flags`` bits of the chunk kernels (see the source).
ATOMIC, A_PAIRS, B_PAIRS = 1, 2, 4
#: Widest ``cp.async`` of the pipelined kernel, bytes: 16 copies two FP64 elements per instruction where the
#: layout and alignment allow (:func:`flags`), 8 one.
COPY_BYTES = 16

def _strides(X: Array) -> tuple[np.int64, np.int64]:
    return tuple(np.int64(s // X.itemsize) for s in X.strides)


def _blocks(total: int) -> tuple[int]:
    return (max(1, min(_MAX_BLOCKS, -(-total // _THREADS))),)


def _pair_layout(strides: tuple[int, int], fast_axis: int) -> bool:
    """Whether a view of these element strides has its rows along ``fast_axis`` in 16-byte pairs (wherever its
    first element is 16-byte aligned): unit stride along that axis, an even stride along the other."""
    return COPY_BYTES == 16 and strides[fast_axis] == 1 and strides[1 - fast_axis] % 2 == 0


def _even_starts(plan: SplitPlan) -> bool:
    """Whether every chunk of the plan starts on an even element along k."""
    return plan.unit % 2 == 0 or (plan.base % 2 == 0 and plan.extra == 0)


def _pairs(X: Array, fast_axis: int, even_starts: bool) -> bool:
    """Whether X's rows can be copied in 16-byte pairs along ``fast_axis``: that axis has unit stride, the
    pointer is 16-byte aligned, the other stride is even and each chunk's first element along it is even."""
    return _pair_layout(_strides(X), fast_axis) and X.data.ptr % 16 == 0 and even_starts


def flags(v: Variant, A: Array, B: Array, plan: SplitPlan, atomic: bool) -> int:
    """The chunk kernels' ``flags`` (source: ``ATOMIC``, ``A_PAIRS``, ``B_PAIRS``): pairs are the pipelined
    kernel's, where :func:`_pairs` allows them (A along k: every chunk starts on an even element; B along n)."""
    pairs = 0
    if v.pairs:
        pairs = A_PAIRS * _pairs(A, 1, _even_starts(plan)) + B_PAIRS * _pairs(B, 1, True)
    return int(atomic) | pairs


class ChunkLaunch:
    """Chunk kernel ``v`` over a plan's grid for operands of A's and B's strides, into ``out`` of element
    strides ``out_strides`` (a chunk's slot, row, column): the compiled function, grid, block, shared memory
    and every argument fixed once, but the addresses, alpha, and the pair flags that hang on the addresses'
    alignment (:func:`flags`). A kernel that reads through tensor maps (:attr:`Variant.maps`) runs where
    :func:`_boxes` allows, and keeps the maps of the last
    :data:`MAPS` address pairs; it hands any other call to the pipelined kernel of the same output
    (:meth:`Variant.tuned`), bound on first need."""

    def __init__(self, v: Variant, plan: SplitPlan, A: Array, B: Array, out_strides: tuple, atomic: bool) -> None:
        self.plan, self.out_strides = plan, out_strides
        self.grid = (-(-plan.n // v.cols), -(-plan.m // v.rows), plan.chunks)
        self.block, self.shared = v.block, v.shared
        self.a_strides, self.b_strides = _strides(A), _strides(B)
        self.sizes = (*out_strides, np.int32(plan.m), np.int32(plan.n), np.int64(plan.base), np.int64(plan.extra),
                      np.int64(plan.unit))
        self.atomic = ATOMIC if atomic else 0
        self.a_pairs = v.pairs and _even_starts(plan) and _pair_layout(self.a_strides, 1)
        self.b_pairs = v.pairs and _pair_layout(self.b_strides, 1)
        self.mapped = v.maps
        mappable = v.maps and self.a_pairs and self.b_pairs
        self.boxes = _boxes(v, plan, self.a_strides, self.b_strides) if mappable else None
        self.function = _chunk_function(v) if not v.maps or self.boxes else None
        self.maps = LRU(MAPS)                   # shared by the threads that call one kept plan
        self._fallback: ChunkLaunch | None = None

    def fallback(self, A: Array, B: Array) -> ChunkLaunch:
        """The pipelined kernel's launch for calls this kernel cannot take."""
        if self._fallback is None:
            v = Variant.tuned(self.plan.m, self.plan.n, wide=self.plan.wide)
            self._fallback = ChunkLaunch(v, self.plan, A, B, self.out_strides, bool(self.atomic))
        return self._fallback

    def _maps(self, a: int, b: int) -> tuple:
        """The kernel's tensor-map arguments for A at ``a`` and B at ``b``: pointers to their 128 bytes (the
        encoded arrays kept beside them), which CuPy passes by value without another look."""
        found = self.maps.get((a, b))
        if found is None:
            held = (self.boxes[0].encode(a), self.boxes[1].encode(b))
            found = (CPointer(held[0].ctypes.data), CPointer(held[1].ctypes.data), held)
            self.maps[(a, b)] = found
        return found[:2]

    def __call__(self, A: Array, B: Array, out: Array, alpha: float) -> None:
        a, b = A.data.ptr, B.data.ptr
        if self.mapped:
            if self.boxes is None or a % 16 or b % 16:
                self.fallback(A, B)(A, B, out, alpha)
                return
            extra = self._maps(a, b)
        else:
            extra = ()
        flag = self.atomic | (A_PAIRS if self.a_pairs and a % 16 == 0 else 0) | \
            (B_PAIRS if self.b_pairs and b % 16 == 0 else 0)
        self.function(self.grid, self.block, (A, *self.a_strides, B, *self.b_strides, out, *self.sizes,
                                              np.float64(alpha), np.int32(flag), *extra), shared_mem=self.shared)


#: Address pairs whose tensor maps one bulk-kernel launch keeps.
MAPS = 8


def _boxes(v: Variant, plan: SplitPlan, a_strides: tuple, b_strides: tuple) -> tuple | None:
    """The tensor maps' layouts of the bulk kernel (boxes four elements wider than a stage along k in A and
    than the tile along n in B: the padded rows that keep fragment loads free of bank conflicts), or None where
    k passes the TMA's 32-bit coordinates. The caller asks only where both operands' rows copy in 16-byte pairs
    and every chunk starts on an even element (a box's first element along its rows must be 16-byte aligned:
    an odd start was an illegal instruction on the H200)."""
    if plan.k >= 2**31:
        return None
    try:
        return (tensormap.Box(plan.m, plan.k, int(a_strides[0]), v.rows, v.depth + 4),
                tensormap.Box(plan.k, plan.n, int(b_strides[0]), v.depth, v.cols + 4))
    except ValueError:
        return None


#: The launches :func:`launch` made, by device, kernel, plan, layouts and mode (a tensor-map launch keeps its
#: encoded maps, so that an unbound call repeated on the same operands encodes nothing).
_LAUNCHES = LRU(32)


def launch(v: Variant, A: Array, B: Array, out: Array, strides: tuple, plan: SplitPlan, alpha: float,
           atomic: bool) -> None:
    """Run chunk kernel ``v`` over the plan's grid (see the module notes)."""
    key = (cupy.cuda.Device().id, v, plan, _strides(A), _strides(B), tuple(strides), atomic)
    found = _LAUNCHES.get(key)
    if found is None:
        found = _LAUNCHES[key] = ChunkLaunch(v, plan, A, B, strides, atomic)
    found(A, B, out, alpha)


class Reduction:
    """The deterministic reduction of a plan's partials into C of element strides ``c_strides``, in one launch
    (``splitk_reduce``: each block's threads add one group of chunks each for :attr:`per` outputs, then the group
    sums in order): its kernel, grid, block and shared memory fixed once. Measured on the H200 (Nsight Compute, m = n
    = 32, k = 2^22, 132 chunks): the two launches it replaces (a group kernel, then a finishing one) took 5.1 and
    4.4 us beside the chunk kernel's 498 us, as much as split-K then trailed cuBLAS by."""

    def __init__(self, plan: SplitPlan, dtype: Any, c_strides: tuple) -> None:
        outputs = plan.m * plan.n
        self.per = max(1, min(outputs, REDUCE_THREADS // plan.groups))
        self.block = (plan.groups * self.per,)
        self.grid = (-(-outputs // self.per),)
        self.shared = self.block[0] * np.dtype(dtype).itemsize
        self.function = _elementwise("splitk_reduce", dtype)
        self.sizes = (np.int64(outputs), np.int64(plan.chunks), np.int64(plan.group), np.int32(self.per))
        self.c_args = (*c_strides, np.int32(plan.n))

    def __call__(self, P: Array, C: Array, alpha: float, beta: float) -> None:
        self.function(self.grid, self.block, (P, *self.sizes, C, *self.c_args, np.float64(alpha), np.float64(beta)),
                      shared_mem=self.shared)


#: Threads one block of the reduction aims at (a group's chain each): groups x outputs per block.
REDUCE_THREADS = 512


class Scaling:
    """C = beta C for C of one shape and strides: zeros by one ``cudaMemsetAsync`` where beta is 0 and C is
    contiguous (on the H100 the kernel's launch and run cost 1-3% of the copy's bandwidth at k = 2^20-2^21
    beside it); nothing where beta is 1; else a kernel, compiled on first need."""

    def __init__(self, dtype: Any, shape: tuple[int, int], c_strides: tuple, contiguous: bool) -> None:
        self.dtype, self.contiguous = dtype, contiguous
        self.nbytes = shape[0] * shape[1] * np.dtype(dtype).itemsize
        self.args = (*c_strides, np.int32(shape[0]), np.int32(shape[1]))
        self.grid = _blocks(shape[0] * shape[1])
        self.function = None

    def __call__(self, C: Array, beta: float) -> None:
        if beta == 1:
            return
        if beta == 0 and self.contiguous:
            C.data.memset_async(0, self.nbytes)
            return
        if self.function is None:
            self.function = _elementwise("splitk_scale", self.dtype)
        self.function(self.grid, (_THREADS,), (C, *self.args, np.float64(beta)))


def _contiguous(C: Array) -> bool:
    return bool(C.flags.c_contiguous or C.flags.f_contiguous)


class Launcher:
    """:class:`CudaOps`' operations bound to one plan and one operand layout (:meth:`CudaOps.bind`): every
    kernel looked up and every launch sized once, so that a call launches only. Each operation's ``plan``
    argument is the plan it was bound to. ``v``: the chunk kernel (the device's choice, :func:`variant`, where
    None; the tuning scripts name others)."""

    def __init__(self, split: SplitPlan, A: Array, B: Array, c_strides: tuple, contiguous: bool,
                 v: Variant | None = None) -> None:
        v = v or variant(A.dtype, split.m, split.n, split.wide)
        into = ((np.int64(split.n), np.int64(1), np.int64(split.m * split.n)) if split.deterministic
                else (*c_strides, np.int64(0)))
        self.chunks = ChunkLaunch(v, split, A, B, into, not split.deterministic)
        self.reduction = Reduction(split, A.dtype, c_strides) if split.deterministic else None
        self.scaling = Scaling(A.dtype, (split.m, split.n), c_strides, contiguous)

    def partials(self, A: Array, B: Array, P: Array, plan: SplitPlan, alpha: float) -> None:
        self.chunks(A, B, P, alpha)

    def reduce(self, P: Array, C: Array, plan: SplitPlan, alpha: float, beta: float) -> None:
        self.reduction(P, C, alpha, beta)

    def scale(self, C: Array, beta: float) -> None:
        self.scaling(C, beta)

    def accumulate(self, A: Array, B: Array, C: Array, plan: SplitPlan, alpha: float) -> None:
        self.chunks(A, B, C, alpha)


class CudaOps:
    """Split-K on CuPy arrays (see the module notes)."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def limits(self) -> SMLimits:
        props = _properties(cupy.cuda.Device().id)
        return SMLimits(threads=props["maxThreadsPerMultiProcessor"], shared_bytes=props["sharedMemPerMultiprocessor"],
                        registers=props["regsPerMultiprocessor"], blocks=props["maxBlocksPerMultiProcessor"],
                        sm_count=props["multiProcessorCount"])

    def kernel(self, dtype: Any, m: int, n: int) -> Kernel:
        """The resources of the chunk kernel an m x n output runs, as compiled for this device, and those of
        its wide form where that differs."""
        v, wide = variant(dtype, m, n), variant(dtype, m, n, wide=True)
        return replace(resources(v), wide=resources(wide) if wide != v else None)

    def split(self, dtype: Any, m: int, n: int, k: int, *, chunks: int | str = "auto", chunk_width: int | None = None,
              deterministic: bool = True) -> SplitPlan:
        """:func:`gpu.splitk.plan.plan` with this device's limits and kernels, compiling only the kernels the
        split runs: the chunk kernel (whose resources size a wave) with, in the deterministic mode, the
        reduction's, in one NVRTC run; its wide form only where the auto plan is one wave, which runs it."""
        narrow = variant(dtype, m, n)
        compile_names(narrow.name, *(reduction_names(dtype) if deterministic else ()))
        how = {"chunks": chunks, "chunk_width": chunk_width, "deterministic": deterministic}
        kernel, limits = resources(narrow), self.limits()
        split = split_plan(m, n, k, limits, kernel, **how)
        if split.waves == 1 and chunks == "auto" and chunk_width is None:
            wide = variant(dtype, m, n, wide=True)
            if wide != narrow:
                split = split_plan(m, n, k, limits, replace(kernel, wide=resources(wide)), **how)
        return split

    def bind(self, split: SplitPlan, A: Array, B: Array, out: Array | None = None) -> Launcher:
        """These operations for ``split`` and operands of A's, B's and ``out``'s layouts (a new C-ordered C where
        ``out`` is None), with every kernel looked up once (:class:`Launcher`)."""
        if out is None:
            return Launcher(split, A, B, (np.int64(split.n), np.int64(1)), True)
        return Launcher(split, A, B, _strides(out), _contiguous(out))

    def partials(self, A: Array, B: Array, P: Array, plan: SplitPlan, alpha: float) -> None:
        strides = (np.int64(plan.n), np.int64(1), np.int64(plan.m * plan.n))
        launch(variant(A.dtype, plan.m, plan.n, plan.wide), A, B, P, strides, plan, alpha, False)

    def reduce(self, P: Array, C: Array, plan: SplitPlan, alpha: float, beta: float) -> None:
        Reduction(plan, C.dtype, _strides(C))(P, C, alpha, beta)

    def scale(self, C: Array, beta: float) -> None:
        """C = beta C (see :class:`Scaling`)."""
        Scaling(C.dtype, C.shape, _strides(C), _contiguous(C))(C, beta)

    def accumulate(self, A: Array, B: Array, C: Array, plan: SplitPlan, alpha: float) -> None:
        launch(variant(A.dtype, plan.m, plan.n, plan.wide), A, B, C, (*_strides(C), np.int64(0)), plan, alpha, True)
