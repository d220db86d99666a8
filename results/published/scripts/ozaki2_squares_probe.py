"""Fast scaling's one-read statistics kernel (``ozaki2_tile_squares``, :mod:`gpu.ozaki2.fused`) against its form
before byte-packed bars and two other layouts of its work, on phi = 1 operands, then the whole product.

The earlier kernel (gemmlab 06b5f5d: blocks of 32 x 8 threads, a 32 x 32 tile a block, 8 lanes a line of it with
four entries each) computed each entry's eight sums ceil(c / 2**d)**2 one by one (32 integer square-and-adds a
thread) and reduced eight words over a line's 8 lanes. The library's takes a tile a warp and a line a lane (no
shuffles), with four bars packed into the bytes of one word (per d: an add, a shift, a mask and ``__dp4a``). The
variants are compiled here from their source, kept below.

* ``kernel``: per N (``NS``) and operand (A, rows contiguous; B^T of a C-ordered B, columns contiguous), with
  and without the norms (``moduli="auto"``): tile maxima and sums bitwise equal to the earlier kernel's, norms
  bitwise or (the library's, summed in another order) within 2**-45, then each kernel alone timed with CUDA events
  in interleaved rounds (median of ``ROUNDS``), with the rate of its read of X.
* ``product``: per N (``PRODUCT_NS``), plans of ``ozaki2.matmul(A, B, moduli=15)`` (fast scaling) and of the
  defaults (``moduli="auto"``), each built and its graph captured with the earlier kernel and with the library's,
  and DGEMM (``cupy.matmul``): a sample is a loop of 2 calls (``LOOPS``), host time included, in 10 rounds
  (``PRODUCT_ROUNDS``) in turning order; speed as the median over rounds of DGEMM's time over the run's in the
  same round; C bitwise equal between the plans of the same options.

The kernel part also times fine scaling's second read (``ozaki2_wide_squares``, its wide bars' sums Rw) in the
statistics kernel's warp tiles against its earlier form, its sums bitwise equal. ``KERNELS=0`` leaves the kernel part
out. Writes ``$OUT/ozaki2-squares-probe.json``. Run on the device from the
repository root:
``OUT=dir PYTHONPATH=$PWD:$PWD/results/published/scripts python3 results/published/scripts/ozaki2_squares_probe.py``.
"""

import json
import os
import statistics

import cupy as cp
import numpy as np
from ozaki2_as_called import fresh_inputs
from rounds import event_rounds, loop_seconds, paired_ratios, summary, turning

from experiments.core.environment import environment
from gpu import ozaki2
from gpu.backend import get_backend
from gpu.ozaki2 import device, fused
from gpu.ozaki2.options import Options
from gpu.ozaki2.plan import Plan
from gpu.ozaki2.scaling import WIDE_BITS
from gpu.ozaki2.workspace import TILE_K, carve_tiles

ROUNDS = int(os.environ.get("ROUNDS", "15"))
NS = [int(x) for x in os.environ.get("NS", "8192,16384").split(",") if x]
PRODUCT_NS = [int(x) for x in os.environ.get("PRODUCT_NS", "8192,16384").split(",") if x]
PRODUCT_ROUNDS = int(os.environ.get("PRODUCT_ROUNDS", "10"))
#: Calls a sample of the product takes, per N (``LOOPS``: "N:calls,..."; 2 where not given).
LOOPS = {int(k): int(v) for k, v in (x.split(":") for x in os.environ.get("LOOPS", "").split(",") if x)}
KERNELS = os.environ.get("KERNELS", "1") == "1"

#: The kernel before byte-packed bars (gemmlab 06b5f5d), renamed.
EARLIER = r"""
#define NO_LINE(r) make_int2(0, 0)
#define ABS_VALUE(v, l) fabs(v)
extern "C" __global__ void ozaki2_tile_squares_earlier(
    const double* __restrict__ x, long long rs, long long cs, long long rows, long long cols,
    double* __restrict__ tmax, int* __restrict__ sums, double* __restrict__ norms)
{
    LOAD_TILE(NO_LINE, ABS_VALUE)
    const int tid = ty * 32 + tx, q = tid >> 3, g = (tid & 7) * 4;
    double m = tile[q][g];
#pragma unroll
    for (int j = 1; j < 4; ++j) m = nanmax(m, tile[q][g + j]);
    for (int offset = 4; offset > 0; offset >>= 1) m = nanmax(m, __shfl_xor_sync(0xffffffffu, m, offset, 8));
    int s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    double n1 = 0.0, n2 = 0.0;
    if (isfinite(m)) {
        const int e = bar_exponent(m);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const double y = ldexp(tile[q][g + j], e);
            const int c = (int)ceil(y);
#pragma unroll
            for (int d = 0; d < 8; ++d) { const int t = (c + (1 << d) - 1) >> d; s[d] += t * t; }
            n1 = __dadd_rn(n1, y);
            n2 = __dadd_rn(n2, __dmul_rn(y, y));
        }
    }
#pragma unroll
    for (int d = 0; d < 8; ++d)
        for (int offset = 4; offset > 0; offset >>= 1) s[d] += __shfl_down_sync(0xffffffffu, s[d], offset, 8);
    for (int offset = 4; offset > 0; offset >>= 1) {
        n1 = __dadd_rn(n1, __shfl_down_sync(0xffffffffu, n1, offset, 8));
        n2 = __dadd_rn(n2, __shfl_down_sync(0xffffffffu, n2, offset, 8));
    }
    const long long line = r0 + q;
    if (g == 0 && line < rows) {
        const long long at = line * gridDim.x + blockIdx.x;
        tmax[at] = m;
        int4* out = (int4*)(sums + at * 8);
        out[0] = make_int4(s[0], s[1], s[2], s[3]);
        out[1] = make_int4(s[4], s[5], s[6], s[7]);
        if (norms) { norms[2 * at] = n1; norms[2 * at + 1] = n2; }
    }
}

/* Fine scaling's wide bars before they took the statistics kernel's warp tiles (gemmlab 0f10d65). */
extern "C" __global__ void ozaki2_wide_squares_earlier(
    const double* __restrict__ x, long long rs, long long cs, long long rows, long long cols,
    const int* __restrict__ exps, int wide, unsigned long long* __restrict__ sums)
{
    LOAD_TILE(NO_LINE, ABS_VALUE)
    const int tid = ty * 32 + tx, q = tid >> 3, g = (tid & 7) * 4;
    const long long line = r0 + q;
    const int e = line < rows ? exps[line] + wide : 0;
    unsigned long long s = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const double y = ceil(ldexp(tile[q][g + j], e));
        if (y <= 65536.0) s += (unsigned long long)(y * y);
    }
    for (int offset = 4; offset > 0; offset >>= 1) s += __shfl_down_sync(0xffffffffu, s, offset, 8);
    if (g == 0 && line < rows && s) atomicAdd(sums + line, s);
}
"""

#: Two other layouts: ``packed``, the library's at gemmlab 3469c4d (the earlier kernel's 8 lanes a line of a tile,
#: with four bars packed into a word: four words reduced over the lanes, two sums to a word); ``multi``, the same
#: arithmetic in blocks that load 4 tiles of a row of tiles into registers before working through them (4 times
#: the bytes in flight a block). The library's (a lane a line) sums the norms in another order, so their values
#: are compared, not their bits.
VARIANTS = r"""
#define MULTI 4
__device__ __forceinline__ void packed_sums(const double (*tile)[33], int q, int g, long long line, long long rows,
    long long at, double* __restrict__ tmax, int* __restrict__ sums, double* __restrict__ norms)
{
    double m = tile[q][g];
#pragma unroll
    for (int j = 1; j < 4; ++j) m = nanmax(m, tile[q][g + j]);
    for (int offset = 4; offset > 0; offset >>= 1) m = nanmax(m, __shfl_xor_sync(0xffffffffu, m, offset, 8));
    unsigned int s[8] = {0u, 0u, 0u, 0u, 0u, 0u, 0u, 0u};
    double n1 = 0.0, n2 = 0.0;
    if (isfinite(m)) {
        const int e = bar_exponent(m);
        unsigned int bars = 0;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const double y = times_pow2(tile[q][g + j], e);
            bars |= (unsigned int)ceil(y) << (8 * j);
            n1 = __dadd_rn(n1, y);
            n2 = __dadd_rn(n2, __dmul_rn(y, y));
        }
#pragma unroll
        for (int d = 0; d < 8; ++d) {
            const unsigned int t = ((bars + ((1u << d) - 1u) * 0x01010101u) >> d) & ((0xffu >> d) * 0x01010101u);
            s[d] = __dp4a(t, t, 0u);
        }
    }
    unsigned int w[4] = {s[0] | (s[7] << 20), s[1] | (s[2] << 16), s[3] | (s[4] << 16), s[5] | (s[6] << 16)};
#pragma unroll
    for (int i = 0; i < 4; ++i)
        for (int offset = 4; offset > 0; offset >>= 1) w[i] += __shfl_down_sync(0xffffffffu, w[i], offset, 8);
    for (int offset = 4; offset > 0; offset >>= 1) {
        n1 = __dadd_rn(n1, __shfl_down_sync(0xffffffffu, n1, offset, 8));
        n2 = __dadd_rn(n2, __shfl_down_sync(0xffffffffu, n2, offset, 8));
    }
    if (g == 0 && line < rows) {
        tmax[at] = m;
        int4* out = (int4*)(sums + at * 8);
        out[0] = make_int4(w[0] & 0xfffffu, w[1] & 0xffffu, w[1] >> 16, w[2] & 0xffffu);
        out[1] = make_int4(w[2] >> 16, w[3] & 0xffffu, w[3] >> 16, w[0] >> 20);
        if (norms) { norms[2 * at] = n1; norms[2 * at + 1] = n2; }
    }
}

extern "C" __global__ void ozaki2_tile_squares_multi(
    const double* __restrict__ x, long long rs, long long cs, long long rows, long long cols,
    double* __restrict__ tmax, int* __restrict__ sums, double* __restrict__ norms)
{
    __shared__ double tile[32][33];
    const long long r0 = (long long)blockIdx.y * 32, tiles = (cols + 31) / 32;
    const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * 32 + tx, q = tid >> 3, g = (tid & 7) * 4;
    const bool by_rows = (cs == 1);
    double v[MULTI][4];
#pragma unroll
    for (int u = 0; u < MULTI; ++u) {
        const long long c0 = ((long long)blockIdx.x * MULTI + u) * 32;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int p = ty + 8 * i;
            const long long r = r0 + (by_rows ? p : tx), c = c0 + (by_rows ? tx : p);
            v[u][i] = (r < rows && c < cols) ? fabs(x[r * rs + c * cs]) : 0.0;
        }
    }
#pragma unroll
    for (int u = 0; u < MULTI; ++u) {
        const long long t = (long long)blockIdx.x * MULTI + u;
        if (t >= tiles) break;
        if (u) __syncthreads();
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int p = ty + 8 * i;
            if (by_rows) tile[p][tx] = v[u][i]; else tile[tx][p] = v[u][i];
        }
        __syncthreads();
        packed_sums(tile, q, g, r0 + q, rows, (r0 + q) * tiles + t, tmax, sums, norms);
    }
}

extern "C" __global__ void ozaki2_tile_squares_packed(
    const double* __restrict__ x, long long rs, long long cs, long long rows, long long cols,
    double* __restrict__ tmax, int* __restrict__ sums, double* __restrict__ norms)
{
    LOAD_TILE(NO_LINE, ABS_VALUE)
    const int tid = ty * 32 + tx, q = tid >> 3, g = (tid & 7) * 4;
    packed_sums(tile, q, g, r0 + q, rows, (r0 + q) * gridDim.x + blockIdx.x, tmax, sums, norms);
}
"""
#: Per kernel: its block, and how many tiles of a row of tiles a block covers.
SHAPES = {"library": ((32, fused.SQUARES_WARPS), fused.SQUARES_WARPS), "earlier": ((32, 8), 1), "packed": ((32, 8), 1),
          "multi": ((32, 8), 4)}


def kernels() -> dict:
    """The library's kernel and the variants (:data:`EARLIER`, :data:`VARIANTS`), each compiled from its source."""
    module = cp.RawModule(code=fused._SOURCE + EARLIER + VARIANTS)
    return {"library": device.kernel("ozaki2_tile_squares"),
            **{name: module.get_function(f"ozaki2_tile_squares_{name}") for name in ("earlier", "packed", "multi")},
            "wide-library": device.kernel("ozaki2_wide_squares"),
            "wide-earlier": module.get_function("ozaki2_wide_squares_earlier")}


def launcher(kern, X, norms: bool, shape=SHAPES["library"]):
    """One launch of ``kern`` over X into its own scratch (as :func:`gpu.ozaki2.device.line_stats` launches it)."""
    rows, cols = X.shape
    rs, cs = X.strides[0] // 8, X.strides[1] // 8
    tiles = -(-cols // TILE_K)
    scratch = cp.empty(fused.workspace_bytes(rows, cols), dtype=np.uint8)
    tmax, sums, tile_norms = carve_tiles(scratch, rows, cols)
    i64 = np.int64

    def run():
        kern((-(-tiles // shape[1]), -(-rows // 32)), shape[0], (X, i64(rs), i64(cs), i64(rows), i64(cols), tmax, sums,
                                                tile_norms if norms else np.uint64(0)))
        return tmax, sums, tile_norms
    return run


def kernel_point(n: int, kerns: dict) -> dict:
    rng = cp.random.default_rng(n)
    A, B = (rng.standard_normal((n, n)) * cp.exp(rng.standard_normal((n, n))) for _ in range(2))
    out = {}
    for side, X in (("A", A), ("B^T", B.T)):
        for norms in (False, True):
            runs = {name: launcher(k, X, norms, SHAPES[name]) for name, k in kerns.items() if name in SHAPES}
            got = {name: [v.copy() for v in run()] for name, run in runs.items()}
            want = got["earlier"]
            equal = {name: {"maxima_and_sums": all(bool(cp.array_equal(v[i], want[i])) for i in range(2)),
                            "norms": None if not norms else bool(cp.array_equal(v[2], want[2])),
                            "norms_close": None if not norms else bool(cp.allclose(v[2], want[2], rtol=2.0**-45))}
                     for name, v in got.items()}
            times = summary(event_rounds(runs, ROUNDS))
            rate = {name: X.nbytes / (t["median_ms"] * 1e-3) / 1e12 for name, t in times.items()}
            key = f"{side}{' norms' if norms else ''}"
            out[key] = {"equal": equal, "times": times, "read_tb_s": rate}
            print(n, key, json.dumps(equal), {k: round(v["median_ms"], 4) for k, v in times.items()}, flush=True)
        out[f"{side} wide"] = wide_point(X, kerns)
    return out


def wide_point(X, kerns: dict) -> dict:
    """Fine scaling's second read (Rw), the library's kernel against the earlier one: sums bitwise, then times."""
    rows, cols = X.shape
    rs, cs, tiles, i64 = X.strides[0] // 8, X.strides[1] // 8, -(-cols // TILE_K), np.int64
    e = device.line_stats(X).e
    sums = {name: cp.zeros(rows, dtype=np.uint64) for name in ("wide-library", "wide-earlier")}
    shapes = {"wide-library": ((-(-tiles // fused.SQUARES_WARPS), -(-rows // 32)), (32, fused.SQUARES_WARPS)),
              "wide-earlier": ((tiles, -(-rows // 32)), (32, 8))}

    def launcher_of(name):
        def run():
            sums[name].fill(0)
            kerns[name](*shapes[name], (X, i64(rs), i64(cs), i64(rows), i64(cols), e, np.int32(WIDE_BITS), sums[name]))
        return run
    runs = {name: launcher_of(name) for name in sums}
    for run in runs.values():
        run()
    equal = bool(cp.array_equal(sums["wide-library"], sums["wide-earlier"]))
    times = summary(event_rounds(runs, ROUNDS))
    print(rows, "wide", equal, {k: round(v["median_ms"], 4) for k, v in times.items()}, flush=True)
    return {"equal": equal, "times": times}


def product_point(n: int, kerns: dict) -> dict:
    be = get_backend("cupy")
    A, B = fresh_inputs(n)
    real, plans, outs = device.kernel, {}, {}

    def earlier(grid, block, args):       # the library's launch, in the earlier kernel's geometry
        kerns["earlier"]((-(-int(args[4]) // TILE_K), grid[1]), SHAPES["earlier"][0], args)

    for name in ("earlier", "library"):
        for label, moduli in (("15", 15), ("auto", "auto")):
            key = f"{name}-{label}"
            device.kernel = (lambda name: earlier if name == "ozaki2_tile_squares" else real(name)) \
                if name == "earlier" else real
            outs[key] = cp.empty((n, n))
            plans[key] = Plan(A, B, out=outs[key], options=Options(moduli=moduli), backend=be)
            for _ in range(3):                       # the graph is captured from the second call of an address set
                plans[key].execute(A, B, outs[key])
            device.kernel = real
    cp.cuda.Device().synchronize()
    equal = {label: bool(cp.array_equal(outs[f"earlier-{label}"], outs[f"library-{label}"]))
             for label in ("15", "auto")}
    calls = {name: (lambda p=p, C=outs[name]: p.execute(A, B, C)) for name, p in plans.items()}
    calls["dgemm"] = lambda: cp.matmul(A, B)
    loop = LOOPS.get(n, 2)
    for call in calls.values():
        loop_seconds(call, loop)
    samples = turning(calls, PRODUCT_ROUNDS, lambda call: loop_seconds(call, loop))
    ratios = paired_ratios(samples, "dgemm")
    ms = {k: statistics.median(v) * 1e3 for k, v in samples.items()}
    print(n, "product", equal, {k: round(v, 2) for k, v in ms.items()}, {k: round(v, 4) for k, v in ratios.items()},
          flush=True)
    del plans, outs
    ozaki2.PLANS.clear()
    return {"loop": loop, "rounds": PRODUCT_ROUNDS, "equal": equal, "ms": ms, "x_dgemm": ratios, "samples_s": samples}


def main() -> None:
    be = get_backend("cupy")
    kerns = kernels()
    result = {"script": "results/published/scripts/ozaki2_squares_probe.py", "environment": environment(be),
              "rounds": ROUNDS, "registers": {k: v.num_regs for k, v in kerns.items()},
              "kernel": {n: kernel_point(n, kerns) for n in NS} if KERNELS else {}}
    result["product"] = {n: product_point(n, kerns) for n in PRODUCT_NS}
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "ozaki2-squares-probe.json"), "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
