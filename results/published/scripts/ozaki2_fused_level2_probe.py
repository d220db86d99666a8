"""Probe: two Winograd levels over the residues in their fused form, built by hand, against DGEMM at N = 32768.

Level 1 (``gpu.ozaki2.fused_level``) reaches 1.84-1.88x DGEMM at N = 32768 on the H200, its 105 INT8 GEMMs held
at the 700 W cap's rate (654-663 ms of a 717-737 ms call); 2.0x needed a call of 671-687 ms. Level 2's 735 GEMMs of
8192^3 took 594 ms (``h200-ozaki2-level2-gemms-probe-32768.json``), but the library's level 2 runs its second level
in passes of their own (865 ms a call). The fused form needs two new passes, built here as a probe before the
library takes them:

* **operands**: one read of an operand's float64 entries writes, per modulus, its 49 second-level operands (each a
  sum modulo m of up to 16 of its (N/4)^2 sub-blocks: Winograd's sums of the sums). A block takes the 8 x 32 tile
  at one position of all 16 sub-blocks. Form 2 (``ozaki2_level2_operands_r``, the default): each thread splits four
  neighbouring entries of four sub-blocks once and writes their residues for every modulus into shared memory;
  then each task (a modulus, two neighbouring entries) reads its 16 residue pairs as 16-bit lanes
  (``gpu.ozaki2.residue_cuda``), forms the 28 inner operands once and writes the 49 outer ones as 16-bit stores.
  Forms 0 and 1 (``ozaki2_level2_operands``) keep 26-bit limbs in shared memory and take the residues per task,
  four entries a word in two halves of lanes (form 1 with swizzled 16-byte reads). A's operands are formed per
  span of its quarter rows, B's once;
* **the CRT** (``ozaki2_crt_level2``): a thread reads the 49 INT8 products of every modulus at one position and
  combines them, exactly in integers, into the 16 output entries there (the level's combination of the 7 products,
  inner then outer), each reduced and summed into the double-double CRT in level 0's order (``SPLIT=1``: two
  threads a position, 8 outputs each; ``SPLIT=2``: four warps a position, 4 outputs a thread. On the H200 both ran
  slower: 12.3 and 43.7 ms a span against 11.1).

Between them the 49 x count residue GEMMs of each span (CUTLASS, ``Backend.residue_gemm``), planned once on the
kept buffers. Every residue is a function of its integer alone, so C is **bitwise** level 0's; this is checked at
``CHECK_N`` against a level-0 plan, with the operands checked plane by plane against the library's level passes,
and at ``N`` against a level-0 plan run first. Then at ``N``: the kernels' forms alone by CUDA events (``BENCH``,
each form's output checksummed), ``LOOP`` back-to-back calls with one synchronise beside DGEMM, ``ROUNDS`` rounds in
turning order, each phase by CUDA events, and (``LEVEL1``) the library's level 1 as called beside DGEMM once the
level-2 buffers are freed.

    OUT=dir GEMMLAB_KERNEL_DIR=... PYTHONPATH=/tmp/site:$PWD:$PWD/results/published/scripts \\
        python3 results/published/scripts/ozaki2_fused_level2_probe.py

``N`` (default 32768), ``CHECK_N`` (4096: its GEMMs, below the residue kernel's least k, write INT32 products,
reduced to residues before the CRT), ``BITWISE`` (1), ``COUNT`` (15), ``SPAN`` (rows of A's quarter per span,
2048), ``ROUNDS`` (6), ``LOOP`` (2), ``FAST`` (the operand form, 2), ``OP_BLOCKS`` (3), ``TR`` and ``TC`` (8, 32),
``CRT_BLOCKS`` (2), ``SPLIT`` (0), ``BENCH`` (1), ``LEVEL1`` (1). JSON to ``$OUT/ozaki2-fused-level2-probe.json``.
At N = 32768 and 15 moduli it holds B's operands (49 GB), A's and the products of one span (12 GB each).
"""

import os
import statistics
import time

import cupy as cp
import numpy as np
from ozaki2_as_called import fresh_inputs
from rounds import loop_seconds, turning, write_json

from experiments.core.environment import environment
from gpu import ozaki2
from gpu.backend import get_backend
from gpu.ozaki2.crt_kernels import FINISH
from gpu.ozaki2.cuda_source import COMMON, constants, for_each_modulus
from gpu.ozaki2.fused_level import operands, quadrants
from gpu.ozaki2.gemms import planned, run_planned
from gpu.ozaki2.moduli import moduli_table
from gpu.ozaki2.ops import ops
from gpu.ozaki2.options import Options
from gpu.ozaki2.plan import Plan
from gpu.ozaki2.residue_cuda import DEVICE
from gpu.ozaki2.rows_source import ROWS_SOURCE, element_strides, powers

N, CHECK_N = int(os.environ.get("N", 32768)), int(os.environ.get("CHECK_N", 4096))
COUNT, SPAN = int(os.environ.get("COUNT", 15)), int(os.environ.get("SPAN", 2048))
ROUNDS, LOOP = int(os.environ.get("ROUNDS", 6)), int(os.environ.get("LOOP", 2))
CRT_BLOCKS, BITWISE = int(os.environ.get("CRT_BLOCKS", 2)), int(os.environ.get("BITWISE", 1))
FAST, BENCH = int(os.environ.get("FAST", 2)), int(os.environ.get("BENCH", 1))
OP_BLOCKS, SPLIT = int(os.environ.get("OP_BLOCKS", 3)), int(os.environ.get("SPLIT", 0))
LEVEL1 = int(os.environ.get("LEVEL1", 1))
TR, TC = int(os.environ.get("TR", 8)), int(os.environ.get("TC", 32))

OPERANDS = r"""
/* The 7 operands of one Winograd level from the four blocks of a plane, given as (row, column) quadrants of the
   residues' layout (B's columns as rows: its X12 is the bottom left): A's X11, X12, S4, X22, S1, S2, S3 and B's
   X11, X21, X22, T4, T1, T2, T3, as gpu.ozaki2.fused_level.operands pairs them; lanes of representatives. */
__device__ __forceinline__ void ops7(Lanes k, unsigned r00, unsigned r01, unsigned r10, unsigned r11, unsigned* o)
{
#if SIDE == 0
    const unsigned s1 = lanes_add(r10, r11, k), s2 = lanes_sub(s1, r00, k);
    o[0] = r00; o[1] = r01; o[2] = lanes_sub(r01, s2, k); o[3] = r11; o[4] = s1; o[5] = s2;
    o[6] = lanes_sub(r00, r10, k);
#else
    const unsigned t1 = lanes_sub(r10, r00, k), t2 = lanes_sub(r11, t1, k);
    o[0] = r00; o[1] = r01; o[2] = r11; o[3] = lanes_sub(t2, r01, k); o[4] = t1; o[5] = t2;
    o[6] = lanes_sub(r11, r10, k);
#endif
}
__device__ __forceinline__ int residue_rt(double y, int m, double inv)
{
    return (int)((unsigned)low_word(__dadd_rn(y, MAGIC)) - (unsigned)low_word(fma(y, inv, MAGIC)) * (unsigned)m);
}
#define TILE (TR * TC)
/* Where entry (row, col) of a sub-block's tile sits in shared memory. FAST: its 16-byte chunk of four swizzled by
   the row, so that a warp's 16-byte reads of four entries, and the stores of a tile read by columns, do not
   conflict; limbs converted by from_int (integer operations and one add) rather than int-to-double conversions. */
#if FAST
#define SLOT(r, c) ((r) * TC + (((((c) >> 2) ^ (r)) & (TC / 4 - 1)) << 2) + ((c) & 3))
#define TO_DOUBLE(x) from_int(x)
#else
#define SLOT(r, c) ((r) * TC + (c))
#define TO_DOUBLE(x) ((double)(x))
#endif
extern "C" __global__ void __launch_bounds__(256, 3) ozaki2_level2_operands(
    const double* __restrict__ x, long long rs, long long cs, long long rows, long long cols,
    const int* __restrict__ shifts, const int* __restrict__ exps, const int* __restrict__ moduli, int count,
    const double* __restrict__ pow2, int pow2_len, unsigned* __restrict__ out, long long span0, long long span_rows,
    long long hq, long long dq)
{
    extern __shared__ int limbs[];
    __shared__ double c26s[32], c52s[32];
    const int tid = threadIdx.x;
    const long long r0 = (long long)blockIdx.y * TR, c0 = (long long)blockIdx.x * TC;
    if (tid < count) {
        const int m = moduli[tid];
        c26s[tid] = (double)((1LL << 26) % m);
        c52s[tid] = (double)((1LL << 52) % m);
    }
    const bool by_rows = (cs == 1);
    const int rt = by_rows ? tid / TC : tid % TR, ct = by_rows ? tid % TC : tid / TR;
    double v[16];
    bool wide = false;
#pragma unroll
    for (int s = 0; s < 16; ++s) {
        const long long r = (s >> 3) * 2 * hq + ((s >> 1) & 1) * hq + span0 + r0 + rt;
        const long long c = ((s >> 2) & 1) * 2 * dq + (s & 1) * dq + c0 + ct;
        v[s] = (r < rows && c < cols) ? scaled_integer(x[r * rs + c * cs], shifts[r], exps[r]) : 0.0;
        wide |= fabs(v[s]) >= 0x1p79;
    }
    const int any_wide = __syncthreads_or(wide);
#pragma unroll
    for (int s = 0; s < 16; ++s) {
        double p, q, r;
        int e = 0;
        if (any_wide) split_h_l(v[s], p, q, e); else split_limbs(v[s], p, q, r);
        int* at = limbs + s * TILE + SLOT(rt, ct);
        at[0] = (int)p; at[16 * TILE] = (int)q; at[32 * TILE] = any_wide ? e : (int)r;
    }
    __syncthreads();
    for (int task = tid; task < count * (TILE / 4); task += blockDim.x) {
        const int t = task / (TILE / 4), wp = task % (TILE / 4), row = wp / (TC / 4), g = wp % (TC / 4);
        const int m = moduli[t];
        const double inv = 1.0 / (double)m, c26 = c26s[t], c52 = c52s[t];
        const double* p2 = pow2 + (long long)t * pow2_len;
        const Lanes k = lanes_of(m);
        unsigned u[16];
#pragma unroll
        for (int s = 0; s < 16; ++s) {
            const int* at = limbs + s * TILE + SLOT(row, 4 * g);
#if FAST
            const int4 l0 = *(const int4*)at, l1 = *(const int4*)(at + 16 * TILE), l2 = *(const int4*)(at + 32 * TILE);
            const int L0[4] = {l0.x, l0.y, l0.z, l0.w}, L1[4] = {l1.x, l1.y, l1.z, l1.w},
                      L2[4] = {l2.x, l2.y, l2.z, l2.w};
#else
            const int L0[4] = {at[0], at[1], at[2], at[3]}, L1[4] = {at[16 * TILE], at[16 * TILE + 1],
                      at[16 * TILE + 2], at[16 * TILE + 3]}, L2[4] = {at[32 * TILE], at[32 * TILE + 1],
                      at[32 * TILE + 2], at[32 * TILE + 3]};
#endif
            unsigned word = 0;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                double y;
                if (any_wide) {
                    const int e = L2[j];
                    double lp = TO_DOUBLE(L1[j]), p26 = c26;
                    if (e) { lp = __dmul_rn(lp, p2[e]); p26 = p2[e + 26]; }
                    y = fma(TO_DOUBLE(L0[j]), p26, lp);
                } else {
                    y = fma(TO_DOUBLE(L0[j]), c52, fma(TO_DOUBLE(L1[j]), c26, TO_DOUBLE(L2[j])));
                }
                word |= ((unsigned)residue_rt(y, m, inv) & 0xffu) << (8 * j);
            }
            u[s] = reps4(word, k);
        }
        const long long words = dq / 4, at0 = (r0 + row) * words + c0 / 4 + g;
#pragma unroll
        for (int q = 0; q < 7; ++q) {
            unsigned half[2][7];
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                const unsigned sel = i ? 0x4342u : 0x4140u;
                unsigned y[4];
#pragma unroll
                for (int o = 0; o < 4; ++o) {
                    unsigned seven[7];
                    ops7(k, lanes_in(u[4 * o], sel), lanes_in(u[4 * o + 1], sel), lanes_in(u[4 * o + 2], sel),
                         lanes_in(u[4 * o + 3], sel), seven);
                    y[o] = seven[q];
                }
                ops7(k, y[0], y[1], y[2], y[3], half[i]);
            }
#pragma unroll
            for (int p = 0; p < 7; ++p)
                out[((long long)t * 49 + p * 7 + q) * span_rows * words + at0] = lanes_out(half[0][p], half[1][p], k);
        }
    }
}
"""

#: The operand kernel in two phases (``FAST=2``): the block's residues first, each thread four neighbouring entries of
#: four sub-blocks, all moduli, into shared memory (one split of each entry, no conversions); then each task, one
#: modulus and two neighbouring entries, its 16 residue pairs as 16-bit lanes, the 28 inner operands once, the 49
#: outer ones written as they come (16-bit stores): no repacking of halves and fewer live registers.
OPERANDS_R = r"""
__device__ __forceinline__ unsigned pack4(const double* y, int m, double inv)
{
    unsigned word = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) word |= ((unsigned)residue_rt(y[j], m, inv) & 0xffu) << (8 * j);
    return word;
}
extern "C" __global__ void __launch_bounds__(256, OP_BLOCKS) ozaki2_level2_operands_r(
    const double* __restrict__ x, long long rs, long long cs, long long rows, long long cols,
    const int* __restrict__ shifts, const int* __restrict__ exps, const int* __restrict__ moduli, int count,
    const double* __restrict__ pow2, int pow2_len, unsigned short* __restrict__ out, long long span0,
    long long span_rows, long long hq, long long dq)
{
    extern __shared__ unsigned res_sh[];
    __shared__ double c26s[32], c52s[32], invs[32];
    const int tid = threadIdx.x;
    const long long r0 = (long long)blockIdx.y * TR, c0 = (long long)blockIdx.x * TC;
    if (tid < count) {
        const int m = moduli[tid];
        c26s[tid] = (double)((1LL << 26) % m);
        c52s[tid] = (double)((1LL << 52) % m);
        invs[tid] = 1.0 / (double)m;
    }
    const bool by_rows = (cs == 1);
    const int e = tid & 63, sp = tid >> 6;
    const int rt = by_rows ? e / (TC / 4) : e % TR, g = by_rows ? e % (TC / 4) : e / TR;
    double v[4][4];
    bool wide = false;
#pragma unroll
    for (int P = 0; P < 4; ++P) {
        const int s = 4 * P + sp;
        const long long r = (s >> 3) * 2 * hq + ((s >> 1) & 1) * hq + span0 + r0 + rt;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const long long c = ((s >> 2) & 1) * 2 * dq + (s & 1) * dq + c0 + 4 * g + j;
            v[P][j] = (r < rows && c < cols) ? scaled_integer(x[r * rs + c * cs], shifts[r], exps[r]) : 0.0;
            wide |= fabs(v[P][j]) >= 0x1p79;
        }
    }
    const int any_wide = __syncthreads_or(wide);
#pragma unroll
    for (int P = 0; P < 4; ++P) {
        unsigned* dst = res_sh + (4 * P + sp) * (TILE / 4) + rt * (TC / 4) + g;
        if (!any_wide) {
            double a[4], b[4], c[4];
#pragma unroll
            for (int j = 0; j < 4; ++j) split_limbs(v[P][j], a[j], b[j], c[j]);
            for (int t = 0; t < count; ++t) {
                double y[4];
#pragma unroll
                for (int j = 0; j < 4; ++j) y[j] = fma(a[j], c52s[t], fma(b[j], c26s[t], c[j]));
                dst[t * 16 * (TILE / 4)] = pack4(y, moduli[t], invs[t]);
            }
        } else {
            double h[4], l[4];
            int ex[4];
#pragma unroll
            for (int j = 0; j < 4; ++j) split_h_l(v[P][j], h[j], l[j], ex[j]);
            for (int t = 0; t < count; ++t) {
                const double* p2 = pow2 + (long long)t * pow2_len;
                double y[4];
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    double lp = l[j], p26 = c26s[t];
                    if (ex[j]) { lp = __dmul_rn(l[j], p2[ex[j]]); p26 = p2[ex[j] + 26]; }
                    y[j] = fma(h[j], p26, lp);
                }
                dst[t * 16 * (TILE / 4)] = pack4(y, moduli[t], invs[t]);
            }
        }
    }
    __syncthreads();
    const unsigned short* pairs = (const unsigned short*)res_sh;
    for (int task = tid; task < count * (TILE / 2); task += blockDim.x) {
        const int t = task / (TILE / 2), hw = task % (TILE / 2), row = hw / (TC / 2), pair = hw % (TC / 2);
        const Lanes k = lanes_of(moduli[t]);
        unsigned L[16];
#pragma unroll
        for (int s = 0; s < 16; ++s)
            L[s] = lanes_in(reps4(pairs[(t * 16 + s) * (TILE / 2) + row * (TC / 2) + pair], k), 0x4140u);
        unsigned Y[4][7];
#pragma unroll
        for (int o = 0; o < 4; ++o) ops7(k, L[4 * o], L[4 * o + 1], L[4 * o + 2], L[4 * o + 3], Y[o]);
        unsigned short* dst = out + ((long long)t * 49 * span_rows + r0 + row) * (dq / 2) + c0 / 2 + pair;
        const long long plane = span_rows * (dq / 2);
#pragma unroll
        for (int q = 0; q < 7; ++q) {
            unsigned z[7];
            ops7(k, Y[0][q], Y[1][q], Y[2][q], Y[3][q], z);
#pragma unroll
            for (int p = 0; p < 7; ++p) dst[(p * 7 + q) * plane] = (unsigned short)lanes_out(z[p], 0u, k);
        }
    }
}
"""

CRT2 = FINISH + r"""
template <int M> __device__ __forceinline__ void term2(const signed char* __restrict__ at, long long pstride,
                                                       double w_hi, double w_lo, double (&hi)[16], double (&lo)[16])
{
    int y[7][4];
#pragma unroll
    for (int p = 0; p < 7; ++p) {
        int x[7];
#pragma unroll
        for (int q = 0; q < 7; ++q) x[q] = at[(p * 7 + q) * pstride];
        const int u2 = x[0] + x[5], u3 = u2 + x[6];
        y[p][0] = x[0] + x[1]; y[p][1] = u2 + x[4] + x[2]; y[p][2] = u3 - x[3]; y[p][3] = u3 + x[4];
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int u2 = y[0][i] + y[5][i], u3 = u2 + y[6][i];
        const int z[4] = {y[0][i] + y[1][i], u2 + y[4][i] + y[2][i], u3 - y[3][i], u3 + y[4][i]};
#pragma unroll
        for (int o = 0; o < 4; ++o) {
            const double v = from_int(z[o]);
            const double c = from_int((signed char)residue_word<M>(v, low_word(__dadd_rn(v, MAGIC))));
            hi[4 * o + i] = fma(w_hi, c, hi[4 * o + i]);
            if (!EXACT) lo[4 * o + i] = __dadd_rn(lo[4 * o + i], __dmul_rn(w_lo, c));
        }
    }
}

/* Output (o, i): outer block o (C11, C12, C21, C22 of the whole) and inner block i of it, at (span0 + row, col). */
extern "C" __global__ void __launch_bounds__(256, CRT_BLOCKS) ozaki2_crt_level2(
    const signed char* __restrict__ prod, long long plane, long long pstride, long long ld,
    const int* __restrict__ sa, const int* __restrict__ sb, double* __restrict__ C, long long ldc,
    long long span0, long long rows, long long hq, long long wq)
{
    for (long long i = blockIdx.y; i < rows; i += gridDim.y) {
        for (long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x; j < wq;
             j += (long long)gridDim.x * blockDim.x) {
            const signed char* at = prod + i * ld + j;
            double hi[16], lo[16];
#pragma unroll
            for (int o = 0; o < 16; ++o) { hi[o] = 0.0; lo[o] = 0.0; }
#define TERM(T, M) term2<M>(at + (long long)(T) * plane, pstride, W_HI_##T, W_LO_##T, hi, lo);
            FOR_EACH_MODULUS(TERM)
#pragma unroll
            for (int o = 0; o < 16; ++o) {
                const int outer = o >> 2, inner = o & 3;
                const long long r = (outer >> 1) * 2 * hq + (inner >> 1) * hq + span0 + i;
                const long long c = (outer & 1) * 2 * wq + (inner & 1) * wq + j;
                const int code = sa[r];
                C[r * ldc + c] = unscale(finish(hi[o], lo[o]), code >> 8, (code & 255) + 256, sb[c]);
            }
        }
    }
}
"""

#: The CRT with two threads a position (``SPLIT``): lanes 0-15 of a warp take C's top outer blocks at 16 columns,
#: lanes 16-31 the bottom ones at the same columns (the same loads, served once), 8 outputs a thread, so that half the
#: double-double sums are live and more blocks fit an SM; the halves' combinations are chosen without branches.
CRT2_SPLIT = r"""
template <int M> __device__ __forceinline__ void term_split(const signed char* __restrict__ at, long long pstride,
                                                            int h, double w_hi, double w_lo, double (&hi)[8],
                                                            double (&lo)[8])
{
    int y[7][4];
#pragma unroll
    for (int p = 0; p < 7; ++p) {
        int x[7];
#pragma unroll
        for (int q = 0; q < 7; ++q) x[q] = at[(p * 7 + q) * pstride];
        const int u2 = x[0] + x[5], u3 = u2 + x[6];
        y[p][0] = x[0] + x[1]; y[p][1] = u2 + x[4] + x[2]; y[p][2] = u3 - x[3]; y[p][3] = u3 + x[4];
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int u2 = y[0][i] + y[5][i];
        const int z[2] = {y[0][i] + (h ? y[5][i] + y[6][i] - y[3][i] : y[1][i]),
                          u2 + y[4][i] + (h ? y[6][i] : y[2][i])};
#pragma unroll
        for (int o = 0; o < 2; ++o) {
            const double v = from_int(z[o]);
            const double c = from_int((signed char)residue_word<M>(v, low_word(__dadd_rn(v, MAGIC))));
            hi[4 * o + i] = fma(w_hi, c, hi[4 * o + i]);
            if (!EXACT) lo[4 * o + i] = __dadd_rn(lo[4 * o + i], __dmul_rn(w_lo, c));
        }
    }
}

extern "C" __global__ void __launch_bounds__(256, CRT_BLOCKS) ozaki2_crt_level2_split(
    const signed char* __restrict__ prod, long long plane, long long pstride, long long ld,
    const int* __restrict__ sa, const int* __restrict__ sb, double* __restrict__ C, long long ldc,
    long long span0, long long rows, long long hq, long long wq)
{
    const int h = (threadIdx.x >> 4) & 1;
    const long long lane_col = (threadIdx.x >> 5) * 16 + (threadIdx.x & 15);
    for (long long i = blockIdx.y; i < rows; i += gridDim.y) {
        for (long long j = (long long)blockIdx.x * 128 + lane_col; j < wq; j += (long long)gridDim.x * 128) {
            const signed char* at = prod + i * ld + j;
            double hi[8], lo[8];
#pragma unroll
            for (int o = 0; o < 8; ++o) { hi[o] = 0.0; lo[o] = 0.0; }
#define TERM_SPLIT(T, M) term_split<M>(at + (long long)(T) * plane, pstride, h, W_HI_##T, W_LO_##T, hi, lo);
            FOR_EACH_MODULUS(TERM_SPLIT)
#pragma unroll
            for (int o = 0; o < 8; ++o) {
                const int outer = 2 * h + (o >> 2), inner = o & 3;
                const long long r = (outer >> 1) * 2 * hq + (inner >> 1) * hq + span0 + i;
                const long long c = (outer & 1) * 2 * wq + (inner & 1) * wq + j;
                const int code = sa[r];
                C[r * ldc + c] = unscale(finish(hi[o], lo[o]), code >> 8, (code & 255) + 256, sb[c]);
            }
        }
    }
}
"""

#: The CRT with four warps a position (``SPLIT=2``): warp w of a block takes inner block i = w mod 4 of all four outer
#: blocks at 32 columns, reading only the products its inner combination needs (2 or 4 of each 7), so that a thread
#: holds 4 double-double sums and four blocks fit an SM; the other warps' reads of the same products hit the caches.
CRT2_QUARTER = r"""
template <int M> __device__ __forceinline__ void term_quarter(const signed char* __restrict__ at, long long ps, int i,
                                                              double w_hi, double w_lo, double (&hi)[4],
                                                              double (&lo)[4])
{
    int y[7];
#pragma unroll
    for (int p = 0; p < 7; ++p) {
        const signed char* b = at + p * 7 * ps;
        const int x0 = b[0];
        if (i == 0) {
            y[p] = x0 + b[ps];
        } else {
            const int x5 = b[5 * ps];
            if (i == 1) y[p] = x0 + x5 + b[4 * ps] + b[2 * ps];
            else y[p] = x0 + x5 + b[6 * ps] + (i == 2 ? -(int)b[3 * ps] : (int)b[4 * ps]);
        }
    }
    const int u2 = y[0] + y[5], u3 = u2 + y[6];
    const int z[4] = {y[0] + y[1], u2 + y[4] + y[2], u3 - y[3], u3 + y[4]};
#pragma unroll
    for (int o = 0; o < 4; ++o) {
        const double v = from_int(z[o]);
        const double c = from_int((signed char)residue_word<M>(v, low_word(__dadd_rn(v, MAGIC))));
        hi[o] = fma(w_hi, c, hi[o]);
        if (!EXACT) lo[o] = __dadd_rn(lo[o], __dmul_rn(w_lo, c));
    }
}

extern "C" __global__ void __launch_bounds__(256, CRT_BLOCKS) ozaki2_crt_level2_quarter(
    const signed char* __restrict__ prod, long long plane, long long pstride, long long ld,
    const int* __restrict__ sa, const int* __restrict__ sb, double* __restrict__ C, long long ldc,
    long long span0, long long rows, long long hq, long long wq)
{
    const int warp = threadIdx.x >> 5, i = warp & 3;
    const long long lane_col = (warp >> 2) * 32 + (threadIdx.x & 31);
    for (long long r = blockIdx.y; r < rows; r += gridDim.y) {
        for (long long j = (long long)blockIdx.x * 64 + lane_col; j < wq; j += (long long)gridDim.x * 64) {
            const signed char* at = prod + r * ld + j;
            double hi[4] = {0.0, 0.0, 0.0, 0.0}, lo[4] = {0.0, 0.0, 0.0, 0.0};
#define TERM_QUARTER(T, M) term_quarter<M>(at + (long long)(T) * plane, pstride, i, W_HI_##T, W_LO_##T, hi, lo);
            FOR_EACH_MODULUS(TERM_QUARTER)
#pragma unroll
            for (int o = 0; o < 4; ++o) {
                const long long row = (o >> 1) * 2 * hq + (i >> 1) * hq + span0 + r;
                const long long c = (o & 1) * 2 * wq + (i & 1) * wq + j;
                const int code = sa[row];
                C[row * ldc + c] = unscale(finish(hi[o], lo[o]), code >> 8, (code & 255) + 256, sb[c]);
            }
        }
    }
}
"""


def operand_kernel(side: str, fast: int | None = None, blocks: int | None = None, tile: tuple[int, int] = (0, 0)):
    """The operand kernel of ``side`` in form ``fast`` (0, 1: one phase; 2: two, :data:`OPERANDS_R`), over tiles of
    ``tile`` (rows, columns; default TR x TC, 256 entries: form 2 takes 4 x 64 too)."""
    fast, (tr, tc) = FAST if fast is None else fast, (tile[0] or TR, tile[1] or TC)
    head = (f"#define SIDE {int(side != 'a')}\n#define TR {tr}\n#define TC {tc}\n#define BARS 0\n"
            f"#define FAST {fast}\n#define OP_BLOCKS {blocks or OP_BLOCKS}\n")
    source = head + COMMON + DEVICE + ROWS_SOURCE.split("/* The row kernels'")[0] + OPERANDS
    kernel = cp.RawKernel(source + OPERANDS_R, "ozaki2_level2_operands_r") if fast == 2 else \
        cp.RawKernel(source, "ozaki2_level2_operands")
    kernel.max_dynamic_shared_size_bytes = operand_shared(fast)
    return kernel


def operand_shared(fast: int, count: int = 20) -> int:
    """Dynamic shared bytes of the operand kernel: three limbs of 16 tiles, or (form 2) 16 tiles' residues."""
    return count * 16 * TR * TC if fast == 2 else 48 * TR * TC * 4


def crt_kernel(table, blocks: int, split: int | None = None):
    """The CRT over the 49 products for ``table``: a thread a position (``split`` 0), two (1) or four warps (2);
    default ``SPLIT``."""
    split = SPLIT if split is None else split
    head = f"#define CRT_BLOCKS {blocks}\n" + constants(table) + for_each_modulus(table.moduli) + COMMON
    if split == 2:
        return cp.RawKernel(head + FINISH + CRT2_QUARTER, "ozaki2_crt_level2_quarter")
    if split:
        return cp.RawKernel(head + FINISH + CRT2_SPLIT, "ozaki2_crt_level2_split")
    return cp.RawKernel(head + CRT2, "ozaki2_crt_level2")


class Level2:
    """``A @ B`` by scheme II with two fused Winograd levels (see the module), into kept buffers."""

    def __init__(self, be, A, B, C, count: int, span: int) -> None:
        self.be, self.A, self.B, self.C = be, A, B, C
        n = A.shape[0]
        self.n, self.q, self.span = n, n // 4, span
        self.table = moduli_table(count)
        self.family = ops(be)
        self.lines = [self.family.line_buffers(be, n, False) for _ in range(2)]
        self.shift = [cp.empty(n, dtype=cp.int32) for _ in range(2)]
        self.moduli = cp.asarray(np.array(self.table.moduli, dtype=np.int32))
        self.pow2, self.pow2_len = powers(self.table.moduli)
        self.ops_b = cp.empty((count, 49, self.q, self.q), dtype=cp.int8)
        self.ops_a = cp.empty((count, 49, span, self.q), dtype=cp.int8)
        self.prod = cp.empty((count, 49, span, self.q), dtype=cp.int8)
        self.fast, self.tile = FAST, (TR, TC)
        self.kernels = {"a": operand_kernel("a"), "b": operand_kernel("b")}
        self.crt = crt_kernel(self.table, CRT_BLOCKS)
        tiles = [(slice(0, span), slice(0, self.q))]
        self.gemms, self.wide = [], None
        for t in range(count):
            for pq in range(49):
                found = planned(be, self.ops_a[t, pq], self.ops_b[t, pq], self.prod[t, pq], tiles,
                                self.table.moduli[t])
                if found is None:
                    break
                self.gemms += found
        if found is None:               # k below the residue kernel's least (a check size): INT32, then reduced
            self.wide = cp.empty((count, 49, span, self.q), dtype=cp.int32)
            self.gemms = [g for t in range(count) for pq in range(49)
                          for g in planned(be, self.ops_a[t, pq], self.ops_b[t, pq], self.wide[t, pq], tiles)]

    def operands(self, X, shifts, exps, side: str, out, span0: int, rows: int) -> None:
        rs, cs = element_strides(X)
        i64 = np.int64
        tr, tc = self.tile
        self.kernels[side]((self.q // tc, rows // tr), (256,), (
            X, i64(rs), i64(cs), i64(X.shape[0]), i64(X.shape[1]), shifts, exps, self.moduli,
            np.int32(self.table.count), self.pow2, np.int32(self.pow2_len), out, i64(span0), i64(rows), i64(self.q),
            i64(self.q)), shared_mem=operand_shared(self.fast, self.table.count))

    def scale(self):
        """The line statistics and scale codes of A's rows and B's columns (level 0's fast scaling)."""
        f = self.family
        rows = f.line_stats(self.A, None, False, self.lines[0])
        cols = f.line_stats(self.B.T, None, False, self.lines[1])
        return rows, cols, f.shifts(rows, self.table, self.shift[0]), f.shifts(cols, self.table, self.shift[1])

    def crt_span(self, s0: int, sa, sb, kernel=None, split: int | None = None) -> None:
        q, i64, C = self.q, np.int64, self.C
        columns = (256, 128, 64)[SPLIT if split is None else split]
        grid = (max(1, min(-(-q // columns), 64)), min(self.span, 65535))
        (kernel or self.crt)(grid, (256,), (self.prod, i64(49 * self.span * q), i64(self.span * q), i64(q), sa, sb,
                                            C, i64(C.strides[0] // 8), i64(s0), i64(self.span), i64(q), i64(q)))

    def __call__(self, mark=lambda name: None):
        A, B, C = self.A, self.B, self.C
        rows, cols, sa, sb = self.scale()
        mark("scaling")
        self.operands(B.T, sb, cols.e, "b", self.ops_b, 0, self.q)
        mark("operands")
        for s0 in range(0, self.q, self.span):
            self.operands(A, sa, rows.e, "a", self.ops_a, s0, self.span)
            mark("operands")
            run_planned(self.be, self.gemms)
            if self.wide is not None:
                wino = self.be.ops("ozaki2-winograd")
                for t, m in enumerate(self.table.moduli):
                    for pq in range(49):
                        self.prod[t, pq] = wino.reduce(self.wide[t, pq], m)
            mark("gemms")
            self.crt_span(s0, sa, sb)
            mark("crt")
        self.family.fix_nonfinite(A, B, C, rows, cols)
        mark("crt")
        return C


def events_ms(work, repeats: int = 5) -> float:
    """The median device time of ``work`` by CUDA events."""
    times = []
    for _ in range(repeats):
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        work()
        end.record()
        end.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, end))
    return statistics.median(times)


def bench(run: Level2, A, B) -> dict:
    """The passes' kernels alone at N (device time): the operand kernel's forms (FAST 0 and 2, blocks an SM: A's
    spans, B whole, with a checksum of what they write) and the CRT's blocks an SM (its last span)."""
    rows, cols, sa, sb = run.scale()
    out, kept = {}, run.kernels
    for fast, blocks, tile in ((0, 3, (8, 32)), (2, 3, (8, 32)), (2, 3, (4, 64))):
        run.fast, run.tile = fast, tile
        run.kernels = {"a": operand_kernel("a", fast, blocks, tile), "b": operand_kernel("b", fast, blocks, tile)}
        b = events_ms(lambda: run.operands(B.T, sb, cols.e, "b", run.ops_b, 0, run.q))
        a = events_ms(lambda: [run.operands(A, sa, rows.e, "a", run.ops_a, s0, run.span)
                               for s0 in range(0, run.q, run.span)])
        sums = [int(cp.sum(x.view(cp.uint32), dtype=cp.uint64)) for x in (run.ops_a, run.ops_b)]
        out[f"operands-form{fast}-blocks{blocks}-tile{tile[0]}x{tile[1]}"] = {"a_ms": a, "b_ms": b, "checksums": sums}
    run.fast, run.tile, run.kernels = FAST, (TR, TC), kept
    run()
    for split, blocks in ((0, 2), (1, 2), (2, 3), (2, 4)):
        kernel = crt_kernel(run.table, blocks, split)
        kernel.compile()
        out[f"crt-split{split}-blocks{blocks}-last-span"] = {
            "ms": events_ms(lambda k=kernel, x=split: run.crt_span(run.q - run.span, sa, sb, k, x)),
            "regs": kernel.num_regs, "local": kernel.local_size_bytes,
            "c_checksum": float(cp.sum(run.C[::97]))}
    print("bench", out, flush=True)
    return out


def reference_operands(be, res, table, side: str):
    """The 49 second-level operands of each modulus from the library's residues, by its level passes (twice)."""
    wino = be.ops("ozaki2-winograd")
    out = []
    for t, m in enumerate(table.moduli):
        sums = wino.operand_sums(*quadrants(res[t], side), m, side)
        for x in _side(res[t], sums, side):
            out += _side(x, wino.operand_sums(*quadrants(x, side), m, side), side)
    return out


def _side(res, sums, side: str) -> list:
    """The 7 operands of one level of ``res``'s side, as the library's fused level pairs them."""
    return [pair[0 if side == "a" else 1] for pair in operands(res, res, sums, sums)[2]]


def check(be) -> dict:
    """C bitwise a level-0 plan's at CHECK_N, and each operand plane the library level passes' (A whole)."""
    A, B = fresh_inputs(CHECK_N)
    C0, C2 = cp.empty((CHECK_N, CHECK_N)), cp.empty((CHECK_N, CHECK_N))
    plan = Plan(A, B, out=C0, options=Options(moduli=COUNT), backend=be)
    plan.execute(A, B, C0)
    run = Level2(be, A, B, C2, COUNT, CHECK_N // 4)
    run()
    family, table = run.family, run.table
    rows = family.line_stats(A, None, False)
    cols = family.line_stats(B.T, None, False)
    res_a = cp.empty((COUNT, CHECK_N, CHECK_N), dtype=cp.int8)
    res_b = cp.empty((COUNT, CHECK_N, CHECK_N), dtype=cp.int8)
    family.residues(A, family.shifts(rows, table), rows.e, table, CHECK_N, CHECK_N, out=res_a)
    family.residues(B.T, family.shifts(cols, table), cols.e, table, CHECK_N, CHECK_N, out=res_b)
    ref_a, ref_b = reference_operands(be, res_a, table, "a"), reference_operands(be, res_b, table, "b")
    flat_a, flat_b = run.ops_a.reshape(COUNT * 49, *run.ops_a.shape[2:]), run.ops_b.reshape(COUNT * 49,
                                                                                             *run.ops_b.shape[2:])
    bad_a = [i for i, x in enumerate(ref_a) if not bool(cp.array_equal(x, flat_a[i]))]
    bad_b = [i for i, x in enumerate(ref_b) if not bool(cp.array_equal(x, flat_b[i]))]
    out = {"n": CHECK_N, "bitwise_level_0": bool(cp.array_equal(C0, C2)),
           "max_abs_diff": float(cp.abs(C0 - C2).max()), "operand_planes_differing": {"a": bad_a[:20], "b": bad_b[:20]}}
    print("check", out, flush=True)
    plan.free()
    return out


def marker(events):
    start = cp.cuda.Event()
    start.record()
    last = [start]

    def mark(name):
        e = cp.cuda.Event()
        e.record()
        e.synchronize()
        events[name] = events.get(name, 0.0) + cp.cuda.get_elapsed_time(last[0], e)
        last[0] = e
    return mark


def main() -> None:
    be = get_backend("cupy")
    result = {"script": "results/published/scripts/ozaki2_fused_level2_probe.py", "environment": environment(be),
              "command": f"N={N} CHECK_N={CHECK_N} COUNT={COUNT} SPAN={SPAN} ROUNDS={ROUNDS} LOOP={LOOP} "
                         f"CRT_BLOCKS={CRT_BLOCKS} BITWISE={BITWISE} FAST={FAST} OP_BLOCKS={OP_BLOCKS} TR={TR} TC={TC} "
                         f"SPLIT={SPLIT} LEVEL1={LEVEL1} "
                         f"BENCH={BENCH} OUT=dir python3 "
                         "results/published/scripts/ozaki2_fused_level2_probe.py"}
    for name in ("a", "b"):
        k = operand_kernel(name)
        k.compile()
        result.setdefault("kernels", {})[f"operands-{name}"] = {"regs": k.num_regs, "local": k.local_size_bytes}
    ck = crt_kernel(moduli_table(COUNT), CRT_BLOCKS)
    ck.compile()
    result["kernels"]["crt"] = {"regs": ck.num_regs, "local": ck.local_size_bytes}
    print("kernels", result["kernels"], flush=True)
    if CHECK_N:
        result["check"] = check(be)
        write_json(result, "ozaki2-fused-level2-probe.json")
    if not N:
        return
    A, B = fresh_inputs(N)
    C, D = cp.empty((N, N)), cp.empty((N, N))
    C0 = None
    if BITWISE:
        C0 = cp.empty((N, N))
        plan = Plan(A, B, out=C0, options=Options(moduli=COUNT), backend=be)
        plan.execute(A, B, C0)
        plan.free()
        del plan
        cp.get_default_memory_pool().free_all_blocks()
    start = time.perf_counter()
    run = Level2(be, A, B, C, COUNT, SPAN)
    result["plan_s"] = time.perf_counter() - start
    if BENCH:
        result["bench"] = bench(run, A, B)
    calls = {"level-2-fused": run, "dgemm": lambda: cp.matmul(A, B, out=D)}
    for call in calls.values():
        call()
    cp.cuda.Device().synchronize()
    rows = cp.arange(0, N, 97)
    rel = cp.abs(C[rows] - D[rows]).max() / cp.abs(D[rows]).max()
    result["max_rel_diff_dgemm_sampled_rows"] = float(rel)
    if C0 is not None:
        result["bitwise_level_0_at_n"] = bool(cp.array_equal(C, C0))
        print("bitwise level 0 at", N, result["bitwise_level_0_at_n"], flush=True)
        del C0
    samples = turning(calls, ROUNDS, lambda call: loop_seconds(call, LOOP))
    ms = {k: statistics.median(v) * 1e3 for k, v in samples.items()}
    phases = []
    for _ in range(3):
        ev: dict = {}
        run(marker(ev))
        phases.append(ev)
    result.update({"n": N, "count": COUNT, "span": SPAN, "ms": ms, "samples_s": samples,
                   "x_dgemm": ms["dgemm"] / ms["level-2-fused"],
                   "phases_ms": {k: statistics.median(p[k] for p in phases) for k in phases[0]},
                   "telemetry": be.telemetry().read().as_dict() if be.telemetry() else None})
    print({k: result[k] for k in ("ms", "x_dgemm", "phases_ms", "max_rel_diff_dgemm_sampled_rows")}, flush=True)
    write_json(result, "ozaki2-fused-level2-probe.json")
    if LEVEL1:
        del run, calls
        cp.get_default_memory_pool().free_all_blocks()
        result["level_1"] = level_one(A, B, C, D)
        write_json(result, "ozaki2-fused-level2-probe.json")


def level_one(A, B, C, D) -> dict:
    """The library's level 1 as called (``ozaki2.matmul(A, B, moduli=COUNT, level=1, out=C)``) beside DGEMM, on the
    same inputs and machine, once the level-2 buffers are freed."""
    calls = {"level-1": lambda: ozaki2.matmul(A, B, moduli=COUNT, level=1, out=C),
             "dgemm": lambda: cp.matmul(A, B, out=D)}
    for call in calls.values():
        call()
    cp.cuda.Device().synchronize()
    samples = turning(calls, ROUNDS, lambda call: loop_seconds(call, LOOP))
    ms = {k: statistics.median(v) * 1e3 for k, v in samples.items()}
    out = {"ms": ms, "samples_s": samples, "x_dgemm": ms["dgemm"] / ms["level-1"]}
    print("level 1", out["ms"], out["x_dgemm"], flush=True)
    return out


if __name__ == "__main__":
    main()
