"""Where Ozaki II complex's 3M spends its time at one N (CuPy): each stage of
:func:`gpu.ozaki2.complex.matmul` with ``scheme="3m"`` timed alone by CUDA events (median of 3 after a warm call),
beside the whole call, 4M's whole call and ZGEMM.
Stages, as the call runs them: the stacked parts [Re A, Im A] and [Re B; Im B]; the line statistics with the
modulus count; the shifts and the residues of the four parts; per modulus the two operand sums, the three INT32
products and the Karatsuba pass (one modulus, times the count), the pass also in its first form (64-bit integers
and float64 quotients, ``karatsuba_f64_one_modulus``: the same bits, checked); the two CRTs with their IEEE repair
(B's halves in place). Writes ``$OUT/ozaki2-complex-probe.json``; prints one line. Run from the repository root
with ``PYTHONPATH=$PWD``; ``N`` (default 16384).
"""
import json
import os
import statistics

import cupy as cp
import numpy as np

from experiments.core.environment import environment
from gpu.backend import get_backend
from gpu.backend.plans import free_kept_plans
from gpu.ozaki.plan import _round_up
from gpu.ozaki2 import complex as oc
from gpu.ozaki2.complex_plan import fill_stacked
from gpu.ozaki2.moduli import MODULI, moduli_table
from gpu.ozaki2.normwise import target_value
from gpu.ozaki2.ops import ops
from gpu.ozaki2.winograd import FAMILY, add, int32_product
from gpu.ozaki2.winograd_kernels import DEVICE, MAX_X, MAX_Y, THREADS

#: The Karatsuba pass's first form (session 7): 64-bit differences, float64 quotients with their conversions.
F64 = cp.RawKernel(DEVICE + r"""
extern "C" __global__ void karatsuba_f64(
        const int* __restrict__ p1, long long ld1, const int* __restrict__ p2, long long ld2,
        const int* __restrict__ p3, long long ld3, signed char* __restrict__ re, signed char* __restrict__ im,
        long long ldz, long long rows, long long groups, int m, double inverse) {
    ROW_GROUPS {
        int4 a = *reinterpret_cast<const int4*>(p1 + r * ld1 + 4 * g);
        int4 b = *reinterpret_cast<const int4*>(p2 + r * ld2 + 4 * g);
        int4 c = *reinterpret_cast<const int4*>(p3 + r * ld3 + 4 * g);
        char4 x, y;
        x.x = residue_reduce64((long long)a.x - b.x, m, inverse);
        x.y = residue_reduce64((long long)a.y - b.y, m, inverse);
        x.z = residue_reduce64((long long)a.z - b.z, m, inverse);
        x.w = residue_reduce64((long long)a.w - b.w, m, inverse);
        y.x = residue_reduce64((long long)c.x - a.x - b.x, m, inverse);
        y.y = residue_reduce64((long long)c.y - a.y - b.y, m, inverse);
        y.z = residue_reduce64((long long)c.z - a.z - b.z, m, inverse);
        y.w = residue_reduce64((long long)c.w - a.w - b.w, m, inverse);
        *reinterpret_cast<char4*>(re + r * ldz + 4 * g) = x;
        *reinterpret_cast<char4*>(im + r * ldz + 4 * g) = y;
    }
}""", "karatsuba_f64")


def timed(fn, reps: int = 3) -> float:
    """Device ms of ``fn()``, the median of ``reps`` calls after a warm one."""
    fn()
    cp.cuda.Device().synchronize()
    out = []
    for _ in range(reps):
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        fn()
        end.record()
        end.synchronize()
        out.append(cp.cuda.get_elapsed_time(start, end))
    return statistics.median(out)


def main() -> None:
    n = int(os.environ.get("N", "16384"))
    be = get_backend("cupy")
    rng = cp.random.default_rng(1)
    A = rng.standard_normal((n, n)) + 1j * rng.standard_normal((n, n))
    B = rng.standard_normal((n, n)) + 1j * rng.standard_normal((n, n))
    fam, xp = ops(be), cp
    r = {"zgemm": timed(lambda: A @ B), "3m_call": timed(lambda: oc.matmul(A, B, scheme="3m")),
         "4m_call": timed(lambda: oc.matmul(A, B, scheme="4m"))}
    free_kept_plans()
    cp.get_default_memory_pool().free_all_blocks()
    SA, SB = cp.empty((n, 2 * n)), cp.empty((2 * n, n))
    r["parts"] = timed(lambda: (fill_stacked(SA, A, 1), fill_stacked(SB, B, 0)))
    (ar, ai), (br, bi) = (SA[:, :n], SA[:, n:]), (SB[:n], SB[n:])

    def stats():
        rows, cols = fam.line_stats(SA, None, True), fam.line_stats(SB.T, None, True)
        goal = target_value("dgemm", 2 * n)
        return rows, cols, fam.auto_count(rows, cols, 2 * n, goal, fam.count_buffers(be), MODULI)
    r["stats_and_count"] = timed(stats)
    rows, cols, count = stats()
    table = moduli_table(count)
    ldk, n_pad = _round_up(n), _round_up(n)
    shift_a, shift_b = fam.shifts(rows, table), fam.shifts(cols, table)

    def residues():
        return [fam.residues(X, shift_a, rows.e, table, n, ldk) for X in (ar, ai)] + \
            [fam.residues(X.T, shift_b, cols.e, table, n_pad, ldk) for X in (br, bi)]
    r["residues"] = timed(residues)
    res = residues()
    mod = table.moduli[0]
    a, b, c, d = (x[0] for x in res)
    r["sums_one_modulus"] = timed(lambda: (add(a, b, mod), add(c, d, mod)))
    sa, sb = add(a, b, mod), add(c, d, mod)
    r["gemms_one_modulus"] = timed(lambda: (int32_product(be, a, c), int32_product(be, b, d),
                                            int32_product(be, sa, sb)))
    t1, t2, t3 = int32_product(be, a, c), int32_product(be, b, d), int32_product(be, sa, sb)
    r["karatsuba_one_modulus"] = timed(lambda: be.ops(FAMILY).karatsuba(t1, t2, t3, mod))
    old = cp.empty_like(t1, dtype=np.int8), cp.empty_like(t1, dtype=np.int8)
    rows_, groups = t1.shape[0], t1.shape[1] // 4
    grid, ld = (min(MAX_X, -(-groups // THREADS)), min(MAX_Y, rows_)), np.int64(t1.shape[1])
    r["karatsuba_f64_one_modulus"] = timed(lambda: F64(grid, (THREADS,), (
        t1, ld, t2, ld, t3, ld, *old, ld, np.int64(rows_), np.int64(groups), np.int32(mod), np.float64(1.0 / mod))))
    new = be.ops(FAMILY).karatsuba(t1, t2, t3, mod)
    assert all(bool((x == y).all()) for x, y in zip(new, old)), "the two Karatsuba passes differ"
    def parts():
        u, v = add(a, b, mod), add(c, d, mod)
        return be.ops(FAMILY).karatsuba(int32_product(be, a, c), int32_product(be, b, d), int32_product(be, u, v), mod)
    r["parts_one_modulus"] = timed(parts)
    planes = cp.empty((count, n, n), dtype=np.int8)
    r["plane_copy_one_modulus"] = timed(lambda: planes.__setitem__(0, t1.astype(np.int8)[:, :n]))
    out = xp.empty((n, n))
    fam.prepare(table, planes)

    def crt():
        fam.crt(planes, table, shift_a, shift_b, out)
        fam.fix_nonfinite(SA, br, out, rows, cols, bi, -1.0)
    r["crt_and_repair_one_part"] = timed(crt)
    r["count"] = count
    r["estimate_3m"] = (r["parts"] + r["stats_and_count"] + r["residues"] + count * r["parts_one_modulus"]
                        + 2 * r["crt_and_repair_one_part"])
    print(n, {k: round(v, 2) for k, v in r.items()}, flush=True)
    doc = {"script": "results/published/scripts/ozaki2_complex_probe.py", "environment": environment(be), "n": n,
           "unit": "device ms", "points": r}
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "ozaki2-complex-probe.json"), "w") as fh:
        json.dump(doc, fh, indent=1)


if __name__ == "__main__":
    main()
