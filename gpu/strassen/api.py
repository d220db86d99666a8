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

:func:`gpu.strassen.costs.strassen_memory` gives these bytes for any schedule and
level; a product predicted not to fit in free device memory is refused
before any work starts.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..backend import Array, Backend, blas, get_backend, matrix_pair
from .auto import MAX_LEVEL, auto_level
from .costs import strassen_memory
from .executor import Executor, quadrants
from .liveness import analyze, clobbers
from .schedules import SUPPORT, get_schedule, resolve

FRINGES = ("peel", "pad")


def _operands(be: Backend, A: Any, B: Any) -> tuple[Array, Array, bool, bool]:
    """Backend arrays of A and B, and whether each was converted (a private copy)."""
    A, B, copied_a, copied_b = matrix_pair(be, A, B)
    be.layout(A, "A")
    be.layout(B, "B")
    blas.check_dtypes(("A", A), ("B", B))
    return A, B, copied_a, copied_b


def _output(be: Backend, out: Any, A: Array, B: Array) -> Array:
    shape = (A.shape[0], B.shape[1])
    if out is None:
        return be.xp.empty(shape, dtype=A.dtype)
    if not isinstance(out, be.xp.ndarray) or out.shape != shape or out.dtype != A.dtype:
        raise ValueError(f"out must be a {be.xp.__name__} array of shape {shape} and dtype {A.dtype}")
    lay = be.layout(out, "out")
    for name, x in (("A", A), ("B", B)):
        if blas.overlaps(lay, be.layout(x, name)):
            raise ValueError(f"out overlaps {name}; pass a separate output array")
    return out


def check_schedule(schedule: str, level: int) -> None:
    """ValueError unless ``schedule`` exists and can run ``level`` levels (every level
    above the bottom one must be able to recurse)."""
    if not isinstance(level, (int, np.integer)) or not 0 <= level <= MAX_LEVEL:
        raise ValueError(f"level must be an integer from 0 to {MAX_LEVEL} or 'auto', got {level!r}")
    get_schedule(schedule)
    name = schedule
    for left in range(level, 1, -1):
        sched = resolve(name, left)
        report = analyze(sched.name)
        if not report.recursible:
            b = report.blocking[0]
            raise ValueError(f"schedule {sched.name!r} cannot recurse (step {b.step}: {b.reason}); "
                             f"use level 1, or a schedule that recurses such as 'rum' or 'otsuka'")
        name = sched.products_schedule


def matmul(A: Any, B: Any, *, level: int | str = "auto", schedule: str = "rum", parallel: bool = False,
           fused: bool = False, overwrite_a: bool = False, overwrite_b: bool = False, out: Any = None,
           backend: str | Backend = "auto", fringe: str = "peel") -> Array:
    """``A @ B`` by ``level`` levels of a Strassen-Winograd ``schedule``.

    Parameters follow SciPy's conventions: ``overwrite_a``/``overwrite_b``
    allow the schedule to use the inputs as scratch (then their contents are
    undefined afterwards; ignored when A and B share memory, as in
    ``matmul(A, A)``); ``out`` receives the product. ``parallel`` runs a
    schedule's stream assignment (``rum2``, ``lai7``, ``otsuka2``) on CUDA
    streams; ``fused`` runs consecutive additions as one kernel on CuPy.
    ``level="auto"`` asks :func:`gpu.strassen.auto.auto_level`: the level table
    of this device's profile (written by ``gemmlab calibrate``), else a fixed rule.
    Raises ValueError for bad shapes, dtypes, levels, schedules that cannot
    recurse, or a product predicted not to fit in free memory.
    """
    be = get_backend(backend)
    if fringe not in FRINGES:
        raise ValueError(f"fringe must be one of {FRINGES}, got {fringe!r}")
    A, B, own_a, own_b = _operands(be, A, B)
    C = _output(be, out, A, B)
    if blas.overlaps(be.layout(A), be.layout(B)):
        overwrite_a = overwrite_b = own_a = own_b = False
    m, k, n = A.shape[0], A.shape[1], B.shape[1]
    if level == "auto":
        level = auto_level(min(m, k, n) if fringe == "peel" else max(m, k, n), be, schedule=schedule, fused=fused)
    check_schedule(schedule, level)
    q = 2**level
    side = min(m, k, n) // q * q if fringe == "peel" else -(-max(m, k, n) // q) * q
    if level == 0 or side == 0:
        be.gemm(A, B, C)
        return C
    run = Executor(be, parallel=parallel, fused=fused)
    if fringe == "pad" and (m, k, n) != (side, side, side):
        _padded(be, run, schedule, A, B, C, side, level)
    else:
        _peeled(be, run, schedule, A, B, C, side, level, overwrite_a or own_a, overwrite_b or own_b)
    return C


def _peeled(be: Backend, run: Executor, schedule: str, A: Array, B: Array, C: Array, s: int, level: int,
            overwrite_a: bool, overwrite_b: bool) -> None:
    """Strassen on the s x s core, library GEMMs on the fringe panels (computed first,
    while the core's inputs are intact)."""
    _check_memory(be, schedule, s, level, A.dtype, overwrite_a, overwrite_b)
    m, n = C.shape
    if n > s:
        be.gemm(A[:s], B[:, s:], C[:s, s:])
    if m > s:
        be.gemm(A[s:], B, C[s:])
    Ac, Bc = A[:s, :s], B[:s, :s]
    hit = clobbers(schedule, level)
    if "A" in hit and not overwrite_a:
        Ac = Ac.copy()
    if "B" in hit and not overwrite_b:
        Bc = Bc.copy()
    run.multiply(schedule, Ac, Bc, C[:s, :s], level, top_support(be, schedule, level, Ac, Bc, overwrite_a, overwrite_b))
    if A.shape[1] > s:
        be.gemm(A[:s, s:], B[s:, :s], C[:s, :s], 1.0, 1.0)


def _padded(be: Backend, run: Executor, schedule: str, A: Array, B: Array, C: Array, side: int,
            level: int) -> None:
    """Zero-pad A, B and C to side x side and run the whole product by Strassen."""
    _check_memory(be, schedule, side, level, A.dtype, True, True, extra=3 * side * side * A.itemsize)
    xp = be.xp
    Ap, Bp, Cp = (xp.zeros((side, side), dtype=A.dtype) for _ in range(3))
    Ap[:A.shape[0], :A.shape[1]] = A
    Bp[:B.shape[0], :B.shape[1]] = B
    run.multiply(schedule, Ap, Bp, Cp, level, top_support(be, schedule, level, Ap, Bp, True, True))
    C[...] = Cp[:C.shape[0], :C.shape[1]]


def top_support(be: Backend, schedule: str, level: int, A: Array, B: Array, overwrite_a: bool,
                overwrite_b: bool) -> dict[str, Array] | None:
    """Top-level support quadrants: the input quadrants they may alias where the caller allows,
    new buffers otherwise; None for schedules that take no support."""
    sched = resolve(schedule, level)
    if not sched.support:
        return None
    inputs = {**quadrants(A, "A"), **quadrants(B, "B")}
    reuse = sched.permitted_aliases(overwrite_a, overwrite_b)
    h = A.shape[0] // 2
    return {s: inputs[reuse[s]] if s in reuse else be.xp.empty((h, h), dtype=A.dtype) for s in SUPPORT}


def _check_memory(be: Backend, schedule: str, side: int, level: int, dtype, overwrite_a: bool,
                  overwrite_b: bool, extra: int = 0) -> None:
    """Refuse a product whose predicted extra memory exceeds the device's free memory."""
    est = strassen_memory(schedule, side, level, np.dtype(dtype).itemsize,
                          overwrite_a=overwrite_a, overwrite_b=overwrite_b)
    need = est.extra + extra
    free = be.memory_info()[0]
    if need > free:
        raise ValueError(
            f"{schedule} at level {level} on a {side} x {side} core needs {need / 2**30:.2f} GiB beyond "
            f"A, B and C (support {est.support / 2**30:.2f}, copies {est.copies / 2**30:.2f}, "
            f"temporaries {est.temporaries / 2**30:.2f}) but {free / 2**30:.2f} GiB are free; use "
            "schedule='rum', overwrite_a=True, overwrite_b=True or a lower level"
        )
