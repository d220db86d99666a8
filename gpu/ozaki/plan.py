"""Planning an Ozaki product before it runs: bits per digit, GEMM calls, buffers and workspace.

:func:`plan` turns (m, k, n, slices, format) into an :class:`OzakiPlan`: alpha
and k_block (:func:`choose_alpha`), the GEMM calls of every diagonal
(:class:`Chunk`), how many accumulator buffers are held at once and the
workspace by part. :func:`auto_slices` picks the slice count for an error
target from the proven bound :func:`predicted_error` and the data's ratio
(:func:`gpu.ozaki.bound.slice_ratio`; see :mod:`gpu.ozaki`).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..backend.checks import MemoryPlanError
from .formats import SliceFormat, get_format

#: Slice rows and inner ranges are padded to multiples of this (INT8 tensor cores want 16-byte alignment).
ALIGN = 16
MAX_SLICES = 64
#: Share of free device memory the workspace may take (the rest: cuBLAS workspace, CuPy's pool slack).
HEADROOM = 0.9
#: ``target`` names: t in |C - AB| <= t |A||B| + 2**-53 |C| (float64's and float32's unit roundoff).
TARGETS = {"dgemm": 2.0**-53, "sgemm": 2.0**-24}
#: What the compensated fold adds to the bound, relative to |A||B| (S <= 64; see :mod:`gpu.ozaki`).
SUM_ERROR = 2.0**-91


class WorkspaceError(MemoryPlanError):
    """The configuration's workspace does not fit in the memory available (a :class:`MemoryPlanError`: the
    toolkit's plan caches free their kept workspaces and try once more)."""


@dataclass(frozen=True)
class Chunk:
    """One GEMM call into one accumulator buffer: ``length`` inner terms of diagonal ``diagonal``,
    from column ``a_start`` of A_cat and ``b_start`` of B_cat; ``closes``: the diagonal's last;
    ``exact``: every operand is an exact digit (not a rounded remainder), so the product is exact."""

    diagonal: int
    a_start: int
    b_start: int
    length: int
    closes: bool
    exact: bool = True


@dataclass(frozen=True)
class OzakiPlan:
    """What a product will do and need, known before it runs (see :func:`plan`)."""

    m: int
    k: int
    n: int
    slices: int
    format: SliceFormat
    alpha: int
    k_block: int
    ldk: int
    n_pad: int
    chunks: tuple[Chunk, ...]
    held: int
    remainder: bool = False
    bound: float | None = None

    @property
    def digits(self) -> int:
        """Exact digits per operand (with ``remainder``, the last slice of A is its rounded tail)."""
        return self.slices - 1 if self.remainder else self.slices

    @property
    def b_positions(self) -> int:
        """Slices held for B: S digits, or with ``remainder`` S - 1 digits and S rounded tails."""
        return 2 * self.slices - 1 if self.remainder else self.slices

    @property
    def pairs(self) -> int:
        return self.slices * (self.slices + 1) // 2

    @property
    def gemm_calls(self) -> int:
        return len(self.chunks)

    @property
    def batches(self) -> list[list[int]]:
        """Chunk indices per fold batch (``held`` buffers each)."""
        return [list(range(i, min(i + self.held, len(self.chunks)))) for i in range(0, len(self.chunks), self.held)]

    @property
    def needs_open(self) -> bool:
        """Whether a diagonal spans two batches (its partial sum D is kept in float64 between them)."""
        return any(not self.chunks[b[-1]].closes for b in self.batches[:-1])

    @property
    def flops(self) -> int:
        """Multiply-adds times two of the low-precision GEMMs, padding included."""
        return 2 * self.m * self.n_pad * sum(c.length for c in self.chunks)

    def workspace(self) -> dict[str, int]:
        """Bytes by part, beyond A and B (``output``: C, unless the caller passes ``out``)."""
        buffer = self.m * self.n_pad * np.dtype(self.format.accumulator).itemsize
        return {
            "slices_a": self.m * self.slices * self.ldk * self.format.itemsize,
            "slices_b": self.n_pad * self.b_positions * self.ldk * self.format.itemsize,
            "exponents": 4 * (self.m + self.n),
            "buffers": self.held * buffer,
            "open_diagonal": 8 * self.m * self.n if self.needs_open else 0,
            "compensation": 8 * self.m * self.n if len(self.chunks) > self.held else 0,
            "output": 8 * self.m * self.n,
        }

    @property
    def workspace_bytes(self) -> int:
        return sum(self.workspace().values())

    def as_dict(self) -> dict[str, Any]:
        return {"m": self.m, "k": self.k, "n": self.n, "slices": self.slices, "format": self.format.name,
                "remainder": self.remainder, "alpha": self.alpha, "k_block": self.k_block, "pairs": self.pairs,
                "gemm_calls": self.gemm_calls, "buffers": len(self.chunks), "buffers_held": self.held,
                "fold_launches": len(self.batches), "flops": self.flops, "workspace": self.workspace(),
                "workspace_bytes": self.workspace_bytes, "bound": self.bound}

    def report(self) -> str:
        """The configuration and its workspace, as text."""
        parts = ", ".join(f"{k} {_bytes(v)}" for k, v in self.workspace().items() if v)
        last = " (rounded tails on the last diagonal)" if self.remainder else ""
        proven = "" if self.bound is None else (f"; proven |C - AB| <= {self.bound:.3g} |A||B| + 2^-53 |C| "
                                                "on these inputs")
        return (f"Ozaki {self.format.name} x {self.slices} slices{last} on {self.m} x {self.k} x {self.n}: "
                f"alpha = {self.alpha} bits per slice, k_block = {self.k_block}, {self.pairs} slice pairs in "
                f"{self.gemm_calls} GEMM calls ({self.format.recipe}), {len(self.chunks)} buffers "
                f"({self.held} held), {len(self.batches)} fold launch(es){proven}; workspace "
                f"{_bytes(self.workspace_bytes)}: {parts}")


def _bytes(n: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} B"


def _round_up(x: int, to: int = ALIGN) -> int:
    return -(-x // to) * to


def _positive_int(value: Any, name: str, low: int = 1, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low or (
            high is not None and value > high):
        bound = f"from {low} to {high}" if high is not None else f"of at least {low}"
        raise ValueError(f"{name} must be an integer {bound}, got {value!r}")
    return int(value)


def choose_alpha(fmt: SliceFormat, k: int, k_block: int | None = None) -> tuple[int, int]:
    """(alpha, k_block) for inner dimension k: see :mod:`gpu.ozaki`.

    With ``k_block`` given (at least 16), alpha is the most bits for which that
    many terms sum exactly, and calls take at most ``k_block`` terms (rounded down
    to a multiple of 16).
    """
    if k_block is not None:
        k_block = _positive_int(k_block, "k_block", ALIGN)
        alpha = fmt.alpha_for(k_block)
        if alpha == 0:
            raise ValueError(f"k_block = {k_block} is too long for {fmt.name}: even 1-bit digits would "
                             f"overflow its accumulator (at most {fmt.terms(1)} terms)")
        return alpha, k_block // ALIGN * ALIGN
    alpha = max(fmt.alpha_for(_round_up(max(k, 1))), min(fmt.min_alpha, fmt.bits))
    return alpha, min(fmt.terms(alpha) // ALIGN * ALIGN, 2**30)


def _chunks(slices: int, ldk: int, k_block: int, remainder: bool = False) -> tuple[Chunk, ...]:
    """Every diagonal, smallest first, cut into near-equal calls of at most k_block terms.

    A_cat holds digit s at position s - 1 and B_cat digit t at position top - t
    (top = S, or S - 1 with ``remainder``), so the pairs (s, d - s) of a diagonal
    are one contiguous inner range of both. With ``remainder`` the last diagonal
    pairs A_1 .. A_{S-1} and A's rounded tail with B's rounded tails T_S .. T_1,
    which B_cat holds at positions S - 1 .. 2S - 2: one range again, not exact.
    """
    def pieces(d: int, a0: int, b0: int, length: int, exact: bool) -> list[Chunk]:
        size = _round_up(-(-length // -(-length // k_block)))
        starts = range(0, length, size)
        return [Chunk(d, a0 + x, b0 + x, min(size, length - x), x == starts[-1], exact) for x in starts]

    top = slices - 1 if remainder else slices
    out: list[Chunk] = []
    if remainder:
        out += pieces(slices + 1, 0, (slices - 1) * ldk, slices * ldk, False)
    for d in range(slices if remainder else slices + 1, 1, -1):
        s0, s1 = max(1, d - slices), min(slices, d - 1)
        out += pieces(d, (s0 - 1) * ldk, (top - d + s0) * ldk, (s1 - s0 + 1) * ldk, True)
    return tuple(out)


#: Most accumulator buffers held at once when memory is bounded. More save fold launches
#: (each re-reads and re-writes C) but make one huge allocation: on the H100, 50 buffers
#: of 1 GiB at N = 16384 were refused by the allocator although the free memory reported
#: before the slicing seemed to allow them...
MAX_HELD = 8
#: ... unless they are small: a bounded plan holds as many as fit in this many bytes (64 buffers of 16 MiB at
#: N = 2048: 3 fold launches for a count of 11 in FP32 slices instead of 17; 1 GiB is what 8 buffers hold at
#: N = 8192 anyway).
HELD_BYTES = 2**30
#: Most buffers one fold launch adds (the closing flags travel as one 64-bit mask).
MAX_FOLD = 64


def plan(m: int, k: int, n: int, slices: int, slice_format: str = "fp32", *, k_block: int | None = None,
         memory: int | None = None, remainder: bool = False, bound: float | None = None) -> OzakiPlan:
    """The configuration of an m x k by k x n product, before it runs: alpha, k_block, GEMM calls,
    buffers and the workspace by part (:meth:`OzakiPlan.report`).

    ``memory``: bytes available for the workspace (None: unbounded, every buffer held
    at once, one fold launch). With it, at most :data:`MAX_HELD` buffers are held, or as many as
    :data:`HELD_BYTES` hold where they are small (at most :data:`MAX_FOLD`; fewer if they do not fit), GEMMs
    and folds alternate;
    :class:`WorkspaceError` if not even one buffer fits beside the slices.
    ``bound``: the proven componentwise bound on the data, when ``target`` chose the slices (reported).
    """
    fmt = get_format(slice_format)
    m, k, n = (_positive_int(v, name, 0) for v, name in ((m, "m"), (k, "k"), (n, "n")))
    slices = _positive_int(slices, "slices", 1, MAX_SLICES)
    alpha, block = choose_alpha(fmt, k, k_block)
    if remainder and not fmt.floating:
        raise ValueError(f"{fmt.name} slices hold integers; the rounded-remainder form needs a float format")
    ldk, n_pad = _round_up(max(k, 1)), _round_up(max(n, 1))
    if (slices + 1) * ldk > 2**31 - 1 or max(m, n_pad) > 2**31 - 1 or n_pad > 65535 * 32 or m > 65535 * 32:
        raise ValueError(f"{m} x {k} x {n} with {slices} slices exceeds the 32-bit sizes of cuBLAS "
                         "and the slicing kernel; split the product into blocks")
    chunks = _chunks(slices, ldk, block, bool(remainder))
    p = OzakiPlan(m, k, n, slices, fmt, alpha, block, ldk, n_pad, chunks, len(chunks), bool(remainder), bound)
    if memory is None:
        return p
    budget = int(HEADROOM * memory)
    buffer = replace(p, held=1).workspace()["buffers"]
    held = min(len(chunks), MAX_FOLD, max(MAX_HELD, HELD_BYTES // max(buffer, 1)))
    while held >= 1:
        p = replace(p, held=held)
        if p.workspace_bytes <= budget:
            return p
        buffer = p.workspace()["buffers"] // held
        fixed = p.workspace_bytes - p.workspace()["buffers"]
        held = min(held - 1, max(0, (budget - fixed) // max(buffer, 1)))
    p = replace(p, held=1)
    raise WorkspaceError(f"predicted workspace beyond the memory available: {p.report()}; "
                         f"{_bytes(memory)} available ({HEADROOM:.0%} usable). Use fewer slices, a format "
                         "with smaller slices (int8), or split the product into blocks of rows")


def predicted_error(alpha: int, slices: int, ratio: float) -> float:
    """The proven bound on |T - AB|_ij / (|A||B|)_ij, T the exact sum of the kept slice pairs:
    (S + 1) 2**(-alpha S) G, with ``ratio`` G of :func:`gpu.ozaki.bound.slice_ratio`."""
    return (slices + 1) * 2.0 ** (-alpha * slices) * ratio


def target_value(target: Any) -> float:
    """A target as a componentwise error bound: a number in (0, 1), or a name of :data:`TARGETS`."""
    if isinstance(target, str):
        if target not in TARGETS:
            raise ValueError(f"unknown target {target!r}; give a bound in (0, 1) or one of {', '.join(TARGETS)}")
        return TARGETS[target]
    if isinstance(target, bool) or not isinstance(target, numbers.Real) or not 0 < target < 1:
        raise ValueError(f"target must be a number in (0, 1) (an error bound) or one of "
                         f"{', '.join(map(repr, TARGETS))}, got {target!r}")
    return float(target)


def auto_slices(alpha: int, ratio: float, target: Any) -> int:
    """The fewest slices whose :func:`predicted_error`, plus the fold's :data:`SUM_ERROR`, meets ``target``
    (both evaluated with a relative margin of 2**-40); ValueError, before any product, if none up to
    :data:`MAX_SLICES` does."""
    budget = target_value(target) * (1 - 2.0**-40) - SUM_ERROR
    if budget <= 0:
        raise ValueError(f"target {target!r} is below what the float64 sum of the slice products guarantees "
                         f"(2^-91 of |A||B|); give a target of at least 2^-90")
    for s in range(1, MAX_SLICES + 1):
        if predicted_error(alpha, s, ratio) * (1 + 2.0**-40) <= budget:
            return s
    raise ValueError(out_of_reach(target, alpha, float(np.log2(ratio)) if ratio < np.inf else None))


def out_of_reach(target: Any, alpha: int, spread: float | None) -> str:
    """The message of a target no slice count reaches; ``spread``: log2 of the bound's ratio (None: infinite)."""
    shown = f"2^{spread:.0f}" if spread is not None else "more than 2^900"
    return (
        f"cannot meet target {target!r} with at most {MAX_SLICES} slices of {alpha} bits on these inputs: "
        f"k times the largest |a| of a row times the largest |b| of a column exceeds (|A||B|)_ij by {shown} "
        "for some entry, and each row's slices carry its entries relative to its largest, so the proven bound "
        "stays above the target. To run anyway without this bound pass slices= (a count); or pass a looser "
        "target; or scale or split A's rows and B's columns so that each spans fewer binades (the library "
        "GEMM, A @ B, has no such limit)")
