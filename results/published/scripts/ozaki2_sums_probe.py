"""Probe: the fused level's operand-sums pass, two residues a word in 16-bit lanes against one residue a byte.

``gpu.ozaki2.fused_level.form_sums`` forms each modulus's four Winograd sums of A's blocks and of B's (one kernel,
``ozaki2_winograd_sums16``, per operand and modulus). Its first form took each residue as a byte and reduced each
sum with C comparisons on 32-bit integers, about 50 instructions an entry of the four sums, so that instruction
issue, not memory, bound it. The shipped form packs two residues a word (see ``gpu.ozaki2.residue_cuda``). This
script keeps the first form's source (:data:`BYTEWISE`) and times both on the same residue planes, 15 moduli
(fast-15's) at each N of ``NS`` (default 16384, 32768):

* each form's whole pass (every modulus, both operands) by CUDA events, ``ROUNDS`` rounds interleaved (default 12),
  and the bytes it moves over its median time;
* both forms' sums bitwise equal, modulus by modulus.

Planes are drawn on the device, symmetric residues of each modulus, with each end of the range placed in every
plane. The planes exceed the L2 cache many times over, so it is not flushed.

    OUT=dir PYTHONPATH=$PWD:$PWD/results/published/scripts python3 results/published/scripts/ozaki2_sums_probe.py

JSON to ``$OUT/ozaki2-sums-probe.json``.
"""

import json
import os
import statistics

import cupy as cp
import numpy as np
from rounds import event_rounds

from experiments.core.environment import environment
from gpu.backend import get_backend
from gpu.ozaki2 import winograd_kernels
from gpu.ozaki2.fused_level import form_sums, operands
from gpu.ozaki2.moduli import moduli_table

NS = tuple(int(n) for n in os.environ.get("NS", "16384,32768").split(","))
ROUNDS, COUNT = max(10, int(os.environ.get("ROUNDS", 12))), 15

#: The first form of the pass, one residue a byte (``residue_sum`` of the module's shared device functions).
BYTEWISE = winograd_kernels.DEVICE + r"""
__device__ __forceinline__ void bytewise_sums(int side, int m, int x11, int x12, int x21, int x22, signed char* s) {
    if (side == 0) {
        signed char r1 = residue_sum(x21, x22, m, 1), r2 = residue_sum(r1, x11, m, -1);
        s[0] = r1; s[1] = r2; s[2] = residue_sum(x11, x21, m, -1); s[3] = residue_sum(x12, r2, m, -1);
    } else {
        signed char r1 = residue_sum(x12, x11, m, -1), r2 = residue_sum(x22, r1, m, -1);
        s[0] = r1; s[1] = r2; s[2] = residue_sum(x22, x12, m, -1); s[3] = residue_sum(r2, x21, m, -1);
    }
}
extern "C" __global__ void bytewise_sums16(
        const signed char* __restrict__ x11, long long ld11, const signed char* __restrict__ x12, long long ld12,
        const signed char* __restrict__ x21, long long ld21, const signed char* __restrict__ x22, long long ld22,
        signed char* __restrict__ s1, signed char* __restrict__ s2, signed char* __restrict__ s3,
        signed char* __restrict__ s4, long long rows, long long groups, int m, int side) {
    ROW_GROUPS {
        int4 a = *reinterpret_cast<const int4*>(x11 + r * ld11 + 16 * g);
        int4 b = *reinterpret_cast<const int4*>(x12 + r * ld12 + 16 * g);
        int4 c = *reinterpret_cast<const int4*>(x21 + r * ld21 + 16 * g);
        int4 d = *reinterpret_cast<const int4*>(x22 + r * ld22 + 16 * g);
        const signed char *pa = reinterpret_cast<const signed char*>(&a),
                          *pb = reinterpret_cast<const signed char*>(&b),
                          *pc = reinterpret_cast<const signed char*>(&c),
                          *pd = reinterpret_cast<const signed char*>(&d);
        int4 o1, o2, o3, o4;
        signed char *q1 = reinterpret_cast<signed char*>(&o1), *q2 = reinterpret_cast<signed char*>(&o2),
                    *q3 = reinterpret_cast<signed char*>(&o3), *q4 = reinterpret_cast<signed char*>(&o4);
#pragma unroll
        for (int i = 0; i < 16; ++i) {
            signed char s[4];
            bytewise_sums(side, m, pa[i], pb[i], pc[i], pd[i], s);
            q1[i] = s[0]; q2[i] = s[1]; q3[i] = s[2]; q4[i] = s[3];
        }
        long long at = r * groups * 16 + 16 * g;
        *reinterpret_cast<int4*>(s1 + at) = o1;
        *reinterpret_cast<int4*>(s2 + at) = o2;
        *reinterpret_cast<int4*>(s3 + at) = o3;
        *reinterpret_cast<int4*>(s4 + at) = o4;
    }
}
"""


def planes(n: int, moduli: tuple[int, ...], seed: int):
    """One operand's residue planes (count x n x n), each modulus's symmetric residues, both ends in every plane."""
    out = cp.empty((len(moduli), n, n), dtype=cp.int8)
    rng = cp.random.RandomState(seed)
    for t, m in enumerate(moduli):
        lo, hi = -(m // 2), (m - 1) // 2
        out[t] = rng.randint(lo, hi + 1, (n, n), dtype=cp.int32).astype(cp.int8)
        out[t, 0, :2], out[t, -1, -2:] = lo, hi
    return out


def bytewise_pass(module, res_a, res_b, sums_a, sums_b, moduli) -> None:
    """The first form over every modulus and both operands, launched as the library launches its kernel
    (``winograd_kernels._launch``: the same grid and block)."""
    for t, m in enumerate(moduli):
        qa, qb, _ = operands(res_a[t], res_b[t], sums_a[t], sums_b[t])
        for side, blocks, out in ((0, qa, sums_a[t]), (1, qb, sums_b[t])):
            rows, cols = blocks[0].shape
            lds = [np.int64(x.strides[0]) for x in blocks]
            winograd_kernels._launch(
                "bytewise_sums16", rows, cols // 16,
                (blocks[0], lds[0], blocks[1], lds[1], blocks[2], lds[2], blocks[3], lds[3], *out, np.int64(rows),
                 np.int64(cols // 16), np.int32(m), np.int32(side)), lambda: module)


def point(be, module, n: int) -> dict:
    """Both forms at one N: times, bandwidth and bitwise equality."""
    moduli = moduli_table(COUNT).moduli
    res_a, res_b = planes(n, moduli, 1), planes(n, moduli, 2)
    h = n // 2
    packed = [cp.empty((COUNT, 4, h, h), dtype=cp.int8) for _ in range(2)]
    bytewise = [cp.empty((COUNT, 4, h, h), dtype=cp.int8) for _ in range(2)]
    runs = {"packed": lambda: form_sums(be, res_a, res_b, *packed, moduli),
            "bytewise": lambda: bytewise_pass(module, res_a, res_b, *bytewise, moduli)}
    for run in runs.values():
        run()
    equal = [bool((packed[i][t] == bytewise[i][t]).all()) for i in range(2) for t in range(COUNT)]
    samples = event_rounds(runs, ROUNDS)
    moved = 2 * 2 * COUNT * n * n
    out = {"n": n, "moduli": list(moduli), "bytes_moved": moved, "bitwise_equal": all(equal), "runs": {}}
    for name, v in samples.items():
        ms = statistics.median(v)
        out["runs"][name] = {"median_ms": ms, "min_ms": min(v), "max_ms": max(v), "samples_ms": v,
                             "tb_per_s": moved / ms / 1e9}
    out["speedup"] = out["runs"]["bytewise"]["median_ms"] / out["runs"]["packed"]["median_ms"]
    return out


def main() -> None:
    be = get_backend("cupy")
    module = cp.RawModule(code=BYTEWISE)
    result = {"script": "results/published/scripts/ozaki2_sums_probe.py", "environment": environment(be),
              "rounds": ROUNDS, "points": []}
    for n in NS:
        p = point(be, module, n)
        cp.get_default_memory_pool().free_all_blocks()
        result["points"].append(p)
        print(n, "equal" if p["bitwise_equal"] else "DIFFER",
              {k: (round(v["median_ms"], 3), round(v["tb_per_s"], 2)) for k, v in p["runs"].items()},
              f"{p['speedup']:.2f}x", flush=True)
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "ozaki2-sums-probe.json"), "w") as fh:
        json.dump(result, fh, indent=1)


if __name__ == "__main__":
    main()
