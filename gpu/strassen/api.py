"""``matmul``: Strassen-Winograd products on NumPy or CuPy, any shape, inputs kept safe.

Strassen runs on the largest square core whose side is a multiple of 2^L;
what is left of a rectangular or odd-sized product goes to the library GEMM
(``fringe="peel"``, no extra memory) or is zero-padded into a square product
(``fringe="pad"``, three padded copies). Inputs are never overwritten unless
the caller opts in with ``overwrite_a``/``overwrite_b``:

* RUM lends scratch quadrants to itself; at the top level they alias A11,
  A21 (A) and B11, B12 (B). Without the opt-in each aliased quadrant is
  allocated instead: (s/2)^2 * itemsize bytes each, s^2 * itemsize for all
  four (s: the core's side).
* Schedules that overwrite inputs (Otsuka's low level) work on copies:
  s^2 * itemsize bytes per copied matrix.
* Lai and Winograd never write their inputs; they allocate temporaries.

:func:`gpu.strassen.costs.matmul_memory` gives these bytes for any schedule and
level; a product whose output and extra memory are predicted not to fit in
free device memory (host memory on NumPy) is refused before any work starts.

Levels
------
A level halves the side of the products below it. Levels whose bottom
products would be smaller than :data:`MIN_BOTTOM` (16 x 16) are refused:
such blocks make thousands of library calls (7^L of them) and gain nothing,
and ``level=7`` on a 256 x 256 product took a minute. ``level="auto"`` never
asks for one.

Non-finite inputs
-----------------
By default (``check_finite=False``) NaN and infinity go through, and the result
is what the library GEMM gives. ``check_finite=True`` refuses them before any
work instead, at the cost of reading A and B once with no allocation and a wait
for the device: on an H100 2.1 ms against 145 ms for a level-2 product at
N = 16384 (1.4%), 0.64 ms against 21 ms at N = 8192 (3%). Without the check: a level adds quadrants
before it multiplies, so a NaN or infinity reaches more entries than in ``A @ B``
(one NaN in A gave 512 NaN entries at level 2 on a 128 x 128 product, where
``A @ B`` has 128, and infinities met their negations: inf - inf = NaN), and
finite inputs near the top of the range can overflow in the additions where
``A @ B`` is finite; every non-finite entry of the product is therefore
recomputed by the library GEMM after it (:mod:`gpu.strassen.finite`: a read of
C where it is finite, with no allocation and, on the GPU, no wait for the
device). Entries no non-finite value reaches keep the bound below.

Accuracy
--------
Normwise, after Higham's bound for Winograd's form (*Accuracy and Stability of
Numerical Algorithms*, 2nd ed., sec. 23.2.2), which every schedule here computes
(the same sums, stored elsewhere): an L-level product whose core has side s
(``fringe="peel"``: the largest multiple of 2^L within min(m, k, n); ``"pad"``:
every side padded up to one), bottom products of side n0 = s / 2^L, satisfies

    max |C - AB| <= (18^L (n0^2 + 6 n0) + 2 k^2) u max|A| max|B|

to first order in u, the unit roundoff of the dtype (2**-53 for float64, 2**-24
for float32); 2 k^2 covers the fringe's library GEMMs and their sum with the
core. 18 per level is the worst case; on random operands the error grows by
about 12 per level and stays below 2% of ``4 * 12^L * 2u * s * max|A| max|B|``.
No componentwise bound holds: a row of A scaled by 2**300 spreads its rounding
errors into the rows it is added to.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..backend import Array, Backend, blas, check_output, get_backend, matrix_pair, require_finite, require_memory
from ..backend.checks import require_writeable
from ..profile import check_regime, profile_stamp
from . import finite, graphs, shortcut
from .auto import MAX_LEVEL, auto_level
from .costs import core_side, matmul_memory, total_launches
from .executor import Executor, quadrants
from .flat import FLAT_SCHEDULE, flat_plan
from .liveness import clobbers, recursion_blocker
from .plans import BASE, auto_workspace, check_workspace, choose_plan, plan_extra
from .schedules import SUPPORT, get_schedule, plan_name, resolve

FRINGES = ("peel", "pad")
#: Smallest side of the bottom products a level may make (see the module notes).
MIN_BOTTOM = 16
NONFINITE = ("entries that NaN or infinity reach are then recomputed by the library GEMM, so they are what A @ B "
             "gives (see gpu.strassen.api)")


def _operands(be: Backend, A: Any, B: Any, check_finite: bool) -> tuple[Array, Array, bool, bool]:
    """Backend arrays of A and B, and whether each is a private copy, after every check."""
    A, B, copied_a, copied_b = matrix_pair(be, A, B)
    be.layout(A, "A")
    be.layout(B, "B")
    blas.check_dtypes(("A", A), ("B", B))
    require_finite(be, check_finite, {"A": A, "B": B}, NONFINITE)
    return A, B, copied_a, copied_b


def deepest_level(m: int, k: int, n: int, fringe: str = "peel") -> int:
    """The most levels an m x k by k x n product may take: bottom products of at least
    :data:`MIN_BOTTOM` (0 when even one level would go below it)."""
    level = 0
    while (level < MAX_LEVEL and min(m, k, n) > 0
           and core_side(m, k, n, level + 1, fringe) // 2 ** (level + 1) >= MIN_BOTTOM):
        level += 1
    return level


def resolve_auto_level(m: int, k: int, n: int, be: Backend, *, schedule: str = "rum", fused: bool = False,
                       regime: str = "sustained", fringe: str = "peel") -> int:
    """The level ``matmul(level="auto")`` runs an m x k by k x n product at: :func:`gpu.strassen.auto.auto_level`
    of the side the fringe mode recurses on, never deeper than :func:`deepest_level` (0 for an empty product)."""
    size = min(m, k, n) if fringe == "peel" else max(m, k, n)
    if not size:
        return 0
    return min(auto_level(size, be, schedule=schedule, fused=fused, regime=regime), deepest_level(m, k, n, fringe))


def check_level(m: int, k: int, n: int, level: int, fringe: str = "peel") -> None:
    """ValueError when ``level`` levels would make bottom products below :data:`MIN_BOTTOM`
    (an empty product multiplies nothing: any level gives its empty or zero result)."""
    deepest = deepest_level(m, k, n, fringe)
    if level > deepest and min(m, k, n) > 0:
        bottom = core_side(m, k, n, level, fringe) // 2**level
        fix = f"use level <= {deepest}" if deepest else "use level=0 (the library GEMM)"
        raise ValueError(f"level {level} on a {m} x {k} x {n} product would multiply {bottom} x {bottom} blocks at "
                         f"the bottom; a level needs bottom products of at least {MIN_BOTTOM} x {MIN_BOTTOM} "
                         f"(smaller ones make 7^{level} library calls and gain nothing): {fix}, or level='auto'")


def check_schedule(schedule: str, level: int) -> None:
    """ValueError unless ``schedule`` exists and can run ``level`` levels (every level
    above the bottom one must be able to recurse)."""
    if not isinstance(level, (int, np.integer)) or not 0 <= level <= MAX_LEVEL:
        raise ValueError(f"level must be an integer from 0 to {MAX_LEVEL} or 'auto', got {level!r}")
    get_schedule(schedule)
    blocked = recursion_blocker(schedule, level)
    if blocked:
        name, b = blocked
        raise ValueError(f"schedule {name!r} cannot recurse (step {b.step}: {b.reason}); "
                         f"use level 1, or a schedule that recurses such as 'rum' or 'otsuka'")


def matmul(A: Any, B: Any, *, level: int | str = "auto", schedule: str | Sequence[str] | None = None,
           parallel: bool = False, fused: bool = False, overwrite_a: bool = False, overwrite_b: bool = False,
           out: Any = None, backend: str | Backend = "auto", fringe: str = "peel", check_finite: bool = False,
           graph: bool | str = False, workspace: int | str | None = None, regime: str = "sustained",
           flat: bool = False) -> Array:
    """``A @ B`` by ``level`` levels of a Strassen-Winograd ``schedule``.

    Parameters follow SciPy's conventions: ``overwrite_a``/``overwrite_b``
    allow the schedule to use the inputs as scratch (then their contents are
    undefined afterwards; ignored when A and B share memory, as in
    ``matmul(A, A)``); ``out`` receives the product. ``parallel`` runs a
    schedule's stream assignment (``rum2``, ``lai7``, ``otsuka2``) on CUDA
    streams; ``fused`` runs consecutive additions as one kernel on CuPy. ``flat`` runs all levels
    at once (:mod:`gpu.strassen.flat`): one pass forms every operand sum of A, one of B, 7^L GEMMs,
    one pass forms C; the fastest form where its three stacks fit (8.06 n^2 elements at two levels,
    15.2 n^2 at three), bitwise equal to the recursive product. It needs a schedule whose table is
    sums, products, outputs (``"winograd"``, its default, or ``"lai7"``) and one stream.
    ``level="auto"`` asks :func:`gpu.strassen.auto.auto_level`: the level table
    of this device's profile (written by ``gemmlab calibrate``) for the power ``regime`` the
    caller runs in (``"sustained"``, the default, or ``"cold"``), else a fixed rule;
    levels are never deeper than bottom products of :data:`MIN_BOTTOM`.
    ``graph``: run the product as a CUDA graph (``True``: captured on the first call with this
    signature, replayed after; ``"auto"``: captured on the second call where the product launches
    many kernels; see :mod:`gpu.strassen.graphs`). Results are bitwise those of eager execution;
    ``True`` needs the CuPy backend with nvmath-python, ``"auto"`` runs eagerly elsewhere.
    ``schedule``: a schedule name (default ``"rum"``, or ``"winograd"`` with ``flat``) or a per-level
    plan, top level first
    (``("rum", "winograd")`` or ``"rum/winograd"``: the last one runs every level below).
    ``workspace``: instead of ``schedule``, let each level take the fastest schedule whose
    memory fits this many bytes beyond the RUM product's (``"auto"``: what is free on the
    device; ``0``: RUM throughout); see :mod:`gpu.strassen.plans`.
    ``check_finite=True`` refuses NaN and infinity first; by default they give what the library
    GEMM gives (see the module notes for the check's cost and how the default keeps that promise). A repeated call
    with ``out=`` skips the checks its signature already passed
    (:mod:`gpu.strassen.shortcut`). Inputs may
    be any 2-D array-likes: they are converted to plain arrays of the backend
    (``np.matrix`` included; masked arrays are refused).
    Raises TypeError for inputs or ``out`` of the wrong kind or dtype,
    ValueError for bad shapes, levels, schedules that cannot recurse or
    non-finite inputs, and :class:`gpu.backend.MemoryPlanError` (a ValueError)
    for a product predicted not to fit in free memory: all before any work.
    """
    be = get_backend(backend)
    key = shortcut.signature(be, A, B, out, (level, schedule, parallel, fused, fringe, graph, workspace, regime,
                                             overwrite_a, overwrite_b, flat))
    plan = shortcut.kept(be, key, level, A, B, out, check_finite, NONFINITE)
    how = (parallel, fused, graph, flat)
    if plan is not None:
        return _execute(be, A, B, out, plan, *how)
    asked, stamp = level, profile_stamp(be) if level == "auto" and key is not None else None
    if fringe not in FRINGES:
        raise ValueError(f"fringe must be one of {FRINGES}, got {fringe!r}")
    graphs.check_mode(be, graph)
    check_regime(regime)
    check_flat(flat, parallel, workspace)
    A, B, own_a, own_b = _operands(be, A, B, check_finite)
    require_writeable({"A": (A, overwrite_a), "B": (B, overwrite_b)})
    m, k, n = A.shape[0], A.shape[1], B.shape[1]
    C = check_output(be, out, (m, n), A.dtype, {"A": A, "B": B})
    if blas.overlaps(be.layout(A), be.layout(B)):
        overwrite_a = overwrite_b = own_a = own_b = False
        key = None                                        # its overwrite rights depend on the addresses: not kept
    ow_a, ow_b = overwrite_a or own_a, overwrite_b or own_b
    output = 0 if C is not None else m * n * A.itemsize
    if workspace is not None and schedule is not None:
        raise ValueError("pass schedule= or workspace=, not both: workspace chooses the schedule of each level")
    check_workspace(workspace)
    schedule = plan_name((FLAT_SCHEDULE if flat else BASE) if schedule is None else schedule)
    if level == "auto":
        level = resolve_auto_level(m, k, n, be, schedule=schedule, fused=fused or flat, regime=regime,
                                   fringe=fringe)
    check_schedule(schedule, level)
    if flat and level:
        flat_plan(schedule, level)                       # ValueError for a schedule that cannot run flat
    if level == 0 and C is not None:                     # the library GEMM: no workspace or new output to plan
        return _execute(be, A, B, C, shortcut.keep(be, key, asked, stamp, A, B, C, shortcut.GEMM), *how)
    if level == 0:                                       # the library's own product, into a new array
        memory = (output, f"the {m} x {n} output", "pass out= (an array you allocated), or split the product "
                  "into blocks of rows")
        require_memory(be, *memory)
        return _execute(be, A, B, None, shortcut.keep(be, key, asked, stamp, A, B, None, shortcut.product(memory)),
                        *how)
    check_level(m, k, n, level, fringe)
    level = level if min(m, k, n) else 0                 # an empty product multiplies nothing
    if workspace is not None and level:
        schedule = _planned(be, workspace, (m, k, n, level, A.itemsize, fringe, ow_a, ow_b), fused, output)
    need = _memory_need(schedule, m, k, n, level, A.dtype, fringe, ow_a, ow_b, output, flat)
    require_memory(be, *need)
    C = be.xp.empty((m, n), dtype=A.dtype) if C is None else C
    side = core_side(m, k, n, level, fringe) if level else 0
    plan = shortcut.Plan(level, schedule, fringe == "pad" and (m, k, n) != (side, side, side), side, ow_a, ow_b,
                         need if need[0] else None)
    if out is not None and workspace != "auto":
        shortcut.keep(be, key, asked, stamp, A, B, C, plan)
    return _execute(be, A, B, C, plan, *how)


def check_flat(flat: Any, parallel: bool, workspace: Any) -> None:
    """ValueError before any work for a ``flat`` that is not a bool, or that meets an option it excludes."""
    if not isinstance(flat, (bool, np.bool_)):
        raise ValueError(f"flat must be True or False, got {flat!r}")
    if flat and parallel:
        raise ValueError("flat=True runs its passes and GEMMs on one stream; pass parallel=False")
    if flat and workspace is not None:
        raise ValueError("flat=True runs one schedule at every level and workspace= mixes them; pass "
                         "schedule='winograd' instead of workspace=")


def _execute(be: Backend, A: Array, B: Array, C: Array, plan: shortcut.Plan, parallel: bool, fused: bool,
             graph: bool | str, flat: bool = False) -> Array:
    """Run a checked ``plan``: the library GEMM at level 0, else its levels (eagerly or as a CUDA graph), whose
    non-finite entries are then recomputed by the library GEMM (:mod:`gpu.strassen.finite`)."""
    level, schedule, side = plan.level, plan.schedule, plan.side
    if level == 0 and C is None:
        return be.product(A, B)
    if level == 0:
        be.gemm(A, B, C)
        return C

    def body(run: Executor) -> None:
        if plan.padded:
            _padded(be, run, schedule, A, B, C, side, level)
        else:
            _peeled(be, run, schedule, A, B, C, side, level, plan.overwrite_a, plan.overwrite_b)

    key = (id(be), schedule, level, parallel, fused, flat, plan.padded, plan.overwrite_a, plan.overwrite_b,
           *(graphs.array_key(x, be) for x in (A, B, C)))
    with np.errstate(over="ignore", invalid="ignore"):    # the additions' overflow and NaN are repaired below
        graphs.run(be, graph, key, total_launches(schedule, level, fused, flat),
                   lambda arena: Executor(be, parallel=parallel, fused=fused, arena=arena, flat=flat), body)
    be.ops(finite.FAMILY).repair(A, B, C)
    return C


def _planned(be: Backend, workspace: int | str, shape: tuple, fused: bool, output: int) -> str:
    """The per-level plan of ``workspace`` bytes (``"auto"``: see :func:`gpu.strassen.plans.auto_workspace`)."""
    if workspace == "auto":
        workspace = auto_workspace(be.memory_info()[0], output, plan_extra(BASE, *shape))
    m, k, n, level, itemsize, fringe, ow_a, ow_b = shape
    return choose_plan(m, k, n, level, workspace, fused=fused, itemsize=itemsize, fringe=fringe,
                       overwrite_a=ow_a, overwrite_b=ow_b)


def _peeled(be: Backend, run: Executor, schedule: str, A: Array, B: Array, C: Array, s: int, level: int,
            overwrite_a: bool, overwrite_b: bool) -> None:
    """Strassen on the s x s core, library GEMMs on the fringe panels (computed first,
    while the core's inputs are intact)."""
    m, n = C.shape
    if n > s:
        be.gemm(A[:s], B[:, s:], C[:s, s:])
    if m > s:
        be.gemm(A[s:], B, C[s:])
    Ac, Bc = A[:s, :s], B[:s, :s]
    hit = clobbers(schedule, level)
    if "A" in hit and not overwrite_a:
        Ac = run.copy(Ac, ("top", "A"))
    if "B" in hit and not overwrite_b:
        Bc = run.copy(Bc, ("top", "B"))
    support = top_support(be, schedule, level, Ac, Bc, overwrite_a, overwrite_b, run.buffer)
    run.multiply(schedule, Ac, Bc, C[:s, :s], level, support)
    if A.shape[1] > s:
        be.gemm(A[:s, s:], B[s:, :s], C[:s, :s], 1.0, 1.0)


def _padded(be: Backend, run: Executor, schedule: str, A: Array, B: Array, C: Array, side: int,
            level: int) -> None:
    """Zero-pad A, B and C to side x side and run the whole product by Strassen."""
    Ap, Bp, Cp = (run.buffer((side, side), A.dtype, ("top", "pad", name)) for name in "ABC")
    for P in (Ap, Bp, Cp):
        P.fill(0)
    Ap[:A.shape[0], :A.shape[1]] = A
    Bp[:B.shape[0], :B.shape[1]] = B
    run.multiply(schedule, Ap, Bp, Cp, level, top_support(be, schedule, level, Ap, Bp, True, True, run.buffer))
    C[...] = Cp[:C.shape[0], :C.shape[1]]


def top_support(be: Backend, schedule: str, level: int, A: Array, B: Array, overwrite_a: bool,
                overwrite_b: bool, buffer: Any = None) -> dict[str, Array] | None:
    """Top-level support quadrants: the input quadrants they may alias where the caller allows,
    new buffers otherwise (from ``buffer(shape, dtype, slot)``, an executor's, where given);
    None for schedules that take no support."""
    sched = resolve(schedule, level)
    if not sched.support:
        return None
    inputs = {**quadrants(A, "A"), **quadrants(B, "B")}
    reuse = sched.permitted_aliases(overwrite_a, overwrite_b)
    h = A.shape[0] // 2
    new = buffer or (lambda shape, dtype, slot: be.xp.empty(shape, dtype=dtype))
    return {s: inputs[reuse[s]] if s in reuse else new((h, h), A.dtype, ("top", s)) for s in SUPPORT}


def _memory_need(schedule: str, m: int, k: int, n: int, level: int, dtype, fringe: str, overwrite_a: bool,
                 overwrite_b: bool, output: int, flat: bool = False) -> tuple[int, str, str]:
    """Bytes the product needs beyond its operands (its output where new, and extra memory), what for, and
    the way out: :func:`gpu.backend.require_memory`'s arguments."""
    est = matmul_memory(schedule, m, k, n, level, np.dtype(dtype).itemsize, fringe=fringe,
                        overwrite_a=overwrite_a, overwrite_b=overwrite_b, flat=flat)
    parts = (f"output {output / 2**30:.2f} GiB, support {est.support / 2**30:.2f}, copies {est.copies / 2**30:.2f}, "
             f"temporaries {est.temporaries / 2**30:.2f}")
    advice = ("pass out= (an array you allocated), or split the product into blocks of rows" if not est.extra else
              "use flat=False (the recursive product keeps fewer temporaries), a lower level, or pass out="
              if flat else "use schedule='rum', overwrite_a=True, overwrite_b=True, a lower level, or pass out=")
    return output + est.extra, f"{schedule} at level {level} on {m} x {k} x {n} ({parts})", advice
