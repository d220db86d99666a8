"""``gemmlab calibrate --methods``: every front-door method timed as called beside the library GEMM at a grid of
shapes, stored, and written into this device's profile as its ``methods`` section (:mod:`gpu.frontdoor.table`).

The front door ranks by that section: on a device the package ships no measurements for, a calibration is what lets
it take Ozaki scheme II on large squares or split-K on tiny outputs (the transfer model carries split-K only between
GPUs of one kernel, and its Ozaki predictions are conservative). Each shape is one interleaved group (the library
GEMM as called, the baseline; each method through its own family plan, ``plan.execute(A, B)`` as a kept plan runs;
the timing of :func:`experiments.frontdoor.bench.time_point`): Ozaki II at ``moduli="auto"`` with the DGEMM target
(plain, and over one and two Winograd levels: the front door takes a level where it measured faster), Ozaki I at the
DGEMM target on INT8 slices, split-K deterministic and atomic where its own test lets it run. A method whose family
refuses the shape (split-K on a square, a workspace that does not fit, a level that would run its passes: the front
door's :func:`~gpu.frontdoor.frontplan.refuse_passes`) is left out of that point.

**Screening.** After each call's check, one more warm call of each method is timed beside one of the library
GEMM's (:func:`screen`). A method slower than :data:`~experiments.frontdoor.groups.SLOWEST` of the library
GEMM's speed there is recorded from that call (``"screened": true``, one sample) and left out of the interleaved
group: the front door never takes it, and a finer ratio changes nothing. On the H200 the whole default grid did
not finish in 470 s without it (Ozaki I took 1.4 s a call at 16 x 2^24 x 16, the library GEMM 1 ms).

Rows are stored per shape, the library GEMM's last, so an interrupted calibration measures only the shapes
whose library row is missing; the profile's section is rebuilt from every stored row of this environment and
regime, so a resumed run writes the same section a whole one would. Entries the profile held for shapes or
methods this database never timed are kept beside them (:func:`merged`): a calibration of a few more shapes
adds to the profile, never takes from it.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from functools import partial
from typing import Any

from gpu.frontdoor import Ranked
from gpu.frontdoor.complexmm import DTYPE as COMPLEX_DTYPE
from gpu.frontdoor.complexmm import ComplexPlan
from gpu.frontdoor.frontplan import family_plan
from gpu.frontdoor.table import COMPLEX_METHODS as COMPLEX
from gpu.frontdoor.table import Timed, legacy_config
from gpu.profile import bundled_profile, device_name, load_profile, profile_path, save_profile

from ..core.ascalled import Call, wall_seconds
from ..core.regime import of_regime
from ..core.registry import Context
from ..core.sweep import group_sweep
from .bench import time_point
from .errors import SEED, TIME_PHI, phi_inputs
from .groups import REFUSALS, SLOWEST, FrontOperands, Group, check_calls
from .points import Plan, Shape, fitting_points, shape_text

EXPERIMENT = "methods-calibration"
LIBRARY = "library"
#: The methods a calibration times: the calls the front door's candidates make, and whether each waits (Ozaki
#: II's ``moduli="auto"`` decides its count on the device on a repeated call: :mod:`gpu.ozaki2.deferred`).
METHODS = ((Timed.of("ozaki2", {"moduli": "auto", "target": "dgemm"}), False),
           *((Timed.of("ozaki2", {"moduli": "auto", "target": "dgemm", "level": level}), False) for level in (1, 2)),
           (Timed.of("ozaki", {"slice_format": "int8", "target": "dgemm"}), True),
           (Timed.of("splitk", {"deterministic": True}), False),
           (Timed.of("splitk", {"deterministic": False}), False))
#: Shapes by backend: squares across the sizes where methods trade places, and split-K's tiny outputs.
SHAPES = {"cupy": ((2048,) * 3, (4096,) * 3, (8192,) * 3, (16384,) * 3, (16, 2**20, 16), (64, 2**20, 64),
                   (16, 2**24, 16), (64, 2**24, 64)),
          "numpy": ((96,) * 3, (8, 4096, 8))}
#: The complex methods, timed beside the complex library GEMM on complex operands at :data:`COMPLEX_SHAPES`
#: (their points say ``"dtype": "complex128"``): Ozaki II's default 2M over the Gaussian moduli, its 3M over the
#: residues and its 4M through the real plans.
COMPLEX_METHODS = tuple((Timed.of("ozaki2c", {"moduli": "auto", "target": "dgemm", "scheme": s}), True)
                        for s in ("2m", "3m", "4m"))
COMPLEX_SHAPES = {"cupy": ((4096,) * 3, (8192,) * 3, (16384,) * 3), "numpy": ((64,) * 3,)}


def screen(be: Any, group: Group, reference: Call) -> dict[str, dict[str, Any]]:
    """The methods of ``group`` slower than :data:`SLOWEST` of the library GEMM's speed on one warm call each
    (the calls are warm: :func:`check_calls` made each once), taken out of ``group.public``, with the meta their
    rows store (see the module notes)."""
    library = wall_seconds(be, reference.fn)
    out = {}
    for name, call in list(group.public.items()):
        seconds = wall_seconds(be, call.fn)
        if library < SLOWEST * seconds:
            out[name] = {"as_called_s": seconds, "ratio_as_called": library / seconds, "reference_s": library,
                         "reference_call": reference.text, "call": call.text, "screened": True, "samples": 1}
            del group.public[name]
    return out


def params(shape: Shape, regime: str, dtype: str = "float64") -> dict[str, Any]:
    m, k, n = shape
    return {"m": m, "k": k, "n": n, "regime": regime, **({"dtype": dtype} if dtype != "float64" else {})}


def _plan(timed: Timed, A: Any, B: Any, be: Any) -> Any:
    r = Ranked(timed.name, timed.method, timed.options)
    return ComplexPlan(r, A, B, None, be) if timed.method in COMPLEX else family_plan(r, A, B, None, be, None)


def method_group(be: Any, A: Any, B: Any, methods: Sequence[tuple[Timed, bool]]) -> Group:
    """The calls of ``methods`` on (A, B), each through its own family plan; those whose family refuses, with
    why."""
    public, families, plans, refused = {}, {}, [], {}
    for timed, _ in methods:
        try:
            plan = _plan(timed, A, B, be)
        except REFUSALS as err:
            refused[timed.name] = str(err)
            continue
        public[timed.name] = Call(f"{timed.method}.Plan(A, B, options={timed.options!r}).execute(A, B)",
                                  partial(plan.execute, A, B))
        families[timed.name] = timed.method
        plans.append(plan)
    return Group("dgemm", Ranked(LIBRARY, "gemm"), "", (), public, {LIBRARY: "gemm", **families}, plans, refused)


def operands(be: Any, shape: Shape, dtype: str) -> tuple[Any, Any]:
    """phi = 1 operands; complex ones take their imaginary parts from a second draw."""
    A, B, _ = phi_inputs(be, shape, TIME_PHI, SEED)
    if dtype == COMPLEX_DTYPE:
        Ai, Bi, _ = phi_inputs(be, shape, TIME_PHI, SEED + 1)
        A, B = A + 1j * Ai, B + 1j * Bi
    return A, B


def measure_shape(ctx: Context, shape: Shape, dtype: str = "float64") -> int:
    """Time the methods at ``shape`` beside the library GEMM (phi = 1 operands of ``dtype``) and store a row per
    call, the library GEMM's last; rows stored. A method short of memory beside the others' plans (the whole
    group's workspaces need not fit where each one does: Ozaki II tiled at N = 49152 on the H200) is timed again
    in a group of its own beside the library GEMM, and its row says ``"alone": true``."""
    be = ctx.backend
    A, B = operands(be, shape, dtype)
    ops = FrontOperands(be, A, B, be.xp.empty((0, 0)))
    reference = Call(f"{be.xp.__name__}.matmul(A, B)", partial(be.xp.matmul, A, B))
    methods = COMPLEX_METHODS if dtype == COMPLEX_DTYPE else METHODS
    where = params(shape, ctx.regime, dtype)
    library, refused, short = time_methods(ctx, ops, reference, methods, where)
    stored = len(methods) - len(refused)
    for name in short:
        seconds, again, _ = time_methods(ctx, ops, reference, [m for m in methods if m[0].name == name], where, True)
        library = library or seconds
        if name in again:
            refused[name] = again[name]
        else:
            del refused[name]
            stored += 1
    ctx.db.add(ctx.run_id, EXPERIMENT, LIBRARY, where, value=library or 0.0, unit="s", meta={"refused": refused})
    return stored + 1


def time_methods(ctx: Context, ops: FrontOperands, reference: Call, methods: Sequence[tuple[Timed, bool]],
                 where: dict[str, Any], alone: bool = False) -> tuple[float | None, dict[str, str], list[str]]:
    """``methods`` checked, screened and timed in one group beside the library GEMM, a row stored per method that
    ran; (the library GEMM's time, the methods refused with why, those short of memory beside the others)."""
    be, A, B = ctx.backend, ops.A, ops.B
    group = method_group(be, A, B, methods)
    splits = recorded_splits(group)
    try:
        short = check_calls(be, A, B, group, reference, shape_text((A.shape[0], A.shape[1], B.shape[1])))
        screened = screen(be, group, reference)
        called = time_point(ctx, ops, group, reference) if group.public else None
    finally:
        group.free()
    waits = {t.name: w for t, w in methods}
    options = {t.name: t.options for t, _ in methods}
    for name in [*group.public, *screened]:
        meta = screened.get(name) or called.meta(name)
        ctx.db.add(ctx.run_id, EXPERIMENT, name, where, value=meta["as_called_s"], unit="s",
                   meta={**meta, "method": group.families[name], "config": options[name], "waits": waits[name],
                         **({"split": splits[name]} if name in splits else {}), **({"alone": True} if alone else {})})
    library = called.meta(LIBRARY).get("as_called_s") if called is not None else \
        next((m["reference_s"] for m in screened.values()), None)
    return library, group.refused, short


def recorded_splits(group: Group) -> dict[str, list[int]]:
    """Each split-K call's split on this device, [chunk width, chunks]: what its proven bound rests on, stored with
    its entry so that a ranking away from the device proves what the device's would (:mod:`gpu.frontdoor.table`).
    Read as the group is built, while its calls and plans are still in step."""
    return {name: [int(plan.split.width), int(plan.split.chunks)] for name, plan in zip(list(group.public), group.plans)
            if group.families[name] == "splitk"}


def calibrate(ctx: Context, shapes: Sequence[Shape] | None = None,
              complex_: bool = False) -> tuple[dict[str, Any], str]:
    """Measure (or resume) the methods at ``shapes`` (default: :data:`SHAPES` for the backend, those that fit,
    and :data:`COMPLEX_SHAPES` as complex products; ``complex_``: the shapes given as complex products only),
    then write the profile's methods section from every stored row; (counts, the profile's path)."""
    if complex_ and not shapes:
        raise ValueError("--complex times the shapes given as complex products: give them with --shapes M:K:N,...")
    plan_shapes = list(shapes or SHAPES.get(ctx.backend.name, SHAPES["numpy"]))
    points = [(s, COMPLEX_DTYPE if complex_ else "float64") for s in plan_shapes] + \
        ([] if shapes else [(s, COMPLEX_DTYPE) for s in COMPLEX_SHAPES.get(ctx.backend.name, COMPLEX_SHAPES["numpy"])])
    fitting, left_out = fitting_points(ctx.backend, Plan(tuple(s for s, _ in points), ("dgemm",)))
    todo = [(s, d) for s, d in points if s in fitting.shapes]
    with ctx.backend.allocation_policy("pooled"):
        outcome = group_sweep(ctx, EXPERIMENT, todo,
                              lambda p: ctx.db.has(EXPERIMENT, LIBRARY, params(p[0], ctx.regime, p[1]), ctx.env_key),
                              lambda p: measure_shape(ctx, *p), point_text)
    section = methods_section(ctx)
    path = write_section(ctx, section)
    return {"shapes measured": outcome.measured, "shapes already stored": outcome.skipped,
            "shapes left out (memory)": list(left_out), "points in the section": len(section["points"])}, path


def point_text(point: tuple[Shape, str]) -> str:
    shape, dtype = point
    return shape_text(shape) + ("" if dtype == "float64" else f" ({dtype})")


def methods_section(ctx: Context) -> dict[str, Any]:
    """The methods section of every stored row of this environment and regime (see the module notes)."""
    points: dict[tuple[Shape, str], dict[str, Any]] = {}
    for m in of_regime(ctx.db.measurements(EXPERIMENT, env_key=ctx.env_key), ctx.regime):
        if m.method == LIBRARY:
            continue
        p, meta = m.params, m.meta
        shape, dtype = (int(p["m"]), int(p["k"]), int(p["n"])), p.get("dtype", "float64")
        point = points.setdefault((shape, dtype), {"shape": list(shape), "gemm_s": meta.get("reference_s"),
                                                   "reference": meta.get("reference_call"), "timed": [],
                                                   **({"dtype": dtype} if dtype != "float64" else {})})
        point["timed"] = [e for e in point["timed"] if (e["method"], e["config"]) != (meta["method"], meta["config"])]
        point["timed"].append({"method": meta["method"], "config": meta["config"],
                               "ratio": round(meta["ratio_as_called"], 4), "seconds": meta.get("as_called_s"),
                               "host_s": meta.get("host_s"), "waits": meta["waits"],
                               **({"screened": True, "samples": 1} if meta.get("screened") else {}),
                               **({"split": meta["split"]} if meta.get("split") else {}),
                               "source": f"gemmlab calibrate --methods (run {m.run_id})"})
    sm_count, least = ctx.backend.device_info().get("sm_count"), ctx.backend.residue_min_k
    return {"regime": ctx.regime, "written_by": "gemmlab calibrate --methods",
            **({"sm_count": int(sm_count)} if sm_count else {}),
            **({"residue_min_k": int(least)} if least is not None else {}),
            "points": [points[s] for s in sorted(points)]}


def write_section(ctx: Context, section: dict[str, Any]) -> str:
    """The section into this device's profile; where the user has none, into a copy of the bundled one (so that
    its level tables and configurations still decide), else into a new profile holding only it; its path."""
    be = ctx.backend
    device = device_name(be)
    doc = copy.deepcopy(load_profile(profile_path(be.name, device)) or bundled_profile(be)) or \
        {"backend": be.name, "device": device, "levels": {}}
    doc.update(backend=be.name, device=device)
    regimes = doc.setdefault("regimes", {})
    held = regimes.setdefault(ctx.regime, {"levels": doc.get("levels", {})})
    held["methods"] = merged(held.get("methods"), section)
    return str(save_profile(doc))


def _named(entry: dict[str, Any]) -> Timed:
    """An entry's method as the front door reads it (:func:`gpu.frontdoor.table.legacy_config`)."""
    return Timed.of(entry["method"], legacy_config(entry["method"], entry.get("config")))


def merged(old: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    """``new`` with every entry of ``old`` whose (shape, dtype, method, config) ``new`` does not hold (see the
    module notes); the points in order of shape."""
    def key(point: dict[str, Any]) -> tuple[Any, ...]:
        return (*point["shape"], point.get("dtype", "float64"))
    points = {key(p): copy.deepcopy(p) for p in new["points"]}
    for point in (old or {}).get("points", ()):
        mine = points.setdefault(key(point), {**copy.deepcopy(point), "timed": []})
        have = {_named(e) for e in mine["timed"]}
        mine["timed"] += [copy.deepcopy(e) for e in point.get("timed", ()) if _named(e) not in have]
    return {**new, "points": [points[k] for k in sorted(points)]}
