"""Probe: split-K's bulk kernel with its chunks interleaved along k against the contiguous chunks it runs.

Chunk z of P takes the stages z, z + P, z + 2P, ... of k instead of one stretch, so that the blocks running at
once read neighbouring stretches of each row of A (the H100's narrow chunks had gained 0.3-1.6% that way,
``gpu.splitk.plan.NARROW_WAVES``). The kernel source is edited in this process only (a flag bit selects the
order) and ``splitk.matmul`` is timed in both orders and both modes beside ``cupy.matmul``: device time by CUDA
events around loops of about 10 ms, rounds interleaved, medians; the error against ``cupy.matmul``.

Run on the GPU from the repository root: ``PYTHONPATH=$PWD OUT=dir python
results/published/scripts/splitk_interleave_probe.py`` (``ROUNDS``: 15).
"""
import json
import os
import statistics

import cupy as cp
import numpy as np

import gpu.splitk as splitk
from gpu.splitk import compiled, kernels

src = compiled._SOURCE
edits = [
 ("""    chunk_range(base, extra, unit, start, stop);
    const int tiles = static_cast<int>((stop - start + KS - 1) / KS);
    if (threadIdx.x == 0) {
        for (int s = 0; s < S; ++s) {
            bar_init(full + s, 1);""",
  """    chunk_range(base, extra, unit, start, stop);
    const bool inter = (flags & 8) != 0;
    const long long P = gridDim.z, zz = blockIdx.z;
    const long long T = (unit * (P * base + extra) + KS - 1) / KS;
    const int tiles = inter ? static_cast<int>(zz < T ? (T - zz + P - 1) / P : 0)
                            : static_cast<int>((stop - start + KS - 1) / KS);
    if (threadIdx.x == 0) {
        for (int s = 0; s < S; ++s) {
            bar_init(full + s, 1);"""),
 ("""            const int k0 = static_cast<int>(start + static_cast<long long>(tile) * KS);
            double* As = stages + slot * STAGE;""",
  """            const int k0 = static_cast<int>(inter ? (static_cast<long long>(tile) * P + zz) * KS
                                                  : start + static_cast<long long>(tile) * KS);
            double* As = stages + slot * STAGE;"""),
 ("""            const long long k0 = start + static_cast<long long>(tile) * KS;
            const int len = static_cast<int>(min(static_cast<long long>(KS), stop - k0));
            if (len == KS) bulk_products""",
  """            const long long k0 = inter ? (static_cast<long long>(tile) * P + zz) * KS
                                       : start + static_cast<long long>(tile) * KS;
            const int len = inter ? KS : static_cast<int>(min(static_cast<long long>(KS), stop - k0));
            if (len == KS) bulk_products"""),
]
for a, b in edits:
    assert src.count(a) == 1, a[:60]
    src = src.replace(a, b)
compiled._SOURCE = src
EXTRA = [0]
orig_call = kernels.ChunkLaunch.__call__
def call(self, A, B, out, alpha):
    """The launch with the interleave bit (8) set where EXTRA asks for it."""
    if not EXTRA[0]:
        return orig_call(self, A, B, out, alpha)
    a, b = A.data.ptr, B.data.ptr
    extra = self._maps(a, b)
    flag = self.atomic | (kernels.A_PAIRS if self.a_pairs and a % 16 == 0 else 0) | \
        (kernels.B_PAIRS if self.b_pairs and b % 16 == 0 else 0) | 8
    self.function(self.grid, self.block, (A, *self.a_strides, B, *self.b_strides, out, *self.sizes,
                                          np.float64(alpha), np.int32(flag), *extra), shared_mem=self.shared)
kernels.ChunkLaunch.__call__ = call

SHAPES = [(32, 2**22), (32, 2**24), (64, 2**20), (16, 2**24), (64, 2**24), (16, 2**20), (64, 2**22)]
ROUNDS = int(os.environ.get("ROUNDS", 15))


def measure(m: int, k: int) -> dict:
    """One shape: every call's median device time, its speed-up over cuBLAS and its error."""
    rng = np.random.default_rng(1)
    A, B = cp.asarray(rng.random((m, k))), cp.asarray(rng.random((k, m)))
    ref = A @ B
    calls = {"cublas": (None, {}), "contig": (False, {}), "inter": (True, {}),
             "contig_atomic": (False, {"deterministic": False}), "inter_atomic": (True, {"deterministic": False})}

    def run(name):
        on, kw = calls[name]
        if on is None:
            return A @ B
        EXTRA[0] = int(on)
        return splitk.matmul(A, B, **kw)

    err = {name: float(cp.max(cp.abs(run(name) - ref) / cp.abs(ref))) for name in calls}
    reps = max(2, int(0.01 / (16 * m * k / 4.3e12)))
    samples = {n: [] for n in calls}
    names = list(calls)
    for r in range(ROUNDS):
        for name in names[r % len(names):] + names[:r % len(names)]:
            start, end = cp.cuda.Event(), cp.cuda.Event()
            start.record()
            for _ in range(reps):
                run(name)
            end.record()
            end.synchronize()
            samples[name].append(cp.cuda.get_elapsed_time(start, end) / reps)
    med = {n: statistics.median(v) for n, v in samples.items()}
    return {"m": m, "k": k, "reps": reps, "median_ms": med, "x_cublas": {n: med["cublas"] / v for n, v in med.items()},
            "max_rel_err": err}


def main() -> None:
    out = {"script": "results/published/scripts/splitk_interleave_probe.py", "rounds": ROUNDS, "points": []}
    for m, k in SHAPES:
        point = measure(m, k)
        out["points"].append(point)
        print(f"{m} x 2^{k.bit_length() - 1}: " + ", ".join(f"{n} {x:.3f}x" for n, x in point["x_cublas"].items())
              + f"  err {max(point['max_rel_err'].values()):.1e}", flush=True)
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "splitk-interleave.json"), "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
