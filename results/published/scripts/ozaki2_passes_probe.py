"""Scheme II's two memory passes (the residue kernel and the CRT) against variants that keep their arithmetic and
change only how the work is laid out, on the arguments of a real product.

Captures the ``CudaOps.residues`` and ``CudaOps.crt`` calls of ``ozaki2.matmul(A, B, moduli=COUNT)`` (fast scaling,
phi = 1 inputs, :func:`accuracy.generate.phi_matrix`), then per call times, with CUDA events in interleaved rounds
(median of ROUNDS), into fresh outputs that must equal the library's bit for bit:

* residues: ``library`` (a 32 x 32 tile per block of 256 threads, 62 registers on sm_90: four blocks an SM);
  ``bounds5`` (the same kernel held to five blocks an SM); ``persist-B`` (B blocks an SM that stay resident and
  walk the tiles, the next tile's entries loaded into registers while the current one's residues are computed
  and written, so that each block keeps its loads in flight through its arithmetic), for B in 3, 4;
* CRT: ``library`` (:mod:`gpu.ozaki2.crt_kernels`: the moduli set's constants compiled in, four columns a thread
  where the planes allow, two blocks of 256 an SM); ``cols2-B`` (two columns a thread at B blocks an SM, for B
  in 2, 3, 4).

Run at gemmlab 740c7e0 (``results/published/h200/h200-ozaki2-passes-probe-740c7e0.json``), the library's CRT read
its weights from global memory and took two columns a thread; the variants then were the constants at 2, 3 and 4
blocks (``const-B``) and with four columns (``const4-2``), which became the library's kernel.

Writes ``$OUT/passes.json``. Run on the device from the repository root:
``OUT=<dir> NS=8192,16384 PYTHONPATH=$PWD:$PWD/results/published/scripts python3
results/published/scripts/ozaki2_passes_probe.py``.
"""

import json
import os

import cupy as cp
import numpy as np
from ozaki2_residues import launcher  # this directory's script: the library's residue launch, into a fresh output
from rounds import event_rounds, summary

from accuracy.generate import phi_matrix
from experiments.core.environment import environment
from gpu import ozaki2
from gpu.backend import get_backend
from gpu.ozaki.kernels import TILE
from gpu.ozaki2 import crt_kernels, fused, kernels
from gpu.ozaki2.cuda_source import COMMON, for_each_modulus
from gpu.ozaki2.kernels import CudaOps
from gpu.ozaki2.scaling import FINE_BITS  # the shifts are scale codes: extra shifts go above its bits

COUNT = int(os.environ.get("COUNT", "15"))
ROUNDS = int(os.environ.get("ROUNDS", "15"))
SMS = cp.cuda.runtime.getDeviceProperties(0)["multiProcessorCount"]

_PERSIST = r"""
/* The tile t's entries this thread loads (raw, unscaled): rows ty, ty + 8, ty + 16, ty + 24 of the tile where X's
   rows are contiguous, its columns where not (the library's LOAD_TILE). */
__device__ __forceinline__ void fetch_tile(const double* __restrict__ x, long long rs, long long cs, long long rows,
                                           long long cols, long long tiles_c, long long t, double (&v)[4])
{
    const long long r0 = t / tiles_c * 32, c0 = t % tiles_c * 32;
    const bool by_rows = (cs == 1);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int q = threadIdx.y + 8 * i;
        const long long r = r0 + (by_rows ? q : threadIdx.x), c = c0 + (by_rows ? threadIdx.x : q);
        v[i] = (r < rows && c < cols) ? x[r * rs + c * cs] : 0.0;
    }
}

extern "C" __global__ void __launch_bounds__(256, PERSIST_BLOCKS) ozaki2_rows_persist(ROWS_ARGS)
{
    __shared__ double tile[32][33];
    const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * 32 + tx, q = tid >> 3, g = (tid & 7) * 4;
    const bool by_rows = (cs == 1);
    const long long tiles_c = (ldk + 31) / 32, tiles = tiles_c * ((rows_pad + 31) / 32), plane4 = plane / 4;
    double v[4];
    long long t = blockIdx.x;
    if (t < tiles) fetch_tile(x, rs, cs, rows, cols, tiles_c, t, v);
    for (; t < tiles; t += gridDim.x) {
        const long long r0 = t / tiles_c * 32, c0 = t % tiles_c * 32;
        __syncthreads();
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int qq = ty + 8 * i;
            const long long r = r0 + (by_rows ? qq : tx), c = c0 + (by_rows ? tx : qq);
            const double y = (r < rows && c < cols) ? scaled_integer(v[i], shifts[r], exps[r]) : 0.0;
            if (by_rows) tile[qq][tx] = y; else tile[tx][qq] = y;
        }
        __syncthreads();
        if (t + gridDim.x < tiles) fetch_tile(x, rs, cs, rows, cols, tiles_c, t + gridDim.x, v);
        const long long r = r0 + q, c = c0 + g;
        if (r < rows_pad && c < ldk) {
            unsigned int* o = out + (r * ldk + c) / 4;
            bool wide = false;
#pragma unroll
            for (int j = 0; j < 4; ++j) wide |= fabs(tile[q][g + j]) >= 0x1p79;
            if (__any_sync(__activemask(), wide)) {
                TABLE_PLANES
            } else {
                double a[4], b[4], lo[4];
#pragma unroll
                for (int j = 0; j < 4; ++j) split_limbs(tile[q][g + j], a[j], b[j], lo[j]);
                FOR_EACH_MODULUS(LIMB_PLANE)
            }
        }
    }
}
"""


def rows_source(moduli: tuple[int, ...]) -> str:
    """The library's residue source (its helpers, ROWS_ARGS, the table and limbs paths) for these moduli."""
    return "#define BARS 0\n" + for_each_modulus(moduli) + COMMON + fused.TILE_SOURCE + kernels.ROWS_SOURCE


def rows_variant(name: str, moduli: tuple[int, ...]):
    """``bounds5`` or ``persist-B`` (see the module)."""
    src = rows_source(moduli)
    if name == "bounds5":
        src = src.replace("__global__ void ozaki2_rows(", "__global__ void __launch_bounds__(256, 5) ozaki2_rows(")
        return cp.RawKernel(src, "ozaki2_rows")
    return cp.RawKernel(f"#define PERSIST_BLOCKS {name.split('-')[1]}\n" + src + _PERSIST, "ozaki2_rows_persist")


def crt_variant(table, reduce: bool, vec: int, blocks: int):
    """The library's CRT source with ``vec`` columns a thread at ``blocks`` blocks an SM."""
    src = crt_kernels.source(table, reduce, vec).replace("__launch_bounds__(CRT_THREADS, 2)",
                                                         f"__launch_bounds__(CRT_THREADS, {blocks})")
    return cp.RawKernel(src, "ozaki2_crt")


def crt_launcher(kernel, planes, shift_a, shift_b, shape, vec):
    """The library's CRT launch (``crt_kernels.launch``) of ``kernel`` into a fresh C of ``shape``."""
    C = cp.empty(shape, dtype=np.float64)

    def run():
        crt_kernels.launch(kernel, vec, planes, shift_a, shift_b, C)
        return C
    return run


def rows_launcher(kernel, X, shifts, exps, table, rows_pad, ldk, persist=0):
    """:func:`ozaki2_residues.launcher`, on ``persist`` blocks an SM for the persistent kernel (0: the library's
    grid of tiles)."""
    tiles = -(-ldk // TILE) * -(-rows_pad // TILE)
    return launcher(kernel, X, shifts, exps, table, rows_pad, ldk,
                    grid=(min(tiles, SMS * persist),) if persist else None)


def compare(runs: dict) -> dict:
    ref = runs["library"]().copy()
    return {name: bool(cp.array_equal(run(), ref)) for name, run in runs.items()}


def main() -> None:
    be = get_backend("cupy")
    results = {"script": "results/published/scripts/ozaki2_passes_probe.py", "environment": environment(be),
               "count": COUNT, "rounds": ROUNDS, "points": {}}
    captured = {"residues": [], "crt": []}
    residues, crt = CudaOps.residues, CudaOps.crt

    def take_residues(self, X, shifts, exps, table, rows_pad, ldk, out=None):
        captured["residues"].append((X, shifts.copy(), exps.copy(), table, rows_pad, ldk))
        return residues(self, X, shifts, exps, table, rows_pad, ldk, out=out)

    def take_crt(self, planes, table, shift_a, shift_b, C):
        captured["crt"].append((planes, table, shift_a.copy(), shift_b.copy(), C.shape))
        return crt(self, planes, table, shift_a, shift_b, C)
    CudaOps.residues, CudaOps.crt = take_residues, take_crt
    for n in (int(x) for x in os.environ.get("NS", "8192,16384").split(",")):
        A, B = (cp.asarray(phi_matrix(n, n, 1.0, seed)) for seed in (1, 2))
        for v in captured.values():
            v.clear()
        ozaki2.matmul(A, B, moduli=COUNT, backend="cupy")
        point = {}
        for side, (X, shifts, exps, table, rows_pad, ldk) in zip("AB", captured["residues"]):
            kern = {"library": kernels._rows_kernel("residues", table.moduli)}
            kern.update({name: rows_variant(name, table.moduli) for name in ("bounds5", "persist-3", "persist-4")})
            blocks = {name: int(name.split("-")[1]) if name.startswith("persist") else 0 for name in kern}
            runs = {name: rows_launcher(k, X, shifts, exps, table, rows_pad, ldk, blocks[name])
                    for name, k in kern.items()}
            entry = {"equal": compare(runs), "registers": {name: k.num_regs for name, k in kern.items()},
                     "local_bytes": {name: k.local_size_bytes for name, k in kern.items()},
                     "bytes_moved": X.nbytes + table.count * rows_pad * ldk}
            entry["equal_shifted_up"] = {}
            for extra in (30, 60):
                raised = shifts + (extra << FINE_BITS)
                shifted = {name: rows_launcher(k, X, raised, exps, table, rows_pad, ldk, blocks[name])
                           for name, k in kern.items()}
                entry["equal_shifted_up"][extra] = compare(shifted)
            entry["times"] = summary(event_rounds(runs, ROUNDS))
            point[f"residues-{side}"] = entry
            print(n, side, json.dumps({k: v for k, v in entry.items()}), flush=True)
        planes, table, shift_a, shift_b, shape = captured["crt"][-1]      # the span whose products the planes hold
        reduce, vec = planes.dtype == np.int32, crt_kernels.columns(planes)
        kern, vecs = {"library": crt_kernels.kernel(table, reduce, vec)}, {"library": vec}
        for blocks in (2, 3, 4):
            kern[f"cols2-{blocks}"], vecs[f"cols2-{blocks}"] = crt_variant(table, reduce, 2, blocks), 2
        runs = {name: crt_launcher(k, planes, shift_a, shift_b, shape, vecs[name]) for name, k in kern.items()}
        entry = {"crt_calls": len(captured["crt"]), "planes": [str(planes.dtype), list(planes.shape)], "vec": vec,
                 "equal": compare(runs), "registers": {name: k.num_regs for name, k in kern.items()},
                 "local_bytes": {name: k.local_size_bytes for name, k in kern.items()},
                 "bytes_moved": planes.nbytes + 8 * shape[0] * shape[1]}
        entry["times"] = summary(event_rounds(runs, ROUNDS))
        point["crt"] = entry
        print(n, "crt", json.dumps(entry), flush=True)
        results["points"][n] = point
        del A, B
        for v in captured.values():
            v.clear()
        ozaki2.PLANS.clear()
        be.release_memory()
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "passes.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
