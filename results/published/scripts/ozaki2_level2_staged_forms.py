"""Two forms of the level-2 passes that keep more loads in flight, for ``ozaki2_level2_staged_probe.py``.

Why: under Nsight Compute (``h200-ozaki2-level2-lanes-ncu-16384.txt``) 81% of the operand pass's stall samples fall
in its first phase, nearly half on the long scoreboard at the first use of the loaded entries; and the staged CRT
reads a span's 12.3 GB in about 4.6 ms (2.7 TB/s) while its instructions would take about 1 ms at full issue:
both wait on memory.

* **The staged operand pass** (``operands``, ``operand_kernel``): resident blocks (2 an SM, 128 registers, 93 KB of
  shared memory at 15 moduli against the library's 3 an SM) that copy the next tile's 16 entries a thread into
  shared memory with ``cp.async`` while they write the current tile's 49 operands. Built from the library's own
  source text (``gpu.ozaki2.level2_kernels.HELPERS`` and ``OPERANDS``), so the arithmetic is the library's; only the
  loads and the block's loop differ. ``operands`` has the library's signature (its grid differs).
* **The ring CRT** (``crt_kernel``): the staged level-2 CRT with a ring of :data:`STAGES` buffers, two moduli's 49
  product rows in flight against one (37.6 KB of static shared memory a block, 122 registers), launched by the
  library's launcher.
"""
from functools import cache

import cupy
import numpy as np

from gpu.ozaki2 import level2_kernels as L
from gpu.ozaki2.cuda_source import COMMON, constants, for_each_modulus
from gpu.ozaki2.rows_source import element_strides, powers

LOAD = "            v[P][j] = (r < rows && c < cols) ? x[r * rs + c * cs] : 0.0;"
STAGED_LOAD = "            v[P][j] = stage[(4 * P + j) * 256 + tid];"
SIG = "    const double* c52s, const double* invs, const int* nms)"
STAGED_SIG = "    const double* c52s, const double* invs, const int* nms, const double* stage)"

STAGE = r"""
/* This thread's 16 entries of the tile at (r0, c0) (level2_residues's), copied into stage[(4 P + j) 256 + tid] by
   cp.async (zero-filled beyond the operand), one commit group. */
__device__ __forceinline__ void stage_entries(const double* __restrict__ x, long long rs, long long cs, long long rows,
                                              long long cols, long long r0, long long c0, long long hq, long long dq,
                                              double* stage)
{
    const int tid = threadIdx.x;
    const bool by_rows = (cs == 1);
    const int e = tid & 63, sp = tid >> 6;
    const int rt = by_rows ? e / (TC / 4) : e % TR, g = by_rows ? e % (TC / 4) : e / TR;
#pragma unroll
    for (int P = 0; P < 4; ++P) {
        const int s = 4 * P + sp;
        const long long r = (s >> 3) * 2 * hq + ((s >> 1) & 1) * hq + r0 + rt;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const long long c = ((s >> 2) & 1) * 2 * dq + (s & 1) * dq + c0 + 4 * g + j;
            const bool in = r < rows && c < cols;
            const unsigned to = (unsigned)__cvta_generic_to_shared(stage + (4 * P + j) * 256 + tid);
            asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" :: "r"(to),
                         "l"(in ? x + r * rs + c * cs : x), "r"(in ? 8 : 0));
        }
    }
    asm volatile("cp.async.commit_group;\n" ::);
}
"""


def _staged_source(side: str) -> str:
    """The staged operand pass's source for ``side``, from the library's."""
    head = L.operand_head(side, 2)
    assert LOAD in head and SIG in head, "the library's level2_residues changed: rebuild the draft"
    head = head.replace(LOAD, STAGED_LOAD).replace(SIG, STAGED_SIG)
    ops = L.OPERANDS
    start = ops.index("    __syncthreads();\n    for (int task = tid;")
    phase2 = ops[start + len("    __syncthreads();\n"):ops.rindex("}")]
    setup = ops[ops.index("    __shared__ double c26s[32]"):ops.index("    level2_residues(")]
    setup = setup.replace("    const long long r0 = (long long)blockIdx.y * TR, c0 = (long long)blockIdx.x * TC;\n", "")
    kernel = (
        "extern \"C\" __global__ void __launch_bounds__(256, 2) ozaki2_level2_operands_staged(\n"
        "    const double* __restrict__ x, long long rs, long long cs, long long rows, long long cols,\n"
        "    const int* __restrict__ shifts, const int* __restrict__ exps, const int* __restrict__ moduli, int count,\n"
        "    const double* __restrict__ pow2, int pow2_len, unsigned* __restrict__ out, long long span0,\n"
        "    long long span_rows, long long hq, long long dq, long long tiles_x, long long tiles)\n{\n"
        "    extern __shared__ __align__(16) unsigned char smem[];\n"
        "    double* stage = reinterpret_cast<double*>(smem);\n"
        "    unsigned* res_sh = reinterpret_cast<unsigned*>(smem + 16 * TILE * sizeof(double));\n"
        + setup +
        "    long long tile = blockIdx.x;\n"
        "    if (tile < tiles)\n"
        "        stage_entries(x, rs, cs, rows, cols, span0 + (tile / tiles_x) * TR, (tile % tiles_x) * TC, hq, dq,\n"
        "                      stage);\n"
        "    for (; tile < tiles; tile += gridDim.x) {\n"
        "        const long long r0 = (tile / tiles_x) * TR, c0 = (tile % tiles_x) * TC;\n"
        "        asm volatile(\"cp.async.wait_all;\\n\" ::);\n"
        "        level2_residues(x, rs, cs, rows, cols, shifts, exps, count, pow2, pow2_len, span0 + r0, c0,\n"
        "                        hq, dq, res_sh, c26s, c52s, invs, nms, stage);\n"
        "        __syncthreads();\n"
        "        if (tile + gridDim.x < tiles) {\n"
        "            const long long next = tile + gridDim.x;\n"
        "            stage_entries(x, rs, cs, rows, cols, span0 + (next / tiles_x) * TR, (next % tiles_x) * TC, hq,\n"
        "                          dq, stage);\n"
        "        }\n"
        + phase2.replace("\n", "\n    ").rstrip() + "\n"
        "        __syncthreads();\n"
        "    }\n}\n")
    return head + STAGE + kernel


def shared_bytes(count: int = 20) -> int:
    """Dynamic shared bytes of the staged pass: 16 entries a thread of staging beside the library's residues."""
    return 16 * L.TILE[0] * L.TILE[1] * 8 + L.operand_shared(count)


@cache
def operand_kernel(side: str, blocks: int = 2):
    """The staged operand pass of ``side`` (compiled once per process)."""
    kernel = cupy.RawKernel(_staged_source(side), "ozaki2_level2_operands_staged")
    kernel.max_dynamic_shared_size_bytes = shared_bytes()
    return kernel


def operands(X, shifts, exps, table, out, side: str, span0: int, rows: int, quarter: int) -> None:
    """gpu.ozaki2.level2_kernels.operands's contract, by the staged kernel on 2 resident blocks an SM."""
    count, _, span, dq = out.shape
    rs, cs = element_strides(X)
    pow2, length = powers(table.moduli)
    i64, i32 = np.int64, np.int32
    tiles_x, tiles = dq // L.TILE[1], (dq // L.TILE[1]) * (rows // L.TILE[0])
    operand_kernel(side)((min(tiles, L._sms() * 2),), (256,), (
        X, i64(rs), i64(cs), i64(X.shape[0]), i64(X.shape[1]), shifts.astype(i32, copy=False),
        exps.astype(i32, copy=False), L._moduli(table.moduli), i32(count), pow2, i32(length), out, i64(span0),
        i64(span), i64(quarter), i64(dq), i64(tiles_x), i64(tiles)), shared_mem=shared_bytes(count))


STAGES = 3
_LIBRARY_CRT = L.crt_kernel

RING = r"""
extern "C" __global__ void __launch_bounds__(256, CRT_BLOCKS) ozaki2_crt_level2_ring(
    const signed char* __restrict__ prod, long long plane, long long pstride, long long ld,
    const int* __restrict__ sa, const int* __restrict__ sb, double* __restrict__ C, long long ldc,
    long long span0, long long rows, long long hq, long long wq)
{
    static_assert(NMOD >= STAGES - 1, "a ring deeper than the moduli");
    __shared__ __align__(16) signed char stage[STAGES][49 * 256];
    const long long per_row = wq / 256, tiles = rows * per_row;
    int buf = 0;
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s)
        stage_products(stage[s], prod, plane, pstride, ld, per_row, tiles, s, blockIdx.x);
    for (long long tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const long long i = tile / per_row, j = (tile % per_row) * 256 + threadIdx.x;
        double hi[16], lo[16];
#pragma unroll
        for (int o = 0; o < 16; ++o) { hi[o] = 0.0; lo[o] = 0.0; }
#define RING(T, M) \
        { const int ahead = buf == 0 ? STAGES - 1 : buf - 1; \
          stage_products(stage[ahead], prod, plane, pstride, ld, per_row, tiles, \
                         (T) + STAGES - 1 < NMOD ? (T) + STAGES - 1 : (T) + STAGES - 1 - NMOD, \
                         (T) + STAGES - 1 < NMOD ? tile : tile + gridDim.x); \
          asm volatile("cp.async.wait_group %0;\n" :: "n"(STAGES - 1)); \
          __syncthreads(); \
          term2<M>(stage[buf] + threadIdx.x, 256, W_HI_##T, W_LO_##T, hi, lo); \
          __syncthreads(); \
          buf = buf + 1 < STAGES ? buf + 1 : 0; }
        FOR_EACH_MODULUS(RING)
        write16(hi, lo, sa, sb, C, ldc, span0 + i, j, hq, wq);
    }
    asm volatile("cp.async.wait_group 0;\n" ::);
}
"""


def source(table) -> str:
    """The ring CRT's source for ``table``'s moduli (the library's device code, its own kernel)."""
    stage_fn = L.CRT_STAGED[:L.CRT_STAGED.index("/* A block takes 256")]
    return (f"#define CRT_BLOCKS {L.CRT_BLOCKS}\n#define NMOD {table.count}\n#define STAGES {STAGES}\n"
            + constants(table) + for_each_modulus(table.moduli) + COMMON + L.CRT + stage_fn + RING)


@cache
def crt_kernel(table, staged: bool, blocks: int = L.CRT_BLOCKS):
    """The ring CRT with the library's signature (the unstaged form is the library's)."""
    if not staged:
        return _LIBRARY_CRT(table, False, blocks)
    return cupy.RawKernel(source(table), "ozaki2_crt_level2_ring")
