"""CUDA kernels of split-K (CuPy only): the chunk products on a 3-D grid, and the fixed-order reduction.

Loaded by :meth:`gpu.backend.Backend.ops` for the CuPy backend only (``"splitk"``):
:class:`CudaOps` is the GPU twin of :class:`gpu.splitk.ops.HostOps`. Compiled by NVRTC on
first use (one module per dtype) and cached by CuPy.

* ``splitk_chunk``: block (x, y, z) computes the 16 x 16 output tile (y, x) of chunk z,
  A_z B_z, through shared-memory tiles 16 deep, reading A and B through their strides
  (row- or column-major views with a leading dimension: no copy), and either stores
  alpha A_z B_z in the chunk's slot of the workspace or adds it into C with ``atomicAdd``
  (the paper's mode; FP64 ``atomicAdd`` is native from sm_60).
* ``splitk_groups`` and ``splitk_finish``: the deterministic reduction in the plan's order
  (:class:`gpu.splitk.plan.SplitPlan`): each group's chunks into its first slot, then the
  group sums, then ``+ beta C``, with round-to-nearest intrinsics so that no multiply-add
  is contracted: the same operations as the NumPy path.
* ``splitk_scale``: C = beta C before the atomic additions (zeros where beta is 0).
"""

from __future__ import annotations

from functools import cache
from typing import Any

import cupy
import numpy as np

from ..backend import Array, Backend
from .occupancy import Kernel, SMLimits
from .ops import TILE
from .plan import SplitPlan

_CTYPES = {np.dtype(np.float64): "double", np.dtype(np.float32): "float"}
#: Threads per block of the element-wise kernels, and the most blocks they launch (grid-stride loops).
_THREADS, _MAX_BLOCKS = 256, 4096

_SOURCE = r"""
#define TILE __TILE__
#define KT 16
__device__ inline double add_rn(double a, double b) { return __dadd_rn(a, b); }
__device__ inline float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ inline double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ inline float mul_rn(float a, float b) { return __fmul_rn(a, b); }

extern "C" __global__ void __launch_bounds__(TILE * TILE)
splitk_chunk(const T* __restrict__ A, long long sa0, long long sa1,
             const T* __restrict__ B, long long sb0, long long sb1,
             T* __restrict__ out, long long so0, long long so1, long long so2,
             int m, int n, long long base, long long extra, T alpha, int atomic)
{
    __shared__ T As[TILE][KT + 1];
    __shared__ T Bs[KT][TILE + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row0 = blockIdx.y * TILE, col0 = blockIdx.x * TILE;
    const long long z = blockIdx.z;
    const long long start = z * base + min(z, extra);
    const long long stop = start + base + (z < extra ? 1 : 0);
    T acc = T(0);
    for (long long l0 = start; l0 < stop; l0 += KT) {
        const int ar = row0 + ty;
        const long long aq = l0 + tx, bq = l0 + ty;
        const int bc = col0 + tx;
        As[ty][tx] = (ar < m && aq < stop) ? A[ar * sa0 + aq * sa1] : T(0);
        Bs[ty][tx] = (bq < stop && bc < n) ? B[bq * sb0 + bc * sb1] : T(0);
        __syncthreads();
#pragma unroll
        for (int q = 0; q < KT; ++q) acc += As[ty][q] * Bs[q][tx];
        __syncthreads();
    }
    const int r = row0 + ty, c = col0 + tx;
    if (r < m && c < n) {
        if (atomic) atomicAdd(out + r * so0 + c * so1, mul_rn(alpha, acc));
        else out[blockIdx.z * so2 + r * so0 + c * so1] = mul_rn(alpha, acc);
    }
}

extern "C" __global__ void splitk_groups(T* P, long long outputs, long long chunks, long long group)
{
    const long long groups = (chunks + group - 1) / group, total = groups * outputs;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        const long long g = i / outputs, o = i - g * outputs, first = g * group;
        const long long last = min(chunks, first + group);
        T s = P[first * outputs + o];
        for (long long h = first + 1; h < last; ++h) s = add_rn(s, P[h * outputs + o]);
        P[first * outputs + o] = s;
    }
}

extern "C" __global__ void splitk_finish(const T* __restrict__ P, long long outputs, long long chunks,
                                         long long group, T* C, long long sc0, long long sc1, int n, T beta)
{
    for (long long o = (long long)blockIdx.x * blockDim.x + threadIdx.x; o < outputs;
         o += (long long)gridDim.x * blockDim.x) {
        T s = P[o];
        for (long long first = group; first < chunks; first += group) s = add_rn(s, P[first * outputs + o]);
        const long long r = o / n, c = o - r * n;
        T* dst = C + r * sc0 + c * sc1;
        *dst = beta == T(0) ? s : add_rn(s, mul_rn(beta, *dst));
    }
}

extern "C" __global__ void splitk_scale(T* C, long long sc0, long long sc1, int m, int n, T beta)
{
    const long long outputs = (long long)m * n;
    for (long long o = (long long)blockIdx.x * blockDim.x + threadIdx.x; o < outputs;
         o += (long long)gridDim.x * blockDim.x) {
        const long long r = o / n, c = o - r * n;
        T* dst = C + r * sc0 + c * sc1;
        *dst = beta == T(0) ? T(0) : mul_rn(beta, *dst);
    }
}
"""


@cache
def _module(dtype: np.dtype) -> Any:
    source = f"typedef {_CTYPES[dtype]} T;\n" + _SOURCE.replace("__TILE__", str(TILE))
    return cupy.RawModule(code=source, options=("--std=c++14",))


def _strides(X: Array) -> tuple[np.int64, np.int64]:
    return tuple(np.int64(s // X.itemsize) for s in X.strides)


def _blocks(total: int) -> tuple[int]:
    return (max(1, min(_MAX_BLOCKS, -(-total // _THREADS))),)


class CudaOps:
    """Split-K on CuPy arrays (see the module notes)."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def limits(self) -> SMLimits:
        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        return SMLimits(threads=props["maxThreadsPerMultiProcessor"], shared_bytes=props["sharedMemPerMultiprocessor"],
                        registers=props["regsPerMultiprocessor"], blocks=props["maxBlocksPerMultiProcessor"],
                        sm_count=props["multiProcessorCount"])

    def kernel(self, dtype: Any) -> Kernel:
        """The chunk kernel's real resources, as compiled for this device."""
        f = _module(np.dtype(dtype)).get_function("splitk_chunk")
        return Kernel(threads=TILE * TILE, shared_bytes=f.shared_size_bytes, registers_per_thread=f.num_regs,
                      tile=TILE)

    def _chunks(self, A: Array, B: Array, out: Array, strides: tuple, plan: SplitPlan, alpha: float,
                atomic: bool) -> None:
        t = A.dtype.type
        f = _module(A.dtype).get_function("splitk_chunk")
        grid = (-(-plan.n // TILE), -(-plan.m // TILE), plan.chunks)
        f(grid, (TILE, TILE), (A, *_strides(A), B, *_strides(B), out, *strides, np.int32(plan.m), np.int32(plan.n),
                               np.int64(plan.base), np.int64(plan.extra), t(alpha), np.int32(atomic)))

    def partials(self, A: Array, B: Array, P: Array, plan: SplitPlan, alpha: float) -> None:
        self._chunks(A, B, P, (np.int64(plan.n), np.int64(1), np.int64(plan.m * plan.n)), plan, alpha, False)

    def reduce(self, P: Array, C: Array, plan: SplitPlan, beta: float) -> None:
        mod, outputs = _module(C.dtype), plan.m * plan.n
        sizes = (np.int64(outputs), np.int64(plan.chunks), np.int64(plan.group))
        if plan.group > 1:
            mod.get_function("splitk_groups")(_blocks(plan.groups * outputs), (_THREADS,), (P, *sizes))
        mod.get_function("splitk_finish")(_blocks(outputs), (_THREADS,),
                                          (P, *sizes, C, *_strides(C), np.int32(plan.n), C.dtype.type(beta)))

    def scale(self, C: Array, beta: float) -> None:
        _module(C.dtype).get_function("splitk_scale")(
            _blocks(C.size), (_THREADS,), (C, *_strides(C), np.int32(C.shape[0]), np.int32(C.shape[1]),
                                           C.dtype.type(beta)))

    def accumulate(self, A: Array, B: Array, C: Array, plan: SplitPlan, alpha: float) -> None:
        self._chunks(A, B, C, (*_strides(C), np.int64(0)), plan, alpha, True)
