"""The Ozaki scheme: audit methods, accuracy, time, breakdown and error-against-time experiments.

Methods ``ozaki-<format>-<slices>`` (``ozaki-fp32-3``, ``ozaki-int8-8``, ...)
join the accuracy registry when this module is imported (``gemmlab`` imports
it), so ``gemmlab audit --methods ozaki-int8-8`` works. A float format with
``r`` appended (``ozaki-fp32r-3``) is the paper's form, whose last diagonal
multiplies rounded tails (``remainder=True`` in :func:`gpu.ozaki.matmul`).

Experiments for ``gemmlab reproduce``, and their figures:

* ``ozaki-accuracy``: the paper's design (N = 1024, 2048, 4096; phi = 0.1, 1,
  2; seeds 1-10; SGEMM, 2-6 FP32 splits in the paper's form and with exact
  digits only, DGEMM), audited against the correctly rounded product; rows go
  to the shared ``accuracy`` store.
* ``ozaki-time``: N = 128-4096, every configuration timed interleaved with
  DGEMM and SGEMM on the same inputs; stored with both ratios.
* ``ozaki-breakdown``: seconds of the split (exponents and slicing), the GEMMs
  and the FP64 sum, each phase synchronized.
* ``ozaki-pareto``: max relative error (phi = 0.1, 1, 2) and time of every
  format and slice count at one N, drawn as error against time with each
  format's Pareto front.

``gemmlab ozaki`` runs the last one at chosen sizes, formats and slice counts
(the H100 benchmark). Timing: configurations whose warm-up run takes more than
``slow_factor`` times DGEMM's cannot beat it and would make the interleaved
batches take minutes; they are stored from one run (``protocol: "single
run"``, ``stable: false``): a second run, or the warm-up itself when it took
over :data:`SINGLE_RUN_SECONDS`. Configurations whose time, extrapolated from
the previous slice count by the number of slice pairs, exceeds ``max_ratio``
(25) DGEMMs are not run (``protocol: "predicted"``, drawn hollow). Errors at N above :data:`FULL_ROWS_MAX`
are measured on a sample of rows (the same rows for every method; the Ozaki
scheme's rows do not depend on the other rows of A, DGEMM and SGEMM run on the
whole product), against ``exact_matmul`` of those rows; inputs there are drawn
on the device (same distribution as ``phi_matrix``, other numbers).
"""

from __future__ import annotations

import math
import re
import statistics
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from time import perf_counter
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from accuracy.audit import Audited, audit_inputs
from accuracy.methods import Method, family, get_method
from accuracy.metrics import error_report
from accuracy.reference import exact_matmul
from gpu import ozaki
from gpu.backend import Array, Backend
from gpu.ozaki import HEADROOM

from .accuracy_audit import TEN, AuditPlan, record, run_audit, summarize
from .database import ResultsDB
from .plotting import device_label, new_figure, save_figure
from .registry import Context, experiment, figure
from .strassen_bench import free_memory
from .sweep import Record, SweepOutcome, sweep
from .timing import Timing, compare

TIME, ERROR, BREAKDOWN = "ozaki-time", "ozaki-error", "ozaki-breakdown"
DGEMM, SGEMM = "fp64", "fp32"
LABELS = {DGEMM: "DGEMM", SGEMM: "SGEMM"}
PHIS = (0.1, 1.0, 2.0)
PAPER_SPLITS = (2, 3, 4, 5, 6)
#: Every slice variant: the formats, then the paper's rounded-tail form of the float ones.
ALL_FORMATS = (*ozaki.FORMATS, *(f + "r" for f, v in ozaki.FORMATS.items() if v.floating))
#: What ``gemmlab ozaki`` measures on a GPU by default: the paper's FP32 method and every tensor-core format.
GPU_FORMATS = ("fp32r", "tf32", "fp16", "fp16r", "bf16", "int8")
#: Up to this N, errors cover every row and inputs are the audit's host-drawn ``phi_matrix``.
FULL_ROWS_MAX = 4096
SAMPLED_ROWS = 512
#: A slow configuration whose warm-up took less than this is timed by one more run.
SINGLE_RUN_SECONDS = 1.0
#: Timing inputs: phi = 1 (times do not depend on the values).
TIME_PHI, SEED = 1.0, 1


# --------------------------------------------------------------------------- audit methods

def method_name(fmt: str, slices: int) -> str:
    return f"ozaki-{fmt}-{slices}"


def parse_method(name: str) -> tuple[str, int] | None:
    """(format, slices) of an ``ozaki-<format>-<slices>`` name, else None."""
    match = re.fullmatch(r"ozaki-([a-z0-9]+)-(\d+)", name)
    return (match[1], int(match[2])) if match else None


def ozaki_names() -> list[str]:
    return [method_name(f, s) for f in ALL_FORMATS for s in range(1, 13)]


@family(r"ozaki-(?P<format>[a-z0-9]+)-(?P<slices>\d+)", "ozaki-<format>-<slices>", ozaki_names)
def _ozaki_method(match: re.Match) -> Method:
    fmt, remainder = ozaki.parse_variant(match["format"])
    slices = int(match["slices"])
    if not 1 <= slices <= ozaki.MAX_SLICES:
        raise ValueError(f"slices must lie in 1..{ozaki.MAX_SLICES}, got {slices}")

    def run(be: Backend, A: Array, B: Array) -> Array:
        return ozaki.matmul(A, B, slices=slices, slice_format=fmt.name, remainder=remainder, backend=be)

    form = ", the paper's rounded tails" if remainder else ""
    return Method(match.group(0), f"Ozaki scheme, {slices} slices of {fmt.name}{form} ({fmt.description})", run)


# --------------------------------------------------------------------------- plans

@dataclass(frozen=True)
class BenchPlan:
    """Sizes x formats x slice counts, timed against DGEMM and SGEMM, with errors on ``phis``."""

    sizes: tuple[int, ...]
    formats: tuple[str, ...]
    slices: tuple[int, ...]
    phis: tuple[float, ...] = PHIS
    rows: int | None = None          # error rows per size (None: all up to FULL_ROWS_MAX, else SAMPLED_ROWS)
    slow_factor: float = 3.0
    max_ratio: float | None = 25.0   # configurations predicted slower than this many DGEMMs are not run
    errors: bool = True
    timing: bool = True

    def __post_init__(self) -> None:
        if not self.sizes or any(not isinstance(n, int) or n <= 0 for n in self.sizes):
            raise ValueError(f"sizes must be positive integers, got {list(self.sizes)}")
        for f in self.formats or ("",):
            ozaki.parse_variant(f)
        if not self.slices or any(not isinstance(s, int) or not 1 <= s <= ozaki.MAX_SLICES for s in self.slices):
            raise ValueError(f"slice counts must be integers in 1..{ozaki.MAX_SLICES}, got {list(self.slices)}")
        if not self.phis or any(not 0 <= p <= 20 for p in self.phis):
            raise ValueError(f"phi values must lie in [0, 20], got {list(self.phis)}")
        if self.rows is not None and self.rows <= 0:
            raise ValueError(f"rows must be positive, got {self.rows}")
        if not self.slow_factor > 0:
            raise ValueError(f"slow_factor must be positive, got {self.slow_factor}")
        if self.max_ratio is not None and not self.max_ratio > 0:
            raise ValueError(f"max_ratio must be positive, got {self.max_ratio}")

    def configs(self, fmt: str | None = None) -> list[str]:
        return [method_name(f, s) for f in self.formats if fmt in (None, f) for s in self.slices]

    def rows_for(self, n: int) -> int:
        return min(n, self.rows) if self.rows else (n if n <= FULL_ROWS_MAX else SAMPLED_ROWS)


ACCURACY_PLANS: dict[tuple[str, bool], AuditPlan] = {
    ("cupy", False): AuditPlan((1024, 2048, 4096), seeds=TEN),
    ("cupy", True): AuditPlan((1024,), seeds=(1, 2)),
    ("numpy", False): AuditPlan((256, 512, 1024), seeds=TEN),
    ("numpy", True): AuditPlan((128,), seeds=(1, 2)),
}
TIME_PLANS: dict[tuple[str, bool], BenchPlan] = {
    ("cupy", False): BenchPlan((128, 256, 512, 1024, 2048, 4096), GPU_FORMATS, PAPER_SPLITS, errors=False),
    ("cupy", True): BenchPlan((1024, 4096), GPU_FORMATS, (2, 4, 6), errors=False),
    # The CPU runs only FP32 slices at speed; the other formats are emulated in float64 there.
    ("numpy", False): BenchPlan((128, 256, 512, 1024), ("fp32r", "fp32"), PAPER_SPLITS, errors=False),
    ("numpy", True): BenchPlan((64, 128), ("fp32r",), (2, 4), errors=False),
}
PARETO_PLANS: dict[tuple[str, bool], BenchPlan] = {
    ("cupy", False): BenchPlan((4096,), ALL_FORMATS, tuple(range(2, 10))),
    ("cupy", True): BenchPlan((1024,), GPU_FORMATS, (2, 4, 6, 8)),
    ("numpy", False): BenchPlan((256,), ("fp32r", "fp32"), tuple(range(2, 9))),
    ("numpy", True): BenchPlan((96,), ("fp32r",), (2, 3, 4, 6)),
}
#: The benchmark ``gemmlab ozaki`` runs when no sizes, formats or slices are given.
BENCH_DEFAULTS: dict[str, BenchPlan] = {
    "cupy": BenchPlan((4096, 8192, 16384), GPU_FORMATS, tuple(range(2, 11))),
    "numpy": BenchPlan((256, 512), ("fp32r", "fp32"), PAPER_SPLITS),
}
BREAKDOWN_PLANS: dict[tuple[str, bool], tuple[tuple[int, ...], tuple[tuple[str, int], ...]]] = {
    ("cupy", False): ((1024, 4096), (("fp32r", 2), ("fp32r", 4), ("fp32r", 6), ("fp16", 6), ("int8", 4),
                                     ("int8", 8))),
    ("cupy", True): ((1024,), (("fp32r", 2), ("fp32r", 6), ("int8", 8))),
    ("numpy", False): ((512,), (("fp32r", 2), ("fp32r", 4), ("fp32r", 6))),
    ("numpy", True): ((128,), (("fp32r", 2), ("fp32r", 4))),
}
BREAKDOWN_RUNS = 5


# --------------------------------------------------------------------------- inputs

def bench_inputs(be: Backend, n: int, phi: float, seed: int) -> tuple[Array, Array, str]:
    """A and B of one benchmark point, and where they were drawn."""
    if be.name == "numpy" or n <= FULL_ROWS_MAX:
        a, b = audit_inputs(n, phi, seed)
        return be.asarray(a), be.asarray(b), "phi_matrix (host)"
    xp = be.xp
    rng = xp.random.default_rng(seed)

    def draw() -> Array:
        ru, rn = rng.random((n, n)), rng.standard_normal((n, n))
        ru -= 0.5
        rn *= phi
        xp.exp(rn, out=rn)
        ru *= rn
        return ru

    return draw(), draw(), "(ru - 0.5) exp(phi rn) drawn on the device"


def sample_rows(n: int, rows: int, seed: int) -> np.ndarray | None:
    """Sorted row indices for the error (None: every row)."""
    if rows >= n:
        return None
    return np.sort(np.random.default_rng((seed, n)).choice(n, size=rows, replace=False))


# --------------------------------------------------------------------------- errors

def error_params(n: int, phi: float, seed: int, rows: int) -> dict[str, Any]:
    return {"n": int(n), "phi": float(phi), "seed": int(seed), "rows": int(rows)}


def measure_errors(be: Backend, params: Mapping[str, Any], missing: Sequence[str]) -> dict[str, Record]:
    """Every missing method's error at one point: full products for DGEMM and SGEMM, the Ozaki
    scheme on the sampled rows only, all against the exact product of those rows."""
    n, rows = params["n"], params["rows"]
    A, B, source = bench_inputs(be, n, params["phi"], params["seed"])
    picks = sample_rows(n, rows, params["seed"])
    A_rows = A if picks is None else A[be.asarray(picks)]
    start = perf_counter()
    ref = exact_matmul(A_rows, B, backend=be)
    be.synchronize()
    ref_seconds = perf_counter() - start
    out = {}
    for name in missing:
        start = perf_counter()
        if name in (DGEMM, SGEMM):
            C = get_method(name).run(be, A, B)
            C = C if picks is None else C[be.asarray(picks)]
        else:
            C = get_method(name).run(be, A_rows, B)
        be.synchronize()
        seconds = perf_counter() - start
        rec = record(Audited(error_report(C, ref, A_rows, B), seconds, ref_seconds))
        out[name] = replace(rec, meta={**rec.meta, "inputs": source})
        del C
    return out


def run_errors(ctx: Context, plan: BenchPlan, seed: int = SEED) -> SweepOutcome:
    outcome = SweepOutcome()
    methods = [DGEMM, SGEMM, *plan.configs()]
    for n in plan.sizes:
        points = [error_params(n, phi, seed, plan.rows_for(n)) for phi in plan.phis]
        done = sweep(ctx, ERROR, points, methods, partial(measure_errors, ctx.backend), desc=f"errors N={n}")
        outcome.measured += done.measured
        outcome.skipped += done.skipped
        free_memory(ctx.backend)
    return outcome


def error_rows(db: ResultsDB, env_key: str) -> list[dict[str, Any]]:
    return [{"method": m["method"], **m["params"], "max_rel": m["value"] if m["unit"] == "rel" else None,
             "max_comp": m["meta"].get("max_comp"), "nonfinite": m["meta"].get("nonfinite", 0)}
            for m in db.measurements(ERROR, env_key=env_key)]


# --------------------------------------------------------------------------- timing

def time_params(n: int, fmt: str, slices: int) -> dict[str, Any]:
    """An Ozaki configuration, or (slices 0) the DGEMM / SGEMM of the group of format ``fmt``."""
    return {"n": int(n), "format": fmt, "slices": int(slices)}


@dataclass
class Operands:
    """Timing operands of one size: float64 A, B, C and float32 copies for SGEMM."""

    A: Array
    B: Array
    C: Array
    A32: Array
    B32: Array
    C32: Array
    out: Array = field(default=None)

    @classmethod
    def allocate(cls, be: Backend, n: int) -> Operands:
        A, B, _ = bench_inputs(be, n, TIME_PHI, SEED)
        xp = be.xp
        return cls(A, B, xp.empty((n, n)), A.astype(np.float32), B.astype(np.float32),
                   xp.empty((n, n), dtype=np.float32), xp.empty((n, n)))


def _single_run(be: Backend, work: Callable[[], Any]) -> float:
    be.synchronize()
    with be.timer() as t:
        work()
    return t.seconds


def _protocol(n: int) -> dict[str, int]:
    """Warm-up is done before the batches; large products get one batch (their batches take seconds)."""
    return {"warmup": 0, "max_attempts": 1 if n >= 8192 else 3}


def measure_group(ctx: Context, ops: Operands, n: int, fmt: str, slices: Sequence[int], plan: BenchPlan) -> int:
    """DGEMM, SGEMM and the Ozaki configurations of one format, interleaved; stored with ratios.

    Every method runs once first (warm-up), by increasing slice count. A
    configuration slower than ``plan.slow_factor`` DGEMMs keeps a single run;
    one whose time, extrapolated from the previous slice count by the number
    of slice pairs, exceeds ``plan.max_ratio`` DGEMMs is not run at all and is
    stored as predicted (``protocol: "predicted"``).
    """
    be = ctx.backend
    works: dict[str, Callable[[], Any]] = {
        DGEMM: lambda: be.gemm(ops.A, ops.B, ops.C), SGEMM: lambda: be.gemm(ops.A32, ops.B32, ops.C32)}
    plans = {}
    base, remainder = ozaki.parse_variant(fmt)
    for s in sorted(slices):
        kw = {"slices": s, "slice_format": base.name, "remainder": remainder, "backend": be}
        plans[method_name(fmt, s)] = ozaki.configure(ops.A, ops.B, **kw)
        works[method_name(fmt, s)] = partial(ozaki.matmul, ops.A, ops.B, out=ops.out, **kw)
    first: dict[str, float] = {}
    predicted: dict[str, float] = {}
    previous: str | None = None
    for name, work in works.items():
        if name in plans and previous is not None and plan.max_ratio is not None:
            guess = first[previous] * plans[name].pairs / plans[previous].pairs
            if guess > plan.max_ratio * first[DGEMM]:
                predicted[name] = guess
                continue
        first[name] = _single_run(be, work)
        previous = name if name in plans else previous
    slow = {name for name in plans if name in first and first[name] > plan.slow_factor * first[DGEMM]}
    for name in slow:      # a warm-up run of seconds is its own sample: first-use costs are negligible there
        if first[name] < SINGLE_RUN_SECONDS:
            first[name] = _single_run(be, works[name])
    flush = 3 * n * n * 8 < 2 * be.cache_bytes()
    result = compare({k: w for k, w in works.items() if k not in slow and k not in predicted}, be, baseline=DGEMM,
                     flush=flush, **_protocol(n))
    timings = dict(result.timings)
    for name in slow:
        timings[name] = Timing(samples=[first[name]], stable=False)
    d, s_ = timings[DGEMM], timings[SGEMM]
    for name in (DGEMM, SGEMM):
        t = timings[name]
        ctx.db.add(ctx.run_id, TIME, name, time_params(n, fmt, 0), value=t.median, unit="s", samples=t.samples,
                   meta={**t.meta(), "group": fmt, "flush": flush})
    for name, p in plans.items():
        if name in predicted:
            seconds, samples = predicted[name], []
            meta = {"protocol": "predicted", "stable": False, "max_ratio": plan.max_ratio}
        else:
            t = timings[name]
            seconds, samples = t.median, t.samples
            meta = {**t.meta(), "protocol": "single run" if name in slow else "interleaved"}
        ctx.db.add(ctx.run_id, TIME, name, time_params(n, fmt, p.slices), value=seconds, unit="s", samples=samples,
                   meta={**meta, "dgemm_s": d.median, "sgemm_s": s_.median, "speedup_vs_dgemm": d.median / seconds,
                         "slowdown_vs_sgemm": seconds / s_.median, "plan": p.as_dict(), "flush": flush})
    return len(plans)


def run_timing(ctx: Context, plan: BenchPlan) -> SweepOutcome:
    """Time (or resume) every format group at every size of the plan."""
    be, outcome = ctx.backend, SweepOutcome()
    groups = [(n, f) for n in plan.sizes for f in plan.formats]
    ops, ops_n = None, None
    try:
        for n, fmt in tqdm(groups, desc="ozaki timing", unit="group", disable=not ctx.progress, file=sys.stderr,
                           leave=False):
            missing = [s for s in plan.slices if ctx.force or not ctx.db.has(
                TIME, method_name(fmt, s), time_params(n, fmt, s), ctx.env_key)]
            outcome.skipped += len(plan.slices) - len(missing)
            if not missing:
                continue
            if ops_n != n:
                ops = None
                free_memory(be)
                ops, ops_n = Operands.allocate(be, n), n
            outcome.measured += measure_group(ctx, ops, n, fmt, missing, plan)
    finally:
        ops = None
        free_memory(be)
    return outcome


def time_rows(db: ResultsDB, env_key: str) -> list[dict[str, Any]]:
    rows = []
    for m in db.measurements(TIME, env_key=env_key):
        p, meta = m["params"], m["meta"]
        if p["slices"] == 0:
            continue
        rows.append({"method": m["method"], "n": p["n"], "format": p["format"], "slices": p["slices"],
                     "time_s": m["value"], "dgemm_s": meta["dgemm_s"], "sgemm_s": meta["sgemm_s"],
                     "speedup_vs_dgemm": meta["speedup_vs_dgemm"], "slowdown_vs_sgemm": meta["slowdown_vs_sgemm"],
                     "stable": bool(meta.get("stable", True)), "protocol": meta.get("protocol", "interleaved")})
    return sorted(rows, key=lambda r: (r["n"], r["format"], r["slices"]))


# --------------------------------------------------------------------------- the benchmark table

def bench_table(db: ResultsDB, env_key: str, plan: BenchPlan) -> list[dict[str, Any]]:
    """Per size and method of the plan: time, ratios and max relative error per phi (DGEMM and SGEMM first)."""
    times = {(r["n"], r["method"]): r for r in time_rows(db, env_key)}
    errors: dict[tuple[int, str], dict[float, float | None]] = defaultdict(dict)
    for r in error_rows(db, env_key):
        if r["seed"] == SEED and r["rows"] == plan.rows_for(r["n"]):
            errors[(r["n"], r["method"])][r["phi"]] = r["max_rel"]
    out = []
    for n in plan.sizes:
        group = [times[(n, c)] for c in plan.configs() if (n, c) in times]
        base = {DGEMM: statistics.median(r["dgemm_s"] for r in group) if group else None,
                SGEMM: statistics.median(r["sgemm_s"] for r in group) if group else None}
        for name in (DGEMM, SGEMM, *plan.configs()):
            t = times.get((n, name))
            time_s = t["time_s"] if t else base.get(name)
            row = {"n": n, "method": name, "label": LABELS.get(name, name), "time_s": time_s,
                   "speedup_vs_dgemm": t["speedup_vs_dgemm"] if t else (base[DGEMM] / time_s if time_s else None),
                   "slowdown_vs_sgemm": t["slowdown_vs_sgemm"] if t else (time_s / base[SGEMM] if time_s else None),
                   "protocol": t["protocol"] if t else ("interleaved" if time_s else None)}
            row.update({f"max_rel_phi{phi:g}": errors[(n, name)].get(phi) for phi in plan.phis})
            out.append(row)
    return out


def verdict(rows: Sequence[Mapping[str, Any]], phi: float = 1.0) -> dict[str, Any]:
    """At the largest size: configurations at least as accurate as DGEMM on phi inputs, and the fastest of them."""
    if not rows:
        return {}
    n = max(r["n"] for r in rows)
    key = f"max_rel_phi{phi:g}"
    at_n = [r for r in rows if r["n"] == n]
    dgemm = next((r for r in at_n if r["method"] == DGEMM), None)
    if dgemm is None or dgemm.get(key) is None:
        return {"n": n, "note": f"no DGEMM error at phi = {phi:g}"}
    ok = [r for r in at_n if parse_method(r["method"]) and r.get(key) is not None and r[key] <= dgemm[key]
          and r["time_s"] and r.get("protocol") != "predicted"]
    best = min(ok, key=lambda r: r["time_s"], default=None)
    return {"n": n, "phi": phi, "dgemm_max_rel": dgemm[key],
            "as_accurate_as_dgemm": [r["method"] for r in ok],
            "fastest_of_them": best["method"] if best else None,
            "its_speedup_vs_dgemm": best["speedup_vs_dgemm"] if best else None,
            "target_met": bool(best and best["speedup_vs_dgemm"] and best["speedup_vs_dgemm"] > 1)}


def run_bench(ctx: Context, plan: BenchPlan) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Errors, then timings, of every configuration of the plan (resuming); the summary and the table."""
    err = run_errors(ctx, plan) if plan.errors else SweepOutcome()
    tim = run_timing(ctx, plan) if plan.timing else SweepOutcome()
    rows = bench_table(ctx.db, ctx.env_key, plan)
    return {"error points measured": err.measured, "error points already stored": err.skipped,
            "timed configurations": tim.measured, "configurations already timed": tim.skipped,
            "verdict (phi = 1)": verdict(rows)}, rows


# --------------------------------------------------------------------------- experiments

def paper_methods() -> list[str]:
    """SGEMM, 2-6 splits in the paper's form and with exact digits only, DGEMM."""
    return [SGEMM, *(method_name(f, s) for f in ("fp32r", "fp32") for s in PAPER_SPLITS), DGEMM]


def digits_gained(rows: Iterable[Mapping[str, Any]]) -> dict[tuple[int, float], dict[str, float]]:
    """Per (n, phi): decimal digits gained over SGEMM, log10(SGEMM error / method error), median over seeds."""
    base = {(r["n"], r["phi"], r["seed"]): r["max_rel"] for r in rows if r["method"] == SGEMM}
    gains: dict[tuple[int, float], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        ref = base.get((r["n"], r["phi"], r["seed"]))
        if r["method"] != SGEMM and ref and r["max_rel"]:
            gains[(r["n"], r["phi"])][r["method"]].append(math.log10(ref / r["max_rel"]))
    return {key: {m: statistics.median(v) for m, v in methods.items()} for key, methods in gains.items()}


@experiment("ozaki-accuracy", "Ozaki scheme with 2-6 FP32 splits against SGEMM and DGEMM on phi inputs (the paper's "
                              "design)")
def run_accuracy(ctx: Context) -> dict[str, Any]:
    outcome, rows = run_audit(ctx, paper_methods(), ACCURACY_PLANS[(ctx.backend.name, ctx.quick)])
    n = max((r["n"] for r in rows), default=None)
    gains = digits_gained(rows)
    summary: dict[str, Any] = {"points measured": outcome.measured, "points already stored": outcome.skipped}
    for s in summarize(rows):
        if s["n"] == n:
            summary.setdefault(f"mean max relative error at N={n}", {})[
                f"{s['method']} phi={s['phi']:g}"] = f"{s['mean_max_rel']:.3e}" if s["mean_max_rel"] else "n/a"
    for (size, phi), by_method in sorted(gains.items()):
        if size == n:
            summary[f"digits gained over SGEMM at N={n}, phi={phi:g}"] = {
                m: f"{g:.1f}" for m, g in by_method.items()}
    return summary


@experiment(TIME, "Ozaki scheme time against DGEMM and SGEMM, N = 128-4096, every format (interleaved)")
def run_time(ctx: Context) -> dict[str, Any]:
    plan = TIME_PLANS[(ctx.backend.name, ctx.quick)]
    outcome = run_timing(ctx, plan)
    rows = [r for r in time_rows(ctx.db, ctx.env_key) if r["n"] in plan.sizes and r["method"] in plan.configs()]
    n = max(plan.sizes)
    return {"configurations timed": outcome.measured, "already stored": outcome.skipped,
            f"speed-up over DGEMM at N={n}": {r["method"]: f"{r['speedup_vs_dgemm']:.3f}" for r in rows
                                              if r["n"] == n},
            f"time relative to SGEMM at N={n}": {r["method"]: f"{r['slowdown_vs_sgemm']:.2f}" for r in rows
                                                 if r["n"] == n}}


def measure_breakdown(be: Backend, n: int, fmt: str, slices: int, runs: int = BREAKDOWN_RUNS) -> Record:
    A, B, _ = bench_inputs(be, n, TIME_PHI, SEED)
    base, remainder = ozaki.parse_variant(fmt)
    kw = {"slices": slices, "slice_format": base.name, "remainder": remainder, "backend": be,
          "out": be.xp.empty((n, n))}
    ozaki.matmul(A, B, **kw)
    samples: list[dict[str, float]] = []
    for _ in range(runs):
        phases: dict[str, float] = {}
        ozaki.matmul(A, B, phases=phases, **kw)
        samples.append(phases)
    median = {k: statistics.median(s[k] for s in samples) for k in ("split", "gemm", "sum")}
    p = ozaki.plan(n, n, n, slices, base, remainder=remainder)
    return Record(sum(median.values()), "s", [sum(s.values()) for s in samples],
                  meta={**{f"{k}_s": v for k, v in median.items()}, "runs": runs, "plan": p.as_dict(),
                        "phases": samples})


@experiment(BREAKDOWN, "Seconds of the split, the GEMMs and the FP64 sum of the Ozaki scheme")
def run_breakdown(ctx: Context) -> dict[str, Any]:
    sizes, configs = BREAKDOWN_PLANS[(ctx.backend.name, ctx.quick)]
    methods = [method_name(f, s) for f, s in configs]

    def measure(params: Mapping[str, Any], missing: Sequence[str]) -> dict[str, Record]:
        return {m: measure_breakdown(ctx.backend, params["n"], *parse_method(m)) for m in missing}

    outcome = sweep(ctx, BREAKDOWN, [{"n": n} for n in sizes], methods, measure, desc=BREAKDOWN)
    rows = [r for r in breakdown_rows(ctx.db, ctx.env_key) if r["n"] in sizes and r["method"] in methods]
    return {"points measured": outcome.measured, "points already stored": outcome.skipped,
            "share of time (split / GEMM / sum)": {
                f"{r['method']} N={r['n']}": " / ".join(f"{r[k] / r['total_s']:.0%}" for k in ("split_s", "gemm_s",
                                                                                             "sum_s"))
                for r in rows}}


def breakdown_rows(db: ResultsDB, env_key: str) -> list[dict[str, Any]]:
    return sorted(({"method": m["method"], "n": m["params"]["n"], "total_s": m["value"],
                    **{k: m["meta"][k] for k in ("split_s", "gemm_s", "sum_s")}}
                   for m in db.measurements(BREAKDOWN, env_key=env_key)), key=lambda r: (r["n"], r["method"]))


@experiment("ozaki-pareto", "Error (phi = 0.1, 1, 2) and time of every format and slice count at one N")
def run_pareto(ctx: Context) -> dict[str, Any]:
    return run_bench(ctx, PARETO_PLANS[(ctx.backend.name, ctx.quick)])[0]


# --------------------------------------------------------------------------- figures

def _grid(count: int, width: float, height: float, cols: int = 3) -> tuple[Any, list[Any]]:
    """A figure with ``count`` panels of width x height inches, at most ``cols`` per row."""
    cols = min(cols, count)
    rows = -(-count // cols)
    fig, axes = new_figure(rows, cols, width=width * cols, height=height * rows)
    flat = list(np.array(axes, dtype=object).reshape(-1))
    for ax in flat[count:]:
        ax.set_visible(False)
    return fig, flat[:count]


def _finish(ax: Any, title: str, xlabel: str, ylabel: str) -> None:
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    ax.title.set_fontsize(8)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=6)


@figure("ozaki-accuracy", "Max relative error against the number of FP32 splits, with SGEMM and DGEMM, per phi and N")
def render_accuracy(db: ResultsDB, out_dir: Path) -> list[Path]:
    from .accuracy_audit import audit_rows

    wanted = set(paper_methods())
    panels = []
    for key in db.env_keys():
        rows = [r for r in audit_rows(db, key) if r["method"] in wanted and r["max_rel"]]
        splits = {r["n"] for r in rows if parse_method(r["method"])}
        panels += [(key, n, phi, [r for r in rows if r["n"] == n and r["phi"] == phi])
                   for n in sorted(splits) for phi in sorted({r["phi"] for r in rows if r["n"] == n})]
    if not panels:
        return []
    fig, axes = _grid(len(panels), 4.2, 3.4)
    for ax, (key, n, phi, rows) in zip(axes, panels):
        by_split: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
        for r in rows:
            parsed = parse_method(r["method"])
            if parsed:
                by_split[parsed[0]][parsed[1]].append(r["max_rel"])
        for variant, label in (("fp32r", "FP32 splits, paper's form"), ("fp32", "FP32, exact digits only")):
            xs = sorted(by_split[variant])
            if not xs:
                continue
            line, = ax.plot(xs, [statistics.median(by_split[variant][s]) for s in xs], "o-", ms=3,
                            label=f"{label} (median)")
            ax.fill_between(xs, [min(by_split[variant][s]) for s in xs], [max(by_split[variant][s]) for s in xs],
                            alpha=0.2, color=line.get_color())
        for method, style in ((SGEMM, "--"), (DGEMM, ":")):
            vals = [r["max_rel"] for r in rows if r["method"] == method]
            if vals:
                ax.axhline(statistics.median(vals), ls=style, color="black", lw=0.9, label=LABELS[method])
        ax.set_yscale("log")
        ax.xaxis.get_major_locator().set_params(integer=True)
        _finish(ax, f"phi = {phi:g}, N = {n}\n{device_label(db, key)}", "splits", "max relative error")
    fig.suptitle("Ozaki scheme with FP32 splits: maximum relative error against the correctly rounded product "
                 "(bands: min-max over seeds)", fontsize=9)
    return save_figure(fig, out_dir, "ozaki-accuracy")


@figure(TIME, "Ozaki time relative to DGEMM against N, one line per slice count, one panel per format")
def render_time(db: ResultsDB, out_dir: Path) -> list[Path]:
    panels = [(key, fmt, [r for r in rows if r["format"] == fmt]) for key in db.env_keys()
              if (rows := time_rows(db, key)) for fmt in [f for f in ALL_FORMATS if any(r["format"] == f for r in rows)]]
    if not panels:
        return []
    fig, axes = _grid(len(panels), 4.4, 3.5)
    for ax, (key, fmt, rows) in zip(axes, panels):
        for s in sorted({r["slices"] for r in rows}):
            pts = sorted((r["n"], 1 / r["speedup_vs_dgemm"], r["stable"]) for r in rows if r["slices"] == s)
            line, = ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", ms=3, label=f"{s} slices")
            shaky = [(x, y) for x, y, ok in pts if not ok]
            if shaky:
                ax.plot(*zip(*shaky), "o", color=line.get_color(), mfc="white", zorder=3)
        sg = sorted({(r["n"], r["sgemm_s"] / r["dgemm_s"]) for r in rows})
        ax.plot([p[0] for p in sg], [p[1] for p in sg], "k--", lw=0.9, label="SGEMM")
        ax.axhline(1.0, color="black", lw=0.8, ls=":", label="DGEMM")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        _finish(ax, f"{fmt} slices, {device_label(db, key)}", "N", "time / DGEMM time")
    fig.suptitle("Ozaki scheme: time relative to DGEMM (interleaved; hollow: single run, predicted or unstable)",
                 fontsize=9)
    return save_figure(fig, out_dir, TIME)


@figure(BREAKDOWN, "Split, GEMM and sum seconds of Ozaki configurations, stacked, per N")
def render_breakdown(db: ResultsDB, out_dir: Path) -> list[Path]:
    panels = [(key, n, [r for r in rows if r["n"] == n]) for key in db.env_keys()
              if (rows := breakdown_rows(db, key)) for n in sorted({r["n"] for r in rows})]
    if not panels:
        return []
    fig, axes = _grid(len(panels), max(4.5, 1.0 + 0.8 * max(len(p[2]) for p in panels)), 4.0, cols=len(panels))
    for ax, (key, n, rows) in zip(axes, panels):
        xs = np.arange(len(rows))
        bottom = np.zeros(len(rows))
        for part in ("split_s", "gemm_s", "sum_s"):
            vals = np.array([1e3 * r[part] for r in rows])
            ax.bar(xs, vals, bottom=bottom, label=part[:-2])
            bottom += vals
        ax.set_xticks(xs)
        ax.set_xticklabels([r["method"].removeprefix("ozaki-") for r in rows], rotation=45, fontsize=7)
        _finish(ax, f"N = {n}, {device_label(db, key)}", "format-slices", "milliseconds")
    fig.suptitle("Ozaki scheme: where the time goes (median of runs, each phase synchronized)", fontsize=9)
    return save_figure(fig, out_dir, BREAKDOWN)


def pareto_front(points: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points no other point beats in both time and error, by increasing time."""
    front, best = [], math.inf
    for t, e in sorted(points):
        if e < best:
            front.append((t, e))
            best = e
    return front


@figure("ozaki-pareto", "Max relative error against time relative to DGEMM, per format with its Pareto front")
def render_pareto(db: ResultsDB, out_dir: Path) -> list[Path]:
    panels = []
    for key in db.env_keys():
        times = {(r["n"], r["method"]): r for r in time_rows(db, key)}
        errors = [r for r in error_rows(db, key) if r["seed"] == SEED and r["max_rel"]]
        for n in sorted({r["n"] for r in errors if (r["n"], r["method"]) in times}):
            for phi in sorted({r["phi"] for r in errors if r["n"] == n}):
                panels.append((key, n, phi, times, [r for r in errors if r["n"] == n and r["phi"] == phi]))
    if not panels:
        return []
    fig, axes = _grid(len(panels), 4.6, 3.8)
    for ax, (key, n, phi, times, errors) in zip(axes, panels):
        by_format = defaultdict(list)
        for r in errors:
            parsed, t = parse_method(r["method"]), times.get((n, r["method"]))
            if parsed and t:
                by_format[parsed[0]].append((1 / t["speedup_vs_dgemm"], r["max_rel"], parsed[1],
                                             t["protocol"] == "predicted"))
        for fmt in [f for f in ALL_FORMATS if f in by_format]:
            pts = by_format[fmt]
            line, = ax.plot([p[0] for p in pts], [p[1] for p in pts], "o", ms=3, label=fmt)
            guessed = [(x, y) for x, y, _, g in pts if g]
            if guessed:
                ax.plot(*zip(*guessed), "o", ms=3, color=line.get_color(), mfc="white", zorder=3)
            for x, y, s, _ in pts:
                ax.annotate(str(s), (x, y), fontsize=5, xytext=(2, 2), textcoords="offset points")
            front = pareto_front((x, y) for x, y, _, _ in pts)
            ax.plot([p[0] for p in front], [p[1] for p in front], "-", color=line.get_color(), lw=0.8)
        group = [t for (size, _), t in times.items() if size == n]
        for method, marker in ((DGEMM, "s"), (SGEMM, "^")):
            err = next((r["max_rel"] for r in errors if r["method"] == method), None)
            if err and group:
                x = 1.0 if method == DGEMM else statistics.median(t["sgemm_s"] / t["dgemm_s"] for t in group)
                ax.plot([x], [err], marker, color="black", label=LABELS[method])
        ax.set_xscale("log")
        ax.set_yscale("log")
        _finish(ax, f"phi = {phi:g}, N = {n}\n{device_label(db, key)}", "time / DGEMM time", "max relative error")
    fig.suptitle("Ozaki scheme: error against time (labels: slices; lines: Pareto fronts per format; hollow: "
                 "time predicted, not run)", fontsize=9)
    return save_figure(fig, out_dir, "ozaki-pareto")


def check_sizes(be: Backend, plan: BenchPlan) -> None:
    """ValueError before any measurement when a size's operands cannot fit in free memory."""
    free = free_memory(be)
    for n in plan.sizes:
        need = 44 * n * n                  # A, B, C and the output in float64, SGEMM's float32 copies
        if need > HEADROOM * free:
            raise ValueError(f"N = {n} needs {need / 2**30:.1f} GiB for its operands but the {be.name} device has "
                             f"{free / 2**30:.1f} GiB free; choose smaller --sizes")
