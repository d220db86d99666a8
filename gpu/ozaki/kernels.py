"""CUDA kernels of the Ozaki scheme (CuPy only): row maxima, slicing, the bound's magnitudes, the FP64 sum.

Loaded by :meth:`gpu.backend.Backend.ops` for the CuPy backend only (``"ozaki"``):
:class:`CudaOps` is the GPU twin of :class:`gpu.ozaki.ops.HostOps`.

Kernels, compiled by NVRTC on first use and cached by CuPy:

* ``absmax``: a reduction of |x| along an axis with no |x| temporary; the
  maximum propagates NaN, so one small vector tells whether a row holds NaN
  or infinity.
* ``ozaki_slice``: reads a 32 x 32 tile of X (rows of A, or rows of B^T read
  from B's columns) through shared memory, so that both the read and the writes
  are coalesced whichever axis of X is contiguous, and writes every slice of
  each element in one pass: x = ldexp(X[r, c], -e[r]); then S times
  x *= 2**alpha; m = trunc(x); x -= m, storing m in the slice format (with
  ``remainder``, the last slice and B's extra one are rounded to the format's
  significand bits instead). Padding columns (up to the leading dimension) and
  padding rows get zeros.
* ``ozaki_magnitude``: the operand of ``target=``'s magnitude GEMM
  (:func:`gpu.ozaki.slicing.magnitudes`): |x| 2**-e rounded toward zero to
  ``bits`` bits, nonzeros raised to at least 2**-63, stored as FP32 or BF16;
  every step (frexp, ldexp, floor) is exact, so the bits are NumPy's.
* ``ozaki_screen_max`` / ``ozaki_screen_weak``: reductions over the bound's
  magnitude product that compute, per entry and with no m x n temporary,
  NumPy's :func:`gpu.ozaki.ops.screen_block` (explicitly rounded operations):
  the largest K/L over the resolved entries, and which rows and columns hold
  an entry left to the float64 product.
* ``ozaki_fold``: adds the GEMM buffers of a batch into the FP64 result in
  one pass over the output: per entry, D += buffer (exact: integers below
  2**53), and at the last buffer of a diagonal the exact D * 2**(-alpha d)
  joins the sum by TwoSum (the sum and its rounding errors, kept apart); the
  last batch writes ldexp(sum + errors, e_i + f_j). Between batches the sum
  stays in the output and the errors in a compensation array. Every
  operation is an explicitly rounded intrinsic (``__dadd_rn``, ...), so no
  contraction into FMAs can change a bit: results are bitwise reproducible.

The NumPy path (:class:`gpu.ozaki.ops.HostOps`) performs the same operations in
the same order; the two give identical bits.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import cupy
import numpy as np

from ..backend import Backend
from .ops import FINALIZE, LOAD_ACC, LOAD_OPEN, RAISED_TERM, STORE_OPEN, WEAK
from .plan import OzakiPlan
from .slicing import RAISE

#: Tile side of the slicing kernel, and rows of threads per tile (each thread handles 32/8 rows).
TILE, TILE_ROWS = 32, 8
#: Threads per block of the fold kernel, and the most blocks it launches (a grid-stride loop does the rest).
FOLD_THREADS, FOLD_MAX_BLOCKS = 256, 65536

_SLICE_SOURCE = r"""
__device__ __forceinline__ unsigned short half_bits(float f)
{
    // float -> binary16 bits; exact for the integers |f| < 2048 that slices hold.
    unsigned int b = __float_as_uint(f);
    unsigned int sign = (b >> 16) & 0x8000u, mag = b & 0x7fffffffu;
    if (mag == 0u) return (unsigned short)sign;
    unsigned int e = (mag >> 23) - 127u + 15u;
    return (unsigned short)(sign | (e << 10) | ((mag & 0x7fffffu) >> 13));
}

__device__ __forceinline__ double round_bits(double r, int bits, double tiny)
{
    // r rounded to nearest even with `bits` significant bits; below `tiny` (the storage's
    // smallest normal) to +0, so that the store is exact.
    int e;
    frexp(r, &e);
    const double q = ldexp(rint(ldexp(r, bits - e)), e - bits);
    return fabs(q) < tiny ? 0.0 : q;
}

extern "C" __global__ void ozaki_slice(
    const double* __restrict__ x, long long rs, long long cs, long long rows, long long cols,
    long long rows_pad, long long ldk, const int* __restrict__ exps,
    STORE_T* __restrict__ out, long long ld_out, int alpha, int slices, int digits, long long first,
    long long step, int tail_from, long long tail_first, long long tail_step, int bits, double tiny)
{
    __shared__ double tile[32][33];
    const long long r0 = (long long)blockIdx.y * 32, c0 = (long long)blockIdx.x * 32;
    const int tx = threadIdx.x, ty = threadIdx.y;
    const bool by_rows = (cs == 1);          // X's rows are contiguous: threads run along columns
    for (int q = ty; q < 32; q += 8) {
        const long long r = r0 + (by_rows ? q : tx), c = c0 + (by_rows ? tx : q);
        double v = 0.0;
        if (r < rows && c < cols) v = ldexp(x[r * rs + c * cs], -exps[r]);
        if (by_rows) tile[q][tx] = v; else tile[tx][q] = v;
    }
    __syncthreads();
    const double radix = ldexp(1.0, alpha);
    for (int q = ty; q < 32; q += 8) {
        const long long r = r0 + q, c = c0 + tx;
        if (r < rows_pad && c < ldk) {
            double v = tile[q][tx];
            STORE_T* o = out + r * ld_out + c;
            for (int j = 1; j <= slices; ++j) {
                if (j >= tail_from)
                    o[(tail_first + (j - tail_from) * tail_step) * ldk] = STORE(round_bits(v * radix, bits, tiny));
                if (j <= digits) {
                    v *= radix;
                    const double m = trunc(v);
                    v -= m;
                    o[(first + (j - 1) * step) * ldk] = STORE(m);
                }
            }
        }
    }
}
"""

#: Per slice storage dtype: the C type the kernel writes and how a digit (a double) is stored.
_STORES = {
    "int8": ("signed char", "(signed char)(int)(m)"),
    "float32": ("float", "(float)(m)"),
    "float16": ("unsigned short", "half_bits((float)(m))"),
    "uint16": ("unsigned short", "(unsigned short)(__float_as_uint((float)(m)) >> 16)"),   # bfloat16 bits
}

_FOLD_SOURCE = r"""
extern "C" __global__ void ozaki_fold(
    const unsigned long long* __restrict__ bufs, const double* __restrict__ scales,
    const int* __restrict__ closes, int nbuf, long long ldbuf,
    double* __restrict__ acc, long long ldacc, double* __restrict__ comp, double* __restrict__ open,
    const int* __restrict__ erow, const int* __restrict__ ecol, long long m, long long n, int flags)
{
    const long long total = m * n;
    for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (long long)gridDim.x * blockDim.x) {
        const long long i = idx / n, j = idx - i * n;
        double hi = (flags & LOAD_ACC) ? acc[i * ldacc + j] : 0.0;
        double lo = (flags & LOAD_ACC) ? comp[idx] : 0.0;
        double d = (flags & LOAD_OPEN) ? open[idx] : 0.0;
        for (int b = 0; b < nbuf; ++b) {
            d = __dadd_rn(d, (double)((const BUF_T*)bufs[b])[i * ldbuf + j]);
            if (closes[b]) {
                // TwoSum (as gpu.ozaki.ops.two_sum): s = hi + t exactly as s + error.
                const double t = __dmul_rn(d, scales[b]);
                const double s = __dadd_rn(hi, t);
                const double v = __dsub_rn(s, hi);
                lo = __dadd_rn(lo, __dadd_rn(__dsub_rn(hi, __dsub_rn(s, v)), __dsub_rn(t, v)));
                hi = s;
                d = 0.0;
            }
        }
        if (flags & STORE_OPEN) open[idx] = d;
        if (flags & FINALIZE) {
            acc[i * ldacc + j] = ldexp(__dadd_rn(hi, lo), erow[i] + ecol[j]);
        } else {
            acc[i * ldacc + j] = hi;
            comp[idx] = lo;
        }
    }
}
"""

_MAGNITUDE_SOURCE = r"""
double v = 0.0;
if (x != 0.0) {
    const double a = fabs(ldexp(x, -e));
    int q;
    frexp(a, &q);
    const double t = ldexp(floor(ldexp(a, bits - q)), q - bits);
    v = t > RAISE_VALUE ? t : RAISE_VALUE;
}
y = STORE(v);
"""

_SCREEN_PREAMBLE = f"""
__device__ __forceinline__ double screen_low(float p, long long nr, long long nc, double factor, double* K)
{{
    *K = (double)(nr < nc ? nr : nc);
    return __dsub_rn(__dmul_rn((double)p, factor), __dmul_rn(*K, ldexp(1.0, {int(np.log2(RAISED_TERM))})));
}}
__device__ __forceinline__ bool screen_weak(float p, long long nr, long long nc, double factor)
{{
    double K;
    const double low = screen_low(p, nr, nc, factor, &K);
    return p > 0.0f && low < __dmul_rn(K, ldexp(1.0, {int(np.log2(WEAK))}));
}}
__device__ __forceinline__ double screen_ratio(float p, long long nr, long long nc, double factor)
{{
    double K;
    const double low = screen_low(p, nr, nc, factor, &K);
    const bool weak = low < __dmul_rn(K, ldexp(1.0, {int(np.log2(WEAK))}));
    return (p > 0.0f && !weak) ? __ddiv_rn(K, low) : 0.0;
}}
"""
_SCREEN_PARAMS = "float32 p, int64 nr, int64 nc, float64 factor"

_FLAGS = "".join(f"#define {k} {v}\n" for k, v in (("LOAD_ACC", LOAD_ACC), ("LOAD_OPEN", LOAD_OPEN),
                                                      ("STORE_OPEN", STORE_OPEN), ("FINALIZE", FINALIZE)))
_BUFFERS = {"float32": "float", "int32": "int"}


@cache
def _slice_kernel(storage: str) -> Any:
    ctype, store = _STORES[storage]
    source = f"#define STORE_T {ctype}\n#define STORE(m) {store}\n" + _SLICE_SOURCE
    return cupy.RawKernel(source, "ozaki_slice")


@cache
def _fold_kernel(buffer: str) -> Any:
    return cupy.RawKernel(f"#define BUF_T {_BUFFERS[buffer]}\n" + _FLAGS + _FOLD_SOURCE, "ozaki_fold")


@cache
def _absmax() -> Any:
    return cupy.ReductionKernel("float64 x", "float64 y", "fabs(x)", "(isnan(a) || a > b) ? a : b",
                                "y = a", "0", "ozaki_absmax")


@cache
def _screen_kernels() -> tuple[Any, Any]:
    ratio = cupy.ReductionKernel(_SCREEN_PARAMS, "float64 y", "screen_ratio(p, nr, nc, factor)", "(a > b) ? a : b",
                                 "y = a", "0", "ozaki_screen_max", preamble=_SCREEN_PREAMBLE)
    weak = cupy.ReductionKernel(_SCREEN_PARAMS, "bool y", "screen_weak(p, nr, nc, factor)", "a || b", "y = a",
                                "false", "ozaki_screen_weak", preamble=_SCREEN_PREAMBLE)
    return ratio, weak


def screen(P: Any, nnz_rows: Any, nnz_cols: Any, factor: float) -> tuple[Any, Any, Any]:
    """:meth:`gpu.ozaki.ops.HostOps.screen` in three reductions over P^ (float32, read three times)."""
    ratio, weak = _screen_kernels()
    args = (P, nnz_rows[:, None], nnz_cols[None, :], np.float64(factor))
    return ratio(*args), weak(*args, axis=1), weak(*args, axis=0)


@cache
def _magnitude_kernel(storage: str) -> Any:
    store = _STORES[storage][1]
    preamble = f"#define STORE(m) {store}\n#define RAISE_VALUE ldexp(1.0, {int(np.log2(RAISE))})\n"
    return cupy.ElementwiseKernel("float64 x, int32 e, int32 bits", f"{storage} y", _MAGNITUDE_SOURCE,
                                  f"ozaki_magnitude_{storage}", preamble=preamble)


def absmax(X: Any, axis: int) -> Any:
    """max |X| along ``axis`` (NaN if the line holds NaN), with no |X| temporary."""
    return _absmax()(X, axis=axis)


def magnitudes(X: Any, exps: Any, axis: int, bits: int, storage: str) -> Any:
    """The bound's magnitude operand of X (see :func:`gpu.ozaki.slicing.magnitudes`), C-ordered, in one pass;
    ``exps`` per row (axis 1) or per column (axis 0)."""
    out = cupy.empty(X.shape, dtype=storage)
    _magnitude_kernel(storage)(X, exps[:, None] if axis == 1 else exps[None, :], np.int32(bits), out)
    return out


def slice_rows(X: Any, exps: Any, out: Any, *, rows_pad: int, ldk: int, alpha: int, slices: int, bits: int,
               tiny: float, digits: int, first: int, step: int, tail_from: int, tail_first: int,
               tail_step: int) -> None:
    """Write the slices of every X[r, c] into ``out`` (rows_pad x positions*ldk, C order).

    For j = 1..slices: from ``tail_from`` on, the rest x_{j-1} 2**alpha rounded to
    ``bits`` significant bits goes to position tail_first + (j - tail_from) tail_step;
    up to ``digits``, digit j goes to position first + (j - 1) step (positions in
    units of ``ldk`` columns). Columns up to ldk and rows up to ``rows_pad`` are
    zero-filled. X may have any strides (B^T is read from B).
    """
    rows, cols = X.shape
    it = X.itemsize
    rs, cs = X.strides[0] // it, X.strides[1] // it
    if cols == 1:
        cs = 1
    grid = (-(-ldk // TILE), -(-rows_pad // TILE))
    i64, i32 = np.int64, np.int32
    _slice_kernel(out.dtype.name)(
        grid, (TILE, TILE_ROWS),
        (X, i64(rs), i64(cs), i64(rows), i64(cols), i64(rows_pad), i64(ldk), exps, out,
         i64(out.strides[0] // out.itemsize), i32(alpha), i32(slices), i32(digits), i64(first), i64(step),
         i32(tail_from), i64(tail_first), i64(tail_step), i32(bits), np.float64(tiny)))


def fold(buffers: Any, scales: Any, closes: Any, acc: Any, comp: Any, open_: Any, erow: Any, ecol: Any,
         flags: int) -> None:
    """One fold launch over ``buffers`` (a list of (m, ld) views of one dtype) into ``acc`` (m x n), with the
    compensation ``comp`` (m x n; None when one launch does it all)."""
    m, n = acc.shape
    ptrs = cupy.asarray(np.array([b.data.ptr for b in buffers], dtype=np.uint64))
    sc = cupy.asarray(np.asarray(scales, dtype=np.float64))
    cl = cupy.asarray(np.asarray(closes, dtype=np.int32))
    ldbuf = buffers[0].strides[0] // buffers[0].itemsize
    blocks = max(1, min(FOLD_MAX_BLOCKS, -(-(m * n) // FOLD_THREADS)))
    i64 = np.int64
    _fold_kernel(buffers[0].dtype.name)(
        (blocks,), (FOLD_THREADS,),
        (ptrs, sc, cl, np.int32(len(buffers)), i64(ldbuf), acc, i64(acc.strides[0] // acc.itemsize),
         comp if comp is not None else acc, open_ if open_ is not None else acc, erow, ecol, i64(m), i64(n),
         np.int32(flags)))


class CudaOps:
    """The Ozaki scheme's operations on CuPy arrays, as CUDA kernels."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    absmax = staticmethod(absmax)
    magnitudes = staticmethod(magnitudes)
    screen = staticmethod(screen)
    fold = staticmethod(fold)

    def split(self, X: Any, exps: Any, p: OzakiPlan, rows_pad: int, layout: dict[str, int],
              overwrite: bool) -> Any:
        """X's rows as concatenated slices in one kernel pass; X is only read (``overwrite`` unused)."""
        out = cupy.empty((rows_pad, layout["positions"] * p.ldk), dtype=p.format.storage)
        slice_rows(X, exps, out, rows_pad=rows_pad, ldk=p.ldk, alpha=p.alpha, slices=p.slices, bits=p.format.bits,
                   tiny=p.format.tiny, **{k: v for k, v in layout.items() if k != "positions"})
        return out
