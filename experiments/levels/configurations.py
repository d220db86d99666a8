"""``gemmlab calibrate --configurations``: the configurations a default Strassen call may choose, timed as called.

At each size of the sweep, DGEMM (the backend's library GEMM) and every candidate configuration that applies
there (:func:`candidates_at`) are timed interleaved in one group by the protocol
(:mod:`experiments.core.timing`: warm-up, samples rotated between methods, the power regime's settling and
each sample's NVML telemetry), on one set of uniform [0, 1) operands, each candidate as a user calls it:
``gpu.strassen.matmul(A, B, out=C, options=...)``, host work included, its plan kept across calls. A sample
issues its calls back to back for about 20 ms of DGEMM's time (one call from 20 ms up), as a loop of
products runs, so the host's dispatch counts where it outlasts the device's work. Samples: the protocol's 10
where one DGEMM takes at most :data:`LONG_S`; :data:`FEW` above (N = 32768 and 49152 of the defaults, at the
H200's 52 TFLOP/s), with one warm-up round, and one batch at every size, so that the H200's default sweep
takes about 6 minutes (370 s by :func:`estimate`, which the command prints first); the stored record keeps
the count. Sizes run in ascending order, back to back, so the
device is already at its sustained clock: a group settles for 3 to 10 s (one round where a round is longer).
Each candidate's product is checked once against ``A (B x)`` before it is timed.

Candidates (:data:`CANDIDATES`): the configurations that measured fastest on the H200 (Winograd flat at 1-3
levels as a graph, flat level 3 eager, RUM with fused additions at 1-3 levels, and the level-4 per-level plans
``lai7/winograd`` and ``rum/rum/winograd`` fused), each where its bottom products lie within
:data:`BOTTOM` (the measured winners' bottoms: 1024-6144 on a GPU) and its memory fits beside A, B and C, at
most :data:`MOST` per size. Without CUDA graphs (no nvmath-python) each graph configuration is timed eagerly.
Every row is stored (:data:`EXPERIMENT`); the device profile's configurations section is written from them
(:func:`experiments.levels.profile.configuration_section`).

A plan keeps its workspace while the group interleaves its configurations, so a size whose candidates' memory
does not fit beside each other (two flat level-3 products at N = 24576 take 73 GB each) is timed in several
groups (:func:`groups`), each with its own DGEMM: a speed-up is always over the DGEMM of its own group.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from tqdm.auto import tqdm

from gpu.backend import Backend
from gpu.strassen import Configuration, Options, forget, matmul, matmul_memory
from gpu.strassen.decide import Product, runs

from ..core.lab import HEADROOM, Operands, check_product, free_memory, operand_bytes, time_group
from ..core.regime import COLD, Regime
from ..core.registry import Context
from ..core.timing import FEWEST_REPEATS, MIN_REPEATS, Comparison, call_seconds
from .auto import calls_for

EXPERIMENT = "strassen-configurations"
DTYPE = "float64"
CANDIDATES = tuple(Configuration.parse(name) for name in (
    "L1:winograd+flat+graph", "L2:winograd+flat+graph", "L3:winograd+flat+graph", "L3:winograd+flat",
    "L1:rum+fused", "L2:rum+fused", "L3:rum+fused", "L4:lai7/winograd+fused", "L4:rum/rum/winograd+fused"))
#: Bottom-product sizes (N / 2^level) a candidate is timed at, per backend.
BOTTOM = {"cupy": (1024, 6144), "numpy": (32, 128)}
#: The default sizes: a GPU's cover 2048-49152 (below 2048 no candidate's bottom reaches 1024: level 0 there);
#: 40960 is left out (102 s of the H200's estimate: the chooser takes the lower of 32768's and 49152's there).
SIZES = {"cupy": (2048, 3072, 4096, 5120, 6144, 8192, 10240, 12288, 16384, 20480, 24576, 32768, 49152),
         "numpy": (128, 192, 256, 384, 512)}
MOST = 8
#: DGEMM's sustained rate on the H200 (52 TFLOP/s at N = 32768 and 49152), for the estimate.
RATE = 52e12
#: One DGEMM longer than this (seconds) takes FEW samples, one warm-up round and one batch.
LONG_S, FEW = 1.0, FEWEST_REPEATS
SUSTAINED = Regime("sustained", settle_min_s=3.0, settle_max_s=10.0)
#: Seconds a new configuration's first call costs (kernels compiled, a graph captured), for the estimate.
FIRST_CALL_S = 2.0


def candidates_at(backend: str, n: int, free: float, graphs: bool,
                  chosen: Sequence[Configuration] = CANDIDATES) -> list[Configuration]:
    """The candidates timed at size ``n`` (see the module notes): graph configurations eagerly where there
    are no graphs; ``free``: bytes free for A, B, C and the product's memory."""
    lo, hi = BOTTOM[backend]
    product = Product(n, n, n, DTYPE, 0, False, False)
    out: list[Configuration] = []
    for c in chosen:
        c = c if graphs or not c.graph else replace(c, graph=False)
        memory = matmul_memory(c.schedule, n, n, n, c.level, 8, flat=c.flat).total
        if c in out or not lo <= n // 2**c.level <= hi or not runs(c, product, "peel") or memory > HEADROOM * free:
            continue
        out.append(c)
    return out[:MOST]


def plan(backend: Backend, sizes: Sequence[int] | None, names: Sequence[str] | None = None,
         free: float | None = None) -> dict[int, list[Configuration]]:
    """Sizes to time (ascending; the backend's defaults unless given) and the candidates at each; ValueError
    for a bad size or candidate name before anything is measured."""
    chosen = CANDIDATES if not names else tuple(Configuration.parse(name) for name in names)
    if any(not c.level for c in chosen):
        raise ValueError("DGEMM is timed at every size; name configurations with a level of 1 or more")
    sizes = sorted(set(sizes)) if sizes else list(SIZES[backend.name])
    if not sizes or min(sizes) <= 0:
        raise ValueError(f"sizes must be positive integers, got {sizes}")
    free = backend.memory_info()[0] if free is None else free
    fits = [n for n in sizes if operand_bytes(n) <= HEADROOM * free]
    return {n: candidates_at(backend.name, n, free, backend.supports_graphs, chosen) for n in fits}


def workspace(c: Configuration, n: int) -> int:
    """Bytes configuration ``c``'s plan holds at size n beyond A, B and C (inputs kept, as a user calls it)."""
    return matmul_memory(c.schedule, n, n, n, c.level, 8, flat=c.flat).extra


def groups(n: int, configs: Sequence[Configuration], free: float) -> list[list[Configuration]]:
    """``configs`` in groups whose workspaces fit together beside A, B and C in ``free`` bytes, the largest
    placed first (first fit), each group in the catalogue's order."""
    budget = HEADROOM * free - operand_bytes(n)
    out: list[list[Configuration]] = []
    for c in sorted(configs, key=lambda c: -workspace(c, n)):
        home = next((g for g in out if sum(workspace(x, n) for x in g) + workspace(c, n) <= budget), None)
        if home is None:
            out.append(home := [])
        home.append(c)
    return [sorted(g, key=list(configs).index) for g in out]


@dataclass(frozen=True)
class Estimate:
    """Seconds a plan takes at ``rate`` FLOP/s of DGEMM (every configuration priced as DGEMM), in all and per
    size, with how it was priced."""

    seconds: float
    per_size: dict[int, float]
    how: str


def protocol(gemm_s: float) -> dict[str, int]:
    """Samples, warm-up rounds, least samples and batches of a group where one DGEMM takes ``gemm_s``."""
    if gemm_s > LONG_S:
        return {"repeats": FEW, "warmup": 1, "least": FEW, "max_attempts": 1}
    return {"repeats": MIN_REPEATS, "warmup": 2, "least": MIN_REPEATS, "max_attempts": 1}


def estimate(planned: Mapping[int, Sequence[Configuration]], free: float, rate: float = RATE) -> Estimate:
    """The duration of ``planned`` (see :class:`Estimate`) on a device with ``free`` bytes: per group of each
    size (:func:`groups`), the warm-up and sampled rounds of DGEMM and its candidates (each sample
    :func:`~experiments.levels.auto.calls_for` calls), the settling (3 s, at most 10 s or one round) and a
    checked call per candidate; and each configuration's first call once."""
    per_size, seen = {}, set()
    for n, configs in planned.items():
        gemm_s = max(2.0 * n**3 / rate, 1e-5)
        p, total = protocol(gemm_s), 0.0
        for group in groups(n, configs, free) if configs else []:
            round_s = (1 + len(group)) * calls_for(gemm_s) * gemm_s
            settle = min(max(SUSTAINED.settle_min_s, 3 * round_s), SUSTAINED.settle_max_s + round_s)
            total += (p["warmup"] + p["repeats"]) * round_s + settle + 2 * len(group) * gemm_s
        per_size[n] = total + FIRST_CALL_S * len(set(configs) - seen)
        seen |= set(configs)
    return Estimate(sum(per_size.values()), per_size,
                    f"DGEMM at {rate / 1e12:.0f} TFLOP/s, every configuration priced as DGEMM, {FIRST_CALL_S:.0f} s "
                    "for each configuration's first call")


def params(n: int, c: Configuration, regime: str) -> dict[str, Any]:
    """The stored parameters of configuration ``c`` (level 0: DGEMM) at size n."""
    return {"size": int(n), "level": c.level, "schedule": c.schedule if c.level else "gemm", "parallel": False,
            "fused": c.fused, "flat": c.flat, "graph": c.graph, "dtype": DTYPE, "regime": regime}


def options(c: Configuration) -> Options:
    """The options a user passes to run ``c``."""
    return Options(level=c.level, schedule=c.schedule, fused=c.fused, flat=c.flat, graph=c.graph)


def stored(ctx: Context, n: int, configs: Sequence[Configuration]) -> bool:
    return not ctx.force and all(ctx.db.has(EXPERIMENT, c.name, params(n, c, ctx.regime), ctx.env_key)
                                 for c in configs)


def measure_group(ctx: Context, n: int, configs: Sequence[Configuration]) -> Comparison:
    """Time DGEMM and ``configs`` at size n in one group and store every row (see the module notes)."""
    be = ctx.backend
    ops = Operands.uniform(be, n)
    works = {"L0": lambda: be.gemm(ops.A, ops.B, ops.C)}
    errors = {}
    for c in configs:
        o = options(c)
        works[c.name] = lambda o=o: matmul(ops.A, ops.B, out=ops.C, options=o, backend=be)
        errors[c.name] = check_product(ops, works[c.name], f"{c.name} on N = {n}")
    gemm_s = call_seconds(be, works["L0"])
    calls, p = calls_for(gemm_s), protocol(gemm_s)
    regime = SUSTAINED if ctx.regime == "sustained" else COLD
    result = time_group(ops, works, "L0", refill=False, regime=regime, calls=calls, **p)
    gemm = result.timings["L0"]
    note = (f"{p['repeats']} samples of {calls} calls back to back ({FEW} where one DGEMM takes over {LONG_S:g} s), "
            f"{p['warmup']} warm-up rounds, one batch")
    for c in [Configuration(), *configs]:
        timing = result.timings[c.name]
        ctx.db.add(ctx.run_id, EXPERIMENT, c.name, params(n, c, ctx.regime), value=timing.median, unit="s",
                   samples=timing.samples,
                   meta={**timing.meta(), "speedup": result.ratio(c.name), "gemm_s": gemm.median,
                         "gemm_samples": gemm.samples, "calls_per_sample": calls, "protocol": note,
                         "check_error": errors.get(c.name), "call": call_text(c), "allocation_policy": "pooled"})
    return result


def call_text(c: Configuration) -> str:
    """The call timed, as text for the stored record."""
    if not c.level:
        return "backend.gemm(A, B, C) (the library GEMM)"
    return f"gpu.strassen.matmul(A, B, out=C, options={options(c)!r})"


def calibrate_configurations(ctx: Context, planned: Mapping[int, Sequence[Configuration]]) -> list[dict[str, Any]]:
    """Measure (or resume) ``planned``: one group per size not stored (every size with ``ctx.force``), plans and
    pooled memory handed back between sizes; a row per size (its DGEMM time and each speed-up)."""
    rows = []
    for n in tqdm(list(planned), desc=EXPERIMENT, unit="size", disable=not ctx.progress, file=sys.stderr,
                  leave=False):
        free = free_memory(ctx.backend)
        for group in groups(n, planned[n], free) if planned[n] else []:
            if stored(ctx, n, group):
                continue
            try:
                result = measure_group(ctx, n, group)
            finally:
                forget()                               # the kept plans hold their workspaces
                free_memory(ctx.backend)
            rows.append({"size": n, "gemm_s": result.timings["L0"].median,
                         "samples": len(result.timings["L0"].samples),
                         "speedups": {c.name: round(result.ratio(c.name), 4) for c in group}})
    return rows


def describe(planned: Mapping[int, Sequence[Configuration]], est: Estimate) -> str:
    """The plan and its estimate, as the command prints them before measuring."""
    lines = [f"N = {n}: {', '.join(c.name for c in configs) or 'none (level 0)'} (~{est.per_size[n]:.0f} s)"
             for n, configs in planned.items()]
    return "\n".join(lines + [f"estimated time: {est.seconds:.0f} s ({math.ceil(est.seconds / 60)} min; {est.how})"])
