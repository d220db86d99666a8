"""Fast scaling's line maxima and sums of squared bars in one read of the operand (CuPy only).

Fast mode needs, per line (a row of A, or a column of B read as a row of B^T), its maximum |x| (whose
exponent gives the bar exponent e = 6 - exp, and which finds NaN and infinity) and R = sum_k
ceil(|x_k| 2**e)**2, and ``moduli="auto"`` the line's norms ||x 2**e||_1 and ||x 2**e||_2**2
(:mod:`gpu.ozaki2.normwise`). Each by itself reads the operand once, and the others need e from the
first: two reads of A and two of B, 1.08 ms of a 17.5 ms product at N = 8192 on the H100. Here one read
suffices, exactly for the maxima, exponents and R:

* ``ozaki2_tile_squares`` reads 32 x 32 tiles (coalesced whichever axis is contiguous, as the residue
  kernel) and takes, per line and tile t, the tile's maximum m_t, its bar exponent e_t = 6 - exp(m_t) and
  the eight sums S_t[d] = sum over the tile of ceil(c / 2**d)**2, d = 0..7, of the tile's bars
  c = ceil(|x| 2**e_t) <= 64 (integers: ceil(c / 2**d) = (c + 2**d - 1) >> d). A lane takes a line of a tile
  and four bars a word, so each d costs an add, a shift, a mask and ``__dp4a`` per four entries, and no shuffle:
  on the H200 it reads A at 2.7 TB/s at N = 16384 (0.78 ms), where 8 lanes a line with one bar at a time read it
  at 1.8 (1.17 ms; ``results/published/scripts/ozaki2_squares_probe.py``). A lane's 32 loads walk one pointer and
  are all issued before any entry is used: formed entry by entry, the compiler issued the loads of A's rows one
  or two at a time, each waiting on the last. At N = 32768 (alone, full clock) A's rows then took 5.27 ms and
  B's columns 3.22; now 2.54 ms each (3.4 TB/s; a row-wise maximum 2.19), and a level-2 call's scaling 6.0 ms
  against 10.2 (``h200-ozaki2-scaling-parts-probe*.json``, ``h200-ozaki2-squares-ncu-32768.txt``).
* ``ozaki2_line_squares`` (a warp per line, over its tiles) takes the maximum m = max_t m_t,
  e = 6 - exp(m) <= e_t, and R = sum_t S_t[min(e_t - e, 7)]. The tiles' values are stored line by line, so
  a warp reads them contiguously. An all-zero tile is the exception to e <= e_t (frexp gives 0 the exponent
  0, so e_t = 6 falls below the e of a line whose maximum is under 1/2): its sums are 0 at every d, and d is
  clamped at 0 (unclamped, the kernel read the sum before the tile's, or before the buffer).
* The norms: each tile's sums of y = |x| 2**e_t and of y**2, scaled by 2**(e - e_t) and 4**(e - e_t) and
  added over the tiles, in float64 (no contraction into FMAs; the order is the kernels', not NumPy's, so the
  last bits differ: the bound covers any order).

Exact: for an entry of tile t, with d = e_t - e >= 0, ceil(|x| 2**e) = ceil(|x| 2**e_t / 2**d) =
ceil(c / 2**d), since ceil(y / n) = ceil(ceil(y) / n) for a positive integer n; and for d >= 7,
c / 2**d <= 1/2, so ceil(c / 2**d) is 1 for every nonzero entry and 0 for zero, which S_t[7] counts. So R
equals the two-pass sum (:meth:`gpu.ozaki2.ops.HostOps.line_stats`) bit for bit. The maxima propagate
NaN (a line holding NaN has maximum NaN), as :func:`gpu.ozaki.kernels.absmax` does; a line that is not finite gets
R = 0, no norms and the bar exponent :data:`gpu.ozaki2.normwise.BAD_E`. Workspace: 56 bytes per line and
32 entries of k (:func:`workspace_bytes`).
"""

from __future__ import annotations

from .workspace import tile_bytes

#: The d of the last sum (d >= 7: every nonzero bar becomes 1); tiles of TILE_K entries of k.
LAST_D = 7

#: The 32 x 32 tile the residue and bars kernels (:mod:`gpu.ozaki2.kernels`) read, with a block of 32 x 8 threads:
#: line q's entry j lands in ``tile[q][j]``, read coalesced along X's contiguous axis (rows where ``cs == 1``), zero
#: outside X. The kernel defines ``LINE(r)``, what it reads of X's row r (an ``int2``), and ``VALUE(v, l)``, the
#: value kept of an entry v of a row whose ``LINE`` is l. ``FILL_TILE`` fills the tile at (r0, c0) (a block's
#: threads (tx, ty), four entries each): it issues a thread's loads (its four entries, one pointer walking one
#: stride, and their rows' ``LINE``) before it forms any value, so that they are in flight together (entry by entry
#: the compiler waited on each load before it issued the next).
TILE_SOURCE = r"""
#define FILL_TILE(LINE, VALUE) { \
    const bool by_rows = (cs == 1); \
    const long long lr = r0 + (by_rows ? ty : tx), lc = c0 + (by_rows ? tx : ty); \
    const long long step = 8 * (by_rows ? rs : cs); \
    const double* __restrict__ p = x + lr * rs + lc * cs; \
    double raw[4]; \
    int2 line[4]; \
    _Pragma("unroll") for (int i = 0; i < 4; ++i) { \
        const long long r = by_rows ? lr + 8 * i : lr, c = by_rows ? lc : lc + 8 * i; \
        const bool in = r < rows && c < cols; \
        raw[i] = in ? p[i * step] : 0.0; \
        line[i] = in ? LINE(r) : make_int2(0, 0); \
    } \
    _Pragma("unroll") for (int i = 0; i < 4; ++i) { \
        const long long r = by_rows ? lr + 8 * i : lr, c = by_rows ? lc : lc + 8 * i; \
        const double v = (r < rows && c < cols) ? VALUE(raw[i], line[i]) : 0.0; \
        if (by_rows) tile[ty + 8 * i][tx] = v; else tile[tx][ty + 8 * i] = v; \
    } }
#define LOAD_TILE(LINE, VALUE) \
    __shared__ double tile[32][33]; \
    const long long r0 = (long long)blockIdx.y * 32, c0 = (long long)blockIdx.x * 32; \
    const int tx = threadIdx.x, ty = threadIdx.y; \
    FILL_TILE(LINE, VALUE) \
    __syncthreads();
"""

#: Warps a block of ``ozaki2_tile_squares`` and ``ozaki2_wide_squares`` has, one tile each.
SQUARES_WARPS = 4

_SOURCE = TILE_SOURCE + f"#define SQUARES_WARPS {SQUARES_WARPS}\n" + r"""
#define BAD_E (-(1 << 20))
/* A warp's 32 x 32 tile of |X| (zero outside X), read coalesced along X's contiguous axis: line r0 + lane's entries
   c0 .. c0 + 31 land in tile[lane][0 .. 31]. A block's SQUARES_WARPS warps take consecutive tiles t of a row of
   tiles (count of them); a warp past the last returns. A lane's 32 loads walk one pointer by one stride and all
   are issued before any is stored: with the address formed per entry (r rs + c cs), the compiler issued A's rows'
   loads one at a time, each waiting for the one before (h200-ozaki2-squares-ncu-32768.txt). */
#define LOAD_WARP_TILE \
    __shared__ double tiles[SQUARES_WARPS][32][33]; \
    const long long r0 = (long long)blockIdx.y * 32, count = (cols + 31) / 32; \
    const long long t = (long long)blockIdx.x * SQUARES_WARPS + threadIdx.y, c0 = t * 32; \
    if (t >= count) return; \
    double (*tile)[33] = tiles[threadIdx.y]; \
    const int lane = threadIdx.x; \
    const bool by_rows = (cs == 1); \
    { \
        const long long lr = by_rows ? r0 : r0 + lane, lc = by_rows ? c0 + lane : c0; \
        const long long step = by_rows ? rs : cs, left = by_rows ? rows - r0 : cols - c0; \
        const bool in = lr < rows && lc < cols; \
        const double* __restrict__ p = x + lr * rs + lc * cs; \
        double v[32]; \
        _Pragma("unroll") for (int j = 0; j < 32; ++j) v[j] = (in && j < left) ? p[j * step] : 0.0; \
        _Pragma("unroll") for (int j = 0; j < 32; ++j) { \
            if (by_rows) tile[j][lane] = fabs(v[j]); else tile[lane][j] = fabs(v[j]); \
        } \
    } \
    __syncwarp(); \
    const long long line = r0 + lane;
__device__ __forceinline__ double nanmax(double a, double b) { return (a != a || a > b) ? a : b; }
__device__ __forceinline__ int bar_exponent(double m) { int ex; frexp(m, &ex); return 6 - ex; }

/* x 2**e, exact as ldexp (a product by a power of two is correctly rounded either way) where 2**e is a double. */
__device__ __forceinline__ double times_pow2(double x, int e)
{
    return e <= 1023 ? __dmul_rn(x, __hiloint2double((e + 1023) << 20, 0)) : ldexp(x, e);
}

/* Per line and tile: the tile's maximum, the eight sums of squared bars at its own exponent and, where norms is
   not null, the sums of the entries and of their squares scaled by 2**e_t (no contraction into FMAs). A warp takes
   one 32 x 32 tile (blocks of SQUARES_WARPS warps along a row of tiles) and a lane one line of it, so a line's sums
   need no shuffles. Four bars (each at most 64) are the bytes of one word: per d, one add and shift (no carry
   crosses a byte, since c + 2**d - 1 < 256), a mask, and __dp4a adding the four squares. */
extern "C" __global__ void ozaki2_tile_squares(
    const double* __restrict__ x, long long rs, long long cs, long long rows, long long cols,
    double* __restrict__ tmax, int* __restrict__ sums, double* __restrict__ norms)
{
    LOAD_WARP_TILE
    double m = tile[lane][0];
#pragma unroll
    for (int j = 1; j < 32; ++j) m = nanmax(m, tile[lane][j]);
    unsigned int s[8] = {0u, 0u, 0u, 0u, 0u, 0u, 0u, 0u};
    double n1 = 0.0, n2 = 0.0;
    if (isfinite(m)) {
        const int e = bar_exponent(m);
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            unsigned int bars = 0;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const double y = times_pow2(tile[lane][4 * k + j], e);
                bars |= (unsigned int)ceil(y) << (8 * j);
                if (norms) {
                    n1 = __dadd_rn(n1, y);
                    n2 = __dadd_rn(n2, __dmul_rn(y, y));
                }
            }
#pragma unroll
            for (int d = 0; d < 8; ++d) {
                const unsigned int u = ((bars + ((1u << d) - 1u) * 0x01010101u) >> d) & ((0xffu >> d) * 0x01010101u);
                s[d] = __dp4a(u, u, s[d]);
            }
        }
    }
    if (line < rows) {
        const long long at = line * count + t;
        tmax[at] = m;
        int4* out = (int4*)(sums + at * 8);
        out[0] = make_int4(s[0], s[1], s[2], s[3]);
        out[1] = make_int4(s[4], s[5], s[6], s[7]);
        if (norms) { norms[2 * at] = n1; norms[2 * at + 1] = n2; }
    }
}

/* Per line (a warp, over its tiles): the maximum, the bar exponent (BAD_E where the line is not finite), R, and
   where norms is not null the line's 1-norm and squared 2-norm at the line's exponent. */
extern "C" __global__ void ozaki2_line_squares(
    const double* __restrict__ tmax, const int* __restrict__ sums, const double* __restrict__ norms,
    long long tiles, long long rows, double* __restrict__ mx, int* __restrict__ exps, double* __restrict__ R,
    double* __restrict__ n1, double* __restrict__ n2sq)
{
    const long long line = (long long)blockIdx.x * blockDim.y + threadIdx.y;
    if (line >= rows) return;
    const int lane = threadIdx.x;
    const double* lt = tmax + line * tiles;
    double m = lane < tiles ? lt[lane] : 0.0;
    for (long long t = lane + 32; t < tiles; t += 32) m = nanmax(m, lt[t]);
    for (int offset = 16; offset > 0; offset >>= 1) m = nanmax(m, __shfl_xor_sync(0xffffffffu, m, offset));
    unsigned long long total = 0;
    double s1 = 0.0, s2 = 0.0;
    const bool finite = isfinite(m);
    const int e = finite ? bar_exponent(m) : BAD_E;
    if (finite) {
        for (long long t = lane; t < tiles; t += 32) {
            const int d = bar_exponent(lt[t]) - e;
            total += (unsigned long long)sums[(line * tiles + t) * 8 + max(0, min(d, 7))];
            if (norms) {
                s1 = __dadd_rn(s1, ldexp(norms[2 * (line * tiles + t)], -d));
                s2 = __dadd_rn(s2, ldexp(norms[2 * (line * tiles + t) + 1], -2 * d));
            }
        }
    }
    for (int offset = 16; offset > 0; offset >>= 1) {
        total += __shfl_down_sync(0xffffffffu, total, offset);
        s1 = __dadd_rn(s1, __shfl_down_sync(0xffffffffu, s1, offset));
        s2 = __dadd_rn(s2, __shfl_down_sync(0xffffffffu, s2, offset));
    }
    if (lane == 0) {
        mx[line] = m;
        exps[line] = e;
        R[line] = (double)total;
        if (norms) { n1[line] = s1; n2sq[line] = s2; }
    }
}
"""

#: Fine scaling's wide bars (``ozaki2_wide_squares``): a second read, once the lines' bar exponents e are known, in
#: the statistics kernel's tiles and lanes: each lane adds its line's sum over a tile of ceil(|x| 2**(e + WIDE_BITS))**2
#: (at most 2**32 an entry) into the line's uint64 with an integer atomic, so the sum is exact in any order of the
#: tiles; zero for a line that is not finite (e is BAD_E).
WIDE_SOURCE = r"""
extern "C" __global__ void ozaki2_wide_squares(
    const double* __restrict__ x, long long rs, long long cs, long long rows, long long cols,
    const int* __restrict__ exps, int wide, unsigned long long* __restrict__ sums)
{
    LOAD_WARP_TILE
    if (line >= rows) return;
    const int e = exps[line] + wide;
    unsigned long long s = 0;
#pragma unroll
    for (int j = 0; j < 32; ++j) {
        const double y = ceil(ldexp(tile[lane][j], e));
        if (y <= 65536.0) s += (unsigned long long)(y * y);
    }
    if (s) atomicAdd(sums + line, s);
}
"""

#: The kernels' source, compiled in one module with the count's, shifts' and IEEE values' (:mod:`gpu.ozaki2.device`).
SOURCE = _SOURCE + WIDE_SOURCE


def workspace_bytes(lines: int, k: int) -> int:
    """Device bytes of :func:`line_stats` on ``lines`` x ``k``: a maximum, eight int32 sums and two norms per tile."""
    return tile_bytes(lines, k)
