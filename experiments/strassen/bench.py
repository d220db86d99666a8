"""Strassen-Winograd against the library GEMM: the speed-up experiment ``strassen-speedup``.

* ``strassen-speedup`` times, per size and level, the library GEMM and every
  configuration (schedule, CUDA streams or not, fused additions or not)
  interleaved in one group on the same operands in the same run, and stores the median time with the speed-up
  ``gemm / strassen``. This is the question the project asks: where, and at
  how many levels, does a schedule beat cuBLAS (or the CPU BLAS)?
* ``strassen-memory`` (:mod:`experiments.strassen.memory`) measures the extra
  memory against the model; the figures are in :mod:`experiments.strassen.figures`.

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

import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from gpu.backend import Backend
from gpu.strassen import Config, Executor, choose_plan, strassen_memory, top_support
from gpu.strassen.schedules import PLAN_SEPARATOR

from ..core.ascalled import time_called
from ..core.lab import HEADROOM, Operands, check_product, free_memory, time_group
from ..core.registry import Context, experiment
from ..core.summary import Check, Summary, Table, spread
from ..core.sweep import SweepOutcome
from ..core.timing import Comparison
from . import called
from .rows import DEFAULTS, EXPERIMENT, SpeedupRow, best_by_size, best_per_size, rum_crossover, speedup_table

DTYPE = "float64"

#: Stands for the per-level plan ``matmul(workspace="auto")`` would run at a point: each point's plan
#: within the memory left beside A, B and C (:func:`mix_config`), stored under the plan's own name.
MIX = "mix"
CONFIGS = (Config("rum"), Config("rum", fused=True), Config("rum2", parallel=True),
           Config("rum2", parallel=True, fused=True), Config("lai"), Config("otsuka"),
           Config("winograd", fused=True), Config("winograd", flat=True), Config(MIX, fused=True))
#: Replayed as CUDA graphs, where the backend has them (CuPy with nvmath-python).
GRAPH_CONFIGS = (Config("rum", fused=True, graph=True), Config("winograd", fused=True, graph=True),
                 Config("winograd", flat=True, graph=True), Config(MIX, fused=True, graph=True))
#: Timed only where named (``--configs``): Winograd with its additions on a second stream, which gained nothing
#: on the power-capped H100 (1.156x against winograd+fused's 1.150x at N = 16384, level 2, sustained).
NAMED_CONFIGS = (Config("winograd2", parallel=True, fused=True),)
NAMED_GRAPH_CONFIGS = (Config("winograd2", parallel=True, fused=True, graph=True),)


def method_order(methods: Iterable[str]) -> list[str]:
    """Methods in :data:`CONFIGS` order (graph configurations after), per-level plans and unknown ones last."""
    known = [c.name for c in CONFIGS + GRAPH_CONFIGS + NAMED_CONFIGS + NAMED_GRAPH_CONFIGS]
    present = set(methods)
    return [m for m in known if m in present] + sorted(present - set(known))


def configs_of(backend: Backend, names: Sequence[str] | None = None) -> tuple[Config, ...]:
    """The configurations a sweep on ``backend`` times: every one it can run, or those ``names``
    (ValueError naming the known ones for an unknown or unrunnable name)."""
    known = CONFIGS + (GRAPH_CONFIGS if backend.supports_graphs else ())
    if names is None:
        return known
    by_name = {c.name: c for c in known + NAMED_CONFIGS + (NAMED_GRAPH_CONFIGS if backend.supports_graphs else ())}
    unknown = [n for n in names if n not in by_name]
    if unknown or not names:
        raise ValueError(f"unknown configurations {unknown or '(none given)'} on the {backend.name} backend; "
                         f"known: {', '.join(by_name)}")
    return tuple(by_name[n] for n in dict.fromkeys(names))


@dataclass(frozen=True)
class Plan:
    """Sizes and levels of a speed-up sweep; schedules other than RUM are bounded to keep it short."""

    sizes: tuple[int, ...]
    levels: tuple[int, ...]
    min_bottom: int = 1          # skip levels whose bottom products are smaller than this
    others_max_level: int = 3    # schedules other than RUM: at most this level ...
    others_sizes: tuple[int, ...] | None = None   # ... and only at these sizes (None: all)
    configs: tuple[Config, ...] = CONFIGS


PLANS: dict[tuple[str, bool], Plan] = {
    ("cupy", False): Plan((4096, 5120, 6144, 7168, 8192, 12288, 16384, 24576, 32768, 49152), (1, 2, 3, 4),
                          min_bottom=256, others_sizes=(16384, 32768)),
    ("cupy", True): Plan((4096, 8192), (1, 2, 3), min_bottom=256, others_sizes=(8192,)),
    ("numpy", False): Plan((512, 1024, 2048), (1, 2, 3)),
    ("numpy", True): Plan((256, 512), (1, 2)),
}


# --------------------------------------------------------------------------- planning

@dataclass(frozen=True)
class Point:
    """One configuration at one size and level."""

    config: Config
    size: int
    level: int

    def params(self, dtype: str = DTYPE, regime: str = "sustained") -> dict[str, Any]:
        return point_params(self.size, self.level, self.config, dtype, regime)


def point_params(size: int, level: int, config: Config, dtype: str = DTYPE, regime: str = "sustained") -> dict:
    """The stored parameters of a configuration at (size, level) in a power regime; the GEMM of a
    group is ``Config("gemm")``. Both regimes of one point are kept side by side."""
    return {"size": int(size), "level": int(level), "schedule": config.schedule, "parallel": bool(config.parallel),
            "fused": bool(config.fused), "dtype": dtype, "regime": regime}


def config_bytes(config: Config, n: int, level: int, itemsize: int) -> int:
    """A, B, C and everything the timed product allocates (inputs overwritten, as timed)."""
    return strassen_memory(config.schedule, n, level, itemsize, overwrite_a=True, overwrite_b=True,
                           flat=config.flat).total


def in_plan(plan: Plan, config: Config, n: int, level: int) -> bool:
    """Whether the plan covers this point (memory aside)."""
    if n % 2**level or n // 2**level < plan.min_bottom:
        return False
    if not config.is_rum and config.schedule != MIX:
        return level <= plan.others_max_level and (plan.others_sizes is None or n in plan.others_sizes)
    return True


def plan_points(plan: Plan, free: int, itemsize: int) -> tuple[list[int], list[Point], int]:
    """Sizes whose operands fit, the points that fit in ``free`` bytes, and how many did not fit."""
    budget = HEADROOM * free
    sizes = [n for n in plan.sizes if 3 * n * n * itemsize <= budget]
    points, skipped = [], 0
    for n in sizes:
        for config in plan.configs:
            for level in plan.levels:
                timed = mix_config(config, n, level, budget, itemsize) if config.schedule == MIX else config
                if timed is None or not in_plan(plan, config, n, level):
                    continue
                if config_bytes(timed, n, level, itemsize) <= budget:
                    points.append(Point(timed, n, level))
                else:
                    skipped += 1
    return sizes, points, skipped


def mix_config(config: Config, n: int, level: int, budget: float, itemsize: int) -> Config | None:
    """The per-level plan at (n, level) within ``budget`` bytes in all, inputs overwritten as timed;
    None where that plan is a single schedule (timed under its own name already)."""
    workspace = max(0, int(budget) - 3 * n * n * itemsize)
    plan = choose_plan(n, n, n, level, workspace, fused=config.fused, itemsize=itemsize,
                       overwrite_a=True, overwrite_b=True)
    return replace(config, schedule=plan) if PLAN_SEPARATOR in plan else None


# --------------------------------------------------------------------------- timed work

def strassen_work(config: Config, level: int, ops: Operands):
    """``C = A B`` by ``level`` levels of the configuration, inputs overwritten as in the papers; a
    graph configuration is captured here (its buffers in the executor's arena) and replayed."""
    run = Executor(ops.backend, parallel=config.parallel, fused=config.fused, arena={} if config.graph else None,
                   flat=config.flat)
    support = top_support(ops.backend, config.schedule, level, ops.A, ops.B, True, True, run.buffer)

    def work() -> None:
        run.multiply(config.schedule, ops.A, ops.B, ops.C, level, support)

    return ops.backend.capture(work).launch if config.graph else work


def checked_works(ops: Operands, entries: Mapping[str, tuple[Config, int]]) -> tuple[dict[str, Any], dict[str, float]]:
    """The library GEMM (``"gemm"``) and each named (configuration, level) as timed work on ``ops``,
    each checked once against ``A (B x)``, with the relative errors. A wrong product raises
    RuntimeError before anything is timed or stored."""
    works: dict[str, Any] = {"gemm": lambda: ops.backend.gemm(ops.A, ops.B, ops.C)}
    errors = {}
    for name, (config, level) in entries.items():
        work = strassen_work(config, level, ops)
        errors[name] = check_product(ops, work, f"{config.name} at level {level} on N = {ops.size}")
        works[name] = work
    return works, errors


#: From this size on a batch of every configuration takes minutes: one warm-up round is taken (the
#: protocol's time budget then keeps to one batch, its stability recorded rather than re-measured).
LARGE = 32768


def protocol(n: int) -> dict[str, int]:
    return {"warmup": 1} if n >= LARGE else {}


def time_strassen(ops: Operands, works: Mapping[str, Any], regime: str = "sustained", **protocol_: int) -> Comparison:
    """``works`` interleaved with speed-ups over ``"gemm"``, A and B re-drawn before every sample."""
    return time_group(ops, works, "gemm", regime=regime, **(protocol_ or protocol(ops.size)))


SAMPLE_INPUTS = "re-drawn before every sample"


def measure_level(ctx: Context, ops: Operands, level: int, configs: Sequence[Config], dtype: str = DTYPE,
                  defaults: bool = False) -> int:
    """Time GEMM and every configuration at one (size, level), interleaved in one group with their public
    calls as called (:mod:`experiments.strassen.called`; with ``defaults``, the defaults' call too), and store
    each configuration with its speed-up over the GEMM of the same group and its as-called record."""
    n, entries = ops.size, {c.name: (c, level) for c in configs}
    works, errors = checked_works(ops, entries)
    public, reference = called.public_calls(ops, entries, defaults)
    if defaults:
        errors[DEFAULTS] = check_product(ops, public[DEFAULTS].fn, f"{public[DEFAULTS].text} on N = {n}")
    timed = time_called(ops, works, "gemm", public, reference, regime=ctx.regime, **protocol(n))
    result = timed.device
    gemm = result.timings["gemm"]
    ctx.db.add(ctx.run_id, EXPERIMENT, "gemm", point_params(n, level, Config("gemm"), dtype, ctx.regime),
               value=gemm.median, unit="s", samples=gemm.samples,
               meta={**gemm.meta(), "inputs": SAMPLE_INPUTS, "group_level": level, **timed.meta("gemm")})
    if defaults:
        called.store_defaults(ctx, n, timed, dtype, errors[DEFAULTS])
    for config in configs:
        timing = result.timings[config.name]
        ctx.db.add(ctx.run_id, EXPERIMENT, config.name, point_params(n, level, config, dtype, ctx.regime),
                   value=timing.median, unit="s", samples=timing.samples,
                   meta={**timing.meta(), "speedup": result.ratio(config.name), "gemm_s": gemm.median,
                         "gemm_samples": gemm.samples, "gemm_stable": gemm.stable,
                         "check_error": errors[config.name], "inputs": SAMPLE_INPUTS,
                         "allocation_policy": "pooled", **timed.meta(config.name)})
    return len(configs)


def sweep_size(ctx: Context, n: int, points: Sequence[Point], dtype: str = DTYPE,
               budget: float = float("inf")) -> SweepOutcome:
    """Every level at size ``n``: interleaved groups per level of the configurations not yet
    stored (all with ``--force``), sharing one set of operands, as few groups as fit in ``budget``
    bytes (:func:`groups_within`), each begun with the pool's cached blocks handed back: on the H100
    at N = 16384 the level-3 group died with an illegal address when it ran after the level-2 one in the
    same process (with about 40 GiB of that group's blocks cached), and ran when measured alone. Each
    group is stored as soon as it is measured, so an interrupted sweep resumes at the next missing group."""
    be, outcome, ops, done = ctx.backend, SweepOutcome(), None, False
    levels = sorted({p.level for p in points if p.size == n})
    try:
        for level in tqdm(levels, desc=f"{EXPERIMENT} N={n}", unit="level", disable=not ctx.progress,
                          file=sys.stderr, leave=False):
            configs = [p.config for p in points if p.size == n and p.level == level]
            missing = [c for c in configs if ctx.force or not ctx.db.has(
                EXPERIMENT, c.name, point_params(n, level, c, dtype, ctx.regime), ctx.env_key)]
            outcome.skipped += len(configs) - len(missing)
            for group in groups_within(missing, n, level, budget, np.dtype(dtype).itemsize):
                be.release_memory()
                ops = ops or Operands.uniform(be, n, dtype)
                first = not done and (ctx.force or not ctx.db.has(
                    EXPERIMENT, DEFAULTS, called.defaults_params(n, dtype, ctx.regime), ctx.env_key))
                outcome.measured += measure_level(ctx, ops, level, group, dtype, defaults=first)
                done = True
    finally:
        ops = None
        free_memory(be)
    return outcome


def groups_within(configs: Sequence[Config], n: int, level: int, budget: float, itemsize: int) -> list[list[Config]]:
    """``configs`` in order, cut into groups whose memory fits ``budget``: A, B, C and every
    configuration's extra bytes at once (a graph keeps its buffers for the whole group; at N = 16384,
    level 3, two flat Winograd configurations and the fused one need 79 GiB together, 48 apart).
    Each group times its own GEMM, so every ratio is still measured side by side."""
    out: list[list[Config]] = []
    used = base = 3 * n * n * itemsize
    for config in configs:
        extra = config_bytes(config, n, level, itemsize) - base
        if not out or used + extra > budget:
            out.append([])
            used = base
        out[-1].append(config)
        used += extra
    return out


# --------------------------------------------------------------------------- the experiment

@experiment(EXPERIMENT, "Strassen speed-up over the library GEMM by size, level and configuration")
def run_speedup(ctx: Context) -> Summary:
    counts, rows = run_plan(ctx, replace(PLANS[(ctx.backend.name, ctx.quick)], configs=configs_of(ctx.backend)))
    return speedup_summary(counts, rows)


def speedup_summary(counts: Mapping[str, Any], rows: Sequence[SpeedupRow]) -> Summary:
    """The best speed-up per size, every configuration by level at the largest size, and the
    verdict: does some configuration beat the library GEMM?"""
    best = best_by_size(rows)
    top = max(best.values(), key=lambda r: r.speedup, default=None)
    n = max(best, default=None)
    levels = sorted({r.level for r in rows if r.size == n})
    at_n = {(r.method, r.level): r.speedup for r in rows if r.size == n}
    methods = method_order(m for m, _ in at_n)
    return Summary(
        scope=f"N = {spread(best)}; levels {spread(sorted({r.level for r in rows}), 'levels')}; "
              f"{len({r.method for r in rows})} configurations; {DTYPE}",
        facts={k: counts[k] for k in ("points measured", "points already stored", "configurations left out (memory)",
                                      "sizes", "smallest size where RUM beats GEMM")},
        tables=[Table("best speed-up per size", ("N", "speed-up", "configuration", "level"),
                      [(size, r.speedup, r.method, r.level) for size, r in sorted(best.items())],
                      formats={"speed-up": ".3f"}),
                Table(f"speed-up over GEMM at N={n}", ("configuration", *(f"level {lv}" for lv in levels)),
                      [(m, *(at_n.get((m, lv)) for lv in levels)) for m in methods],
                      formats={f"level {lv}": ".3f" for lv in levels})],
        checks=[Check("Strassen-Winograd faster than the library GEMM (speed-up > 1) at a measured size",
                      f"best {top.speedup:.3f}x ({top.method}, level {top.level}, N = {top.size})" if top
                      else "no point measured", bool(top and top.speedup > 1) if top else None)])


def custom_plan(backend: Backend, sizes: Sequence[int] | None, levels: Sequence[int] | None,
                configs: Sequence[str] | None = None) -> Plan:
    """The backend's full plan with chosen sizes, levels and configurations (``gemmlab strassen``)."""
    base = PLANS[(backend.name, False)]
    for what, given in (("--sizes", sizes), ("--levels", levels)):
        if given is not None and not given:     # given but empty: an error, never the default
            raise ValueError(f"{what} is empty; give values such as 2,3 or leave it out for the default")
    for n in sizes or ():
        if n <= 0:
            raise ValueError(f"sizes must be positive, got {n}")
    if levels and not all(1 <= lv <= 10 for lv in levels):
        raise ValueError(f"levels must lie in 1..10, got {list(levels)}")
    return replace(base, sizes=tuple(sorted(set(sizes))) if sizes else base.sizes,
                   levels=tuple(sorted(set(levels))) if levels else base.levels,
                   configs=configs_of(backend, configs),
                   others_sizes=None if configs else base.others_sizes)   # named configurations run everywhere


def run_plan(ctx: Context, plan: Plan) -> tuple[dict[str, Any], list[SpeedupRow]]:
    """Measure (or resume) the points of ``plan``; a summary and the stored rows of its sizes."""
    be, itemsize = ctx.backend, np.dtype(DTYPE).itemsize
    free = free_memory(be)
    sizes, points, skipped = plan_points(plan, free, itemsize)
    if not sizes:
        raise ValueError(f"no {EXPERIMENT} size fits in the memory free on the {be.name} device")
    outcome = SweepOutcome()
    with be.allocation_policy("pooled"):
        for n in sizes:
            done = sweep_size(ctx, n, points, DTYPE, HEADROOM * free)
            outcome.measured += done.measured
            outcome.skipped += done.skipped
    rows = [r for r in speedup_table(ctx.db, ctx.env_key, DTYPE, ctx.regime)
            if r.size in sizes and r.level in plan.levels]
    return {
        "points measured": outcome.measured,
        "points already stored": outcome.skipped,
        "configurations left out (memory)": skipped,
        "sizes": ", ".join(map(str, sizes)),
        "best speed-up per size": best_per_size(rows),
        "smallest size where RUM beats GEMM": rum_crossover(rows),
    }, rows
