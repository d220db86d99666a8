"""The CUDA source of split-K's deterministic reductions: the fused one that every chunk kernel runs at its end
(:data:`FINISH`, flag ``FUSED``: the default, one launch per product) and the kernels of their own
(:data:`REDUCE`: ``splitk_reduce``, a second launch, which :class:`gpu.splitk.kernels.Launcher` runs where asked
not to fuse, and ``splitk_scale``). Both add the partials in the plan's order
(:class:`gpu.splitk.plan.SplitPlan`), so they give the same bits. :mod:`gpu.splitk.compiled` puts :data:`FINISH`
between :data:`gpu.splitk.source.PRELUDE` and the chunk kernels, and :data:`REDUCE` after them.

Why fused: on the H200 the second launch cost 5-8 us of device time (Nsight Compute) beside a chunk kernel of
490 us at m = n = 32, k = 2^22, plus the gap between the two launches, as much as split-K trailed cuBLAS by.
"""

FINISH = r"""
/* The fused deterministic reduction (flag ``FUSED``), which each block runs once its chunk's partial of its output
   tile is stored: the last block of a group of ``group`` chunks to arrive adds the group's partials in chunk order
   into the group's first slot, and the last group to arrive adds the group sums in group order into C with alpha
   and beta: the order of ``splitk_reduce``, so the same bits, without a second launch. The arrivals are counted
   per tile and group, and per tile, by one thread of each block after a barrier, with an atomic add between
   acquire-release fences (as CUTLASS's semaphores do); the last arrival sets the counter back to zero for the
   next call. ``note``: a word of shared memory the block no longer needs. */
#define FUSED 8
#define FINISH_PARAMS(T) T* C, long long sc0, long long sc1, double beta, unsigned* counters, long long group
#define FINISH_ARGS C, sc0, sc1, beta, counters, group
#define FINISH_BATCH 2
#define FINISH_DEPTH 8

__device__ inline bool last_to_arrive(unsigned* counter, unsigned count, unsigned* note, int tid)
{
    __syncthreads();
    if (tid == 0) {
        unsigned before;
        asm volatile("fence.acq_rel.gpu;\n"
                     "atom.relaxed.gpu.global.add.u32 %0, [%1], 1;\n" : "=r"(before) : "l"(counter) : "memory");
        const bool last = before == count - 1;
        if (last) {
            asm volatile("fence.acq_rel.gpu;\n" ::: "memory");
            *counter = 0;
        }
        *note = last;
    }
    __syncthreads();
    return *note != 0;
}

/* Output o of the block's tile: its row r and column c of C, and whether it lies in C. */
template <int BM, int BN>
__device__ inline bool tile_output(int o, int m, int n, int& r, int& c)
{
    r = blockIdx.y * BM + o / BN;
    c = blockIdx.x * BN + o % BN;
    return o < BM * BN && r < m && c < n;
}

/* Slots ``from``, ``from + step``, ... (``count`` of them) of the tile's outputs o0 + e THREADS added in turn;
   the loads of FINISH_DEPTH slots are issued before their additions, so that many are in flight at once. */
template <typename T, int BM, int BN, int THREADS, int E>
__device__ inline void add_slots(const T* P, long long so0, long long so1, long long so2, int m, int n, int o0,
                                 long long from, long long count, long long step, T (&s)[E])
{
    long long at[E];
    bool in[E];
    int r, c;
#pragma unroll
    for (int e = 0; e < E; ++e) {
        in[e] = tile_output<BM, BN>(o0 + e * THREADS, m, n, r, c);
        at[e] = from * so2 + r * so0 + c * so1;
        s[e] = in[e] ? __ldcg(P + at[e]) : T(0);
    }
    for (long long h = 1; h < count; h += FINISH_DEPTH) {
        T v[FINISH_DEPTH][E];
#pragma unroll
        for (int q = 0; q < FINISH_DEPTH; ++q)
#pragma unroll
            for (int e = 0; e < E; ++e)
                v[q][e] = in[e] && h + q < count ? __ldcg(P + at[e] + (h + q) * step * so2) : T(0);
#pragma unroll
        for (int q = 0; q < FINISH_DEPTH; ++q)
#pragma unroll
            for (int e = 0; e < E; ++e)
                if (in[e] && h + q < count) s[e] = add_rn(s[e], v[q][e]);
    }
}

template <typename T, int BM, int BN, int THREADS>
__device__ inline void finish(T* P, long long so0, long long so1, long long so2, int m, int n, double alpha,
                              FINISH_PARAMS(T), unsigned* note)
{
    constexpr int PER = (BM * BN + THREADS - 1) / THREADS, E = PER < FINISH_BATCH ? PER : FINISH_BATCH;
    const int tid = threadIdx.y * blockDim.x + threadIdx.x;
    const long long chunks = gridDim.z, groups = (chunks + group - 1) / group, first = blockIdx.z / group * group;
    const long long count = min(group, chunks - first);
    const unsigned tile = blockIdx.y * gridDim.x + blockIdx.x;
    int r, c;
    if (!last_to_arrive(counters + tile * groups + first / group, count, note, tid)) return;
    for (int o0 = tid; o0 < BM * BN; o0 += E * THREADS) {
        T s[E];
        add_slots<T, BM, BN, THREADS, E>(P, so0, so1, so2, m, n, o0, first, count, 1, s);
#pragma unroll
        for (int e = 0; e < E; ++e)
            if (tile_output<BM, BN>(o0 + e * THREADS, m, n, r, c)) P[first * so2 + r * so0 + c * so1] = s[e];
    }
    if (!last_to_arrive(counters + gridDim.x * gridDim.y * groups + tile, groups, note, tid)) return;
    for (int o0 = tid; o0 < BM * BN; o0 += E * THREADS) {
        T s[E];
        add_slots<T, BM, BN, THREADS, E>(P, so0, so1, so2, m, n, o0, 0, groups, group, s);
#pragma unroll
        for (int e = 0; e < E; ++e)
            if (tile_output<BM, BN>(o0 + e * THREADS, m, n, r, c)) {
                T* dst = C + r * sc0 + c * sc1;
                *dst = epilogue(alpha, s[e], beta, beta == 0.0 ? T(0) : *dst);
            }
    }
}
"""

REDUCE = r"""
/* The deterministic reduction in one launch. Block b takes ``per`` outputs from b per; its thread g per + j adds
   chunks g G .. g G + G - 1 of output j in turn (group g's sum, kept in shared memory), and after a barrier its
   thread j adds the group sums in turn and applies alpha and beta: the plan's order, as the NumPy path. */
template <typename T>
__global__ void splitk_reduce(const T* __restrict__ P, long long outputs, long long chunks, long long group,
                              int per, T* C, long long sc0, long long sc1, int n, double alpha, double beta)
{
    extern __shared__ __align__(16) unsigned char reduce_shared[];
    T* S = reinterpret_cast<T*>(reduce_shared);
    const long long groups = (chunks + group - 1) / group;
    const int j = threadIdx.x % per, g = threadIdx.x / per;
    const long long o = static_cast<long long>(blockIdx.x) * per + j;
    if (g < groups && o < outputs) {
        const long long first = g * group, last = min(chunks, first + group);
        T s = P[first * outputs + o];
#pragma unroll 8
        for (long long h = first + 1; h < last; ++h) s = add_rn(s, P[h * outputs + o]);
        S[threadIdx.x] = s;
    }
    __syncthreads();
    if (g == 0 && o < outputs) {
        T s = S[j];
        for (long long q = 1; q < groups; ++q) s = add_rn(s, S[q * per + j]);
        const long long r = o / n, c = o - r * n;
        T* dst = C + r * sc0 + c * sc1;
        *dst = epilogue(alpha, s, beta, beta == 0.0 ? T(0) : *dst);
    }
}

template <typename T>
__global__ void splitk_scale(T* C, long long sc0, long long sc1, int m, int n, double beta)
{
    const long long outputs = (long long)m * n;
    for (long long o = (long long)blockIdx.x * blockDim.x + threadIdx.x; o < outputs;
         o += (long long)gridDim.x * blockDim.x) {
        const long long r = o / n, c = o - r * n;
        T* dst = C + r * sc0 + c * sc1;
        *dst = beta == 0.0 ? T(0) : scale_rn(beta, *dst);
    }
}
"""
