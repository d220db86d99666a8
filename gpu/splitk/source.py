"""The CUDA source of split-K's kernels (see :mod:`gpu.splitk.kernels` for what each does).

Kept apart from the launching code so that it can be compiled and checked without CuPy.
``__TILE__`` and ``__WARPS__`` are filled in by :mod:`gpu.splitk.kernels`.
"""

SOURCE = r"""
__device__ inline double add_rn(double a, double b) { return __dadd_rn(a, b); }
__device__ inline float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ inline double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ inline float mul_rn(float a, float b) { return __fmul_rn(a, b); }

/* alpha x, and alpha s + beta c (c not read where beta is 0), computed in double and rounded once to the
   operands' type: a float32 product takes any finite alpha and beta (1e39 overflows a float, 1e-46 vanishes). */
__device__ inline double scale_rn(double a, double x) { return __dmul_rn(a, x); }
__device__ inline float scale_rn(double a, float x) { return __double2float_rn(__dmul_rn(a, (double)x)); }
__device__ inline double epilogue(double alpha, double s, double beta, double c)
{
    return beta == 0.0 ? __dmul_rn(alpha, s) : __dadd_rn(__dmul_rn(alpha, s), __dmul_rn(beta, c));
}
__device__ inline float epilogue(double alpha, float s, double beta, float c)
{
    return __double2float_rn(epilogue(alpha, (double)s, beta, (double)c));
}

/* Chunk z of the plan: ``base`` units of ``unit`` elements, one unit more for the first ``extra`` chunks. */
__device__ inline void chunk_range(long long base, long long extra, long long unit, long long& start, long long& stop)
{
    const long long z = blockIdx.z;
    start = unit * (z * base + min(z, extra));
    stop = start + unit * (base + (z < extra ? 1 : 0));
}

/* ``flags`` of the chunk kernels: add into ``out`` atomically (else store the chunk's partial); A's and B's
   rows may be copied two elements at a time (16-byte aligned pairs along k in A, along n in B). */
#define ATOMIC 1
#define A_PAIRS 2
#define B_PAIRS 4

template <typename T>
__device__ inline void emit(T* out, long long at, T value, int flags)
{
    if (flags & ATOMIC) atomicAdd(out + at, value);
    else out[at] = value;
}

#define KT 16
template <typename T>
__global__ void __launch_bounds__(__TILE__ * __TILE__)
splitk_tile(const T* __restrict__ A, long long sa0, long long sa1,
            const T* __restrict__ B, long long sb0, long long sb1,
            T* __restrict__ out, long long so0, long long so1, long long so2,
            int m, int n, long long base, long long extra, long long unit, double alpha, int flags)
{
    constexpr int TILE = __TILE__;
    __shared__ T As[TILE][KT + 1];
    __shared__ T Bs[KT][TILE + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row0 = blockIdx.y * TILE, col0 = blockIdx.x * TILE;
    long long start, stop;
    chunk_range(base, extra, unit, start, stop);
    T acc = T(0);
    for (long long l0 = start; l0 < stop; l0 += KT) {
        const int ar = row0 + ty, bc = col0 + tx;
        const long long aq = l0 + tx, bq = l0 + ty;
        As[ty][tx] = (ar < m && aq < stop) ? A[ar * sa0 + aq * sa1] : T(0);
        Bs[ty][tx] = (bq < stop && bc < n) ? B[bq * sb0 + bc * sb1] : T(0);
        __syncthreads();
#pragma unroll
        for (int q = 0; q < KT; ++q) acc += As[ty][q] * Bs[q][tx];
        __syncthreads();
    }
    const int r = row0 + ty, c = col0 + tx;
    if (r < m && c < n)
        emit(out, (flags & ATOMIC ? 0 : blockIdx.z * so2) + r * so0 + c * so1, scale_rn(alpha, acc), flags);
}

template <int L2> __device__ inline double load(const double* p) { return __ldg(p); }
template <> __device__ inline double load<256>(const double* p)
{
    double v;
    asm("ld.global.nc.L2::256B.f64 %0, [%1];" : "=d"(v) : "l"(p));
    return v;
}

template <int H, int J> struct Atom;
template <> struct Atom<1, 1> {
    static __device__ inline void mma(double* c, const double* a, const double* b)
    {
        asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0, %1}, {%2}, {%3}, {%0, %1};\n"
                     : "+d"(c[0]), "+d"(c[1]) : "d"(a[0]), "d"(b[0]));
    }
};
template <> struct Atom<2, 4> {
    static __device__ inline void mma(double* c, const double* a, const double* b)
    {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f64.f64.f64.f64 {%0, %1, %2, %3}, "
                     "{%4, %5, %6, %7, %8, %9, %10, %11}, {%12, %13, %14, %15}, {%0, %1, %2, %3};\n"
                     : "+d"(c[0]), "+d"(c[1]), "+d"(c[2]), "+d"(c[3])
                     : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(a[4]), "d"(a[5]), "d"(a[6]), "d"(a[7]),
                       "d"(b[0]), "d"(b[1]), "d"(b[2]), "d"(b[3]));
    }
};

/* The epilogue of the mma kernels: the KW warps that split k write their tiles (the m16n8 / m8n8 fragment
   layout: row 8 H i + 8 (e / 2) + g, column 8 j + 2 t + e % 2 of the warp's tile) to ``red``, KW x BM x (BN + 1)
   doubles of shared memory (``stage_tiles``), and after a barrier one thread per output adds them in warp order
   and stores alpha times the sum into its chunk's slice of ``out``, or adds it atomically (``emit_sums``). */
template <int TM, int TN, int H, int BM, int BN>
__device__ inline void stage_tiles(double* red, double (&acc)[TM][TN][2 * H], int wk, int r0, int c0, int g, int t)
{
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j)
#pragma unroll
            for (int e = 0; e < 2 * H; ++e) {
                const int r = r0 + 8 * H * i + 8 * (e / 2) + g, c = c0 + 8 * j + 2 * t + e % 2;
                red[(wk * BM + r) * (BN + 1) + c] = acc[i][j][e];
            }
}

template <int KW, int BM, int BN>
__device__ inline void emit_sums(const double* red, int m, int n, double* __restrict__ out, long long so0,
                                 long long so1, long long so2, double alpha, int flags)
{
    for (int o = threadIdx.x; o < BM * BN; o += blockDim.x) {
        const int r = o / BN, c = o - r * BN, gr = blockIdx.y * BM + r, gc = blockIdx.x * BN + c;
        double sum = red[r * (BN + 1) + c];
#pragma unroll
        for (int w = 1; w < KW; ++w) sum = add_rn(sum, red[(w * BM + r) * (BN + 1) + c]);
        if (gr < m && gc < n)
            emit(out, (flags & ATOMIC ? 0 : blockIdx.z * so2) + gr * so0 + gc * so1, mul_rn(alpha, sum), flags);
    }
}

template <int TM, int TN, int H, int KW, int BM, int BN>
__device__ inline void reduce_and_emit(double* red, double (&acc)[TM][TN][2 * H], int wk, int r0, int c0,
                                       int g, int t, int m, int n, double* __restrict__ out, long long so0,
                                       long long so1, long long so2, double alpha, int flags)
{
    stage_tiles<TM, TN, H, BM, BN>(red, acc, wk, r0, c0, g, t);
    __syncthreads();
    emit_sums<KW, BM, BN>(red, m, n, out, so0, so1, so2, alpha, flags);
}

template <int H, int J, int TM, int TN, int WMS, int WNS, int U, int L2>
__global__ void __launch_bounds__(__WARPS__ * 32)
splitk_dmma(const double* __restrict__ A, long long sa0, long long sa1,
            const double* __restrict__ B, long long sb0, long long sb1,
            double* __restrict__ out, long long so0, long long so1, long long so2,
            int m, int n, long long base, long long extra, long long unit, double alpha, int flags)
{
    constexpr int AM = 8 * H, AK = 4 * J, KW = __WARPS__ / (WMS * WNS);
    constexpr int BM = AM * TM * WMS, BN = 8 * TN * WNS, STEP = AK * U;
    __shared__ double S[KW][BM][BN + 1];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int wm = warp % WMS, wn = (warp / WMS) % WNS, wk = warp / (WMS * WNS);
    const int g = lane >> 2, t = lane & 3, r0 = wm * TM * AM, c0 = wn * TN * 8;
    long long start, stop;
    chunk_range(base, extra, unit, start, stop);
    const double* pa[TM][H];
    const double* pb[TN];
    bool va[TM][H], vb[TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int h = 0; h < H; ++h) {
            const int r = blockIdx.y * BM + r0 + AM * i + 8 * h + g;
            va[i][h] = r < m;
            pa[i][h] = A + (va[i][h] ? r : 0) * sa0 + (start + t) * sa1;
        }
#pragma unroll
    for (int j = 0; j < TN; ++j) {
        const int c = blockIdx.x * BN + c0 + 8 * j + g;
        vb[j] = c < n;
        pb[j] = B + (vb[j] ? c : 0) * sb1 + (start + t) * sb0;
    }
    double acc[TM][TN][2 * H];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j)
#pragma unroll
            for (int e = 0; e < 2 * H; ++e) acc[i][j][e] = 0.0;
    const long long steps = (stop - start) / STEP;
    for (long long s = wk; s < steps; s += KW) {
        const long long qa = s * STEP * sa1, qb = s * STEP * sb0;
        double a[U][TM][J * H], b[U][TN][J];
#pragma unroll
        for (int u = 0; u < U; ++u)
#pragma unroll
            for (int q = 0; q < J; ++q) {
#pragma unroll
                for (int i = 0; i < TM; ++i)
#pragma unroll
                    for (int h = 0; h < H; ++h) a[u][i][q * H + h] = load<L2>(pa[i][h] + qa + (AK * u + 4 * q) * sa1);
#pragma unroll
                for (int j = 0; j < TN; ++j) b[u][j][q] = load<L2>(pb[j] + qb + (AK * u + 4 * q) * sb0);
            }
#pragma unroll
        for (int u = 0; u < U; ++u) {
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int q = 0; q < J * H; ++q) a[u][i][q] = va[i][q % H] ? a[u][i][q] : 0.0;
#pragma unroll
            for (int j = 0; j < TN; ++j)
#pragma unroll
                for (int q = 0; q < J; ++q) b[u][j][q] = vb[j] ? b[u][j][q] : 0.0;
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) Atom<H, J>::mma(acc[i][j], a[u][i], b[u][j]);
        }
    }
    if (wk == steps % KW) {
        const long long done = steps * STEP;
#pragma unroll
        for (int u = 0; u < U; ++u) {
            double a[TM][J * H], b[TN][J];
#pragma unroll
            for (int q = 0; q < J; ++q) {
                const long long off = done + AK * u + 4 * q;
                const bool inside = start + off + t < stop;
#pragma unroll
                for (int i = 0; i < TM; ++i)
#pragma unroll
                    for (int h = 0; h < H; ++h)
                        a[i][q * H + h] = (inside && va[i][h]) ? pa[i][h][off * sa1] : 0.0;
#pragma unroll
                for (int j = 0; j < TN; ++j) b[j][q] = (inside && vb[j]) ? pb[j][off * sb0] : 0.0;
            }
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) Atom<H, J>::mma(acc[i][j], a[i], b[j]);
        }
    }
    reduce_and_emit<TM, TN, H, KW, BM, BN>(&S[0][0][0], acc, wk, r0, c0, g, t, m, n, out, so0, so1, so2, alpha,
                                           flags);
}

__device__ inline void cp_async8(double* dst, const double* src, bool ok)
{
    const unsigned to = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.ca.shared.global.L2::256B [%0], [%1], 8, %2;\n" :: "r"(to), "l"(src), "r"(ok ? 8 : 0));
}
/* Two elements: ``bytes`` (16, 8 or 0) read, the rest of the 16 zero-filled. */
__device__ inline void cp_async16(double* dst, const double* src, int bytes)
{
    const unsigned to = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;\n" :: "r"(to), "l"(src), "r"(bytes));
}
__device__ inline int pair_bytes(bool row_ok, long long left)
{
    return row_ok ? (left >= 2 ? 16 : left == 1 ? 8 : 0) : 0;
}
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ inline void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(N)); }

template <int TM, int TN, int WMS, int WNS, int R, int S>
__global__ void __launch_bounds__(__WARPS__ * 32)
splitk_pipe(const double* __restrict__ A, long long sa0, long long sa1,
            const double* __restrict__ B, long long sb0, long long sb1,
            double* __restrict__ out, long long so0, long long so1, long long so2,
            int m, int n, long long base, long long extra, long long unit, double alpha, int flags)
{
    constexpr int KW = __WARPS__ / (WMS * WNS), BM = 16 * TM * WMS, BN = 8 * TN * WNS, KS = 16 * KW * R;
    constexpr int LA = KS + 4, LB = BN + 4, STAGE = BM * LA + KS * LB, THREADS = __WARPS__ * 32;
    extern __shared__ __align__(16) double smem[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int wm = warp % WMS, wn = (warp / WMS) % WNS, wk = warp / (WMS * WNS);
    const int g = lane >> 2, t = lane & 3, r0 = wm * TM * 16, c0 = wn * TN * 8;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    long long start, stop;
    chunk_range(base, extra, unit, start, stop);
    const int tiles = static_cast<int>((stop - start + KS - 1) / KS);
    const bool a_kfast = sa1 == 1, b_nfast = sb1 == 1;
    auto load = [&](int tile, int slot) {
        double* As = smem + slot * STAGE;
        double* Bs = As + BM * LA;
        const long long k0 = start + static_cast<long long>(tile) * KS;
        if (flags & A_PAIRS)
            for (int i = threadIdx.x; i < BM * KS / 2; i += THREADS) {
                const int r = i / (KS / 2), q = 2 * (i % (KS / 2));
                const int bytes = pair_bytes(row0 + r < m, stop - (k0 + q));
                cp_async16(As + r * LA + q, A + (bytes ? (row0 + r) * sa0 + k0 + q : 0), bytes);
            }
        else
            for (int i = threadIdx.x; i < BM * KS; i += THREADS) {
                const int r = a_kfast ? i / KS : i % BM, q = a_kfast ? i % KS : i / BM;
                const bool ok = row0 + r < m && k0 + q < stop;
                cp_async8(As + r * LA + q, A + (ok ? (row0 + r) * sa0 + (k0 + q) * sa1 : 0), ok);
            }
        if (flags & B_PAIRS)
            for (int i = threadIdx.x; i < KS * BN / 2; i += THREADS) {
                const int q = i / (BN / 2), c = 2 * (i % (BN / 2));
                const int bytes = k0 + q < stop ? pair_bytes(true, n - (col0 + c)) : 0;
                cp_async16(Bs + q * LB + c, B + (bytes ? (k0 + q) * sb0 + col0 + c : 0), bytes);
            }
        else
            for (int i = threadIdx.x; i < KS * BN; i += THREADS) {
                const int q = b_nfast ? i / BN : i % KS, c = b_nfast ? i % BN : i / KS;
                const bool ok = col0 + c < n && k0 + q < stop;
                cp_async8(Bs + q * LB + c, B + (ok ? (k0 + q) * sb0 + (col0 + c) * sb1 : 0), ok);
            }
    };
    double acc[TM][TN][4];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0;
#pragma unroll
    for (int s = 0; s < S - 1; ++s) {
        if (s < tiles) load(s, s);
        cp_async_commit();
    }
    for (int tile = 0; tile < tiles; ++tile) {
        cp_async_wait<S - 2>();
        __syncthreads();
        if (tile + S - 1 < tiles) load(tile + S - 1, (tile + S - 1) % S);
        cp_async_commit();
        const double* As = smem + (tile % S) * STAGE;
        const double* Bs = As + BM * LA;
#pragma unroll
        for (int rr = 0; rr < R; ++rr) {
            const int kk = (rr * KW + wk) * 16;
            double a[TM][8], b[TN][4];
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int q = 0; q < 4; ++q)
#pragma unroll
                    for (int h = 0; h < 2; ++h) a[i][2 * q + h] = As[(r0 + 16 * i + 8 * h + g) * LA + kk + 4 * q + t];
#pragma unroll
            for (int j = 0; j < TN; ++j)
#pragma unroll
                for (int q = 0; q < 4; ++q) b[j][q] = Bs[(kk + 4 * q + t) * LB + c0 + 8 * j + g];
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) Atom<2, 4>::mma(acc[i][j], a[i], b[j]);
        }
    }
    cp_async_wait<0>();
    __syncthreads();
    reduce_and_emit<TM, TN, 2, KW, BM, BN>(smem, acc, wk, r0, c0, g, t, m, n, out, so0, so1, so2, alpha, flags);
}

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
