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

Form 3 and both CRTs are the library's (:mod:`gpu.ozaki2.level2_kernels`, which ``ozaki2.matmul(..., level=2)``
runs); forms 0 and 1 are kept here for the probe's comparisons, form 2 is in this script at c6525f3.
"""

from __future__ import annotations

import cupy as cp

from gpu.ozaki2.level2_kernels import OPERANDS, operand_head
from gpu.ozaki2.level2_kernels import crt_kernel as library_crt

#: The operand kernel's tile (rows, columns) at one position of each sub-block.
TILE = (8, 32)

#: Forms 0 and 1: 26-bit limbs in shared memory, the residues taken per task.
FORM01 = r"""
__device__ __forceinline__ int residue_rt(double y, int m, double inv) { return residue_nm(y, -m, inv); }
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

def operand_kernel(side: str, form: int = 3, blocks: int = 3, tile: tuple[int, int] = TILE):
    """The operand kernel of ``side`` (``"a"`` or ``"b"``) in ``form`` (0, 1: one phase; 3: the library's, two
    phases, four entries a task), built for ``blocks`` blocks an SM, over tiles of ``tile`` (rows, columns: 256
    entries; form 3 takes 4 x 64 too)."""
    if form not in (0, 1, 3):
        raise ValueError(f"operand form {form}: this script has forms 0, 1 and 3 (form 2 is in it at c6525f3)")
    head = f"#define FAST {min(form, 2)}\n" + operand_head(side, blocks, tile)
    if form == 3:
        kernel = cp.RawKernel(head + OPERANDS, "ozaki2_level2_operands")
    else:
        kernel = cp.RawKernel(head + FORM01, "ozaki2_level2_operands")
    kernel.max_dynamic_shared_size_bytes = operand_shared(form)
    return kernel


def operand_shared(form: int, count: int = 20) -> int:
    """Dynamic shared bytes of the operand kernel (tiles of 256 entries): three limbs of 16 tiles, or (form 3) 16
    tiles' residues at ``count`` moduli."""
    return count * 16 * 256 if form >= 2 else 48 * 256 * 4


def crt_kernel(table, blocks: int = 2, staged: bool = False):
    """The library's CRT over the 49 products for ``table`` (:func:`gpu.ozaki2.level2_kernels.crt_kernel`), built
    for ``blocks`` blocks an SM; ``staged``: its products staged in shared memory."""
    return library_crt(table, staged, blocks)
