"""The CUDA passes of two fused Winograd levels over scheme II's residues (CuPy only; :mod:`gpu.ozaki2.fused_level2`).

* **The operand pass** (``ozaki2_level2_operands``): one read of an operand's float64 entries writes, per modulus,
  its 49 second-level operands, each a sum modulo m of up to 16 of its quarter-side sub-blocks (Winograd's sums of
  the sums). A block takes the :data:`TILE` (8 x 32) at one position of all 16 sub-blocks. First each thread loads
  four neighbouring entries of four sub-blocks (each group's four entries, and its row's scale code and exponent,
  before any is scaled), splits them once and writes their residues for every modulus into shared memory (a word
  of four); then each task (a modulus, four neighbouring entries) reads its 16 words, forms the 28 inner operands in
  16-bit lanes of representatives (:mod:`gpu.ozaki2.residue_cuda`, with ``LANES_MIN``: a modular sum is one IADD3
  and one ``VIADDMNMX.U16x2`` on sm_90, the moduli's packed constants read from shared memory) and writes each of
  the 49 outer ones as one 32-bit word, its stores walking a pointer. The pass is bound by latency and instruction
  issue, not bytes: under Nsight Compute at N = 16384 (before the loads were grouped), 81% of the stall samples
  fell in the first phase, nearly half of them waiting on the loads (``h200-ozaki2-level2-lanes-ncu-16384.txt``).
* **The CRT** (``ozaki2_crt_level2`` and ``_staged``): a thread reads the 49 INT8 residue products of every
  modulus at one position and combines them, exactly in integers, into the 16 output entries there (inner, then
  outer), each reduced to its symmetric residue in integers (``small_residue``) and summed into the double-double
  CRT in level 0's order (:mod:`gpu.ozaki2.crt_kernels`). The staged form copies each modulus's 49 product rows
  into shared memory with ``cp.async`` while it combines the previous modulus's (rows of a multiple of 256
  positions); the other reads them a byte at a time.

Every residue is a function of its integer alone, so the product is bitwise scheme II's plain one. On the H200 at
N = 32768 and 15 moduli (``scripts/ozaki2_level2_lanes_probe.py``, ``ozaki2_level2_variants.py``): the second
phase's 1282 instructions a task are 755, the CRT's float64 ones a third fewer than at cf23e7c, every byte equal.
**As called**, at the 700 W cap, on one board in turning rounds, ``ozaki2.matmul(A, B, moduli=15, level=2)`` ran
684.6 ms a call against 696.6 with cf23e7c's passes (2.029x against 1.993x DGEMM), though at the full clock the
grouped loads ran slower alone (B 32.1 ms, A's spans 30.5, against 28.3 and 24.9 before, and 26.9 and 23.5
ungrouped, whose call ran 688.8 ms); the staged CRT 4.5-4.6 ms a span of 2048 rows against 4.9-5.0.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import cupy
import numpy as np

from .crt_kernels import FINISH
from .cuda_source import COMMON, constants, for_each_modulus
from .moduli import ModuliTable
from .residue_cuda import DEVICE
from .rows_source import ROWS_SOURCE, element_strides, powers

#: The operand pass's tile (rows, columns) at one position of each sub-block; blocks an SM it is built for.
TILE, OPERAND_BLOCKS = (8, 32), 3
#: The CRT's threads a block, blocks an SM, and the positions a staged block takes at a time.
CRT_THREADS, CRT_BLOCKS, STAGE = 256, 2, 256

#: Device functions the operand pass and its probe's earlier forms share.
HELPERS = r"""
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
/* y less the nearest multiple of m (nm = -m, from shared memory, so that it costs one multiply-add). */
__device__ __forceinline__ int residue_nm(double y, int nm, double inv)
{
    return (int)((unsigned)low_word(__dadd_rn(y, MAGIC)) + (unsigned)low_word(fma(y, inv, MAGIC)) * (unsigned)nm);
}
__device__ __forceinline__ unsigned pack4(const double* y, int nm, double inv)
{
    unsigned word = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) word |= ((unsigned)residue_nm(y[j], nm, inv) & 0xffu) << (8 * j);
    return word;
}
#define TILE (TR * TC)
/* The block's residues: each thread four neighbouring entries of four of the 16 sub-blocks (sub-block s at rows
   (s >> 3) 2 hq + ((s >> 1) & 1) hq, columns ((s >> 2) & 1) 2 dq + (s & 1) dq), split once, their words of every
   modulus into res_sh[(t 16 + s) TILE / 4 + word]; entries beyond the operand are zeros. */
__device__ __forceinline__ void level2_residues(
    const double* __restrict__ x, long long rs, long long cs, long long rows, long long cols,
    const int* __restrict__ shifts, const int* __restrict__ exps, int count, const double* __restrict__ pow2,
    int pow2_len, long long r0, long long c0, long long hq, long long dq, unsigned* res_sh, const double* c26s,
    const double* c52s, const double* invs, const int* nms)
{
    const int tid = threadIdx.x;
    const bool by_rows = (cs == 1);
    const int e = tid & 63, sp = tid >> 6;
    const int rt = by_rows ? e / (TC / 4) : e % TR, g = by_rows ? e % (TC / 4) : e / TR;
    double v[4][4];
    bool wide = false;
#pragma unroll
    for (int P = 0; P < 4; ++P) {
        const int s = 4 * P + sp;
        const long long r = (s >> 3) * 2 * hq + ((s >> 1) & 1) * hq + r0 + rt;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const long long c = ((s >> 2) & 1) * 2 * dq + (s & 1) * dq + c0 + 4 * g + j;
            v[P][j] = (r < rows && c < cols) ? x[r * rs + c * cs] : 0.0;
        }
        const int code = r < rows ? shifts[r] : 0, bar = r < rows ? exps[r] : 0;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            v[P][j] = scaled_integer(v[P][j], code, bar);
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
                dst[t * 16 * (TILE / 4)] = pack4(y, nms[t], invs[t]);
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
                dst[t * 16 * (TILE / 4)] = pack4(y, nms[t], invs[t]);
            }
        }
    }
}
"""

OPERANDS = r"""
/* Operand (p, q) of modulus t (outer operand p of the level's 7, inner q of that one's 7) at rows span0 + r0 +
   row of each quarter, into out[(t 49 + 7 p + q) span_rows dq + ...]: the grid is (dq / TC, rows / TR). */
extern "C" __global__ void __launch_bounds__(256, OP_BLOCKS) ozaki2_level2_operands(
    const double* __restrict__ x, long long rs, long long cs, long long rows, long long cols,
    const int* __restrict__ shifts, const int* __restrict__ exps, const int* __restrict__ moduli, int count,
    const double* __restrict__ pow2, int pow2_len, unsigned* __restrict__ out, long long span0,
    long long span_rows, long long hq, long long dq)
{
    extern __shared__ unsigned res_sh[];
    __shared__ double c26s[32], c52s[32], invs[32];
    __shared__ unsigned mms[32], nws[32];
    __shared__ int nms[32];
    const int tid = threadIdx.x;
    const long long r0 = (long long)blockIdx.y * TR, c0 = (long long)blockIdx.x * TC;
    limb_weights(moduli, count, c26s, c52s);
    if (tid < count) {
        const Lanes k = lanes_of(moduli[tid]);
        invs[tid] = 1.0 / (double)moduli[tid];
        nms[tid] = -moduli[tid];
        mms[tid] = k.mm;
        nws[tid] = k.nw;
    }
    level2_residues(x, rs, cs, rows, cols, shifts, exps, count, pow2, pow2_len, span0 + r0, c0, hq, dq, res_sh, c26s,
                    c52s, invs, nms);
    __syncthreads();
    for (int task = tid; task < count * (TILE / 4); task += blockDim.x) {
        const int t = task / (TILE / 4), w = task % (TILE / 4), row = w / (TC / 4), g = w % (TC / 4);
        Lanes k = lanes_of(moduli[t]);
        k.mm = mms[t];
        k.nw = nws[t];
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
        unsigned* dst = out + ((long long)t * 49 * span_rows + r0 + row) * (dq / 4) + c0 / 4 + g;
        const long long plane = span_rows * (dq / 4);
#pragma unroll
        for (int q = 0; q < 7; ++q) {
            unsigned z[2][7];
#pragma unroll
            for (int i = 0; i < 2; ++i) ops7(k, Y[i][0][q], Y[i][1][q], Y[i][2][q], Y[i][3][q], z[i]);
            unsigned* at = dst;
#pragma unroll
            for (int p = 0; p < 7; ++p) {
                *at = lanes_out(z[0][p], z[1][p], k);
                at += 7 * plane;
            }
            dst += plane;
        }
    }
}
"""

CRT = FINISH + r"""
/* Modulus M's 49 products at one position (product (p, q) at at[(7 p + q) pstride]) combined into the 16 outputs
   there, each reduced and added, with the modulus's weight, into the double-double sums. */
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
            const double c = small_residue<M>(z[o]);
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
/* A block takes 256 neighbouring positions of one row at a time; the next modulus's 49 products (or the block's
   next positions') are copied while it combines the current one's. */
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


def operand_head(side: str, blocks: int = OPERAND_BLOCKS, tile: tuple[int, int] = TILE) -> str:
    """The operand pass's defines and the device code it builds on (``side`` ``"a"`` or ``"b"``)."""
    tr, tc = tile
    return (f"#define SIDE {int(side != 'a')}\n#define TR {tr}\n#define TC {tc}\n#define BARS 0\n#define LANES_MIN\n"
            f"#define OP_BLOCKS {blocks}\n" + COMMON + DEVICE + ROWS_SOURCE.split("/* The row kernels'")[0] + HELPERS)


@cache
def operand_kernel(side: str, blocks: int = OPERAND_BLOCKS) -> Any:
    """The operand pass of ``side`` (``"a"``: A's rows; ``"b"``: B's columns as rows), built for ``blocks`` blocks
    an SM (compiled once per process)."""
    kernel = cupy.RawKernel(operand_head(side, blocks) + OPERANDS, "ozaki2_level2_operands")
    kernel.max_dynamic_shared_size_bytes = operand_shared()
    return kernel


def operand_shared(count: int = 20) -> int:
    """Dynamic shared bytes of the operand pass: the residues of 16 tiles of 256 entries at ``count`` moduli."""
    return count * 16 * TILE[0] * TILE[1]


@cache
def crt_kernel(table: ModuliTable, staged: bool, blocks: int = CRT_BLOCKS) -> Any:
    """The CRT over the 49 products for ``table``'s moduli (constants compiled in), built for ``blocks`` blocks an
    SM; ``staged``: its products staged in shared memory (rows a multiple of :data:`STAGE` positions wide)."""
    source = (f"#define CRT_BLOCKS {blocks}\n#define NMOD {table.count}\n" + constants(table)
              + for_each_modulus(table.moduli) + COMMON + CRT)
    if staged:
        return cupy.RawKernel(source + CRT_STAGED, "ozaki2_crt_level2_staged")
    return cupy.RawKernel(source, "ozaki2_crt_level2")


def operands(X: Any, shifts: Any, exps: Any, table: ModuliTable, out: Any, side: str, span0: int, rows: int,
             quarter: int) -> None:
    """The 49 second-level operands per modulus of ``X`` (A, or B^T for ``side`` ``"b"``) for ``rows`` rows from
    ``span0`` of each quarter of its ``4 quarter`` rows, into ``out`` (count x 49 x span x k / 4, INT8; a
    span's first ``rows`` rows). ``shifts`` and ``exps``: the scale codes and bar exponents of X's rows."""
    count, _, span, dq = out.shape
    rs, cs = element_strides(X)
    pow2, length = powers(table.moduli)
    i64, i32 = np.int64, np.int32
    operand_kernel(side)((dq // TILE[1], rows // TILE[0]), (256,), (
        X, i64(rs), i64(cs), i64(X.shape[0]), i64(X.shape[1]), shifts.astype(i32, copy=False),
        exps.astype(i32, copy=False), _moduli(table.moduli), i32(count), pow2, i32(length), out, i64(span0),
        i64(span), i64(quarter), i64(dq)), shared_mem=operand_shared(count))


def crt(products: Any, table: ModuliTable, shift_a: Any, shift_b: Any, C: Any, span0: int, rows: int,
        quarter: int) -> None:
    """C's entries at rows ``span0`` .. ``span0 + rows`` of each quarter of its rows, all its columns, from the 49
    INT8 residue products per modulus (``products``: count x 49 x span x n / 4, C-ordered; their first ``rows``
    rows), staged where the quarter columns are whole multiples of :data:`STAGE`."""
    span, wq = products.shape[2:]
    staged = wq % STAGE == 0
    i64, i32 = np.int64, np.int32
    grid = (_sms() * CRT_BLOCKS, 1) if staged else (max(1, min(-(-wq // CRT_THREADS), 64)), min(rows, 65535))
    crt_kernel(table, staged)(grid, (CRT_THREADS,), (
        products, i64(49 * span * wq), i64(span * wq), i64(wq), shift_a.astype(i32, copy=False),
        shift_b.astype(i32, copy=False), C, i64(C.strides[0] // C.itemsize), i64(span0), i64(rows), i64(quarter),
        i64(wq)))


@cache
def _moduli(moduli: tuple[int, ...]) -> Any:
    """The moduli as an int32 device vector (made once per process, so that a captured call copies nothing)."""
    return cupy.asarray(np.array(moduli, dtype=np.int32))


@cache
def _sms(device: int | None = None) -> int:
    """The streaming multiprocessors of the current device (the staged CRT's grid: :data:`CRT_BLOCKS` each)."""
    return cupy.cuda.Device(device).attributes["MultiProcessorCount"]
