"""The CUDA kernels of ``ozaki2_fused_level2_probe.py``: two fused Winograd levels over scheme II's residues.

* **operands**: one read of an operand's float64 entries writes, per modulus, its 49 second-level operands (each a
  sum modulo m of up to 16 of its (N/4)^2 sub-blocks: Winograd's sums of the sums). A block takes the 8 x 32 tile
  at one position of all 16 sub-blocks. Form 2 (``ozaki2_level2_operands_r``): each thread splits four neighbouring
  entries of four sub-blocks once and writes their residues for every modulus into shared memory; then each task
  (a modulus, two neighbouring entries) reads its 16 residue pairs as 16-bit lanes (``gpu.ozaki2.residue_cuda``),
  forms the 28 inner operands once and writes the 49 outer ones as 16-bit stores. Forms 0 and 1
  (``ozaki2_level2_operands``) keep 26-bit limbs in shared memory and take the residues per task, four entries a
  word in two halves of lanes (form 1 with swizzled 16-byte reads). Form 3 is form 2 with four neighbouring entries
  a task, two words of lanes, so that each of the 49 outer operands is packed and stored as one 32-bit word: fewer
  instructions an entry in a pass that issue, not bytes, bounds. On the H200 at N = 32768 form 3 took 25.5 and
  27.7 ms for A and B, form 2 30.2-30.6 and 31.0-31.3, form 0 37.6 and 37.8-38.0
  (``results/published/h200/h200-ozaki2-fused-level2-*``);
* **the CRT** (``ozaki2_crt_level2``): a thread reads the 49 INT8 products of every modulus at one position and
  combines them, exactly in integers, into the 16 output entries there (the level's combination of the 7 products,
  inner then outer), each reduced and summed into the double-double CRT in level 0's order: 11.1-11.4 ms for a
  span of 2048 rows. Two threads a position (8 outputs each) took 12.3-12.4 ms and four warps a position (4 outputs
  a thread, each warp reading only the products it combines) 43.7-54.6: both forms are in the script at 3041d4a.

Every residue is a function of its integer alone, so the product is bitwise scheme II's plain one.
"""

from __future__ import annotations

import cupy as cp

from gpu.ozaki2.crt_kernels import FINISH
from gpu.ozaki2.cuda_source import COMMON, constants, for_each_modulus
from gpu.ozaki2.residue_cuda import DEVICE
from gpu.ozaki2.rows_source import ROWS_SOURCE

#: The operand kernel's tile (rows, columns) at one position of each sub-block.
TILE = (8, 32)

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
/* 2^26 and 2^52 modulo each modulus, which weigh a 26-bit limb's residue, into the block's shared arrays (the
   first ``count`` threads, one a modulus; the caller's barrier publishes them). */
__device__ __forceinline__ void limb_weights(const int* __restrict__ moduli, int count, double* c26s, double* c52s)
{
    if (threadIdx.x < count) {
        const int m = moduli[threadIdx.x];
        c26s[threadIdx.x] = (double)((1LL << 26) % m);
        c52s[threadIdx.x] = (double)((1LL << 52) % m);
    }
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
    limb_weights(moduli, count, c26s, c52s);
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
    limb_weights(moduli, count, c26s, c52s);
    if (tid < count) invs[tid] = 1.0 / (double)moduli[tid];
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
#if WORDS
    for (int task = tid; task < count * (TILE / 4); task += blockDim.x) {
        const int t = task / (TILE / 4), w = task % (TILE / 4), row = w / (TC / 4), g = w % (TC / 4);
        const Lanes k = lanes_of(moduli[t]);
        unsigned Y[2][4][7];
#pragma unroll
        for (int o = 0; o < 4; ++o) {
            unsigned R[4];
#pragma unroll
            for (int j = 0; j < 4; ++j) R[j] = reps4(res_sh[(t * 16 + 4 * o + j) * (TILE / 4) + w], k);
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                const unsigned sel = i ? 0x4342u : 0x4140u;
                ops7(k, lanes_in(R[0], sel), lanes_in(R[1], sel), lanes_in(R[2], sel), lanes_in(R[3], sel), Y[i][o]);
            }
        }
        unsigned* dst = (unsigned*)out + ((long long)t * 49 * span_rows + r0 + row) * (dq / 4) + c0 / 4 + g;
        const long long plane = span_rows * (dq / 4);
#pragma unroll
        for (int q = 0; q < 7; ++q) {
            unsigned z[2][7];
#pragma unroll
            for (int i = 0; i < 2; ++i) ops7(k, Y[i][0][q], Y[i][1][q], Y[i][2][q], Y[i][3][q], z[i]);
#pragma unroll
            for (int p = 0; p < 7; ++p) dst[(p * 7 + q) * plane] = lanes_out(z[0][p], z[1][p], k);
        }
    }
#else
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
#endif
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

/* Output (o, i): outer block o (C11, C12, C21, C22 of the whole) and inner block i of it, at (row, col) of the
   first, each finished and unscaled into C. */
__device__ __forceinline__ void write16(const double (&hi)[16], const double (&lo)[16], const int* __restrict__ sa,
                                        const int* __restrict__ sb, double* __restrict__ C, long long ldc,
                                        long long row, long long col, long long hq, long long wq)
{
#pragma unroll
    for (int o = 0; o < 16; ++o) {
        const int outer = o >> 2, inner = o & 3;
        const long long r = (outer >> 1) * 2 * hq + (inner >> 1) * hq + row;
        const long long c = (outer & 1) * 2 * wq + (inner & 1) * wq + col;
        const int code = sa[r];
        C[r * ldc + c] = unscale(finish(hi[o], lo[o]), code >> 8, (code & 255) + 256, sb[c]);
    }
}

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
            write16(hi, lo, sa, sb, C, ldc, span0 + i, j, hq, wq);
        }
    }
}
"""

#: The CRT with its products staged in shared memory (``crt_kernel(..., staged=True)``): a block takes 256
#: neighbouring positions of one row at a time, and the 49 products of the next modulus (or of the block's next
#: positions) are copied in 16-byte pieces (``cp.async``) while it combines the current one's, so that many bytes
#: are in flight where the one-byte loads of :data:`CRT2` each waited on their own. The arithmetic is CRT2's. On the
#: H200 at N = 32768 a span of 2048 rows took 4.98 ms against CRT2's 11.4-11.7, the same C.
CRT_STAGED = r"""
__device__ __forceinline__ void stage_products(signed char* dst, const signed char* __restrict__ prod, long long plane,
                                               long long pstride, long long ld, long long per_row, long long tiles,
                                               int t, long long tile)
{
    if (tile < tiles) {
        const signed char* src = prod + t * plane + (tile / per_row) * ld + (tile % per_row) * 256;
        for (int c = threadIdx.x; c < 49 * 16; c += blockDim.x) {
            const unsigned to = (unsigned)__cvta_generic_to_shared(dst + (c >> 4) * 256 + (c & 15) * 16);
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(to),
                         "l"(src + (c >> 4) * pstride + (c & 15) * 16));
        }
    }
    asm volatile("cp.async.commit_group;\n" ::);
}
extern "C" __global__ void __launch_bounds__(256, CRT_BLOCKS) ozaki2_crt_level2_staged(
    const signed char* __restrict__ prod, long long plane, long long pstride, long long ld,
    const int* __restrict__ sa, const int* __restrict__ sb, double* __restrict__ C, long long ldc,
    long long span0, long long rows, long long hq, long long wq)
{
    __shared__ __align__(16) signed char stage[2][49 * 256];
    const long long per_row = wq / 256, tiles = rows * per_row;
    int buf = 0;
    stage_products(stage[0], prod, plane, pstride, ld, per_row, tiles, 0, blockIdx.x);
    for (long long tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const long long i = tile / per_row, j = (tile % per_row) * 256 + threadIdx.x;
        double hi[16], lo[16];
#pragma unroll
        for (int o = 0; o < 16; ++o) { hi[o] = 0.0; lo[o] = 0.0; }
#define STAGED(T, M) \
        stage_products(stage[buf ^ 1], prod, plane, pstride, ld, per_row, tiles, (T) + 1 < NMOD ? (T) + 1 : 0, \
                       (T) + 1 < NMOD ? tile : tile + gridDim.x); \
        asm volatile("cp.async.wait_group 1;\n" ::); \
        __syncthreads(); \
        term2<M>(stage[buf] + threadIdx.x, 256, W_HI_##T, W_LO_##T, hi, lo); \
        __syncthreads(); \
        buf ^= 1;
        FOR_EACH_MODULUS(STAGED)
        write16(hi, lo, sa, sb, C, ldc, span0 + i, j, hq, wq);
    }
    asm volatile("cp.async.wait_group 0;\n" ::);
}
"""


def operand_kernel(side: str, form: int = 3, blocks: int = 3, tile: tuple[int, int] = TILE):
    """The operand kernel of ``side`` (``"a"`` or ``"b"``) in ``form`` (0, 1: one phase; 2, 3: two,
    :data:`OPERANDS_R`, two or four entries a task), built for ``blocks`` blocks an SM, over tiles of ``tile`` (rows,
    columns: 256 entries; forms 2 and 3 take 4 x 64 too)."""
    tr, tc = tile
    head = (f"#define SIDE {int(side != 'a')}\n#define TR {tr}\n#define TC {tc}\n#define BARS 0\n"
            f"#define FAST {min(form, 2)}\n#define WORDS {int(form == 3)}\n#define OP_BLOCKS {blocks}\n")
    source = head + COMMON + DEVICE + ROWS_SOURCE.split("/* The row kernels'")[0] + OPERANDS
    kernel = cp.RawKernel(source + OPERANDS_R, "ozaki2_level2_operands_r") if form >= 2 else \
        cp.RawKernel(source, "ozaki2_level2_operands")
    kernel.max_dynamic_shared_size_bytes = operand_shared(form)
    return kernel


def operand_shared(form: int, count: int = 20) -> int:
    """Dynamic shared bytes of the operand kernel (tiles of 256 entries): three limbs of 16 tiles, or (form 2) 16
    tiles' residues at ``count`` moduli."""
    return count * 16 * 256 if form >= 2 else 48 * 256 * 4


def crt_kernel(table, blocks: int = 2, staged: bool = False):
    """The CRT over the 49 products for ``table`` (a moduli table), built for ``blocks`` blocks an SM; ``staged``:
    its products staged in shared memory (:data:`CRT_STAGED`, rows a multiple of 256 positions wide)."""
    head = f"#define CRT_BLOCKS {blocks}\n#define NMOD {table.count}\n"
    source = head + constants(table) + for_each_modulus(table.moduli) + COMMON + CRT2
    if staged:
        return cp.RawKernel(source + CRT_STAGED, "ozaki2_crt_level2_staged")
    return cp.RawKernel(source, "ozaki2_crt_level2")
