"""Strassen-Winograd against the library GEMM: speed-ups by size and level, and extra memory.

Two experiments and three figures, after the papers' Figs. 5.7, 3.10 and 3.11:

* ``strassen-speedup`` times, per size and level, the library GEMM and every
  configuration (schedule, CUDA streams or not, fused additions or not)
  interleaved in one group on the same operands in the same run, and stores the median time with the speed-up
  ``gemm / strassen``. This is the question the project asks: where, and at
  how many levels, does a schedule beat cuBLAS (or the CPU BLAS)?
* ``strassen-memory`` measures the peak bytes that ``gpu.strassen.matmul``
  allocates beyond A, B and C (inputs preserved, raw allocations, so RUM pays
  for its four support quadrants) and stores it beside the memory model of
  ``modeling.memory``, so the model can be checked against the allocator.

Timing with the papers' semantics
---------------------------------
RUM lends itself scratch space: at the top level its support quadrants alias
A11, A21, B11 and B12, so a product destroys those inputs (Otsuka's low level
overwrites inputs too). The timed work is therefore
``Executor.multiply(schedule, A, B, C, level, support)`` on preallocated
operands, with ``support`` the four aliased input quadrants for RUM (no
allocation at all) and None for the schedules that allocate their own
temporaries (Lai, Otsuka: that allocation is part of the method, as in the
papers; the CuPy memory pool is used, as a ``matmul`` caller gets by default).

Repeating such a product feeds its own scratch values back in as inputs, and
the values grow until they overflow. Inputs are therefore *re-drawn in place
before every sample, outside the timed region*. The protocol's only
per-sample ``setup`` refills A and B from a random generator (in row blocks
of at most :data:`REFILL_CHUNK_BYTES`, through ``out=``), then waits for the
device, so that no queued refill hides the host's launch overhead inside the
timed region; the cache is flushed where the calibration would. A pristine copy to copy
back from would cost as much time and an extra N x N matrix, which the largest
sizes cannot spare; re-drawing keeps memory at A, B and C (plus one chunk,
freed before the timer starts). Every sample, GEMM's included, starts from
fresh uniform [0, 1) operands; the warm-up runs (and a one-off check of each
configuration's product against ``A (B x)``) see grown but finite values.
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np
from tqdm.auto import tqdm

from gpu.backend import Array, Backend
from gpu.executor import Executor
from gpu.strassen import matmul, top_support
from modeling.memory import strassen_memory

from .calibration import HEADROOM, operand_bytes
from .database import ResultsDB
from .plotting import device_label, new_figure, plot_marked, save_figure
from .registry import Context, experiment, figure
from .sweep import Record, SweepOutcome, sweep
from .timing import Comparison, compare

EXPERIMENT = "strassen-speedup"
MEMORY_EXPERIMENT = "strassen-memory"
DTYPE = "float64"
#: Largest block of A or B re-drawn at once (CuPy's ``random(out=)`` draws into a temporary first).
REFILL_CHUNK_BYTES = 64 * 2**20
RUM_SCHEDULES = ("rum", "rum2")


@dataclass(frozen=True)
class Config:
    """One way to run a schedule: on CUDA streams or not, with fused additions or not."""

    schedule: str
    parallel: bool = False
    fused: bool = False

    @property
    def name(self) -> str:
        """The stored method name: ``rum``, ``rum+fused``, ``rum2-parallel+fused``, ..."""
        return self.schedule + ("-parallel" if self.parallel else "") + ("+fused" if self.fused else "")

    @property
    def is_rum(self) -> bool:
        return self.schedule in RUM_SCHEDULES


CONFIGS = (Config("rum"), Config("rum", fused=True), Config("rum2", parallel=True),
           Config("rum2", parallel=True, fused=True), Config("lai"), Config("otsuka"),
           Config("winograd", fused=True))


@dataclass(frozen=True)
class Plan:
    """Sizes and levels of a speed-up sweep; schedules other than RUM are bounded to keep it short."""

    sizes: tuple[int, ...]
    levels: tuple[int, ...]
    min_bottom: int = 1          # skip levels whose bottom products are smaller than this
    others_max_level: int = 3    # schedules other than RUM: at most this level ...
    others_sizes: tuple[int, ...] | None = None   # ... and only at these sizes (None: all)


PLANS: dict[tuple[str, bool], Plan] = {
    ("cupy", False): Plan((4096, 5120, 6144, 7168, 8192, 12288, 16384, 24576, 32768, 49152), (1, 2, 3, 4),
                          min_bottom=256, others_sizes=(16384, 32768)),
    ("cupy", True): Plan((4096, 8192), (1, 2, 3), min_bottom=256, others_sizes=(8192,)),
    ("numpy", False): Plan((512, 1024, 2048), (1, 2, 3)),
    ("numpy", True): Plan((256, 512), (1, 2)),
}

MEMORY_SCHEDULES = ("rum", "rum2", "lai", "otsuka", "winograd")
MEMORY_LEVELS = (1, 2, 3, 4)
MEMORY_SIZES: dict[tuple[str, bool], int] = {
    ("cupy", False): 8192, ("cupy", True): 4096, ("numpy", False): 256, ("numpy", True): 128,
}


# --------------------------------------------------------------------------- planning

@dataclass(frozen=True)
class Point:
    """One configuration at one size and level."""

    config: Config
    size: int
    level: int

    def params(self, dtype: str = DTYPE) -> dict[str, Any]:
        return point_params(self.size, self.level, self.config.schedule, self.config.parallel,
                            self.config.fused, dtype)


def point_params(size: int, level: int, schedule: str, parallel: bool, fused: bool,
                 dtype: str = DTYPE) -> dict[str, Any]:
    return {"size": int(size), "level": int(level), "schedule": schedule, "parallel": bool(parallel),
            "fused": bool(fused), "dtype": dtype}


def config_bytes(config: Config, n: int, level: int, itemsize: int) -> int:
    """A, B, C and everything the timed product allocates (inputs overwritten, as timed)."""
    return strassen_memory(config.schedule, n, level, itemsize, overwrite_a=True, overwrite_b=True).total


def in_plan(plan: Plan, config: Config, n: int, level: int) -> bool:
    """Whether the plan covers this point (memory aside)."""
    if n % 2**level or n // 2**level < plan.min_bottom:
        return False
    if not config.is_rum:
        return level <= plan.others_max_level and (plan.others_sizes is None or n in plan.others_sizes)
    return True


def plan_points(plan: Plan, free: int, itemsize: int) -> tuple[list[int], list[Point], int]:
    """Sizes whose operands fit, the points that fit in ``free`` bytes, and how many did not fit."""
    budget = HEADROOM * free
    sizes = [n for n in plan.sizes if 3 * n * n * itemsize <= budget]
    points, skipped = [], 0
    for n in sizes:
        for config in CONFIGS:
            for level in plan.levels:
                if not in_plan(plan, config, n, level):
                    continue
                if config_bytes(config, n, level, itemsize) <= budget:
                    points.append(Point(config, n, level))
                else:
                    skipped += 1
    return sizes, points, skipped


def free_memory(backend: Backend) -> int:
    """Free device bytes, after handing CuPy's cached pool blocks back to the driver.

    ``memory_info`` reports the driver's view, in which blocks cached by the
    pool (for instance from the calibration run before) look used.
    """
    pool = getattr(backend.xp, "get_default_memory_pool", None)
    if pool is not None:
        backend.synchronize()
        pool().free_all_blocks()
    return backend.memory_info()[0]


# --------------------------------------------------------------------------- operands

@dataclass
class Operands:
    """A, B and C of one size, and the generator that re-draws A and B in place."""

    A: Array
    B: Array
    C: Array
    rng: Any

    def refill(self) -> None:
        """New uniform [0, 1) values in A and B, drawn in row blocks (no full-size temporary)."""
        for M in (self.A, self.B):
            rows = max(1, REFILL_CHUNK_BYTES // (M.shape[1] * M.itemsize))
            for i in range(0, M.shape[0], rows):
                block = M[i:i + rows]
                self.rng.random(block.shape, dtype=M.dtype, out=block)


def allocate(backend: Backend, n: int, dtype: str = DTYPE, seed: int = 7) -> Operands:
    xp = backend.xp
    ops = Operands(xp.empty((n, n), dtype), xp.empty((n, n), dtype), xp.zeros((n, n), dtype),
                   xp.random.default_rng(seed))
    ops.refill()
    return ops


def refill_and_wait(backend: Backend, ops: Operands) -> Callable[[], None]:
    """The per-sample setup: fresh A and B, then an idle device, so that no queued refill
    hides the host's launch overhead inside the timed region."""
    def setup() -> None:
        ops.refill()
        backend.synchronize()
    return setup


def needs_flush(backend: Backend, ops: Operands) -> bool:
    """Flush the cache before samples where the calibration would (operands under twice its size)."""
    return operand_bytes(ops.A.shape[0], ops.A.dtype) < 2 * backend.cache_bytes()


# --------------------------------------------------------------------------- timed work

def strassen_work(backend: Backend, config: Config, level: int, ops: Operands) -> Callable[[], None]:
    """``C = A B`` by ``level`` levels of the configuration, inputs overwritten as in the papers."""
    run = Executor(backend, parallel=config.parallel, fused=config.fused)
    support = top_support(backend, config.schedule, level, ops.A, ops.B, overwrite_a=True, overwrite_b=True)
    return lambda: run.multiply(config.schedule, ops.A, ops.B, ops.C, level, support)


def product_error(backend: Backend, work: Callable[[], None], ops: Operands) -> float:
    """Relative error of ``C x`` against ``A (B x)`` after one run of ``work`` on fresh inputs."""
    ops.refill()
    x = ops.rng.random(ops.A.shape[1], dtype=ops.A.dtype)
    expected = ops.A @ (ops.B @ x)
    work()
    backend.synchronize()
    xp = backend.xp
    return float(xp.linalg.norm(ops.C @ x - expected) / xp.linalg.norm(expected))


def checked_works(backend: Backend, ops: Operands, n: int,
                  entries: Mapping[str, tuple[Config, int]]) -> tuple[dict[str, Callable[[], None]], dict[str, float]]:
    """The library GEMM (``"gemm"``) and each named (configuration, level) as timed work on ``ops``,
    each checked once against ``A (B x)``, with the relative errors. A wrong product raises
    RuntimeError before anything is timed or stored."""
    works = {"gemm": lambda: backend.gemm(ops.A, ops.B, ops.C)}
    errors = {}
    for name, (config, level) in entries.items():
        work = strassen_work(backend, config, level, ops)
        errors[name] = product_error(backend, work, ops)
        if not errors[name] <= np.finfo(ops.A.dtype).eps ** 0.5:
            raise RuntimeError(f"{config.name} at level {level} on N = {n} computed a wrong product "
                               f"(relative error {errors[name]:.2e}); nothing was stored for it")
        works[name] = work
    return works, errors


def time_group(backend: Backend, ops: Operands, works: Mapping[str, Callable[[], None]],
               **protocol: int) -> Comparison:
    """Time ``works`` interleaved, with speed-ups over ``"gemm"``; A and B are re-drawn before
    every sample and the cache flushed where the calibration would (``_protocol`` by default)."""
    setup = refill_and_wait(backend, ops)
    return compare(works, backend, baseline="gemm", flush=needs_flush(backend, ops),
                   setup={name: setup for name in works}, **(protocol or _protocol(ops.A.shape[0])))


def measure_level(ctx: Context, ops: Operands, n: int, level: int, configs: Sequence[Config],
                  dtype: str = DTYPE) -> int:
    """Time GEMM and every configuration at one (size, level), interleaved in one group,
    and store each configuration with its speed-up over the GEMM of the same group."""
    works, errors = checked_works(ctx.backend, ops, n, {c.name: (c, level) for c in configs})
    result = time_group(ctx.backend, ops, works)
    gemm = result.timings["gemm"]
    ctx.db.add(ctx.run_id, EXPERIMENT, "gemm", point_params(n, level, "gemm", False, False, dtype),
               value=gemm.median, unit="s", samples=gemm.samples,
               meta={**gemm.meta(), "inputs": "re-drawn before every sample", "group_level": level})
    for config in configs:
        timing = result.timings[config.name]
        ctx.db.add(ctx.run_id, EXPERIMENT, config.name,
                   point_params(n, level, config.schedule, config.parallel, config.fused, dtype),
                   value=timing.median, unit="s", samples=timing.samples,
                   meta={**timing.meta(), "speedup": result.ratio(config.name), "gemm_s": gemm.median,
                         "gemm_samples": gemm.samples, "gemm_stable": gemm.stable,
                         "check_error": errors[config.name], "inputs": "re-drawn before every sample",
                         "allocation_policy": "pooled"})
    return len(configs)


#: From this size on a batch of every configuration takes minutes: one warm-up round and one
#: batch are taken, and its stability is recorded rather than re-measured.
LARGE = 32768


def _protocol(n: int) -> dict[str, int]:
    return {"warmup": 1, "max_attempts": 1} if n >= LARGE else {}


def sweep_size(ctx: Context, n: int, points: Sequence[Point], dtype: str = DTYPE) -> SweepOutcome:
    """Every level at size ``n``: one interleaved group per level of the configurations not yet
    stored (all with ``--force``), sharing one set of operands. Each group is stored as soon
    as it is measured, so an interrupted sweep resumes at the next missing group."""
    be, outcome, ops = ctx.backend, SweepOutcome(), None
    levels = sorted({p.level for p in points if p.size == n})
    try:
        for level in tqdm(levels, desc=f"{EXPERIMENT} N={n}", unit="level", disable=not ctx.progress,
                          file=sys.stderr, leave=False):
            configs = [p.config for p in points if p.size == n and p.level == level]
            missing = [c for c in configs if ctx.force or not ctx.db.has(
                EXPERIMENT, c.name, point_params(n, level, c.schedule, c.parallel, c.fused, dtype), ctx.env_key)]
            outcome.skipped += len(configs) - len(missing)
            if missing:
                ops = ops or allocate(be, n, dtype)
                outcome.measured += measure_level(ctx, ops, n, level, missing, dtype)
    finally:
        ops = None
        free_memory(be)
    return outcome


# --------------------------------------------------------------------------- speed-up experiment

def speedup_table(db: ResultsDB, env_key: str, dtype: str | None = None) -> list[dict[str, Any]]:
    """Stored Strassen points of one environment (GEMM rows left out), smallest first."""
    rows = []
    for m in db.measurements(EXPERIMENT, env_key=env_key):
        p = m["params"]
        if m["method"] == "gemm" or (dtype is not None and p["dtype"] != dtype):
            continue
        rows.append({"method": m["method"], "size": p["size"], "level": p["level"],
                     "schedule": p["schedule"], "dtype": p["dtype"], "time_s": m["value"],
                     "speedup": m["meta"]["speedup"], "gemm_s": m["meta"]["gemm_s"],
                     "stable": bool(m["meta"].get("stable", True))})
    return sorted(rows, key=lambda r: (r["size"], r["method"], r["level"]))


def best_per_size(rows: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    best: dict[int, Mapping[str, Any]] = {}
    for r in rows:
        if r["size"] not in best or r["speedup"] > best[r["size"]]["speedup"]:
            best[r["size"]] = r
    return {f"N={n}": f"{r['speedup']:.3f}x ({r['method']}, level {r['level']})"
            for n, r in sorted(best.items())}


def rum_crossover(rows: Iterable[Mapping[str, Any]]) -> int | None:
    """Smallest size at which some RUM configuration beats GEMM."""
    wins = [r["size"] for r in rows if r["schedule"] in RUM_SCHEDULES and r["speedup"] > 1]
    return min(wins, default=None)


@experiment(EXPERIMENT, "Strassen speed-up over the library GEMM by size, level and configuration")
def run_speedup(ctx: Context) -> dict[str, Any]:
    return run_plan(ctx, PLANS[(ctx.backend.name, ctx.quick)])[0]


def custom_plan(backend: Backend, sizes: Sequence[int] | None, levels: Sequence[int] | None) -> Plan:
    """The backend's full plan with chosen sizes and levels (``gemmlab strassen``)."""
    base = PLANS[(backend.name, False)]
    for n in sizes or ():
        if n <= 0:
            raise ValueError(f"sizes must be positive, got {n}")
    if levels and not all(1 <= lv <= 10 for lv in levels):
        raise ValueError(f"levels must lie in 1..10, got {list(levels)}")
    return replace(base, sizes=tuple(sorted(set(sizes))) if sizes else base.sizes,
                   levels=tuple(sorted(set(levels))) if levels else base.levels)


def run_plan(ctx: Context, plan: Plan) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Measure (or resume) the points of ``plan``; a summary and the stored rows of its sizes."""
    be, itemsize = ctx.backend, np.dtype(DTYPE).itemsize
    sizes, points, skipped = plan_points(plan, free_memory(be), itemsize)
    if not sizes:
        raise ValueError(f"no {EXPERIMENT} size fits in the memory free on the {be.name} device")
    outcome = SweepOutcome()
    with be.allocation_policy("pooled"):
        for n in sizes:
            done = sweep_size(ctx, n, points, DTYPE)
            outcome.measured += done.measured
            outcome.skipped += done.skipped
    rows = [r for r in speedup_table(ctx.db, ctx.env_key, DTYPE)
            if r["size"] in sizes and r["level"] in plan.levels]
    return {
        "points measured": outcome.measured,
        "points already stored": outcome.skipped,
        "configurations left out (memory)": skipped,
        "sizes": ", ".join(map(str, sizes)),
        "best speed-up per size": best_per_size(rows),
        "smallest size where RUM beats GEMM": rum_crossover(rows),
    }, rows


# --------------------------------------------------------------------------- memory experiment

def memory_model(schedule: str, n: int, level: int, itemsize: int) -> int:
    """Model bytes beyond A, B and C with inputs preserved (what ``matmul`` does by default)."""
    return strassen_memory(schedule, n, level, itemsize, overwrite_a=False, overwrite_b=False).extra


def measure_memory(backend: Backend, params: Mapping[str, Any], methods: Sequence[str]) -> dict[str, Record]:
    """Peak bytes allocated by ``matmul`` (inputs preserved) per schedule, raw allocations."""
    n, level, dtype = params["size"], params["level"], np.dtype(params["dtype"])
    A, B = backend.random((n, n), dtype, seed=1), backend.random((n, n), dtype, seed=2)
    C = backend.xp.zeros((n, n), dtype)
    records = {}
    with backend.allocation_policy("raw"):
        for schedule in methods:
            product = partial(matmul, A, B, out=C, level=level, schedule=schedule, overwrite_a=False,
                              overwrite_b=False, backend=backend)
            product()  # warm-up: one-time caches (schedule analyses, kernels) stay out of the peak
            backend.synchronize()
            with backend.track_allocations() as report:
                product()
                backend.synchronize()
            model = memory_model(schedule, n, level, dtype.itemsize)
            records[schedule] = Record(float(report.peak_bytes), "B", meta={
                "model_bytes": model, "model": strassen_memory(
                    schedule, n, level, dtype.itemsize, overwrite_a=False, overwrite_b=False).as_dict(),
                "exact": report.exact, "allocations": report.count, "allocation_policy": "raw",
                "device_free": report.device_free, "device_total": report.device_total})
    return records


def memory_schedules(n: int, level: int, free: int, itemsize: int) -> list[str]:
    """Schedules whose product (inputs preserved) fits in free memory at this level."""
    return [s for s in MEMORY_SCHEDULES
            if strassen_memory(s, n, level, itemsize, overwrite_a=False, overwrite_b=False).total
            <= HEADROOM * free]


def memory_table(db: ResultsDB, env_key: str) -> list[dict[str, Any]]:
    rows = [{"schedule": m["method"], "size": m["params"]["size"], "level": m["params"]["level"],
             "dtype": m["params"]["dtype"], "measured": m["value"], "model": m["meta"]["model_bytes"],
             "exact": bool(m["meta"].get("exact", False))}
            for m in db.measurements(MEMORY_EXPERIMENT, env_key=env_key)]
    return sorted(rows, key=lambda r: (r["size"], r["schedule"], r["level"]))


@experiment(MEMORY_EXPERIMENT, "Extra memory of Strassen schedules: allocator peak against the model")
def run_memory(ctx: Context) -> dict[str, Any]:
    be, itemsize = ctx.backend, np.dtype(DTYPE).itemsize
    n, free = MEMORY_SIZES[(be.name, ctx.quick)], free_memory(be)
    outcome = SweepOutcome()
    for level in MEMORY_LEVELS:
        schedules = memory_schedules(n, level, free, itemsize)
        if schedules:
            done = sweep(ctx, MEMORY_EXPERIMENT, [{"size": n, "level": level, "dtype": DTYPE}], schedules,
                         partial(measure_memory, be), desc=f"{MEMORY_EXPERIMENT} L={level}")
            outcome.measured += done.measured
            outcome.skipped += done.skipped
    rows = [r for r in memory_table(ctx.db, ctx.env_key) if r["size"] == n and r["dtype"] == DTYPE]
    top = max((r["level"] for r in rows), default=0)
    scale, unit = byte_unit(max((max(r["measured"], r["model"]) for r in rows), default=0))
    return {
        "points measured": outcome.measured,
        "points already stored": outcome.skipped,
        "size": n,
        f"measured / model extra memory at level {top}": {
            r["schedule"]: f"{r['measured'] / scale:.3f} / {r['model'] / scale:.3f} {unit}"
            for r in rows if r["level"] == top},
    }


# --------------------------------------------------------------------------- figures

def byte_unit(largest: float) -> tuple[float, str]:
    """A scale and unit name that keeps ``largest`` readable (GiB for GPU-sized products)."""
    for scale, unit in ((2**30, "GiB"), (2**20, "MiB")):
        if largest >= scale / 10:
            return scale, unit
    return 2**10, "KiB"


def method_order(methods: Iterable[str]) -> list[str]:
    """Methods in CONFIGS order, unknown ones after."""
    known = [c.name for c in CONFIGS]
    present = set(methods)
    return [m for m in known if m in present] + sorted(present - set(known))


def _grouped(db: ResultsDB, table: Callable[[ResultsDB, str], list[dict[str, Any]]],
             by: Callable[[dict[str, Any]], Any]) -> dict[tuple[str, Any], list[dict[str, Any]]]:
    """Rows of every environment (most recent first), grouped by (env_key, by(row))."""
    groups: dict[tuple[str, Any], list[dict[str, Any]]] = {}
    for key in db.env_keys():
        mine: dict[Any, list[dict[str, Any]]] = defaultdict(list)
        for row in table(db, key):
            mine[by(row)].append(row)
        groups.update({(key, value): mine[value] for value in sorted(mine)})
    return groups


def _size_axis(ax: Any, sizes: Sequence[int]) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(set(sizes)))
    ax.set_xticklabels([str(n) for n in sorted(set(sizes))], rotation=45, fontsize=7)
    ax.minorticks_off()


@figure(EXPERIMENT, "Strassen speed-up over GEMM against N, one line per level, one panel per configuration")
def render_speedup(db: ResultsDB, out_dir: Path) -> list[Path]:
    groups = _grouped(db, speedup_table, lambda r: r["dtype"])
    if not groups:
        return []
    methods = method_order(r["method"] for rows in groups.values() for r in rows)
    fig, axes = new_figure(len(groups), len(methods), width=3.1 * len(methods), height=3.0 * len(groups))
    axes = np.array(axes, dtype=object).reshape(len(groups), len(methods))
    for row_axes, ((key, dtype), rows) in zip(axes, groups.items()):
        device = device_label(db, key)
        for ax, method in zip(row_axes, methods):
            mine = [r for r in rows if r["method"] == method]
            ax.set_title(f"{method}\n{device} {dtype}", fontsize=8)
            ax.axhline(1.0, color="black", lw=0.8, ls=":")
            for level in sorted({r["level"] for r in mine}):
                pts = [r for r in mine if r["level"] == level]
                plot_marked(ax, [r["size"] for r in pts], [r["speedup"] for r in pts], [r["stable"] for r in pts],
                      "o-", label=f"level {level}")
            if mine:
                _size_axis(ax, [r["size"] for r in mine])
                ax.legend(fontsize=7)
            ax.set(xlabel="N", ylabel="speed-up over GEMM")
            ax.grid(True, alpha=0.3)
    fig.suptitle("Strassen-Winograd speed-up over the library GEMM (interleaved timings; "
                 "hollow: unstable batch)", fontsize=9)
    return save_figure(fig, out_dir, EXPERIMENT)


def level_curves(rows: Sequence[Mapping[str, Any]]) -> dict[str, tuple[int, list[tuple[int, float, float]]]]:
    """Per method: its largest stored N and (level, time s, speed-up) there, GEMM as level 0."""
    curves = {}
    for method in method_order(r["method"] for r in rows):
        mine = [r for r in rows if r["method"] == method]
        n = max(r["size"] for r in mine)
        at_n = sorted((r for r in mine if r["size"] == n), key=lambda r: r["level"])
        gemm = statistics.median(r["gemm_s"] for r in at_n)
        curves[method] = (n, [(0, gemm, 1.0)] + [(r["level"], r["time_s"], r["speedup"]) for r in at_n])
    return curves


@figure("strassen-level", "Strassen time and speed-up against level at the largest stored N, per configuration")
def render_level(db: ResultsDB, out_dir: Path) -> list[Path]:
    groups = _grouped(db, speedup_table, lambda r: r["dtype"])
    if not groups:
        return []
    fig, axes = new_figure(len(groups), 2, width=11, height=4.0 * len(groups))
    axes = np.array(axes, dtype=object).reshape(len(groups), 2)
    for (ax_t, ax_s), ((key, dtype), rows) in zip(axes, groups.items()):
        device = device_label(db, key)
        for method, (n, pts) in level_curves(rows).items():
            levels, times, speedups = zip(*pts)
            line, = ax_t.plot(levels, [1e3 * t for t in times], "o-", label=f"{method} (N={n})")
            ax_s.plot(levels, speedups, "o-", color=line.get_color(), label=f"{method} (N={n})")
        ax_t.set(xlabel="level (0: GEMM)", ylabel="time (ms)", title=f"time against level, {device} {dtype}")
        ax_t.set_yscale("log")
        ax_s.axhline(1.0, color="black", lw=0.8, ls=":")
        ax_s.set(xlabel="level (0: GEMM)", ylabel="speed-up over GEMM",
                 title=f"speed-up against level, {device} {dtype}")
        for ax in (ax_t, ax_s):
            ax.xaxis.get_major_locator().set_params(integer=True)
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=7)
    return save_figure(fig, out_dir, "strassen-level")


@figure(MEMORY_EXPERIMENT, "Measured peak extra memory against the model, by level, one line per schedule")
def render_memory(db: ResultsDB, out_dir: Path) -> list[Path]:
    groups = _grouped(db, memory_table, lambda r: (r["size"], r["dtype"]))
    if not groups:
        return []
    fig, axes = new_figure(1, len(groups), width=5.5 * len(groups), height=4.4)
    axes = np.array(axes, dtype=object).reshape(-1)
    for ax, ((key, (n, dtype)), rows) in zip(axes, groups.items()):
        scale, unit = byte_unit(max(max(r["measured"], r["model"]) for r in rows))
        for schedule in [s for s in MEMORY_SCHEDULES if any(r["schedule"] == s for r in rows)] + sorted(
                {r["schedule"] for r in rows} - set(MEMORY_SCHEDULES)):
            pts = sorted((r for r in rows if r["schedule"] == schedule), key=lambda r: r["level"])
            levels = [r["level"] for r in pts]
            line, = ax.plot(levels, [r["measured"] / scale for r in pts], "o-", label=f"{schedule} measured")
            ax.plot(levels, [r["model"] / scale for r in pts], "x--", color=line.get_color(),
                    label=f"{schedule} model")
        exact = "exact allocator count" if all(r["exact"] for r in rows) else "tracker peak, incl. library overheads"
        ax.set(xlabel="level", ylabel=f"extra memory beyond A, B, C ({unit})",
               title=f"{device_label(db, key)}, N={n} {dtype}\n({exact})")
        ax.title.set_fontsize(8)
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
    return save_figure(fig, out_dir, MEMORY_EXPERIMENT)
