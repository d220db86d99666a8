"""The CUDA source of split-K's bulk-copy kernel (sm_90), appended to :data:`gpu.splitk.source.SOURCE`.

``splitk_bulk`` computes the tiles of ``splitk_pipe`` (the same warps, m16n8k16 and epilogue) but is fed by
the Tensor Memory Accelerator: one thread of a fifth warp copies each stage as two boxes, one of A and one of
B, through tensor maps (:mod:`gpu.splitk.tensormap`) into a ring of shared stages, and the warps that multiply
wait on each stage's ``mbarrier`` (its bytes counted in) and hand the stage back through a second one. No
thread of the multiplying warps issues a load, and no block-wide barrier stands between stages. Each box is
four elements wider than it needs to be (A's along k, B's along n), so that its rows land in shared memory
four doubles apart beyond a multiple of 16 and the fragment loads meet no bank conflict; the extra columns of
A are the next stage's (read again from L2), those of B past n are zeros. The TMA fills whatever lies past the
matrix with zeros; the last stage of a chunk shorter than the others is masked along k.

Why boxes: on the H200 the same kernel fed by one ``cp.async.bulk`` copy per row ran at 0.45-0.95x cuBLAS,
its speed falling with the copies per stage (one copy for all of B's rows took m = n = 16 from 0.74x to 1.0x at
k = 2^24); two boxes per stage ran 0.97-1.25x (results/published/h200/h200-splitk-bulk-tune.json).
"""

BULK = r"""
struct __align__(64) TensorMap { unsigned long long opaque[16]; };

__device__ inline unsigned smem_address(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }
__device__ inline void bar_init(unsigned long long* bar, unsigned count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(smem_address(bar)), "r"(count) : "memory");
}
__device__ inline void bar_expect(unsigned long long* bar, unsigned bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n"
                 :: "r"(smem_address(bar)), "r"(bytes) : "memory");
}
__device__ inline void bar_arrive(unsigned long long* bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" :: "r"(smem_address(bar)) : "memory");
}
__device__ inline void bar_wait(unsigned long long* bar, unsigned parity)
{
    unsigned done = 0;
    while (!done)
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     "selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(smem_address(bar)), "r"(parity) : "memory");
}
/* A 2-D box of a tensor map (x along the fast dimension, y along the other) into shared memory. */
__device__ inline void tensor_box(double* dst, const TensorMap& map, int x, int y, unsigned long long* bar)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
                 "[%0], [%1, {%2, %3}], [%4];\n"
                 :: "r"(smem_address(dst)), "l"(reinterpret_cast<unsigned long long>(&map)), "r"(x), "r"(y),
                    "r"(smem_address(bar)) : "memory");
}

/* One stage's products of a warp: R slices of 16 along k, masked past ``len`` where MASK. */
template <int TM, int TN, int R, int KW, int LA, int LB, bool MASK>
__device__ inline void bulk_products(const double* As, const double* Bs, double (&acc)[TM][TN][4], int wk, int r0,
                                     int c0, int g, int t, int len)
{
#pragma unroll
    for (int rr = 0; rr < R; ++rr) {
        const int kk = (rr * KW + wk) * 16;
        double a[TM][8], b[TN][4];
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const bool in = !MASK || kk + 4 * q + t < len;
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int h = 0; h < 2; ++h)
                    a[i][2 * q + h] = in ? As[(r0 + 16 * i + 8 * h + g) * LA + kk + 4 * q + t] : 0.0;
#pragma unroll
            for (int j = 0; j < TN; ++j) b[j][q] = in ? Bs[(kk + 4 * q + t) * LB + c0 + 8 * j + g] : 0.0;
        }
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) Atom<2, 4>::mma(acc[i][j], a[i], b[j]);
    }
}

/* The chunk this block computes, by thread 0: blockIdx.z; or, where ``prefer`` is given (a weighted wave: one
   block per chunk, no other output tile), a free chunk among the ``slots`` this SM prefers (the wider chunks on the
   SMs that read faster), else the first free one after them. ``claims`` holds a flag per chunk and then the count of
   blocks that have claimed: each block takes exactly one chunk, so every chunk is computed once whichever SM its
   block lands on, and the last block clears the flags for the next launch of the stream. */
__device__ inline int claim_chunk(const int* __restrict__ prefer, int slots, int table_sms, int* __restrict__ claims)
{
    const int chunks = gridDim.z;
    unsigned sm;
    asm volatile("mov.u32 %0, %%smid;\n" : "=r"(sm));
    int got = -1;
    if (sm < static_cast<unsigned>(table_sms))
        for (int j = 0; j < slots && got < 0; ++j) {
            const int c = prefer[sm * slots + j];
            if (atomicCAS(claims + c, 0, 1) == 0) got = c;
        }
    for (int i = 0; got < 0 && i < chunks; ++i) {
        const int c = static_cast<int>((static_cast<unsigned long long>(sm) * slots + i) % chunks);
        if (atomicCAS(claims + c, 0, 1) == 0) got = c;
    }
    __threadfence();
    if (atomicAdd(claims + chunks, 1) == chunks - 1)
        for (int c = 0; c <= chunks; ++c) atomicExch(claims + c, 0);
    return got;
}

template <int TM, int TN, int WMS, int WNS, int R, int S>
__global__ void __launch_bounds__((__WARPS__ + 1) * 32)
splitk_bulk(const double* __restrict__ A, long long sa0, long long sa1,
            const double* __restrict__ B, long long sb0, long long sb1,
            double* __restrict__ out, long long so0, long long so1, long long so2,
            int m, int n, long long base, long long extra, long long unit, long long fast,
            long long fast_units, double alpha, int flags,
            const __grid_constant__ TensorMap ta, const __grid_constant__ TensorMap tb,
            const int* __restrict__ prefer, int slots, int table_sms, int* __restrict__ claims)
{
    constexpr int KW = __WARPS__ / (WMS * WNS), BM = 16 * TM * WMS, BN = 8 * TN * WNS, KS = 16 * KW * R;
    constexpr int LA = KS + 4, LB = BN + 4, STAGE = BM * LA + KS * LB, BARS = (2 * S + 15) / 16 * 16;
    extern __shared__ __align__(128) double bulk_smem[];
    unsigned long long* full = reinterpret_cast<unsigned long long*>(bulk_smem);
    unsigned long long* empty = full + S;
    double* stages = bulk_smem + BARS;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    __shared__ int chunk;
    if (threadIdx.x == 0) {
        chunk = prefer ? claim_chunk(prefer, slots, table_sms, claims) : static_cast<int>(blockIdx.z);
        for (int s = 0; s < S; ++s) {
            bar_init(full + s, 1);
            bar_init(empty + s, __WARPS__);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    long long start, stop;
    chunk_span(chunk, base, extra, unit, fast, fast_units, start, stop);
    const int tiles = static_cast<int>((stop - start + KS - 1) / KS);
    if (warp == __WARPS__ && lane == 0) {
        for (int tile = 0; tile < tiles; ++tile) {
            const int slot = tile % S;
            if (tile >= S) bar_wait(empty + slot, ((tile / S) & 1) ^ 1);
            const int k0 = static_cast<int>(start + static_cast<long long>(tile) * KS);
            double* As = stages + slot * STAGE;
            bar_expect(full + slot, 8u * STAGE);
            tensor_box(As, ta, k0, row0, full + slot);
            tensor_box(As + BM * LA, tb, col0, k0, full + slot);
        }
    }
    const int wm = warp % WMS, wn = (warp / WMS) % WNS, wk = warp / (WMS * WNS);
    const int g = lane >> 2, t = lane & 3, r0 = wm * TM * 16, c0 = wn * TN * 8;
    double acc[TM][TN][4];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0;
    if (warp < __WARPS__) {
        for (int tile = 0; tile < tiles; ++tile) {
            const int slot = tile % S;
            bar_wait(full + slot, (tile / S) & 1);
            const double* As = stages + slot * STAGE;
            const double* Bs = As + BM * LA;
            const long long k0 = start + static_cast<long long>(tile) * KS;
            const int len = static_cast<int>(min(static_cast<long long>(KS), stop - k0));
            if (len == KS) bulk_products<TM, TN, R, KW, LA, LB, false>(As, Bs, acc, wk, r0, c0, g, t, len);
            else bulk_products<TM, TN, R, KW, LA, LB, true>(As, Bs, acc, wk, r0, c0, g, t, len);
            __syncwarp();
            if (lane == 0) bar_arrive(empty + slot);
        }
    }
    __syncthreads();
    if (warp < __WARPS__) stage_tiles<TM, TN, 2, BM, BN>(stages, acc, wk, r0, c0, g, t);
    __syncthreads();
    emit_sums<KW, BM, BN>(stages, m, n, out, so0, so1, so2, alpha, flags, chunk);
}
/* The SMs' read speeds under a full load (gpu.splitk.sm_probe): one block per SM (its shared ring is too large for
   two), whose first thread streams ``per_block`` bytes of ``src`` ``passes`` times through SPEED_STAGES bulk copies
   of SPEED_PIECE bytes in flight, then writes its SM and the nanoseconds the reads took. */
#define SPEED_PIECE 32768
#define SPEED_STAGES 4
extern "C" __global__ void __launch_bounds__(32)
splitk_sm_speed(const char* __restrict__ src, long long per_block, int passes, unsigned long long* __restrict__ out)
{
    extern __shared__ __align__(128) unsigned char ring[];
    __shared__ __align__(8) unsigned long long full[SPEED_STAGES];
    if (threadIdx.x != 0) return;
    for (int s = 0; s < SPEED_STAGES; ++s) bar_init(full + s, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    const char* base = src + blockIdx.x * per_block;
    const long long per = per_block / SPEED_PIECE, pieces = per * passes;
    unsigned long long t0, t1;
    unsigned sm;
    asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t0));
    for (long long p = 0; p < pieces; ++p) {
        const int slot = static_cast<int>(p % SPEED_STAGES);
        if (p >= SPEED_STAGES) bar_wait(full + slot, static_cast<unsigned>((p / SPEED_STAGES - 1) & 1));
        bar_expect(full + slot, SPEED_PIECE);
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                     :: "r"(smem_address(ring + slot * SPEED_PIECE)), "l"(base + (p % per) * SPEED_PIECE),
                        "r"(SPEED_PIECE), "r"(smem_address(full + slot)) : "memory");
    }
    for (long long p = pieces > SPEED_STAGES ? pieces - SPEED_STAGES : 0; p < pieces; ++p)
        bar_wait(full + p % SPEED_STAGES, static_cast<unsigned>((p / SPEED_STAGES) & 1));
    asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t1));
    asm volatile("mov.u32 %0, %%smid;\n" : "=r"(sm));
    out[2 * blockIdx.x] = sm;
    out[2 * blockIdx.x + 1] = t1 - t0;
}
"""
