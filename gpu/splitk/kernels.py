"""CUDA kernels of split-K (CuPy only): the chunk products on a 3-D grid, and the fixed-order reduction.

Loaded by :meth:`gpu.backend.Backend.ops` for the CuPy backend only (``"splitk"``):
:class:`CudaOps` is the GPU twin of :class:`gpu.splitk.ops.HostOps`. Each kernel is
compiled by NVRTC on first use (one instantiation per :class:`Variant`) and cached by CuPy.

The chunk kernels share one signature: block (x, y, z) computes output tile (y, x) of
chunk z, A_z B_z, reading A and B through their strides (row- or column-major views
with a leading dimension: no copy), and either stores alpha A_z B_z in the chunk's slot
of the workspace or adds it into C with ``atomicAdd`` (the paper's mode).

* ``splitk_dmma`` (FP64, sm_80+): FP64 tensor cores (``mma.sync.m16n8k16.f64`` on sm_90,
  ``m8n8k4`` on sm_80: :data:`ATOMS`). Each of 4 warps owns a tile of up to 32 x 32 and loads
  its fragments straight from global memory into registers (every 32-byte sector read
  whole, in any layout), :data:`DEPTH` along k at a time so that many loads are in flight,
  with a 256-byte L2 fetch where that helps (:data:`L2_FETCH`); A and B are read from DRAM once. Warps that
  the output does not need split the block's chunk between them (k-steps dealt round-robin),
  and their sums meet in shared memory in warp order, so the result is fixed by the plan.
* ``splitk_tile`` (FP32, or FP64 before sm_80): 16 x 16 outputs per block through shared
  tiles 16 deep, one output per thread (the paper's kernel).
* ``splitk_groups`` and ``splitk_finish``: the deterministic reduction in the plan's order
  (:class:`gpu.splitk.plan.SplitPlan`), with round-to-nearest intrinsics so that no
  multiply-add is contracted: the same operations as the NumPy path. Their loops are
  unrolled so that the loads of a chain are in flight together (the additions stay in order).
* ``splitk_scale``: C = beta C before the atomic additions (zeros where beta is 0).
"""

from __future__ import annotations

from dataclasses import dataclass
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

_SOURCE = r"""
__device__ inline double add_rn(double a, double b) { return __dadd_rn(a, b); }
__device__ inline float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ inline double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ inline float mul_rn(float a, float b) { return __fmul_rn(a, b); }

__device__ inline void chunk_range(long long base, long long extra, long long& start, long long& stop)
{
    const long long z = blockIdx.z;
    start = z * base + min(z, extra);
    stop = start + base + (z < extra ? 1 : 0);
}

template <typename T>
__device__ inline void emit(T* out, long long at, T value, int atomic)
{
    if (atomic) atomicAdd(out + at, value);
    else out[at] = value;
}

#define KT 16
template <typename T>
__global__ void __launch_bounds__(__TILE__ * __TILE__)
splitk_tile(const T* __restrict__ A, long long sa0, long long sa1,
            const T* __restrict__ B, long long sb0, long long sb1,
            T* __restrict__ out, long long so0, long long so1, long long so2,
            int m, int n, long long base, long long extra, T alpha, int atomic)
{
    constexpr int TILE = __TILE__;
    __shared__ T As[TILE][KT + 1];
    __shared__ T Bs[KT][TILE + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row0 = blockIdx.y * TILE, col0 = blockIdx.x * TILE;
    long long start, stop;
    chunk_range(base, extra, start, stop);
    T acc = T(0);
    for (long long l0 = start; l0 < stop; l0 += KT) {
        const int ar = row0 + ty, bc = col0 + tx;
        const long long aq = l0 + tx, bq = l0 + ty;
        As[ty][tx] = (ar < m && aq < stop) ? A[ar * sa0 + aq * sa1] : T(0);
        Bs[ty][tx] = (bq < stop && bc < n) ? B[bq * sb0 + bc * sb1] : T(0);
        __syncthreads();
#pragma unroll
        for (int q = 0; q < KT; ++q) acc += As[ty][q] * Bs[q][tx];
        __syncthreads();
    }
    const int r = row0 + ty, c = col0 + tx;
    if (r < m && c < n) emit(out, (atomic ? 0 : blockIdx.z * so2) + r * so0 + c * so1, mul_rn(alpha, acc), atomic);
}

template <int L2> __device__ inline double load(const double* p) { return __ldg(p); }
template <> __device__ inline double load<256>(const double* p)
{
    double v;
    asm("ld.global.nc.L2::256B.f64 %0, [%1];" : "=d"(v) : "l"(p));
    return v;
}

template <int H, int J> struct Atom;
template <> struct Atom<1, 1> {
    static __device__ inline void mma(double* c, const double* a, const double* b)
    {
        asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0, %1}, {%2}, {%3}, {%0, %1};\n"
                     : "+d"(c[0]), "+d"(c[1]) : "d"(a[0]), "d"(b[0]));
    }
};
template <> struct Atom<2, 4> {
    static __device__ inline void mma(double* c, const double* a, const double* b)
    {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f64.f64.f64.f64 {%0, %1, %2, %3}, "
                     "{%4, %5, %6, %7, %8, %9, %10, %11}, {%12, %13, %14, %15}, {%0, %1, %2, %3};\n"
                     : "+d"(c[0]), "+d"(c[1]), "+d"(c[2]), "+d"(c[3])
                     : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(a[4]), "d"(a[5]), "d"(a[6]), "d"(a[7]),
                       "d"(b[0]), "d"(b[1]), "d"(b[2]), "d"(b[3]));
    }
};

template <int H, int J, int TM, int TN, int WMS, int WNS, int U, int L2>
__global__ void __launch_bounds__(__WARPS__ * 32)
splitk_dmma(const double* __restrict__ A, long long sa0, long long sa1,
            const double* __restrict__ B, long long sb0, long long sb1,
            double* __restrict__ out, long long so0, long long so1, long long so2,
            int m, int n, long long base, long long extra, double alpha, int atomic)
{
    constexpr int AM = 8 * H, AK = 4 * J, KW = __WARPS__ / (WMS * WNS);
    constexpr int BM = AM * TM * WMS, BN = 8 * TN * WNS, STEP = AK * U;
    __shared__ double S[KW][BM][BN + 1];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int wm = warp % WMS, wn = (warp / WMS) % WNS, wk = warp / (WMS * WNS);
    const int g = lane >> 2, t = lane & 3, r0 = wm * TM * AM, c0 = wn * TN * 8;
    long long start, stop;
    chunk_range(base, extra, start, stop);
    const double* pa[TM][H];
    const double* pb[TN];
    bool va[TM][H], vb[TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int h = 0; h < H; ++h) {
            const int r = blockIdx.y * BM + r0 + AM * i + 8 * h + g;
            va[i][h] = r < m;
            pa[i][h] = A + (va[i][h] ? r : 0) * sa0 + (start + t) * sa1;
        }
#pragma unroll
    for (int j = 0; j < TN; ++j) {
        const int c = blockIdx.x * BN + c0 + 8 * j + g;
        vb[j] = c < n;
        pb[j] = B + (vb[j] ? c : 0) * sb1 + (start + t) * sb0;
    }
    double acc[TM][TN][2 * H];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j)
#pragma unroll
            for (int e = 0; e < 2 * H; ++e) acc[i][j][e] = 0.0;
    const long long steps = (stop - start) / STEP;
    for (long long s = wk; s < steps; s += KW) {
        const long long qa = s * STEP * sa1, qb = s * STEP * sb0;
        double a[U][TM][J * H], b[U][TN][J];
#pragma unroll
        for (int u = 0; u < U; ++u)
#pragma unroll
            for (int q = 0; q < J; ++q) {
#pragma unroll
                for (int i = 0; i < TM; ++i)
#pragma unroll
                    for (int h = 0; h < H; ++h) a[u][i][q * H + h] = load<L2>(pa[i][h] + qa + (AK * u + 4 * q) * sa1);
#pragma unroll
                for (int j = 0; j < TN; ++j) b[u][j][q] = load<L2>(pb[j] + qb + (AK * u + 4 * q) * sb0);
            }
#pragma unroll
        for (int u = 0; u < U; ++u) {
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int q = 0; q < J * H; ++q) a[u][i][q] = va[i][q % H] ? a[u][i][q] : 0.0;
#pragma unroll
            for (int j = 0; j < TN; ++j)
#pragma unroll
                for (int q = 0; q < J; ++q) b[u][j][q] = vb[j] ? b[u][j][q] : 0.0;
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) Atom<H, J>::mma(acc[i][j], a[u][i], b[u][j]);
        }
    }
    if (wk == steps % KW) {
        const long long done = steps * STEP;
#pragma unroll
        for (int u = 0; u < U; ++u) {
            double a[TM][J * H], b[TN][J];
#pragma unroll
            for (int q = 0; q < J; ++q) {
                const long long off = done + AK * u + 4 * q;
                const bool inside = start + off + t < stop;
#pragma unroll
                for (int i = 0; i < TM; ++i)
#pragma unroll
                    for (int h = 0; h < H; ++h)
                        a[i][q * H + h] = (inside && va[i][h]) ? pa[i][h][off * sa1] : 0.0;
#pragma unroll
                for (int j = 0; j < TN; ++j) b[j][q] = (inside && vb[j]) ? pb[j][off * sb0] : 0.0;
            }
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) Atom<H, J>::mma(acc[i][j], a[i], b[j]);
        }
    }
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j)
#pragma unroll
            for (int e = 0; e < 2 * H; ++e)
                S[wk][r0 + AM * i + 8 * (e / 2) + g][c0 + 8 * j + 2 * t + e % 2] = acc[i][j][e];
    __syncthreads();
    for (int o = threadIdx.x; o < BM * BN; o += blockDim.x) {
        const int r = o / BN, c = o - r * BN, gr = blockIdx.y * BM + r, gc = blockIdx.x * BN + c;
        double sum = S[0][r][c];
#pragma unroll
        for (int w = 1; w < KW; ++w) sum = add_rn(sum, S[w][r][c]);
        if (gr < m && gc < n)
            emit(out, (atomic ? 0 : blockIdx.z * so2) + gr * so0 + gc * so1, mul_rn(alpha, sum), atomic);
    }
}

template <typename T>
__global__ void splitk_groups(T* P, long long outputs, long long chunks, long long group)
{
    const long long groups = (chunks + group - 1) / group, total = groups * outputs;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        const long long g = i / outputs, o = i - g * outputs, first = g * group;
        const long long last = min(chunks, first + group);
        T s = P[first * outputs + o];
#pragma unroll 8
        for (long long h = first + 1; h < last; ++h) s = add_rn(s, P[h * outputs + o]);
        P[first * outputs + o] = s;
    }
}

template <typename T>
__global__ void splitk_finish(const T* __restrict__ P, long long outputs, long long chunks,
                              long long group, T* C, long long sc0, long long sc1, int n, T beta)
{
    for (long long o = (long long)blockIdx.x * blockDim.x + threadIdx.x; o < outputs;
         o += (long long)gridDim.x * blockDim.x) {
        T s = P[o];
#pragma unroll 8
        for (long long first = group; first < chunks; first += group) s = add_rn(s, P[first * outputs + o]);
        const long long r = o / n, c = o - r * n;
        T* dst = C + r * sc0 + c * sc1;
        *dst = beta == T(0) ? s : add_rn(s, mul_rn(beta, *dst));
    }
}

template <typename T>
__global__ void splitk_scale(T* C, long long sc0, long long sc1, int m, int n, T beta)
{
    const long long outputs = (long long)m * n;
    for (long long o = (long long)blockIdx.x * blockDim.x + threadIdx.x; o < outputs;
         o += (long long)gridDim.x * blockDim.x) {
        const long long r = o / n, c = o - r * n;
        T* dst = C + r * sc0 + c * sc1;
        *dst = beta == T(0) ? T(0) : mul_rn(beta, *dst);
    }
}
""".replace("__TILE__", str(TILE)).replace("__WARPS__", str(WARPS))


@dataclass(frozen=True)
class Variant:
    """One chunk kernel as data: its template instantiation, block shape and output tile."""

    name: str
    block: tuple[int, ...]
    rows: int
    cols: int

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
        tm, tn = min(warp_tile // (8 * h), -(-m // (8 * h))), min(warp_tile // 8, -(-n // 8))
        wms, wns = 2 if m > 8 * h * tm else 1, 2 if n > 8 * tn else 1
        l2 = (L2_FETCH if wms * wns < WARPS else 0) if l2 is None else l2
        return Variant(f"splitk_dmma<{h}, {j}, {tm}, {tn}, {wms}, {wns}, {max(1, depth // (4 * j))}, {l2}>",
                       (32 * WARPS,), 8 * h * tm * wms, 8 * tn * wns)


def atom(capability: int) -> tuple[int, int] | None:
    """The FP64 tensor-core instruction of a compute capability (None before sm_80)."""
    return next((a for since, a in ATOMS if capability >= since), None)


def variant(dtype: Any, m: int, n: int) -> Variant:
    """The chunk kernel for this dtype and output on the current device: tensor cores for FP64 on sm_80+."""
    a = atom(int(cupy.cuda.Device().compute_capability))
    if np.dtype(dtype) == np.float64 and a is not None:
        return Variant.dmma(m, n, a)
    return Variant.tile(dtype)


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


def launch(v: Variant, A: Array, B: Array, out: Array, strides: tuple, plan: SplitPlan, alpha: float,
           atomic: bool) -> None:
    """Run chunk kernel ``v`` over the plan's grid (see the module notes)."""
    grid = (-(-plan.n // v.cols), -(-plan.m // v.rows), plan.chunks)
    _function(v.name)(grid, v.block, (A, *_strides(A), B, *_strides(B), out, *strides, np.int32(plan.m),
                                      np.int32(plan.n), np.int64(plan.base), np.int64(plan.extra),
                                      A.dtype.type(alpha), np.int32(atomic)))


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
        """The resources of the chunk kernel an m x n output runs, as compiled for this device."""
        v = variant(dtype, m, n)
        f = _function(v.name)
        return Kernel(threads=int(np.prod(v.block)), shared_bytes=f.shared_size_bytes,
                      registers_per_thread=f.num_regs, tile=v.rows, tile_n=v.cols)

    def partials(self, A: Array, B: Array, P: Array, plan: SplitPlan, alpha: float) -> None:
        strides = (np.int64(plan.n), np.int64(1), np.int64(plan.m * plan.n))
        launch(variant(A.dtype, plan.m, plan.n), A, B, P, strides, plan, alpha, False)

    def reduce(self, P: Array, C: Array, plan: SplitPlan, beta: float) -> None:
        outputs = plan.m * plan.n
        sizes = (np.int64(outputs), np.int64(plan.chunks), np.int64(plan.group))
        if plan.group > 1:
            _elementwise("splitk_groups", C.dtype)(_blocks(plan.groups * outputs), (_THREADS,), (P, *sizes))
        _elementwise("splitk_finish", C.dtype)(_blocks(outputs), (_THREADS,),
                                               (P, *sizes, C, *_strides(C), np.int32(plan.n), C.dtype.type(beta)))

    def scale(self, C: Array, beta: float) -> None:
        _elementwise("splitk_scale", C.dtype)(
            _blocks(C.size), (_THREADS,), (C, *_strides(C), np.int32(C.shape[0]), np.int32(C.shape[1]),
                                           C.dtype.type(beta)))

    def accumulate(self, A: Array, B: Array, C: Array, plan: SplitPlan, alpha: float) -> None:
        launch(variant(A.dtype, plan.m, plan.n), A, B, C, (*_strides(C), np.int64(0)), plan, alpha, True)
