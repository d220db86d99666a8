"""``matmul``: Strassen-Winograd products on NumPy or CuPy, any shape, inputs kept safe, planned once per
operand signature.

``matmul(A, B)`` is a kept :class:`gpu.strassen.Plan` plus its execution: the plan of the call's signature
(backend, device, stream, the shapes, strides, dtypes and writeability of A, B and ``out``, and the options)
comes from a bounded cache safe across threads (:data:`PLANS`), so a loop of calls checks and decides once and
each call does only its per-call work (:mod:`gpu.strassen.plan`), with no wait for the device. Calls whose
operands are not plain arrays of the backend are converted and planned for that call alone. With no options the
device profile chooses the level and the whole configuration (:mod:`gpu.strassen.choose`).

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
Levels whose bottom products would be smaller than 16 x 16 are refused (:mod:`gpu.strassen.levels`);
``level="auto"`` never asks for one.

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

from ..backend import Array, Backend, get_backend, matrix_pair
from ..backend.plans import PlanCache, operand_signature
from .levels import MIN_BOTTOM, check_level, check_schedule, deepest_level, resolve_auto_level
from .options import DEFAULT, FRINGES, Options, options_of
from .plan import NONFINITE, Plan, keep, kept_plans, top_support

__all__ = ["FRINGES", "MIN_BOTTOM", "NONFINITE", "PLANS", "check_level", "check_schedule", "deepest_level",
           "forget", "kept", "matmul", "resolve_auto_level", "top_support"]

_KEYWORDS = ("level", "schedule", "parallel", "fused", "overwrite_a", "overwrite_b", "fringe", "check_finite", "graph",
             "workspace", "regime", "flat")
_NONE_GIVEN = (None,) * len(_KEYWORDS)

#: The plans ``matmul`` keeps, by signature and options (least recently used freed first).
PLANS = PlanCache()


def matmul(A: Any, B: Any, *, level: int | str | None = None, schedule: str | Sequence[str] | None = None,
           parallel: bool | None = None, fused: bool | None = None, overwrite_a: bool | None = None,
           overwrite_b: bool | None = None, out: Any = None, backend: str | Backend = "auto",
           fringe: str | None = None, check_finite: bool | None = None, graph: bool | str | None = None,
           workspace: int | str | None = None, regime: str | None = None, flat: bool | None = None,
           options: Options | dict | None = None) -> Array:
    """``A @ B`` by ``level`` levels of a Strassen-Winograd ``schedule``.

    The keywords are the fields of :class:`gpu.strassen.Options` (``options=`` takes one, or a dict of its
    fields; keywords given replace its fields). Called with none, the device profile chooses the level and the
    whole configuration: the fastest that ``gemmlab calibrate --configurations`` measured on this device (or
    the bundled profile of an H100 or H200) that fits in the free memory (within 1% of it, the one with fewer
    levels or a smaller workspace), and the library GEMM wherever none beats it clearly (:mod:`gpu.strassen.choose`).

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
    ``level="auto"`` with a configuration given asks :func:`gpu.strassen.auto.auto_level`: the level
    table of this device's profile (written by ``gemmlab calibrate``) for the power ``regime`` the
    caller runs in (``"sustained"``, the default, or ``"cold"``), else the transfer model's table for
    this GPU, else a fixed rule; levels are never deeper than bottom products of 16 x 16.
    ``graph``: run the product as a CUDA graph (``True``: captured on the first call with an address set of
    A, B and C, replayed after; ``"auto"``: captured on the second call where the product launches
    many kernels; see :mod:`gpu.strassen.graphs`). Results are bitwise those of eager execution;
    ``True`` needs the CuPy backend with nvmath-python, ``"auto"`` runs eagerly elsewhere.
    ``schedule``: a schedule name (default ``"rum"``, or ``"winograd"`` with ``flat``) or a per-level
    plan, top level first
    (``("rum", "winograd")`` or ``"rum/winograd"``: the last one runs every level below).
    ``workspace``: instead of ``schedule``, let each level take the fastest schedule whose
    memory fits this many bytes beyond the RUM product's (``"auto"``: what is free on the
    device; ``0``: RUM throughout); see :mod:`gpu.strassen.plans`.
    ``check_finite=True`` refuses NaN and infinity first (a read of A and B and a wait for the device); by
    default they give what the library GEMM gives, with no wait (see the module notes). Inputs may
    be any 2-D array-likes: they are converted to plain arrays of the backend
    (``np.matrix`` included; masked arrays are refused).
    Raises TypeError for inputs or ``out`` of the wrong kind or dtype, or an unknown option,
    ValueError for bad shapes, levels, schedules that cannot recurse or
    non-finite inputs, and :class:`gpu.backend.MemoryPlanError` (a ValueError)
    for a product predicted not to fit in free memory: all before any work.
    """
    be = get_backend(backend)
    given = (level, schedule, parallel, fused, overwrite_a, overwrite_b, fringe, check_finite, graph, workspace,
             regime, flat)
    o = DEFAULT if options is None and given == _NONE_GIVEN else options_of(options, dict(zip(_KEYWORDS, given)))
    key = operand_signature(be, A, B, out)
    if key is None:                        # converted inputs: planned for this call, their copies its scratch
        A, B, own_a, own_b = matrix_pair(be, A, B)
        with Plan(A, B, out=out, options=o, backend=be, _owned=(own_a, own_b)) as plan:
            return plan._execute(A, B, out)
    plan = PLANS.get((key, o), lambda: keep(Plan(A, B, out=out, options=o, backend=be)))
    return plan._execute(A, B, out)


def forget() -> None:
    """Free every plan ``matmul`` keeps (their workspaces and graphs hold device memory)."""
    PLANS.clear()


def kept() -> list[Plan]:
    """The plans ``matmul`` keeps now (what each runs: ``plan.configuration``, ``plan.decision.reason``)."""
    return kept_plans()
