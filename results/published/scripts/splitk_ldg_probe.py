"""Is split-K's ceiling the tensor-map copies or the reading pattern itself? Plain loads in split-K's pattern.

Split-K's chunk kernel and cuBLAS both read A and B at about 95% of a kernel that reads them in order
(``splitk_roof.read16``), and the chunk kernel's tensor-map boxes, with its products skipped, read at most
2-3% below that roof (``splitk_read_pattern.py``). This probe reads the same bytes in split-K's pattern with
plain 16-byte loads (no tensor maps, no shared memory, no products): ``stage_read`` gives each block a chunk of
k and walks it in stages of ``D`` columns, each stage reading the chunk's m row pieces of A (D entries each)
and its D rows of B (contiguous), as a GEMM's stage must; ``run_read`` walks each row piece of A whole, then
B's chunk (long runs, a pattern no GEMM can use: a bound). Shapes: chunks per SM ``G``, threads ``T``, stage
depth ``D``, loads in flight per thread ``U``.

If a plain-load form reads near the in-order roof where the boxes do not, a chunk kernel fed by plain loads
could pass cuBLAS; if it reads no faster than the boxes, the pattern sets the ceiling and nothing in the
copies can lift it. Per point, as called (``splitk_as_called.sample``: 40 back-to-back launches, one
synchronise), rounds in turning order (``turning_rounds``), beside ``splitk.matmul(A, B)`` and
``cupy.matmul(A, B)``: TB/s of A and B read per call (wall and device). Each read kernel's sum is checked
against ``A.sum() + B.sum()`` first.

    OUT=dir PYTHONPATH=$PWD:$PWD/results/published/scripts python3 results/published/scripts/splitk_ldg_probe.py

``POINTS`` (m:log2 k, default 32:22,32:24,16:24), ``ROUNDS`` (10). JSON to ``$OUT/splitk-ldg-probe.json``.
"""
import json
import os
import statistics

import cupy
import numpy as np
from splitk_as_called import turning_rounds

from experiments.core.environment import environment
from gpu import splitk
from gpu.backend import get_backend

POINTS = [tuple(int(v) for v in p.split(":")) for p in os.environ.get("POINTS", "32:22,32:24,16:24").split(",")]
ROUNDS = int(os.environ.get("ROUNDS", "10"))
#: (chunks per SM G, threads T, stage depth D, loads per thread in flight U)
STAGE_SHAPES = [(1, 512, 64, 4), (2, 256, 64, 8), (2, 512, 64, 4), (2, 512, 128, 8), (4, 256, 64, 8),
                (4, 256, 128, 8), (8, 256, 64, 8), (2, 1024, 128, 4), (1, 1024, 128, 8), (4, 512, 64, 2)]
RUN_SHAPES = [(2, 256, 8), (4, 256, 8), (8, 256, 4)]

_SOURCE = r"""
template <int M, int N, int T, int D, int U>
__global__ void stage_read(const double2* __restrict__ a, const double2* __restrict__ b, long long k,
                           long long width, double* __restrict__ sink)
{
    /* chunk blockIdx.x: columns [c0, c0 + width) of A's M rows and rows of B; stages of D columns. */
    const long long c0 = (long long)blockIdx.x * width;
    constexpr int A2 = M * D / 2, B2 = D * N / 2;        /* double2 per stage */
    double s[U];
#pragma unroll
    for (int u = 0; u < U; ++u) s[u] = 0.0;
    for (long long s0 = c0; s0 < c0 + width; s0 += D) {
        for (int i0 = threadIdx.x; i0 < A2; i0 += T * U) {
            double2 v[U];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int i = i0 + u * T;
                const int r = i / (D / 2), j = i % (D / 2);
                v[u] = i < A2 ? __ldcs(a + (r * k + s0) / 2 + j) : make_double2(0.0, 0.0);
            }
#pragma unroll
            for (int u = 0; u < U; ++u) s[u] += v[u].x + v[u].y;
        }
        const double2* bs = b + s0 * N / 2;
        for (int i0 = threadIdx.x; i0 < B2; i0 += T * U) {
            double2 v[U];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int i = i0 + u * T;
                v[u] = i < B2 ? __ldcs(bs + i) : make_double2(0.0, 0.0);
            }
#pragma unroll
            for (int u = 0; u < U; ++u) s[u] += v[u].x + v[u].y;
        }
    }
    double t = 0.0;
#pragma unroll
    for (int u = 0; u < U; ++u) t += s[u];
    atomicAdd(sink, t);
}

template <int M, int N, int T, int U>
__global__ void run_read(const double2* __restrict__ a, const double2* __restrict__ b, long long k,
                         long long width, double* __restrict__ sink)
{
    /* chunk blockIdx.x: each of A's M row pieces whole, then B's rows of the chunk (one contiguous run). */
    const long long c0 = (long long)blockIdx.x * width;
    double s[U];
#pragma unroll
    for (int u = 0; u < U; ++u) s[u] = 0.0;
    for (int r = 0; r <= M; ++r) {
        const double2* p = r < M ? a + (r * k + c0) / 2 : b + c0 * N / 2;
        const long long len = (r < M ? width : width * N) / 2;
        for (long long i0 = threadIdx.x; i0 < len; i0 += T * U) {
            double2 v[U];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const long long i = i0 + u * T;
                v[u] = i < len ? __ldcs(p + i) : make_double2(0.0, 0.0);
            }
#pragma unroll
            for (int u = 0; u < U; ++u) s[u] += v[u].x + v[u].y;
        }
    }
    double t = 0.0;
#pragma unroll
    for (int u = 0; u < U; ++u) t += s[u];
    atomicAdd(sink, t);
}
"""


def kernels(m: int) -> tuple[dict, dict]:
    """The stage and run kernels of output side m, by shape."""
    stage = {s: f"stage_read<{m}, {m}, {s[1]}, {s[2]}, {s[3]}>" for s in STAGE_SHAPES}
    runs = {s: f"run_read<{m}, {m}, {s[1]}, {s[2]}>" for s in RUN_SHAPES}
    mod = cupy.RawModule(code=_SOURCE, options=("-std=c++17",), name_expressions=[*stage.values(), *runs.values()])
    return ({s: mod.get_function(n) for s, n in stage.items()}, {s: mod.get_function(n) for s, n in runs.items()})


def named(m: int, k: int, A, B, sink) -> dict:
    """Every method at (m, k), by name."""
    from splitk_roof import _READ
    sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
    stage, runs = kernels(m)
    out = {"cupy_matmul": lambda: cupy.matmul(A, B), "matmul": lambda: splitk.matmul(A, B)}
    blocks = 16 * sms
    out["read16"] = lambda: _READ((blocks,), (256,), (A, np.int64(A.size // 2), B, np.int64(B.size // 2), sink))
    for (g, t, d, u), fn in stage.items():
        chunks = g * sms
        width = -(-k // chunks // d) * d
        if width * chunks != k:
            continue
        out[f"stage-g{g}-t{t}-d{d}-u{u}"] = (lambda fn=fn, c=chunks, t=t, w=width:
                                             fn((c,), (t,), (A, B, np.int64(k), np.int64(w), sink)))
    for (g, t, u), fn in runs.items():
        chunks = g * sms
        width = k // chunks
        if width * chunks != k or width % 2:
            continue
        out[f"runs-g{g}-t{t}-u{u}"] = (lambda fn=fn, c=chunks, t=t, w=width:
                                       fn((c,), (t,), (A, B, np.int64(k), np.int64(w), sink)))
    return out


def checked(methods: dict, A, B, sink) -> dict:
    """Each read kernel's sum over A.sum() + B.sum() - 1 (they must read every entry once)."""
    want = float(A.sum() + B.sum())
    errs = {}
    for name, fn in methods.items():
        if name.startswith(("stage", "runs")):
            sink.fill(0)
            fn()
            errs[name] = float(sink[0]) / want - 1
    return errs


def main() -> None:
    be = get_backend("cupy")
    tel = be.telemetry()
    result = {"script": "results/published/scripts/splitk_ldg_probe.py", "environment": environment(be),
              "rounds": ROUNDS, "points": []}
    for m, e in POINTS:
        k = 2 ** e
        sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
        if k % (8 * sms * 128):
            k -= k % (8 * sms * 128)          # whole chunks at every shape
        A, B = cupy.random.rand(m, k), cupy.random.rand(k, m)
        sink = cupy.zeros(1)
        methods = named(m, k, A, B, sink)
        errs = checked(methods, A, B, sink)
        samples = turning_rounds(be, tel, methods, ROUNDS)
        nbytes = 16.0 * m * k
        rows = {}
        for name, got in samples.items():
            wall = statistics.median(s["wall_s"] for s in got)
            dev = statistics.median(s["device_s"] for s in got)
            rows[name] = {"wall_us": wall * 1e6, "device_us": dev * 1e6, "wall_tb_s": nbytes / wall / 1e12,
                          "device_tb_s": nbytes / dev / 1e12,
                          "sm_mhz": [s["start"]["sm_mhz"] for s in got if s["start"]],
                          "x_cublas_wall": statistics.median(
                              c["wall_s"] / s["wall_s"] for c, s in zip(samples["cupy_matmul"], got))}
        result["points"].append({"m": m, "k": k, "bytes": nbytes, "sum_rel_err": errs, "methods": rows})
        print(m, k, flush=True)
        for name, r in sorted(rows.items(), key=lambda x: -x[1]["wall_tb_s"]):
            print(f"  {name:26s} {r['wall_us']:8.1f} us  {r['wall_tb_s']:.3f} TB/s  x{r['x_cublas_wall']:.3f}",
                  flush=True)
        del A, B, methods
        be.release_memory()
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "splitk-ldg-probe.json"), "w") as f:
        json.dump(result, f, indent=1, default=str)


if __name__ == "__main__":
    main()
