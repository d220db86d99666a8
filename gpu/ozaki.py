"""The Ozaki scheme: float64 products from exact products of low-precision slices.

``matmul(A, B, slices=S, slice_format=F)`` computes A @ B for float64 A and B
by splitting them into S integer slices, multiplying slice pairs on a
low-precision GEMM unit where every product is exact, and summing in float64
(Ozaki, Ogita, Oishi & Rump 2012; Nanai & Fujimoto 2021 with FP32 slices;
Mukunoki et al. 2020 and Ootomo et al. 2024 with tensor cores and INT8).

Slicing (truncation on a power-of-two grid)
-------------------------------------------
Row i of A has the exponent e_i, the smallest integer with max_k |a_ik| <
2**e_i (a zero row gets 0 and only zero digits). With x = a_ik * 2**-e_i, so
|x| < 1, slice t = 1..S holds the integer digit

    m_t = trunc(x_{t-1} * 2**alpha),   x_t = x_{t-1} * 2**alpha - m_t,

so a_ik = 2**e_i * (sum_t m_t 2**(-alpha t) + x_S 2**(-alpha S)) exactly and
|m_t| <= 2**alpha - 1. Every step is exact in float64 (scaling by a power of
two; the fractional part of a float). Columns of B get exponents f_j and
digits the same way (B's slices are stored as rows of B^T). Slices hold the
raw integers in the slice format; the scales 2**(e_i + f_j - alpha d) are
applied in the float64 summation, so inputs far outside the FP32 (or FP16)
exponent range work: only the final ``ldexp`` sees the exponents.

Truncation rather than the papers' ``fl((a + sigma) - sigma)`` (round to
nearest): both give digits of the same grid, but truncation is
sign-symmetric (the digits of -a are those of a, negated), so exact zeros and
exact cancellations in the product come out exactly, and its digits stay
within 2**alpha - 1, which is exactly the INT8 range at alpha = 7.

Products and exactness
----------------------
The triangular scheme keeps the slice pairs (s, t) with s + t <= S + 1,
S(S+1)/2 pair products in all, grouped by diagonal d = s + t. A format's
accumulator holds every integer up to ``limit`` exactly (2**24 for SGEMM,
2**31 - 1 for INT32, a documented margin of 2**22 for tensor-core FP32
accumulation, whose alignment details NVIDIA does not specify). A GEMM that
sums L inner terms of digits below 2**alpha in magnitude is exact when
L * (2**alpha - 1)**2 <= limit, in any order and with any blocking, since
every partial sum is then an integer the accumulator holds. ``alpha`` is the
largest such value for the whole inner dimension k, or the format's
``min_alpha`` when k is too long for it, and then the inner dimension is
blocked: ``k_block`` (at most limit // (2**alpha - 1)**2, a multiple of 16)
inner terms per GEMM call. Any k works.

The slices of one side are stored side by side (A_cat = [A_1 | ... | A_S],
each slice padded to a multiple of 16 columns; B's in reverse order), so the
pairs of a diagonal are ONE product over a contiguous inner range:
sum_{s+t=d} A_s B_t = A_cat[:, a0:a1] @ B_cat[:, b0:b1]^T. A diagonal is cut
into calls of at most ``k_block`` inner terms, each into its own accumulator
buffer: for INT8 (k_block = 133,136 terms) a whole diagonal of up to eight
pairs of k = 16384 lands in one INT32 buffer with one ``gemmEx`` call, and no
buffer is read back by the GEMMs (no beta = 1 passes).

Summation
---------
One fold pass adds the buffers in a fixed order: per diagonal, from the
smallest (d = S + 1) to the largest, D_d = the sum of its buffers in float64
(exact: integers below 2**53), then acc += D_d * 2**(-alpha d); finally
C = ldexp(acc, e_i + f_j). The result depends only on the exact integers D_d,
so it is bitwise the same on NumPy and CuPy, for any blocking, and -0 never
appears (exact zeros are +0, as in the correctly rounded product). When the
buffers do not all fit in memory, GEMMs and folds alternate in batches, with
the open diagonal's D kept between them.

On NumPy the same algorithm runs with NumPy and the CPU BLAS: FP32 slices
through SGEMM, the other formats emulated by a float64 GEMM of their integer
values, which is exact (k_block * 2**(2 alpha) <= 2**53): the CPU path
reproduces the GPU's values, not its speed.

The paper's form: rounded tails (``remainder=True``)
---------------------------------------------------
Nanai & Fujimoto keep the last slice as "the remainder rounded to FP32"; their
3-split product A1 B1 + A1 B2 + A2 B1 + A1 B3 + A2 B2 + A3 B gains the digits
they report only if each slice of A meets the rest of B, rounded: with S - 1
exact digits per side and the rounded tails T_j = fl(B - B_1 - ... - B_{j-1})
(T_1 = fl(B)) and A_S = fl(A - A_1 - ... - A_{S-1}),

    C = sum_{s+t <= S} A_s B_t  +  sum_{s=1..S} A_s T_{S+1-s},

still S(S+1)/2 products, and no term is dropped: the error is the rounding of
the tails to the format (``bits`` significant bits) and of the last diagonal's
FP32 accumulation, about 2**(-alpha (S-1)) times SGEMM's, which is the papers'
gain of alpha bits per split. Tails are rounded to nearest in float64 and
flushed to zero below the format's smallest normal, identically on both
paths; the last diagonal is a rounded float GEMM, so there CPU and GPU differ
in the last bits. INT8 has no such form (its slices are integers). Without
the option, 2 and 3 exact slices of 7 bits lose to SGEMM itself (their
truncation error is 2**(-7 S) times the scale ratios below).

Number of slices for a target
-----------------------------
With R_A = max_i 2**e_i / mean_k |a_ik| (how far a row's scale sits above its
typical entry) and R_B likewise for columns, the dropped terms (pairs beyond
the triangle and the truncated remainders) are bounded, relative to
(|A||B|)_ij, by

    E(S) = (R_A + R_B + (S - 1) R_A R_B) * 2**(-alpha S)

(A_1 B_{>S} and A_{>S} B contribute R_B and R_A, each pair (s, t >= 2) of
the first missing diagonal R_A R_B). ``target=x`` picks the smallest S with
E(S) <= x; ``target="dgemm"`` uses x = 2**-53, the unit roundoff of float64,
the componentwise error of a float64 GEMM per term. This bounds the
truncation part of the componentwise error |c - c*| / (|A||B|)_ij; the
float64 sum adds its own rounding, at most about S/2 units of 2**-53. A max
relative error is the componentwise error times the entry's condition
(|A||B|)_ij / |c*_ij|, as for DGEMM. The bound assumes the dropped terms add
up coherently; on random data it is pessimistic by one or two slices.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .backend import Array, Backend, get_backend, matrix_pair
from .ozaki_kernels import FINALIZE, LOAD_ACC, LOAD_OPEN, STORE_OPEN

#: Slice rows and inner ranges are padded to multiples of this (INT8 tensor cores want 16-byte alignment).
ALIGN = 16
MAX_SLICES = 64
#: Share of free device memory the workspace may take (the rest: cuBLAS workspace, CuPy's pool slack).
HEADROOM = 0.9
#: ``target`` names: componentwise error bounds.
TARGETS = {"dgemm": 2.0**-53, "sgemm": 2.0**-24}


class WorkspaceError(ValueError):
    """The configuration's workspace does not fit in the memory available."""


@dataclass(frozen=True)
class SliceFormat:
    """How one slice format stores digits and accumulates their products.

    ``bits``: digit magnitude bits the storage holds exactly (|m| <= 2**bits - 1);
    ``limit``: the largest integer magnitude the accumulator holds exactly
    (every partial sum must stay within it); ``min_alpha``: block the inner
    dimension rather than use fewer bits per slice than this; ``tile``: issue each
    GEMM as output tiles of at most this size (None: one call).
    """

    name: str
    storage: str
    bits: int
    limit: int
    accumulator: str
    recipe: str
    min_alpha: int
    description: str
    tile: int | None = None

    @property
    def itemsize(self) -> int:
        return np.dtype(self.storage).itemsize

    @property
    def tiny(self) -> float:
        """The smallest normal magnitude of the storage (rounded remainders below it are flushed to 0)."""
        return 2.0**-14 if self.storage == "float16" else 2.0**-126

    @property
    def floating(self) -> bool:
        return self.storage != "int8"

    def terms(self, alpha: int) -> int:
        """How many inner terms of digits below 2**alpha an accumulator sums exactly."""
        return self.limit // (2**alpha - 1) ** 2

    def alpha_for(self, terms: int) -> int:
        """The most bits per digit (at most ``bits``) for which ``terms`` inner terms sum exactly; 0 if none."""
        return max((a for a in range(1, self.bits + 1) if self.terms(a) >= terms), default=0)


#: The slice formats, as data. Tensor-core FP32 accumulation gets 22 exact bits, two below
#: FP32's 24: NVIDIA documents neither the alignment nor the rounding of its internal adds,
#: and the GPU tests check exactness at that bound. INT8 GEMMs are issued as output tiles of
#: at most 8192: cuBLAS 13.1 on the H100 ran INT8 at 752 TOPS for 16384 x 16384 x 16384 and
#: 662 for 16384 x 16384 x 131072, but at 1898 for 8192 x 8192 x 131072 (measured).
FORMATS: dict[str, SliceFormat] = {f.name: f for f in (
    SliceFormat("fp32", "float32", 24, 2**24, "float32", "fp32", 7,
                "FP32 slices, SGEMM (the paper's method)"),
    SliceFormat("tf32", "float32", 11, 2**22, "float32", "tf32", 5,
                "TF32 tensor cores (FP32 storage, 11-bit digits), FP32 accumulation"),
    SliceFormat("fp16", "float16", 11, 2**22, "float32", "fp16", 5,
                "FP16 tensor cores, FP32 accumulation"),
    SliceFormat("bf16", "uint16", 8, 2**22, "float32", "bf16", 5,
                "BF16 tensor cores (bit patterns in uint16), FP32 accumulation"),
    SliceFormat("int8", "int8", 7, 2**31 - 1, "int32", "int8", 7,
                "INT8 tensor cores, INT32 accumulation", tile=8192),
)}


def get_format(name: str) -> SliceFormat:
    """The slice format called ``name``; ValueError listing the known ones otherwise."""
    if isinstance(name, SliceFormat):
        return name
    try:
        return FORMATS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown slice format {name!r}; choose one of {', '.join(FORMATS)}") from None


def parse_variant(token: str) -> tuple[SliceFormat, bool]:
    """(format, remainder) of a variant name: a format (``int8``), or a float format with ``r``
    appended for the paper's rounded-tail form (``fp32r``)."""
    if isinstance(token, str) and token in FORMATS:
        return FORMATS[token], False
    if isinstance(token, str) and token.endswith("r") and token[:-1] in FORMATS and FORMATS[token[:-1]].floating:
        return FORMATS[token[:-1]], True
    names = list(FORMATS) + [f + "r" for f, v in FORMATS.items() if v.floating]
    raise ValueError(f"unknown slice format {token!r}; choose one of {', '.join(names)} "
                     "(r: the last diagonal multiplies rounded tails, the paper's form)")


# --------------------------------------------------------------------------- planning

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
            "output": 8 * self.m * self.n,
        }

    @property
    def workspace_bytes(self) -> int:
        return sum(self.workspace().values())

    def as_dict(self) -> dict[str, Any]:
        return {"m": self.m, "k": self.k, "n": self.n, "slices": self.slices, "format": self.format.name,
                "remainder": self.remainder, "alpha": self.alpha, "k_block": self.k_block, "pairs": self.pairs, "gemm_calls": self.gemm_calls,
                "buffers": len(self.chunks), "buffers_held": self.held, "fold_launches": len(self.batches),
                "flops": self.flops, "workspace": self.workspace(), "workspace_bytes": self.workspace_bytes}

    def report(self) -> str:
        """The configuration and its workspace, as text."""
        parts = ", ".join(f"{k} {_bytes(v)}" for k, v in self.workspace().items() if v)
        last = " (rounded tails on the last diagonal)" if self.remainder else ""
        return (f"Ozaki {self.format.name} x {self.slices} slices{last} on {self.m} x {self.k} x {self.n}: "
                f"alpha = {self.alpha} bits per slice, k_block = {self.k_block}, {self.pairs} slice pairs in "
                f"{self.gemm_calls} GEMM calls ({self.format.recipe}), {len(self.chunks)} buffers "
                f"({self.held} held), {len(self.batches)} fold launch(es); workspace "
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
    """(alpha, k_block) for inner dimension k: see the module notes.

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
#: before the slicing seemed to allow them.
MAX_HELD = 8


def plan(m: int, k: int, n: int, slices: int, slice_format: str = "fp32", *, k_block: int | None = None,
         memory: int | None = None, remainder: bool = False) -> OzakiPlan:
    """The configuration of an m x k by k x n product, before it runs: alpha, k_block, GEMM calls,
    buffers and the workspace by part (:meth:`OzakiPlan.report`).

    ``memory``: bytes available for the workspace (None: unbounded, every buffer held
    at once, one fold launch). With it, at most :data:`MAX_HELD` buffers are held
    (and fewer if they do not fit), GEMMs and folds alternate;
    :class:`WorkspaceError` if not even one buffer fits beside the slices.
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
    p = OzakiPlan(m, k, n, slices, fmt, alpha, block, ldk, n_pad, chunks, len(chunks), bool(remainder))
    if memory is None:
        return p
    budget = int(HEADROOM * memory)
    held = min(len(chunks), MAX_HELD)
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


# --------------------------------------------------------------------------- auto

def predicted_error(alpha: int, slices: int, ratio_a: float, ratio_b: float) -> float:
    """The bound E(S) of the module notes on |c - c*| / (|A||B|)_ij."""
    return (ratio_a + ratio_b + (slices - 1) * ratio_a * ratio_b) * 2.0 ** (-alpha * slices)


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


def auto_slices(alpha: int, ratio_a: float, ratio_b: float, target: Any) -> int:
    """The fewest slices whose bound :func:`predicted_error` meets ``target``."""
    bound = target_value(target)
    for s in range(1, MAX_SLICES + 1):
        if predicted_error(alpha, s, ratio_a, ratio_b) <= bound:
            return s
    raise ValueError(f"no number of slices up to {MAX_SLICES} meets target {target!r} at alpha = {alpha} "
                     f"(scale ratios {ratio_a:.3g} and {ratio_b:.3g})")


def scale_ratio(xp: Any, exps: Array, absmax: Array, abssum: Array, count: int) -> float:
    """max over nonzero lines of 2**e / mean |x| (1 when every line is zero)."""
    nonzero = absmax > 0
    if not count or not bool(nonzero.any()):
        return 1.0
    ratios = xp.ldexp(xp.ones(exps.shape), exps) * count / xp.where(nonzero, abssum, 1.0)
    return float(xp.where(nonzero, ratios, 1.0).max())


# --------------------------------------------------------------------------- operands and statistics

def _operands(be: Backend, A: Any, B: Any) -> tuple[Array, Array]:
    A, B, _, _ = matrix_pair(be, A, B)
    for name, x in (("A", A), ("B", B)):
        if x.dtype != np.float64:
            raise TypeError(f"{name} has dtype {x.dtype}; the Ozaki scheme takes float64 inputs "
                            "(convert with .astype(np.float64))")
    return A, B


@dataclass
class Lines:
    """Per row of A (or column of B): the exponent e with max |x| < 2**e, and optionally sum |x|."""

    exps: Array
    absmax: Array
    abssum: Array | None = None


def _lines(be: Backend, X: Array, axis: int, name: str, with_sum: bool = False) -> Lines:
    """Exponents of X's rows (axis 1) or columns (axis 0); ValueError for NaN or infinity."""
    xp = be.xp
    if X.shape[axis] == 0:
        zeros = xp.zeros(X.shape[1 - axis])
        return Lines(xp.zeros(X.shape[1 - axis], dtype=np.int32), zeros, zeros)
    if be.name == "cupy":
        from . import ozaki_kernels as kern

        mx = kern.absmax(X, axis)
        total = kern.abssum(X, axis) if with_sum else None
    else:
        mag = np.abs(X)
        mx = mag.max(axis=axis)
        total = mag.sum(axis=axis) if with_sum else None
    bad = int((~xp.isfinite(mx)).sum())
    if bad:
        what = "rows" if axis == 1 else "columns"
        raise ValueError(f"{name} has NaN or infinite entries (in {bad} {what}); the Ozaki scheme "
                         "needs finite inputs")
    return Lines(xp.frexp(mx)[1].astype(np.int32), mx, total)


# --------------------------------------------------------------------------- configuration

def configure(A: Any, B: Any, *, slices: int | None = None, slice_format: str = "fp32", target: Any = None,
              k_block: int | None = None, remainder: bool = False, backend: str | Backend = "auto") -> OzakiPlan:
    """The plan ``matmul`` would run on these operands (``target``: slices chosen from the data),
    with the workspace sized to the device's free memory; raises as ``matmul`` would."""
    be = get_backend(backend)
    A, B = _operands(be, A, B)
    return _configure(be, A, B, slices, slice_format, target, k_block, remainder, out_given=False)[0]


def _request(slices: Any, target: Any, remainder: bool = False) -> tuple[int | None, Any]:
    """(slices, target) after checks: exactly one of them, ``target="dgemm"`` when neither is given."""
    if slices is not None and target is not None:
        raise ValueError("give either slices (a count) or target (an error bound), not both")
    if slices is None and remainder:
        raise ValueError("target picks slices for exact digits only; with remainder=True give slices")
    if slices is None:
        target = "dgemm" if target is None else target
        target_value(target)
        return None, target
    return _positive_int(slices, "slices", 1, MAX_SLICES), None


def _configure(be: Backend, A: Array, B: Array, slices: Any, slice_format: str, target: Any,
               k_block: int | None, remainder: bool, out_given: bool) -> tuple[OzakiPlan, Lines, Lines]:
    fmt = get_format(slice_format)
    slices, target = _request(slices, target, remainder)
    (m, k), n = A.shape, B.shape[1]
    rows, cols = _lines(be, A, 1, "A", slices is None), _lines(be, B, 0, "B", slices is None)
    if slices is None:
        alpha = choose_alpha(fmt, k, k_block)[0]
        slices = auto_slices(alpha, scale_ratio(be.xp, rows.exps, rows.absmax, rows.abssum, k),
                             scale_ratio(be.xp, cols.exps, cols.absmax, cols.abssum, k), target)
    free = be.memory_info()[0] + (8 * m * n if out_given else 0)
    return plan(m, k, n, slices, fmt, k_block=k_block, memory=free, remainder=remainder), rows, cols


# --------------------------------------------------------------------------- execution

def matmul(A: Any, B: Any, *, slices: int | None = None, slice_format: str = "fp32", target: Any = None,
           k_block: int | None = None, remainder: bool = False, backend: str | Backend = "auto",
           overwrite_a: bool = False, overwrite_b: bool = False, out: Any = None,
           phases: dict[str, float] | None = None) -> Array:
    """``A @ B`` in float64 by the Ozaki scheme (see the module notes).

    ``slices``: slices per operand (S(S+1)/2 slice-pair products), or ``target``:
    an error bound relative to |A||B| (a number, ``"dgemm"`` for 2**-53 or
    ``"sgemm"``) from which the slices are chosen; neither means
    ``target="dgemm"``. ``slice_format``: ``fp32`` (SGEMM, the paper's method),
    ``tf32``, ``fp16``, ``bf16`` (tensor cores, FP32 accumulation) or ``int8``
    (INT32 accumulation). ``k_block``: most inner terms per GEMM call (default:
    as many as the format's accumulator sums exactly). ``remainder``: the
    paper's form for float formats (see the module notes): the last diagonal
    multiplies each slice of A by the rest of B rounded to the format, and A's
    rounded rest by B rounded, so nothing is dropped; more accurate per slice,
    but those products are rounded, not exact, and CPU and GPU results then
    differ in the last bits. ``overwrite_a`` /
    ``overwrite_b``: on NumPy the input may hold the scaled remainders while
    slicing (saving a float64 copy; ignored when A and B share memory); the
    GPU kernel needs no scratch and ignores them. ``out``: a C-ordered float64 array for the result.
    ``phases``: a dict that receives seconds per phase (``split``, ``gemm``,
    ``sum``; each phase synchronized, for breakdowns).

    Raises TypeError for non-float64 inputs, ValueError for NaN or infinite
    entries, bad shapes or parameters, and :class:`WorkspaceError` (a
    ValueError) when the workspace would not fit in free memory.
    """
    be = get_backend(backend)
    A, B = _operands(be, A, B)
    (m, k), n = A.shape, B.shape[1]
    C = _output(be, out, m, n)
    get_format(slice_format)
    _request(slices, target, remainder)
    if m == 0 or n == 0:
        return C
    with _phase(be, phases, "split"):
        p, rows, cols = _configure(be, A, B, slices, slice_format, target, k_block, remainder, out is not None)
        if k == 0:
            C[...] = 0.0
            return C
        if (overwrite_a or overwrite_b) and be.xp.may_share_memory(A, B):
            overwrite_a = overwrite_b = False            # slicing A in place would change B (matmul(A, A.T))
        a_cat = _split(be, A, rows.exps, p, p.m, reverse=False, overwrite=overwrite_a)
        b_cat = _split(be, B.T, cols.exps, p, p.n_pad, reverse=True, overwrite=overwrite_b)
    _products_and_sum(be, p, a_cat, b_cat, rows.exps, cols.exps, C, phases)
    return C


def _output(be: Backend, out: Any, m: int, n: int) -> Array:
    if out is None:
        return be.xp.empty((m, n), dtype=np.float64)
    if (not isinstance(out, be.xp.ndarray) or out.shape != (m, n) or out.dtype != np.float64
            or (m > 1 and n > 0 and (out.strides[1] != 8 or out.strides[0] < 8 * n))):
        raise ValueError(f"out must be a {be.xp.__name__} float64 array of shape ({m}, {n}) with "
                         "contiguous rows (C order)")
    return out


@contextmanager
def _phase(be: Backend, phases: dict[str, float] | None, name: str) -> Iterator[None]:
    if phases is None:
        yield
        return
    with be.timer() as t:
        yield
    phases[name] = phases.get(name, 0.0) + t.seconds


def split_values(xp: Any, X: Array, exps: Array, alpha: int, slices: int) -> list[Array]:
    """The float64 digits m_1..m_S of X's rows (reference version of the slicing, also for tests)."""
    x = xp.ldexp(X, -exps[:, None].astype(np.int32))
    radix, digits = 2.0**alpha, []
    for _ in range(slices):
        x = x * radix
        digit = xp.trunc(x)
        x = x - digit
        digits.append(digit)
    return digits


def round_significant(xp: Any, r: Array, bits: int, tiny: float) -> Array:
    """r rounded to nearest (ties to even) with ``bits`` significant bits, magnitudes below ``tiny`` to +0."""
    exponent = xp.frexp(r)[1]
    q = xp.ldexp(xp.rint(xp.ldexp(r, bits - exponent)), exponent - bits)
    return xp.where(xp.abs(q) < tiny, 0.0, q)


def encode(xp: Any, digits: Array, storage: str) -> Array:
    """Float64 digits in a slice storage dtype (bfloat16 as uint16 bits); exact for values with at
    most the storage's significand bits in its normal range."""
    if storage == "uint16":
        return (digits.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return digits.astype(storage)


def _split(be: Backend, X: Array, exps: Array, p: OzakiPlan, rows_pad: int, reverse: bool,
           overwrite: bool) -> Array:
    """X's rows as concatenated slices in the format's storage, rows_pad x positions*ldk:
    [X_1 | ... | X_S] for A, B's digits reversed for B (see :func:`_chunks`), and with
    ``remainder`` the rounded tails: A's after S - 1 digits, each of B's T_j at 2S - 1 - j."""
    fmt, S = p.format, p.slices
    rows, cols = X.shape
    layout = _slice_layout(p, reverse)
    if be.name == "cupy":
        from . import ozaki_kernels as kern

        out = be.xp.empty((rows_pad, layout["positions"] * p.ldk), dtype=fmt.storage)
        kern.slice_rows(X, exps, out, rows_pad=rows_pad, ldk=p.ldk, alpha=p.alpha, slices=S, bits=fmt.bits,
                        tiny=fmt.tiny, **{k: v for k, v in layout.items() if k != "positions"})
        return out
    out = np.zeros((rows_pad, layout["positions"] * p.ldk), dtype=fmt.storage)

    def put(pos: int, values: np.ndarray) -> None:
        out[:rows, pos * p.ldk:pos * p.ldk + cols] = encode(np, values, fmt.storage)

    x = X if overwrite and X.flags.writeable else X.copy()
    np.ldexp(x, -exps[:, None], out=x)
    radix, digit = 2.0**p.alpha, np.empty_like(x)
    for j in range(1, S + 1):
        if j >= layout["tail_from"]:
            put(layout["tail_first"] + (j - layout["tail_from"]) * layout["tail_step"],
                round_significant(np, x * radix, fmt.bits, fmt.tiny))
        if j <= layout["digits"]:
            x *= radix
            np.trunc(x, out=digit)
            x -= digit
            put(layout["first"] + (j - 1) * layout["step"], digit)
    return out


def _slice_layout(p: OzakiPlan, reverse: bool) -> dict[str, int]:
    """Where the slicing writes digit j (``first + (j-1) step``) and tail T_j (from ``tail_from`` on)."""
    S = p.slices
    if not p.remainder:
        return {"positions": S, "digits": S, "first": S - 1 if reverse else 0, "step": -1 if reverse else 1,
                "tail_from": S + 1, "tail_first": 0, "tail_step": 0}
    if reverse:
        return {"positions": 2 * S - 1, "digits": S - 1, "first": S - 2, "step": -1,
                "tail_from": 1, "tail_first": 2 * S - 2, "tail_step": -1}
    return {"positions": S, "digits": S - 1, "first": 0, "step": 1, "tail_from": S, "tail_first": S - 1,
            "tail_step": 0}


def _tiles(m: int, n: int, tile: int | None) -> list[tuple[slice, slice]]:
    """Row and column ranges of the output tiles (one tile when ``tile`` is None)."""
    step_m, step_n = (tile or m), (tile or n)
    return [(slice(i, min(i + step_m, m)), slice(j, min(j + step_n, n)))
            for i in range(0, m, step_m) for j in range(0, n, step_n)]


def _products_and_sum(be: Backend, p: OzakiPlan, a_cat: Array, b_cat: Array, erow: Array, ecol: Array,
                      C: Array, phases: dict[str, float] | None) -> None:
    """The GEMM calls of every chunk, batch by batch, each batch folded into C."""
    xp, fmt = be.xp, p.format
    buffers = xp.empty((p.held, p.m, p.n_pad), dtype=fmt.accumulator)
    open_ = xp.zeros((p.m, p.n), dtype=np.float64) if p.needs_open else None
    batches = p.batches
    for number, batch in enumerate(batches):
        with _phase(be, phases, "gemm"):
            for slot, index in enumerate(batch):
                c = p.chunks[index]
                a, b = a_cat[:, c.a_start:c.a_start + c.length], b_cat[:, c.b_start:c.b_start + c.length]
                for rows, cols in _tiles(p.m, p.n_pad, fmt.tile):
                    be.gemm_ex(a[rows], b[cols].T, buffers[slot, rows, cols], recipe=fmt.recipe)
        chunks = [p.chunks[i] for i in batch]
        flags = ((LOAD_ACC if number else 0) | (LOAD_OPEN if number and not p.chunks[batch[0] - 1].closes else 0)
                 | (STORE_OPEN if not chunks[-1].closes else 0) | (FINALIZE if number == len(batches) - 1 else 0))
        with _phase(be, phases, "sum"):
            fold(be, [buffers[slot, :, :] for slot in range(len(batch))],
                 [2.0 ** (-p.alpha * c.diagonal) for c in chunks], [c.closes for c in chunks],
                 C, open_, erow, ecol, flags)



def fold(be: Backend, buffers: list[Array], scales: list[float], closes: list[bool], acc: Array,
         open_: Array | None, erow: Array, ecol: Array, flags: int) -> None:
    """Add buffers (m x n_pad) into acc (m x n) in the fixed order of the module notes."""
    if be.name == "cupy":
        from . import ozaki_kernels as kern

        kern.fold(buffers, scales, closes, acc, open_, erow, ecol, flags)
        return
    m, n = acc.shape
    a = acc if flags & LOAD_ACC else np.zeros((m, n))
    d = open_.copy() if flags & LOAD_OPEN else np.zeros((m, n))
    for buf, scale, close in zip(buffers, scales, closes):
        d += buf[:, :n]
        if close:
            a += d * scale
            d[...] = 0.0
    if flags & STORE_OPEN:
        open_[...] = d
    if flags & FINALIZE:
        np.ldexp(a, erow[:, None] + ecol[None, :], out=a)
    if a is not acc:
        acc[...] = a
