"""Scheme II's count-independent CUDA kernels (CuPy only), compiled together once, the first time one is needed.

One module (one NVRTC compilation, kept in CuPy's kernel cache on disk) holds every kernel a call runs whatever its
modulus count: the scaling's one read (:mod:`gpu.ozaki2.fused`), and here

* ``ozaki2_count_terms`` and ``ozaki2_count_pick``: ``moduli="auto"``'s normwise bound
  (:mod:`gpu.ozaki2.normwise`): per count (``blockIdx.y``) and side (``blockIdx.z``: A's rows, B's columns)
  the three maxima of the side's terms over its finite nonzero lines, each block's maxima folded in with
  ``atomicMax`` on their bits (non-negative doubles order as their bit patterns); then one thread forms E per
  count, times the safety factor, and writes the fewest count with E <= t (0: none) for the host's one read;
* ``ozaki2_shifts``: the scale codes of fast scaling ((e + u) 2**8, u as :func:`gpu.ozaki2.scaling.half_shift`,
  by the same exact comparison) or of fine scaling (:func:`gpu.ozaki2.scaling.codes`, the same correctly rounded
  operations);
* ``ozaki2_nonfinite``: the entries of C in rows of A or columns of B whose maximum is not finite (NaN or
  infinity), as sums of the products in IEEE arithmetic (NaN or infinity in any order, so the library GEMM's);
  blocks of 256 threads over 32 lines each return at once where their lines are finite.

The per-count kernels (residues, CRT) are compiled per count, when a plan first takes the count
(:mod:`gpu.ozaki2.kernels`). So the first call of the defaults compiles three modules (this one, and the
residue and CRT kernels of the count it picks) and no CuPy element-wise kernel; the first version compiled,
on the old default path (accurate scaling, the componentwise count), the maxima and bars kernels, the residue
and CRT kernels, and about twenty CuPy element-wise and reduction kernels of the bound, the exponents, the
finiteness test and the shifts (fast-15: the fused, residue and CRT kernels and about ten CuPy kernels).
"""

from __future__ import annotations

from functools import cache
from typing import Any

import cupy
import numpy as np

from ..backend import Backend
from ..backend.conditional import SET_CONDITIONAL
from . import fused
from .moduli import MAX_MODULI, MODULI, ModuliTable
from .normwise import TERMS, LineStats, limits, safety
from .scaling import WIDE_BITS, bound_limit, fine_limit
from .workspace import TILE_K, carve_tiles

#: Threads per block of the count and shift kernels, blocks per count and side of the count's terms, and lines
#: per block of the IEEE values' kernel.
THREADS, COUNT_BLOCKS, FIX_LINES = 256, 32, 32

_SOURCE = r"""
#define MAX_COUNT %(count)d
#define TERMS %(terms)d

__device__ __forceinline__ long long half_shift(double R, double mu, long long L)
{
    int ex;
    const double fr = frexp(fmax(R, 1.0), &ex);
    return (L - ex - (fr > mu ? 1 : 0)) >> 1;
}

extern "C" __global__ void ozaki2_count_terms(
    const double* __restrict__ mx_a, const double* __restrict__ R_a, const double* __restrict__ n1_a,
    const double* __restrict__ n2_a, long long m,
    const double* __restrict__ mx_b, const double* __restrict__ R_b, const double* __restrict__ n1_b,
    const double* __restrict__ n2_b, long long n,
    const double* __restrict__ mu, const long long* __restrict__ L, double half_k,
    unsigned long long* __restrict__ terms)
{
    const int c = blockIdx.y, side = blockIdx.z;
    const double* mx = side ? mx_b : mx_a;
    const double* R = side ? R_b : R_a;
    const double* n1 = side ? n1_b : n1_a;
    const double* n2 = side ? n2_b : n2_a;
    const long long lines = side ? n : m;
    double t[TERMS] = {0.0, 0.0, 0.0};
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < lines;
         i += (long long)gridDim.x * blockDim.x) {
        const double sq = n2[i];
        if (!isfinite(mx[i]) || !(sq > 0.0)) continue;
        const long long u = half_shift(R[i], mu[c], L[c]);
        const double p = ldexp(1.0, (int)-u), norm = sqrt(sq), rho = u >= 0 ? 0.5 : 1.0;
        const double v0 = side ? n1[i] / norm : rho * p / norm;
        const double v1 = side ? rho * p / norm : (n1[i] + half_k * p) / norm;
        t[0] = fmax(t[0], v0);
        t[1] = fmax(t[1], v1);
        t[2] = fmax(t[2], p / norm);
    }
    __shared__ double part[TERMS][32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int r = 0; r < TERMS; ++r) {
        for (int offset = 16; offset > 0; offset >>= 1) t[r] = fmax(t[r], __shfl_xor_sync(0xffffffffu, t[r], offset));
        if (lane == 0) part[r][warp] = t[r];
    }
    __syncthreads();
    if (warp != 0) return;
#pragma unroll
    for (int r = 0; r < TERMS; ++r) {
        double v = lane < (blockDim.x >> 5) ? part[r][lane] : 0.0;
        for (int offset = 16; offset > 0; offset >>= 1) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, offset));
        if (lane == 0)
            atomicMax(terms + (side * MAX_COUNT + c) * TERMS + r, (unsigned long long)__double_as_longlong(v));
    }
}

extern "C" __global__ void ozaki2_count_pick(const unsigned long long* __restrict__ terms,
    const double* __restrict__ crt, double factor, double goal, double* __restrict__ errors, int* __restrict__ count)
{
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    int chosen = 0;
    for (int c = 0; c < MAX_COUNT; ++c) {
        double x[TERMS], y[TERMS];
        for (int r = 0; r < TERMS; ++r) {
            x[r] = __longlong_as_double((long long)terms[c * TERMS + r]);
            y[r] = __longlong_as_double((long long)terms[(MAX_COUNT + c) * TERMS + r]);
        }
        const double E = (x[0] * y[0] + x[1] * y[1] + crt[c] * x[2] * y[2]) * factor;
        errors[c] = E;
        if (chosen == 0 && E <= goal) chosen = c + 1;
    }
    *count = chosen;
}

/* gpu.ozaki2.scaling.codes, operation for operation: fast mode's code, or the larger of it and the fine code (from
   the wide bars' sum W, bars 2**wide finer, where W is given). */
__device__ __forceinline__ int scale_code(double R, int e, double mu, long long L, double T,
                                          const unsigned long long* W, long long i, int wide)
{
    const long long fast = ((long long)e + half_shift(R, mu, L)) * 256;
    if (T == 0.0) return (int)fast;
    const double Rf = W ? __ull2double_ru(W[i]) : R;
    int ex;
    const double fr = frexp(__dmul_rn(__ddiv_rn(T, __dsqrt_rn(fmax(Rf, 1.0))), 1.0 - 0x1p-47), &ex);
    const long long fine = ((long long)e + (W ? wide : 0) + ex - 1) * 256 + (long long)floor(fr * 512.0) - 256;
    return (int)(fast > fine ? fast : fine);
}

extern "C" __global__ void ozaki2_shifts(
    const double* __restrict__ R_a, const int* __restrict__ e_a, int* __restrict__ s_a, long long m,
    const double* __restrict__ R_b, const int* __restrict__ e_b, int* __restrict__ s_b, long long n,
    double mu, long long L, double T, const unsigned long long* __restrict__ W_a,
    const unsigned long long* __restrict__ W_b, int wide)
{
    const int side = blockIdx.y;
    const double* R = side ? R_b : R_a;
    const int* e = side ? e_b : e_a;
    int* s = side ? s_b : s_a;
    const long long lines = side ? n : m;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < lines;
         i += (long long)gridDim.x * blockDim.x)
        s[i] = scale_code(R[i], e[i], mu, L, T, side ? W_b : W_a, i, wide);
}

extern "C" __global__ void ozaki2_nonfinite(
    const double* __restrict__ A, long long ars, long long acs, const double* __restrict__ B, long long brs,
    long long bcs, const double* __restrict__ B2, long long k1, double sign2, double* __restrict__ C, long long ldc,
    long long m, long long k, long long n, const double* __restrict__ mx_a, const double* __restrict__ mx_b,
    long long per_block)
{
    const int side = blockIdx.y;
    const long long lines = side ? n : m, across = side ? m : n;
    const long long first = (long long)blockIdx.x * per_block;
    const long long last = first + per_block < lines ? first + per_block : lines;
    for (long long line = first; line < last; ++line) {
        if (isfinite(side ? mx_b[line] : mx_a[line])) continue;
        for (long long o = threadIdx.x; o < across; o += blockDim.x) {
            const long long i = side ? o : line, j = side ? line : o;
            if (side && !isfinite(mx_a[i])) continue;            /* the rows' pass writes it */
            double s = 0.0;
            for (long long t = 0; t < k1; ++t) s = __dadd_rn(s, __dmul_rn(A[i * ars + t * acs], B[t * brs + j * bcs]));
            for (long long t = k1; t < k; ++t)
                s = __dadd_rn(s, __dmul_rn(A[i * ars + t * acs], sign2 * B2[(t - k1) * brs + j * bcs]));
            C[i * ldc + j] = s;
        }
    }
}
"""


@cache
def _module() -> Any:
    return cupy.RawModule(code=fused.SOURCE + _SOURCE % {"count": MAX_MODULI, "terms": TERMS})


def kernel(name: str) -> Any:
    """One kernel of the module (compiled the first time any is asked for)."""
    return _module().get_function(name)


@cache
def _constants(moduli: tuple[int, ...] = MODULI) -> tuple[Any, Any, Any]:
    """L_N as (mu, L) and the CRT's error bound per count of ``moduli``, on the device."""
    mu, L, crt = limits(moduli)
    return cupy.asarray(mu), cupy.asarray(L), cupy.asarray(crt)


def count_buffers() -> tuple[Any, Any, Any]:
    """The count's device buffers: the terms' maxima (2 x 20 x 3, uint64 bits), E per count, and the count."""
    return (cupy.empty((2, MAX_MODULI, TERMS), dtype=np.uint64), cupy.empty(MAX_MODULI, dtype=np.float64),
            cupy.empty(1, dtype=np.int32))


def count_on_device(rows: LineStats, cols: LineStats, k: int, goal: float, buffers: Any,
                    moduli: tuple[int, ...] = MODULI) -> Any:
    """Queue the normwise bound and the count of ``moduli`` (see the module); the count's device buffer."""
    terms, errors, count = buffers
    mu, L, crt = _constants(moduli)
    terms.data.memset_async(0, terms.nbytes)
    i64, f64 = np.int64, np.float64
    kernel("ozaki2_count_terms")((COUNT_BLOCKS, MAX_MODULI, 2), (THREADS,), (
        rows.mx, rows.R, rows.n1, rows.n2sq, i64(rows.mx.size), cols.mx, cols.R, cols.n1, cols.n2sq,
        i64(cols.mx.size), mu, L, f64(0.5 * k), terms))
    kernel("ozaki2_count_pick")((1,), (32,), (terms, crt, f64(safety(k)), f64(goal), errors, count))
    return count


_IF_COUNT = SET_CONDITIONAL + r"""
extern "C" __global__ void ozaki2_if_count(const int* __restrict__ count, unsigned long long handle,
                                           unsigned int mask)
{
    // The condition of an IF node (gpu.ozaki2.deferred): the count the device computed is one of the mask's bits.
    const int c = count[0];
    cudaGraphSetConditional(handle, (unsigned)(c >= 0 && c < 32 && ((mask >> c) & 1u)));
}
"""


@cache
def _if_count() -> Any:
    """The kernel that sets a deferred count's IF node, compiled (or loaded) on first use, before any capture."""
    return cupy.RawModule(code=_IF_COUNT).get_function("ozaki2_if_count")


class CountCopy:
    """A count's copy into pinned host memory, queued with no wait, and read once it has landed."""

    def __init__(self) -> None:
        self.memory = cupy.cuda.alloc_pinned_memory(4)
        self.value = np.frombuffer(self.memory, dtype=np.int32, count=1)
        self.event = cupy.cuda.Event(block=False, disable_timing=True)

    def start(self, word: Any, stream: Any) -> None:
        cupy.cuda.runtime.memcpyAsync(self.memory.ptr, word.data.ptr, 4, cupy.cuda.runtime.memcpyDeviceToHost,
                                      stream.ptr)
        self.event.record(stream)

    def done(self) -> bool:
        return self.event.done

    def wait(self) -> int:
        self.event.synchronize()
        return int(self.value[0])


def read_count(count: Any) -> int:
    """The count the device computed: the one read of a call under ``moduli="auto"`` (it waits for the device)."""
    return int(count.get()[0])


def fix_nonfinite(A: Any, B: Any, C: Any, rows: LineStats, cols: LineStats, below: Any = None,
                  sign: float = 1.0) -> None:
    """Queue the IEEE values of the entries in lines holding NaN or infinity (see the module). ``below``: B's
    lower rows, ``sign`` times a block of B's shape and strides (a complex part's [Re B; -Im B], say), so that no
    stacked copy is made for a repair that touches only the bad lines."""
    (m, k), n = A.shape, B.shape[1]
    i64 = np.int64
    lines = max(m, n)
    kernel("ozaki2_nonfinite")((max(1, -(-lines // FIX_LINES)), 2), (THREADS,), (
        A, i64(A.strides[0] // 8), i64(A.strides[1] // 8), B, i64(B.strides[0] // 8), i64(B.strides[1] // 8),
        B if below is None else below, i64(B.shape[0]), np.float64(sign), C, i64(C.strides[0] // 8), i64(m),
        i64(k), i64(n), rows.mx, cols.mx, i64(FIX_LINES)))


def line_stats(X: Any, scratch: Any = None, norms: bool = False, out: LineStats | None = None,
               wide: bool = False) -> LineStats:
    """:class:`~gpu.ozaki2.normwise.LineStats` of X's rows (any strides with a unit stride on one axis, or a single
    column), reading X once (:mod:`gpu.ozaki2.fused`; with ``wide``, fine scaling's Rw, once more): into ``out``'s
    vectors where given (with an Rw vector where ``wide``). ``scratch``: uint8
    device bytes (at least :func:`gpu.ozaki2.fused.workspace_bytes`) for the tile sums, else they are allocated."""
    rows, cols = X.shape
    rs, cs = X.strides[0] // X.itemsize, X.strides[1] // X.itemsize
    if cols == 1:
        cs = 1
    tiles = -(-cols // TILE_K)
    if scratch is None:
        scratch = cupy.empty(fused.workspace_bytes(rows, cols), dtype=np.uint8)
    tmax, sums, tile_norms = carve_tiles(scratch, rows, cols)
    out = out or line_buffers(rows, norms, wide)
    i64, null = np.int64, np.uint64(0)
    kept = tile_norms if norms else null
    grid, block = (-(-tiles // fused.SQUARES_WARPS), -(-rows // 32)), (32, fused.SQUARES_WARPS)
    kernel("ozaki2_tile_squares")(grid, block, (X, i64(rs), i64(cs), i64(rows), i64(cols), tmax, sums, kept))
    kernel("ozaki2_line_squares")((-(-rows // 8),), (32, 8),
                                  (tmax, sums, kept, i64(tiles), i64(rows), out.mx, out.e, out.R,
                                   out.n1 if norms else null, out.n2sq if norms else null))
    if wide:
        out.Rw.data.memset_async(0, out.Rw.nbytes)
        kernel("ozaki2_wide_squares")(grid, block, (X, i64(rs), i64(cs), i64(rows), i64(cols), out.e,
                                                   np.int32(WIDE_BITS), out.Rw))
    return out._replace(**({} if norms else {"n1": None, "n2sq": None}), **({} if wide else {"Rw": None}))


def line_buffers(lines: int, norms: bool, wide: bool = False) -> LineStats:
    """Device vectors for one side's line statistics (``wide``: with fine scaling's Rw)."""
    f64 = (lambda: cupy.empty(lines, dtype=np.float64))
    return LineStats(f64(), cupy.empty(lines, dtype=np.int32), f64(), f64() if norms else None,
                     f64() if norms else None, cupy.empty(lines, dtype=np.uint64) if wide else None)


class DeviceOps:
    """The count-independent part of :class:`gpu.ozaki2.kernels.CudaOps` (see the module)."""

    @staticmethod
    def line_buffers(be: Backend, lines: int, norms: bool, wide: bool = False) -> LineStats:
        return line_buffers(lines, norms, wide)

    @staticmethod
    def shift_buffers(be: Backend, m: int, n: int) -> tuple[Any, Any]:
        return cupy.empty(m, dtype=np.int32), cupy.empty(n, dtype=np.int32)

    @staticmethod
    def count_buffers(be: Backend) -> tuple[Any, Any, Any]:
        return count_buffers()

    def auto_count(self, rows: LineStats, cols: LineStats, k: int, goal: float, buffers: Any,
                   moduli: tuple[int, ...] = MODULI) -> int:
        """The normwise count, computed on the device and read: the call's one wait (:mod:`gpu.ozaki2.device`)."""
        return read_count(count_on_device(rows, cols, k, goal, buffers, moduli))

    @staticmethod
    def count_copy() -> CountCopy:
        _if_count()
        return CountCopy()

    @staticmethod
    def if_count(word: Any, handle: int, mask: int) -> None:
        """Set IF node ``handle`` where the count in ``word`` is one of ``mask``'s bits (:mod:`gpu.ozaki2.deferred`)."""
        _if_count()((1,), (1,), (word, np.uint64(handle), np.uint32(mask)))

    def count_word(self, rows: LineStats, cols: LineStats, k: int, goal: float, buffers: Any) -> Any:
        """The normwise count's device word, queued and not read (:mod:`gpu.ozaki2.deferred`)."""
        return count_on_device(rows, cols, k, goal, buffers)

    def auto_errors(self, rows: LineStats, cols: LineStats, k: int, buffers: Any,
                    moduli: tuple[int, ...] = MODULI) -> np.ndarray:
        count_on_device(rows, cols, k, 0.0, buffers, moduli)
        return buffers[1].get()

    def shifts(self, stats: LineStats, table: ModuliTable, out: Any = None, fine_k: int | None = None) -> Any:
        """One side's scale codes (see :meth:`gpu.ozaki2.ops.HostOps.shifts`), as int32 on the device."""
        out = cupy.empty(stats.e.size, dtype=np.int32) if out is None else out
        mu, L = np.frexp(bound_limit(table))
        T = 0.0 if fine_k is None else fine_limit(table, fine_k)
        W = np.uint64(0) if stats.Rw is None else stats.Rw
        kernel("ozaki2_shifts")((max(1, min(-(-stats.e.size // THREADS), 1024)), 1), (THREADS,), (
            stats.R, stats.e, out, np.int64(stats.e.size), stats.R, stats.e, out, np.int64(0), np.float64(mu),
            np.int64(L), np.float64(T), W, W, np.int32(WIDE_BITS)))
        return out

    def fix_nonfinite(self, A: Any, B: Any, C: Any, rows: LineStats, cols: LineStats, below: Any = None,
                      sign: float = 1.0) -> None:
        if below is not None and (below.shape, below.strides) != (B.shape, B.strides):
            raise ValueError("the lower block of B must have B's shape and strides (two halves of one array)")
        fix_nonfinite(A, B, C, rows, cols, below, sign)

