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

template <int TM, int TN, int WMS, int WNS, int R, int S>
__global__ void __launch_bounds__((__WARPS__ + 1) * 32)
splitk_bulk(const double* __restrict__ A, long long sa0, long long sa1,
            const double* __restrict__ B, long long sb0, long long sb1,
            double* __restrict__ out, long long so0, long long so1, long long so2,
            int m, int n, long long base, long long extra, long long unit, double alpha, int flags,
            const __grid_constant__ TensorMap ta, const __grid_constant__ TensorMap tb)
{
    constexpr int KW = __WARPS__ / (WMS * WNS), BM = 16 * TM * WMS, BN = 8 * TN * WNS, KS = 16 * KW * R;
    constexpr int LA = KS + 4, LB = BN + 4, STAGE = BM * LA + KS * LB, BARS = (2 * S + 15) / 16 * 16;
    extern __shared__ __align__(128) double bulk_smem[];
    unsigned long long* full = reinterpret_cast<unsigned long long*>(bulk_smem);
    unsigned long long* empty = full + S;
    double* stages = bulk_smem + BARS;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    long long start, stop;
    chunk_range(base, extra, unit, start, stop);
    const int tiles = static_cast<int>((stop - start + KS - 1) / KS);
    if (threadIdx.x == 0) {
        for (int s = 0; s < S; ++s) {
            bar_init(full + s, 1);
            bar_init(empty + s, __WARPS__);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
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
    emit_sums<KW, BM, BN>(stages, m, n, out, so0, so1, so2, alpha, flags);
}
"""
