"""Scheme II's residue kernel against variants and its memory floor, on the arguments of a real product.

Captures the two ``CudaOps.residues`` calls of ``ozaki2.matmul(A, B, moduli=COUNT, scaling=SCALING)`` on
phi = 1 inputs (:func:`accuracy.generate.phi_matrix`), then per call: the library kernel; ``table``, the
kernel before its limbs path (every entry through the power table); ``int_low``, the limbs path with y's
low word from 32-bit integer limbs; ``wide``, the library's arithmetic on blocks of 32 rows x 128 columns, so
that each warp writes whole 128-byte lines of a plane (the library's warps write 32 bytes of each of 4 rows);
``dp4a``, each residue from three ``__dp4a`` of x''s bytes (offset to unsigned words) against the bytes of
2**(8i) mod m, in 32-bit integers only; ``hybrid``, the library's float64 limbs for even moduli indices and dp4a
for odd ones (both pipes at once); and two floor kernels, one per block shape, that read the same tiles of X and
write the same planes with no arithmetic. Planes must be bitwise equal, also with the shifts raised by 20, 30
and 60 (entries past 2**79: the table path). Timed with CUDA events in interleaved rounds (median of ROUNDS).
Writes ``$OUT/residues.json``. ``NCU=1`` runs each kernel once (for ``ncu -k regex:ozaki2_``).

Run on the device: ``OUT=<dir> NS=8192,16384 python3 results/published/scripts/ozaki2_residues.py``.
"""

import json
import os

import cupy as cp
import numpy as np
from rounds import event_rounds, summary

from accuracy.generate import phi_matrix
from gpu import ozaki2
from gpu.ozaki.kernels import TILE, TILE_ROWS
from gpu.ozaki2 import fused, kernels
from gpu.ozaki2.cuda_source import COMMON, for_each_modulus
from gpu.ozaki2.kernels import CudaOps
from gpu.ozaki2.scaling import FINE_BITS  # the shifts are scale codes: extra shifts go above its bits

COUNT = int(os.environ.get("COUNT", "15"))
SCALING = os.environ.get("SCALING", "fast")
ROUNDS = int(os.environ.get("ROUNDS", "15"))
NCU = os.environ.get("NCU") == "1"
#: Columns a block of a variant covers, where not the library's TILE.
WIDTHS = {"wide": 128, "floor_wide": 128}
#: The variants run beside the library (``VARIANTS``, comma-separated).
VARIANTS = os.environ.get("VARIANTS", "table,int_low,wide,dp4a,hybrid").split(",")

_VARIANT = r"""
/* The kernel before the limbs path: every entry through split_h_l and the power table. */
extern "C" __global__ void ozaki2_rows_table(ROWS_ARGS)
{
    ROWS_START(ROWS_LINE, ROWS_VALUE)
    TABLE_PLANES
}

/* The limbs path with y's low word from 32-bit integer limbs instead of the MAGIC sum. */
template <int M> __device__ __forceinline__ unsigned int limbs4_int(
    const double* a, const double* b, const double* c, const int* ai, const int* bi, const int* ci)
{
    const int C26 = (int)((1LL << 26) % M), C52 = (int)((1LL << 52) % M);
    int r[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const double y = fma(a[j], (double)C52, fma(b[j], (double)C26, c[j]));
        r[j] = residue_word<M>(y, ai[j] * C52 + bi[j] * C26 + ci[j]);
    }
    return __byte_perm(__byte_perm(r[0], r[1], 0x0040), __byte_perm(r[2], r[3], 0x0040), 0x5410);
}

extern "C" __global__ void ozaki2_rows_int_low(ROWS_ARGS)
{
    ROWS_START(ROWS_LINE, ROWS_VALUE)
    TABLE_PLANES_IF_WIDE
    double a[4], b[4], lo[4];
    int ai[4], bi[4], ci[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        split_limbs(tile[q][g + j], a[j], b[j], lo[j]);
        ai[j] = low_word(__dadd_rn(a[j], MAGIC));
        bi[j] = low_word(__dadd_rn(b[j], MAGIC));
        ci[j] = low_word(__dadd_rn(lo[j], MAGIC));
    }
#define INT_PLANE(T, M) o[T * plane4] = limbs4_int<M>(a, b, lo, ai, bi, ci);
    FOR_EACH_MODULUS(INT_PLANE)
}

/* ``dp4a``: x' + 2**79 + 2**51 = T 2**52 + L in unsigned words (T = a + 2**27 in [0, 2**28], L = x' - a 2**52 + 2**51
   in [0, 2**52], a the nearest integer to x' / 2**52), and each residue from three __dp4a of their bytes against
   the bytes of 2**(8i) mod M: y < 2**20, q = umulhi(y, ceil(2**32 / M)) = floor(y / M) exactly, r = y - q M - M / 2
   with y offset by M / 2 and the offsets' class, so r is the symmetric residue ([-128, 127] at M = 256). */
__host__ __device__ constexpr unsigned pow2_mod(int e, int m)
{
    unsigned r = 1u % m;
    for (int i = 0; i < e; ++i) r = (2u * r) % m;
    return r;
}
__host__ __device__ constexpr unsigned bytes4(int e, int m)
{
    return pow2_mod(e, m) | pow2_mod(e + 8, m) << 8 | pow2_mod(e + 16, m) << 16 | pow2_mod(e + 24, m) << 24;
}
__device__ __forceinline__ void byte_limbs(double x, unsigned& lo, unsigned& hi, unsigned& top)
{
    const double a = rint_magic(x * 0x1p-52);
    const long long L = __double2ll_rn(fma(-a, 0x1p52, x)) + (1LL << 51);
    lo = (unsigned)L;
    hi = (unsigned)(L >> 32);
    top = (unsigned)(__double2int_rn(a) + (1 << 27));
}
template <int M> __device__ __forceinline__ unsigned int dp4a4(const unsigned* lo, const unsigned* hi,
                                                               const unsigned* top)
{
    constexpr unsigned K0 = bytes4(0, M), K1 = bytes4(32, M), K2 = bytes4(52, M), H = M / 2;
    constexpr unsigned OFF = M - (pow2_mod(79, M) + pow2_mod(51, M)) % M + H;
    constexpr unsigned MAG = (unsigned)((0x100000000ULL + M - 1) / M);
    int r[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const unsigned y = __dp4a(top[j], K2, __dp4a(hi[j], K1, __dp4a(lo[j], K0, OFF)));
        r[j] = (int)(y - __umulhi(y, MAG) * (unsigned)M) - (int)H;
    }
    return __byte_perm(__byte_perm(r[0], r[1], 0x0040), __byte_perm(r[2], r[3], 0x0040), 0x5410);
}

extern "C" __global__ void ozaki2_rows_dp4a(ROWS_ARGS)
{
    ROWS_START(ROWS_LINE, ROWS_VALUE)
    TABLE_PLANES_IF_WIDE
    unsigned lo[4], hi[4], top[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) byte_limbs(tile[q][g + j], lo[j], hi[j], top[j]);
#define DP4A_PLANE(T, M) o[T * plane4] = dp4a4<M>(lo, hi, top);
    FOR_EACH_MODULUS(DP4A_PLANE)
}

/* ``hybrid``: the library's float64 limbs for even t, dp4a for odd t (the two pipes side by side). */
extern "C" __global__ void ozaki2_rows_hybrid(ROWS_ARGS)
{
    ROWS_START(ROWS_LINE, ROWS_VALUE)
    TABLE_PLANES_IF_WIDE
    double da[4], db[4], dc[4];
    unsigned lo[4], hi[4], top[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        split_limbs(tile[q][g + j], da[j], db[j], dc[j]);
        byte_limbs(tile[q][g + j], lo[j], hi[j], top[j]);
    }
#define HYBRID_PLANE(T, M) o[T * plane4] = ((T) & 1) ? dp4a4<M>(lo, hi, top) : limbs4<M>(da, db, dc);
    FOR_EACH_MODULUS(HYBRID_PLANE)
}

#define NO_LINE(r) make_int2(0, 0)
#define COPY_VALUE(v, l) (v)
#define COPY_ENTRY(r, c) x[(r) * rs + (c) * cs]
#define ROWS_ENTRY(r, c) ROWS_VALUE(x[(r) * rs + (c) * cs], ROWS_LINE(r))
extern "C" __global__ void ozaki2_rows_floor(ROWS_ARGS)
{
    ROWS_START(NO_LINE, COPY_VALUE)
    unsigned int word = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) word |= ((unsigned int)low_word(tile[q][g + j]) & 0xffu) << (8 * j);
#define FLOOR_PLANE(T, M) o[T * plane4] = word + T;
    FOR_EACH_MODULUS(FLOOR_PLANE)
}

/* Whole 128-byte rows per warp and plane: a block reads a tile of 32 rows x 128 columns (through shared memory
   whose columns are spread by one double in five, so that a lane's four neighbours and a column's 32 rows both
   fall on distinct banks), and warp w writes rows w, w + 8, w + 16, w + 24, four entries a lane. */
#define SW(c) ((c) + ((c) >> 2))
#define LOAD_WIDE(ENTRY) \
    __shared__ double wtile[32][161]; \
    const long long r0 = (long long)blockIdx.y * 32, c0 = (long long)blockIdx.x * 128; \
    const int tx = threadIdx.x, ty = threadIdx.y; \
    if (cs == 1) { \
        for (int q = ty; q < 32; q += 8) \
            for (int j = 0; j < 4; ++j) { \
                const long long r = r0 + q, c = c0 + tx + 32 * j; \
                wtile[q][SW(tx + 32 * j)] = (r < rows && c < cols) ? ENTRY(r, c) : 0.0; \
            } \
    } else { \
        for (int cc = ty; cc < 128; cc += 8) { \
            const long long r = r0 + tx, c = c0 + cc; \
            wtile[tx][SW(cc)] = (r < rows && c < cols) ? ENTRY(r, c) : 0.0; \
        } \
    } \
    __syncthreads(); \
    const long long plane4 = plane / 4;

extern "C" __global__ void ozaki2_rows_wide(ROWS_ARGS)
{
    LOAD_WIDE(ROWS_ENTRY)
    for (int q = ty; q < 32; q += 8) {
        const long long r = r0 + q, c = c0 + 4 * tx;
        if (r >= rows_pad || c >= ldk) continue;
        unsigned int* o = out + (r * ldk + c) / 4;
        double v[4];
        bool wide = false;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            v[j] = wtile[q][SW(4 * tx + j)];
            wide |= fabs(v[j]) >= 0x1p79;
        }
        if (__any_sync(__activemask(), wide)) {
            double h[4], l[4];
            int e[4];
#pragma unroll
            for (int j = 0; j < 4; ++j) split_h_l(v[j], h[j], l[j], e[j]);
            FOR_EACH_MODULUS(RESIDUE_PLANE)
        } else {
            double a[4], b[4], lo[4];
#pragma unroll
            for (int j = 0; j < 4; ++j) split_limbs(v[j], a[j], b[j], lo[j]);
            FOR_EACH_MODULUS(LIMB_PLANE)
        }
    }
}

extern "C" __global__ void ozaki2_rows_floor_wide(ROWS_ARGS)
{
    LOAD_WIDE(COPY_ENTRY)
    for (int q = ty; q < 32; q += 8) {
        const long long r = r0 + q, c = c0 + 4 * tx;
        if (r >= rows_pad || c >= ldk) continue;
        unsigned int* o = out + (r * ldk + c) / 4;
        unsigned int word = 0;
#pragma unroll
        for (int j = 0; j < 4; ++j) word |= ((unsigned int)low_word(wtile[q][SW(4 * tx + j)]) & 0xffu) << (8 * j);
        FOR_EACH_MODULUS(FLOOR_PLANE)
    }
}
"""


def variant(name: str, moduli: tuple[int, ...]):
    """A variant kernel, after the library's own source (BARS 0: its helpers, ROWS_ARGS, ROWS_START, ROWS_ENTRY and
    the table path)."""
    source = ("#define BARS 0\n" + for_each_modulus(moduli) + COMMON + fused.TILE_SOURCE
              + kernels.ROWS_SOURCE + _VARIANT)
    return cp.RawKernel(source, name)


def launcher(kernel, X, shifts, exps, table, rows_pad, ldk, width=TILE, grid=None):
    """A call of ``kernel`` with the library's launch (``kernels._launch_rows``; blocks ``width`` columns wide, or
    ``grid`` where given), into a fresh output."""
    out = cp.empty((table.count, rows_pad, ldk), dtype=np.int8)
    rows, cols = X.shape
    rs, cs = X.strides[0] // 8, X.strides[1] // 8
    pow2, length = kernels.powers(table.moduli)
    i64, i32 = np.int64, np.int32
    args = (X, i64(rs), i64(1 if cols == 1 else cs), i64(rows), i64(cols), i64(rows_pad), i64(ldk),
            shifts.astype(i32), exps.astype(i32), out, i64(rows_pad * ldk), pow2, i32(length))
    grid = grid or (-(-ldk // width), -(-rows_pad // TILE))

    def run():
        kernel(grid, (TILE, TILE_ROWS), args)
        return out
    return run


def main() -> None:
    out_dir, results = os.environ.get("OUT", "/tmp"), {}
    calls = []
    original = CudaOps.residues

    def capture(self, X, shifts, exps, table, rows_pad, ldk, out=None):
        calls.append((X, shifts.copy(), exps.copy(), table, rows_pad, ldk))
        return original(self, X, shifts, exps, table, rows_pad, ldk, out=out)
    CudaOps.residues = capture
    for n in (int(x) for x in os.environ.get("NS", "8192").split(",")):
        A, B = (cp.asarray(phi_matrix(n, n, 1.0, seed)) for seed in (1, 2))
        calls.clear()
        ozaki2.matmul(A, B, moduli=COUNT, scaling=SCALING, backend="cupy")
        for side, (X, shifts, exps, table, rows_pad, ldk) in zip("AB", calls):
            runs = {"library": launcher(kernels._rows_kernel("residues", table.moduli), X, shifts, exps, table,
                                        rows_pad, ldk)}
            kernels_tried = [(name, variant(f"ozaki2_rows_{name}", table.moduli), WIDTHS.get(name, TILE))
                             for name in VARIANTS]
            floors = [(name, variant(f"ozaki2_rows_{name}", table.moduli), WIDTHS.get(name, TILE))
                      for name in ("floor", "floor_wide")]
            for name, kernel, width in kernels_tried + [(f"ozaki2_rows_{n}", k, w) for n, k, w in floors]:
                runs[name] = launcher(kernel, X, shifts, exps, table, rows_pad, ldk, width)
            ref = runs["library"]().copy()
            equal = {name: bool((run() == ref).all()) for name, run in runs.items() if "floor" not in name}
            wide = {}
            for extra in (20, 30, 60):
                raised = shifts + (extra << FINE_BITS)
                lib = launcher(kernels._rows_kernel("residues", table.moduli), X, raised, exps, table,
                               rows_pad, ldk)().copy()
                wide[extra] = {name: bool((launcher(kernel, X, raised, exps, table, rows_pad, ldk, width)()
                                           == lib).all())
                               for name, kernel, width in kernels_tried}
            big = int((cp.abs(cp.ldexp(X, cp.asarray(shifts >> FINE_BITS)[:, None])) >= 2.0**53).sum())
            registers = {name: [k.num_regs, k.local_size_bytes] for name, k in
                         [(n, k) for n, k, _ in kernels_tried] + [("library", kernels._rows_kernel("residues",
                                                                                                    table.moduli))]}
            entry = {"registers_and_local_bytes": registers, "equal": equal, "equal_shifted_up": wide,
                      "entries_at_or_above_2^53": big, "shape": list(X.shape),
                     "strides": list(X.strides), "bytes_read": X.nbytes, "bytes_written": ref.nbytes}
            if not NCU:
                entry["times"] = summary(event_rounds(runs, ROUNDS))
                moved = X.nbytes + ref.nbytes
                entry["floor_tb_s"] = {name: moved / entry["times"][f"ozaki2_rows_{name}"]["median_ms"] / 1e9
                                       for name in ("floor", "floor_wide")}
            results[f"{n}-{side}"] = entry
            print(n, side, json.dumps(entry), flush=True)
        del A, B
    with open(f"{out_dir}/residues.json", "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
