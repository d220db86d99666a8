"""Probe: two Winograd levels over the residues in their fused form, built by hand, against DGEMM at N = 32768.

Level 1 (``gpu.ozaki2.fused_level``) reaches 1.84-1.88x DGEMM at N = 32768 on the H200, its 105 INT8 GEMMs held
at the 700 W cap's rate (654-663 ms of a 717-737 ms call); 2.0x needed a call of 671-687 ms. Level 2's 735 GEMMs of
8192^3 took 594 ms (``h200-ozaki2-level2-gemms-probe-32768.json``), but the library's level 2 runs its second level
in passes of their own (865 ms a call). The fused form needs two new passes, built here as a probe before the
library takes them (``ozaki2_fused_level2_kernels.py``): one pass per operand writes, per modulus, its 49
second-level operands from one read of its float64 entries (A's per span of its quarter rows, B's once), and the CRT
combines the 49 INT8 products of each position into its 16 entries of C.

Between them the 49 x count residue GEMMs of each span (CUTLASS, ``Backend.residue_gemm``), planned once on the
kept buffers. Every residue is a function of its integer alone, so C is **bitwise** level 0's; this is checked at
``CHECK_N`` against a level-0 plan, with the operands checked plane by plane against the library's level passes,
and at ``N`` against a level-0 plan run first. Then at ``N``: the kernels' forms alone by CUDA events (``BENCH``,
each form's output checksummed), ``LOOP`` back-to-back calls with one synchronise beside DGEMM, ``ROUNDS`` rounds in
turning order, each phase by CUDA events, and (``LEVEL1``) the library's level 1 as called beside DGEMM once the
level-2 buffers are freed (``ozaki2.matmul(A, B, moduli=COUNT, level=1, out=C)``).

    OUT=dir GEMMLAB_KERNEL_DIR=... PYTHONPATH=/tmp/site:$PWD:$PWD/results/published/scripts \\
        python3 results/published/scripts/ozaki2_fused_level2_probe.py

``N`` (default 32768), ``CHECK_N`` (4096: its GEMMs, below the residue kernel's least k, write INT32 products,
reduced to residues before the CRT), ``BITWISE`` (1), ``COUNT`` (15), ``SPAN`` (rows of A's quarter per span,
2048), ``ROUNDS`` (6), ``LOOP`` (2), ``FAST`` (the operand form, 3), ``OP_BLOCKS`` (3), ``TR`` and ``TC`` (8, 32),
``CRT_BLOCKS`` (2), ``STAGED`` (1: the CRT with its products staged in shared memory; 0: one-byte loads), ``BENCH`` (1),
``FORMS`` (the operand forms ``BENCH`` times, form:blocks:TR:TC, default ``0:3:8:32,3:3:8:32``; form 2 is in the
kernels' script at c6525f3),
``LEVEL1`` (1), ``BATCHED`` (1: each modulus's 49 residue GEMMs of a span as one launch of the kernel's batch,
timed beside one launch a product by events), ``AGAINST`` (the call timed beside the default as called: ``batch``,
one GEMM launch a product; ``formN``, operand form N; ``staged``, the other CRT; empty: none). JSON to
``$OUT/ozaki2-fused-level2-probe.json``. The CRT's forms of two threads and of four warps a position are in the
script at 3041d4a. At N = 32768 and 15 moduli it holds B's operands (49 GB), A's and the products of one span
(12 GB each).
"""

import os
import statistics
import time

import cupy as cp
import numpy as np
from ozaki2_as_called import fresh_inputs
from ozaki2_fused_level2_kernels import crt_kernel, operand_kernel, operand_shared
from ozaki2_fused_level_probe import _marker
from rounds import device_ms, loop_seconds, turning, write_json

from experiments.core.environment import environment
from gpu import ozaki2
from gpu.backend import get_backend
from gpu.ozaki2.fused_level import operands, quadrants
from gpu.ozaki2.gemms import planned, run_planned
from gpu.ozaki2.moduli import moduli_table
from gpu.ozaki2.ops import ops
from gpu.ozaki2.options import Options
from gpu.ozaki2.plan import Plan
from gpu.ozaki2.rows_source import element_strides, powers

N, CHECK_N = int(os.environ.get("N", 32768)), int(os.environ.get("CHECK_N", 4096))
COUNT, SPAN = int(os.environ.get("COUNT", 15)), int(os.environ.get("SPAN", 2048))
ROUNDS, LOOP = int(os.environ.get("ROUNDS", 6)), int(os.environ.get("LOOP", 2))
CRT_BLOCKS, BITWISE = int(os.environ.get("CRT_BLOCKS", 2)), int(os.environ.get("BITWISE", 1))
FAST, BENCH = int(os.environ.get("FAST", 3)), int(os.environ.get("BENCH", 1))
OP_BLOCKS, LEVEL1 = int(os.environ.get("OP_BLOCKS", 3)), int(os.environ.get("LEVEL1", 1))
STAGED = int(os.environ.get("STAGED", 1))
BATCHED, AGAINST = int(os.environ.get("BATCHED", 1)), os.environ.get("AGAINST", "batch")
FORMS = [tuple(int(v) for v in f.split(":")) for f in os.environ.get("FORMS", "0:3:8:32,3:3:8:32").split(",")]
TR, TC = int(os.environ.get("TR", 8)), int(os.environ.get("TC", 32))
if TR * TC != 256 or TC % 32:
    raise SystemExit("TR x TC must be 256 entries, TC a multiple of 32 (the kernels' thread layout)")


class Level2:
    """``A @ B`` by scheme II with two fused Winograd levels (see the module), into kept buffers; ``gemms=False``:
    the operand pass's state only (B's operands, no A span, products or GEMMs), for a profiler."""

    def __init__(self, be, A, B, C, count: int, span: int, gemms: bool = True) -> None:
        self.be, self.A, self.B, self.C = be, A, B, C
        n = A.shape[0]
        self.n, self.q, self.span = n, n // 4, span
        self.table = moduli_table(count)
        self.family = ops(be)
        self.lines = [self.family.line_buffers(be, n, False) for _ in range(2)]
        self.shift = [cp.empty(n, dtype=cp.int32) for _ in range(2)]
        self.moduli = cp.asarray(np.array(self.table.moduli, dtype=np.int32))
        self.pow2, self.pow2_len = powers(self.table.moduli)
        self.ops_b = cp.empty((count, 49, self.q, self.q), dtype=cp.int8)
        self.fast, self.tile = FAST, (TR, TC)
        self.kernels = {side: operand_kernel(side, FAST, OP_BLOCKS, self.tile) for side in "ab"}
        if gemms:
            self._gemms(be, count, span)

    def _gemms(self, be, count: int, span: int) -> None:
        """A span's operands and products, the CRT and the 49 x count residue GEMMs planned on them."""
        self.ops_a = cp.empty((count, 49, span, self.q), dtype=cp.int8)
        self.prod = cp.empty((count, 49, span, self.q), dtype=cp.int8)
        self.staged = bool(STAGED)
        self.crts = {staged: crt_kernel(self.table, CRT_BLOCKS, staged) for staged in (False, True)}
        sms = cp.cuda.Device().attributes["MultiProcessorCount"]
        self.crt_grids = {True: (sms * CRT_BLOCKS, 1),
                          False: (max(1, min(-(-self.q // 256), 64)), min(span, 65535))}
        tiles = [(slice(0, span), slice(0, self.q))]
        self.gemms, self.wide = [], None
        for t in range(count):
            for pq in range(49):
                found = planned(be, self.ops_a[t, pq], self.ops_b[t, pq], self.prod[t, pq], tiles,
                                self.table.moduli[t])
                if found is None:
                    break
                self.gemms += found
        if found is None:               # k below the residue kernel's least (a check size): INT32, then reduced
            self.wide = cp.empty((count, 49, span, self.q), dtype=cp.int32)
            self.gemms = [g for t in range(count) for pq in range(49)
                          for g in planned(be, self.ops_a[t, pq], self.ops_b[t, pq], self.wide[t, pq], tiles)]
        issuers = [be.residue_gemm(self.ops_a[t], self.ops_b[t], self.prod[t], m)
                   for t, m in enumerate(self.table.moduli)] if self.wide is None else [None]
        self.batched = None if None in issuers else [(None, issue, None) for issue in issuers]
        self.batch = bool(BATCHED and self.batched)

    def operands(self, X, shifts, exps, side: str, out, span0: int, rows: int) -> None:
        rs, cs = element_strides(X)
        i64 = np.int64
        tr, tc = self.tile
        self.kernels[side]((self.q // tc, rows // tr), (256,), (
            X, i64(rs), i64(cs), i64(X.shape[0]), i64(X.shape[1]), shifts, exps, self.moduli,
            np.int32(self.table.count), self.pow2, np.int32(self.pow2_len), out, i64(span0), i64(rows), i64(self.q),
            i64(self.q)), shared_mem=operand_shared(self.fast, self.table.count))

    def scale(self):
        """The line statistics and scale codes of A's rows and B's columns (level 0's fast scaling)."""
        f = self.family
        rows = f.line_stats(self.A, None, False, self.lines[0])
        cols = f.line_stats(self.B.T, None, False, self.lines[1])
        return rows, cols, f.shifts(rows, self.table, self.shift[0]), f.shifts(cols, self.table, self.shift[1])

    def crt_span(self, s0: int, sa, sb) -> None:
        q, i64, C = self.q, np.int64, self.C
        args = (self.prod, i64(49 * self.span * q), i64(self.span * q), i64(q), sa, sb, C, i64(C.strides[0] // 8),
                i64(s0), i64(self.span), i64(q), i64(q))
        self.crts[self.staged](self.crt_grids[self.staged], (256,), args)

    def __call__(self, mark=lambda name: None):
        A, B, C = self.A, self.B, self.C
        rows, cols, sa, sb = self.scale()
        mark("scaling")
        self.operands(B.T, sb, cols.e, "b", self.ops_b, 0, self.q)
        mark("operands")
        for s0 in range(0, self.q, self.span):
            self.operands(A, sa, rows.e, "a", self.ops_a, s0, self.span)
            mark("operands")
            run_planned(self.be, self.batched if self.batch else self.gemms)
            if self.wide is not None:
                wino = self.be.ops("ozaki2-winograd")
                for t, m in enumerate(self.table.moduli):
                    for pq in range(49):
                        self.prod[t, pq] = wino.reduce(self.wide[t, pq], m)
            mark("gemms")
            self.crt_span(s0, sa, sb)
            mark("crt")
        self.family.fix_nonfinite(A, B, C, rows, cols)
        mark("crt")
        return C


def variant(run: Level2, **change):
    """A call of ``run`` with its attributes ``change``d for the call (the comparison as called)."""
    def call():
        kept = {k: getattr(run, k) for k in change}
        run.__dict__.update(change)
        try:
            return run()
        finally:
            run.__dict__.update(kept)
    return call


def against(run: Level2) -> tuple[str, object]:
    """The run compared with the default as called (``AGAINST``): one GEMM launch a product (``batch``), or the
    operand kernel's form N (``formN``, at OP_BLOCKS blocks an SM and the default tile)."""
    if AGAINST == "batch":
        return "level-2-fused-per-product", variant(run, batch=False)
    if AGAINST == "staged":
        return f"level-2-fused-staged{int(not run.staged)}", variant(run, staged=not run.staged)
    form = int(AGAINST.removeprefix("form"))
    kernels = {side: operand_kernel(side, form, OP_BLOCKS, (TR, TC)) for side in "ab"}
    return f"level-2-fused-form{form}", variant(run, fast=form, kernels=kernels)


def events_ms(work, repeats: int = 5) -> float:
    """The median device time of ``work`` by CUDA events."""
    return statistics.median(device_ms(work) for _ in range(repeats))


def bench(run: Level2, A, B) -> dict:
    """The passes' kernels alone at N (device time): the operand kernel's forms (FAST 0 and 2, blocks an SM: A's
    spans, B whole, with a checksum of what they write) and the CRT's blocks an SM (its last span)."""
    rows, cols, sa, sb = run.scale()
    out, kept = {}, run.kernels
    for fast, blocks, *tile in FORMS:
        tile = tuple(tile)
        run.fast, run.tile = fast, tile
        run.kernels = {"a": operand_kernel("a", fast, blocks, tile), "b": operand_kernel("b", fast, blocks, tile)}
        b = events_ms(lambda: run.operands(B.T, sb, cols.e, "b", run.ops_b, 0, run.q))
        a = events_ms(lambda: [run.operands(A, sa, rows.e, "a", run.ops_a, s0, run.span)
                               for s0 in range(0, run.q, run.span)])
        sums = [int(cp.sum(x.view(cp.uint32), dtype=cp.uint64)) for x in (run.ops_a, run.ops_b)]
        out[f"operands-form{fast}-blocks{blocks}-tile{tile[0]}x{tile[1]}"] = {"a_ms": a, "b_ms": b, "checksums": sums}
    run.fast, run.tile, run.kernels = FAST, (TR, TC), kept
    run()
    for staged in (False, True, False, True):
        run.staged, kernel = staged, run.crts[staged]
        kernel.compile()
        out.setdefault(f"crt-{'staged' if staged else 'loads'}-blocks{CRT_BLOCKS}-last-span", []).append({
            "ms": events_ms(lambda: run.crt_span(run.q - run.span, sa, sb)), "regs": kernel.num_regs,
            "local": kernel.local_size_bytes, "c_checksum": float(cp.sum(run.C[::97]))})
    run.staged = bool(STAGED)
    print("bench", out, flush=True)
    return out


def span_gemms(run: Level2) -> dict:
    """One span's residue GEMMs alone (device time, median of 5, twice in turn): one launch a product against one
    batched launch a modulus."""
    ms = {}
    for name in ("per-product", "batched", "per-product-2", "batched-2"):
        gemms = run.batched if name.startswith("batched") else run.gemms
        ms[name] = events_ms(lambda g=gemms: run_planned(run.be, g))
    print("span gemms", ms, flush=True)
    return ms


def reference_operands(be, res, table, side: str):
    """The 49 second-level operands of each modulus from the library's residues, by its level passes (twice)."""
    wino = be.ops("ozaki2-winograd")
    out = []
    for t, m in enumerate(table.moduli):
        sums = wino.operand_sums(*quadrants(res[t], side), m, side)
        for x in _side(res[t], sums, side):
            out += _side(x, wino.operand_sums(*quadrants(x, side), m, side), side)
    return out


def _side(res, sums, side: str) -> list:
    """The 7 operands of one level of ``res``'s side, as the library's fused level pairs them."""
    return [pair[0 if side == "a" else 1] for pair in operands(res, res, sums, sums)[2]]


def check(be) -> dict:
    """C bitwise a level-0 plan's at CHECK_N, and each operand plane the library level passes' (A whole)."""
    A, B = fresh_inputs(CHECK_N)
    C0, C2 = level_zero(be, A, B), cp.empty((CHECK_N, CHECK_N))
    run = Level2(be, A, B, C2, COUNT, CHECK_N // 4)
    run()
    family, table = run.family, run.table
    rows, cols, sa, sb = run.scale()
    res_a = cp.empty((COUNT, CHECK_N, CHECK_N), dtype=cp.int8)
    res_b = cp.empty((COUNT, CHECK_N, CHECK_N), dtype=cp.int8)
    family.residues(A, sa, rows.e, table, CHECK_N, CHECK_N, out=res_a)
    family.residues(B.T, sb, cols.e, table, CHECK_N, CHECK_N, out=res_b)
    ref_a, ref_b = reference_operands(be, res_a, table, "a"), reference_operands(be, res_b, table, "b")
    flat_a, flat_b = run.ops_a.reshape(COUNT * 49, *run.ops_a.shape[2:]), run.ops_b.reshape(COUNT * 49,
                                                                                             *run.ops_b.shape[2:])
    bad_a = [i for i, x in enumerate(ref_a) if not bool(cp.array_equal(x, flat_a[i]))]
    bad_b = [i for i, x in enumerate(ref_b) if not bool(cp.array_equal(x, flat_b[i]))]
    out = {"n": CHECK_N, "bitwise_level_0": bool(cp.array_equal(C0, C2)),
           "max_abs_diff": float(cp.abs(C0 - C2).max()), "operand_planes_differing": {"a": bad_a[:20], "b": bad_b[:20]}}
    print("check", out, flush=True)
    return out


def level_zero(be, A, B):
    """C of a level-0 plan at COUNT moduli (the bits every level must give), its plan's workspace freed after."""
    C0 = cp.empty((A.shape[0], B.shape[1]))
    plan = Plan(A, B, out=C0, options=Options(moduli=COUNT), backend=be)
    plan.execute(A, B, C0)
    plan.free()
    del plan
    cp.get_default_memory_pool().free_all_blocks()
    return C0


def as_called(calls: dict, warm: bool = True) -> dict:
    """Each call once (unless ``warm`` is False: the caller made them), then ROUNDS rounds of LOOP back-to-back
    calls and one synchronise in turning order: the median ms a call, the samples and the speed-up over
    ``calls["dgemm"]`` of the other call."""
    if warm:
        for call in calls.values():
            call()
    cp.cuda.Device().synchronize()
    samples = turning(calls, ROUNDS, lambda call: loop_seconds(call, LOOP))
    ms = {k: statistics.median(v) * 1e3 for k, v in samples.items()}
    x = {k: ms["dgemm"] / v for k, v in ms.items() if k != "dgemm"}
    return {"ms": ms, "samples_s": samples, "x_dgemm": x if len(x) > 1 else next(iter(x.values()))}


def main() -> None:
    be = get_backend("cupy")
    result = {"script": "results/published/scripts/ozaki2_fused_level2_probe.py", "environment": environment(be),
              "command": f"N={N} CHECK_N={CHECK_N} COUNT={COUNT} SPAN={SPAN} ROUNDS={ROUNDS} LOOP={LOOP} "
                         f"CRT_BLOCKS={CRT_BLOCKS} BITWISE={BITWISE} FAST={FAST} OP_BLOCKS={OP_BLOCKS} TR={TR} TC={TC} "
                         f"LEVEL1={LEVEL1} STAGED={STAGED} BATCHED={BATCHED} AGAINST={AGAINST} "
                         f"FORMS={os.environ.get('FORMS', '')} "
                         f"BENCH={BENCH} OUT=dir python3 "
                         "results/published/scripts/ozaki2_fused_level2_probe.py"}
    for name in ("a", "b"):
        k = operand_kernel(name, FAST, OP_BLOCKS, (TR, TC))
        k.compile()
        result.setdefault("kernels", {})[f"operands-{name}"] = {"regs": k.num_regs, "local": k.local_size_bytes}
    for staged in (False, True):
        ck = crt_kernel(moduli_table(COUNT), CRT_BLOCKS, staged)
        ck.compile()
        result["kernels"][f"crt-staged{int(staged)}"] = {"regs": ck.num_regs, "local": ck.local_size_bytes}
    print("kernels", result["kernels"], flush=True)
    if CHECK_N:
        result["check"] = check(be)
        write_json(result, "ozaki2-fused-level2-probe.json")
    if not N:
        return
    A, B = fresh_inputs(N)
    C, D = cp.empty((N, N)), cp.empty((N, N))
    C0 = level_zero(be, A, B) if BITWISE else None
    start = time.perf_counter()
    run = Level2(be, A, B, C, COUNT, SPAN)
    result["plan_s"] = time.perf_counter() - start
    if BENCH:
        result["bench"] = bench(run, A, B)
    if run.batched:
        result["span_gemms_ms"] = span_gemms(run)
    run()
    cp.matmul(A, B, out=D)
    rows = cp.arange(0, N, 97)
    rel = cp.abs(C[rows] - D[rows]).max() / cp.abs(D[rows]).max()
    result["max_rel_diff_dgemm_sampled_rows"] = float(rel)
    if C0 is not None:
        result["bitwise_level_0_at_n"] = bool(cp.array_equal(C, C0))
        print("bitwise level 0 at", N, result["bitwise_level_0_at_n"], flush=True)
        del C0
    calls = {"level-2-fused": run, "dgemm": lambda: cp.matmul(A, B, out=D)}
    if AGAINST and (run.batch or AGAINST != "batch"):
        name, other = against(run)
        calls = {"level-2-fused": run, name: other, "dgemm": calls["dgemm"]}
        other()
    timed = as_called(calls, warm=False)
    phases = []
    for _ in range(3):
        ev: dict = {}
        run(_marker(ev))
        phases.append({k: v[-1] for k, v in ev.items()})
    result.update({"n": N, "count": COUNT, "span": SPAN, **timed,
                   "phases_ms": {k: statistics.median(p[k] for p in phases) for k in phases[0]},
                   "telemetry": be.telemetry().read().as_dict() if be.telemetry() else None})
    print({k: result[k] for k in ("ms", "x_dgemm", "phases_ms", "max_rel_diff_dgemm_sampled_rows")}, flush=True)
    write_json(result, "ozaki2-fused-level2-probe.json")
    if LEVEL1:
        del run
        cp.get_default_memory_pool().free_all_blocks()
        result["level_1"] = as_called({"level-1": lambda: ozaki2.matmul(A, B, moduli=COUNT, level=1, out=C),
                                       "dgemm": lambda: cp.matmul(A, B, out=D)})
        print("level 1", result["level_1"]["ms"], result["level_1"]["x_dgemm"], flush=True)
        write_json(result, "ozaki2-fused-level2-probe.json")


if __name__ == "__main__":
    main()
