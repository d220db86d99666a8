"""The residue pass of a fused Winograd level that also writes the operand's four sums (CuPy only).

A fused level (:mod:`gpu.ozaki2.fused_level`) needs, per modulus, each operand's residues and its four Winograd
sums of their blocks. Formed apart, the sums pass reads every residue plane again after the residue pass wrote it.
Here ``ozaki2_rows_sums`` writes both from one read of the operand: a block takes the 32 x 32 tile at one position
of each of the operand's four blocks in turn (the residue kernel's tile, thread layout and arithmetic,
:mod:`gpu.ozaki2.kernels`), writes each tile's residue words as that kernel does, and forms the sums from the
words it holds. The sums are those of :meth:`gpu.ozaki2.winograd.HostResidueOps.operand_sums`,

    A: S1 = X21 + X22, S2 = S1 - X11, S3 = X11 - X21, S4 = X12 - S2,
    B: T1 = X12 - X11, T2 = X22 - T1, T3 = X22 - X12, T4 = T2 - X21,

in 16-bit lanes of representatives (:mod:`gpu.ozaki2.residue_cuda`). The blocks are visited at (0, 0), (h, 0),
(h, d) and (0, d), which is X11, X21, X22, X12 of A and X11, X12, X22, X21 of B (B's blocks as rows of B^T), so a
thread keeps at most two words a modulus between tiles (in shared memory: in registers they left one block an
SM). A residue is a function of its integer alone and a sum of its two residues' classes, so every byte is the
two-pass form's.

Measured on the H200 (15 moduli, phi = 1, both operands; ``results/published/h200/h200-ozaki2-residue-sums-*.json``,
``results/published/scripts/ozaki2_residue_sums_probe.py``): at N = 16384 the one pass took 8.41 ms against 9.47
for the two passes (the residue kernel alone 5.55), and ``ozaki2.matmul(A, B, moduli=15, level=1)`` ran at 1.563x
DGEMM as called against 1.541x with the two passes (paired rounds: 1.2% faster), level 0 at 1.521x; at 32768 765.9
against 770.3 ms a call. Built for 4 blocks an SM (64 registers); 3 (80 registers) took 9.68 ms, 2 (128) 11.34, 5
and 6 (spilling) 18.7 and 28.5, and with the kept words in registers (140, one block an SM) 18.9.

It takes operands whose blocks are whole tiles (:func:`gpu.ozaki2.fused_level.whole_tiles`: both halves
multiples of 32); others keep the two passes.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import cupy
import numpy as np

from . import fused
from .cuda_source import COMMON, for_each_modulus
from .fused_level import SUMS_TILE as TILE
from .moduli import ModuliTable
from .residue_cuda import DEVICE
from .rows_source import ROWS_SOURCE, element_strides, powers

_SOURCE = r"""
__device__ __forceinline__ unsigned word_sum(unsigned x, unsigned y, Lanes k, bool add)
{
    const unsigned u = reps4(x, k), v = reps4(y, k);
    unsigned half[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        const unsigned sel = i ? 0x4342u : 0x4140u, a = lanes_in(u, sel), b = lanes_in(v, sel);
        half[i] = add ? lanes_add(a, b, k) : lanes_sub(a, b, k);
    }
    return lanes_out(half[0], half[1], k);
}

/* One block's word w of one modulus at visit Q (see the module): the sums it completes into s (sum j at
   s[j * stride]); k1 and k2 the words kept for later visits. */
template <int Q> __device__ __forceinline__ void sums_step(unsigned w, unsigned& k1, unsigned& k2, unsigned* s,
                                                           long long stride, Lanes k)
{
    if (Q == 0) {
        k1 = w;
    } else if (SIDE == 0) {
        if (Q == 1) { s[2 * stride] = word_sum(k1, w, k, false); k2 = w; }
        if (Q == 2) { const unsigned s1 = word_sum(k2, w, k, true), s2 = word_sum(s1, k1, k, false);
                      s[0] = s1; s[stride] = s2; k1 = s2; }
        if (Q == 3) s[3 * stride] = word_sum(w, k1, k, false);
    } else {
        if (Q == 1) { const unsigned t1 = word_sum(w, k1, k, false); s[0] = t1; k1 = t1; k2 = w; }
        if (Q == 2) { const unsigned t2 = word_sum(w, k1, k, false);
                      s[stride] = t2; s[2 * stride] = word_sum(w, k2, k, false); k1 = t2; }
        if (Q == 3) s[3 * stride] = word_sum(k1, w, k, false);
    }
}

#define SUMS_TABLE(T, M) { const unsigned w = residues4<M>(h, l, e, pow2 + T * pow2_len); o[T * plane4] = w; \
    sums_step<Q>(w, keep[T * 256], keep[(COUNT + T) * 256], s + T * 4 * sum4, sum4, lanes_of(M)); }
#define SUMS_LIMBS(T, M) { const unsigned w = limbs4<M>(a, b, lo); o[T * plane4] = w; \
    sums_step<Q>(w, keep[T * 256], keep[(COUNT + T) * 256], s + T * 4 * sum4, sum4, lanes_of(M)); }

template <int Q> __device__ __forceinline__ void visit(
    const double* __restrict__ x, long long rs, long long cs, long long rows, long long cols, long long ldk,
    const int* __restrict__ shifts, const int* __restrict__ exps, unsigned int* __restrict__ out, long long plane4,
    const double* __restrict__ pow2, int pow2_len, unsigned* __restrict__ s, long long sum4, long long half_rows,
    long long half_k, double (*tile)[33], unsigned* keep)
{
    const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * 32 + tx, q = tid >> 3, g = (tid & 7) * 4;
    const bool by_rows = (cs == 1);
    const long long r0 = (long long)blockIdx.y * 32 + (Q == 1 || Q == 2 ? half_rows : 0),
                    c0 = (long long)blockIdx.x * 32 + (Q >= 2 ? half_k : 0);
    if (Q) __syncthreads();
    for (int j = ty; j < 32; j += 8) {
        const long long r = r0 + (by_rows ? j : tx), c = c0 + (by_rows ? tx : j);
        const double v = (r < rows && c < cols) ? scaled_integer(x[r * rs + c * cs], shifts[r], exps[r]) : 0.0;
        if (by_rows) tile[j][tx] = v; else tile[tx][j] = v;
    }
    __syncthreads();
    unsigned int* o = out + ((r0 + q) * ldk + c0 + g) / 4;
    bool wide = false;
#pragma unroll
    for (int j = 0; j < 4; ++j) wide |= fabs(tile[q][g + j]) >= 0x1p79;
    if (__any_sync(0xffffffffu, wide)) {
        double h[4], l[4];
        int e[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) split_h_l(tile[q][g + j], h[j], l[j], e[j]);
        FOR_EACH_MODULUS(SUMS_TABLE)
    } else {
        double a[4], b[4], lo[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) split_limbs(tile[q][g + j], a[j], b[j], lo[j]);
        FOR_EACH_MODULUS(SUMS_LIMBS)
    }
}

/* The words a thread keeps between visits (two a modulus) are in shared memory, keep[(j COUNT + T) 256 + tid]:
   held in registers they took the kernel to 140 a thread and one block an SM. */
extern "C" __global__ void __launch_bounds__(256, BLOCKS) ozaki2_rows_sums(
    const double* __restrict__ x, long long rs, long long cs, long long rows, long long cols, long long ldk,
    const int* __restrict__ shifts, const int* __restrict__ exps, unsigned int* __restrict__ out, long long plane,
    const double* __restrict__ pow2, int pow2_len, unsigned* __restrict__ sums, long long half_rows,
    long long half_k)
{
    __shared__ double tile[32][33];
    extern __shared__ unsigned kept[];
    const int tid = threadIdx.y * 32 + threadIdx.x;
    unsigned* keep = kept + tid;
    const long long sum4 = half_rows * half_k / 4;
    unsigned* s = sums + (((long long)blockIdx.y * 32 + (tid >> 3)) * half_k + (long long)blockIdx.x * 32
                          + (tid & 7) * 4) / 4;
#define VISIT(Q) visit<Q>(x, rs, cs, rows, cols, ldk, shifts, exps, out, plane / 4, pow2, pow2_len, s, sum4, \
                          half_rows, half_k, tile, keep);
    VISIT(0) VISIT(1) VISIT(2) VISIT(3)
}
"""


#: Blocks an SM the kernel is built to hold (its registers bounded to match).
BLOCKS = 4


def _kept_bytes(count: int) -> int:
    """Dynamic shared bytes a block keeps its words in: two a modulus for each of its 256 threads."""
    return 2 * count * 256 * 4


@cache
def _kernel(moduli: tuple[int, ...], side: str, blocks: int = BLOCKS) -> Any:
    source = (f"#define BARS 0\n#define SIDE {int(side != 'a')}\n#define COUNT {len(moduli)}\n"
              f"#define BLOCKS {blocks}\n"
              + for_each_modulus(moduli) + COMMON + DEVICE + fused.TILE_SOURCE + ROWS_SOURCE + _SOURCE)
    kernel = cupy.RawKernel(source, "ozaki2_rows_sums")
    kernel.max_dynamic_shared_size_bytes = _kept_bytes(len(moduli))
    return kernel


def residues_and_sums(X: Any, shifts: Any, exps: Any, table: ModuliTable, rows_pad: int, ldk: int, out: Any,
                      sums: Any, side: str, blocks: int = BLOCKS) -> None:
    """X's residues into ``out`` (``(count, rows_pad, ldk)``, as :meth:`gpu.ozaki2.kernels.CudaOps.residues`)
    and its four sums per modulus into ``sums`` (``(count, 4, rows_pad / 2, ldk / 2)``, contiguous), ``side``
    ``"a"`` for A's sums, ``"b"`` for B's, in one pass (:func:`~gpu.ozaki2.fused_level.whole_tiles` must hold);
    ``blocks``: the kernel built for that many blocks an SM."""
    rows, cols = X.shape
    rs, cs = element_strides(X)
    pow2, length = powers(table.moduli)
    i64, i32 = np.int64, np.int32
    h, d = rows_pad // 2, ldk // 2
    _kernel(table.moduli, side, blocks)(
        (d // TILE, h // TILE), (TILE, 8),
        (X, i64(rs), i64(cs), i64(rows), i64(cols), i64(ldk), shifts.astype(i32, copy=False),
         exps.astype(i32, copy=False), out, i64(rows_pad * ldk), pow2, i32(length), sums, i64(h), i64(d)),
        shared_mem=_kept_bytes(table.count))
