"""A split-K product as data: how the inner dimension is cut, and in which order the chunks add up.

:class:`SplitPlan` fixes everything the result depends on: the chunk width (so
the chunk boundaries), and the reduction's grouping. The deterministic mode
adds the chunk partials in a fixed order, in two stages so that neither stage is
a long serial chain: chunks ``g G .. g G + G - 1`` are added in turn into the
group's first slot, then the group sums are added in turn, and ``beta C`` last.
Two runs of one plan therefore give the same bits, whatever the device does in
parallel; the NumPy and CUDA operations (:mod:`gpu.splitk.ops`,
:mod:`gpu.splitk.kernels`) follow this order.

Chunks are balanced: they are cut from whole units of ``unit`` elements, and their
widths differ by at most one unit. The chunk count comes from the occupancy formula
(:mod:`gpu.splitk.occupancy`) with the device's limits and the kernel's resources: one
wave of chunks fills the device with resident blocks, and the count is a whole number
of waves, as many as make chunks about :data:`TARGET_WIDTH` wide (the paper's best
K_offset) in the atomic mode where that makes :data:`NARROW_WAVES` waves or more (one
wave otherwise), and :data:`DETERMINISTIC_WIDTH` in the deterministic one,
whose chunks each also write an m x n partial that the reduction reads back: on the
H100, whole waves of 4096-wide chunks ran that mode 3-8% faster than 1024-wide ones at
m = n = 16 to 64. Where k is a multiple of :data:`ALIGN`, the auto plan's unit
is :data:`ALIGN`, so that every chunk also starts aligned (see there).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from . import occupancy
from .occupancy import Kernel, SMLimits

#: The paper's most stable chunk width (K_offset): the atomic mode's target where it makes
#: :data:`NARROW_WAVES` waves or more.
TARGET_WIDTH = 1024
#: The atomic mode cuts :data:`TARGET_WIDTH`-wide chunks only where they make at least this many waves, and
#: one wave of wider chunks otherwise. Measured on the H100 (m = n = 16, 32, 64 by k = 2^20-2^24,
#: two passes): one wave ran up to 5% faster than 2-16 waves of 1024-wide chunks (each block's pipeline
#: fill and the last wave's tail cost more than they buy), while from 31 waves up the narrow chunks ran
#: 0.3-1.6% faster (the blocks running at once read neighbouring stretches of each row). The comparisons
#: with the default stage depth were timed after the probe's copy and read low (the probes' ``caveat``); those
#: with the other depths, timed clear of it, show the same.
NARROW_WAVES = 24
#: The deterministic mode's target chunk width (see the module notes).
DETERMINISTIC_WIDTH = 4096
#: The target chunk width of the bulk-copy kernel (``splitk_bulk``), in both modes: each block's pipeline of
#: tensor-map copies pays its fill once per chunk, so whole waves of wide chunks. Measured on the H200
#: (results/published/h200/h200-splitk-bulk-tune.json): one wave ran m = n = 16-64 at k = 2^20 2-6% faster
#: than two, and as fast as two at k = 2^24; waves of 4096-wide chunks ran 1.5-5% slower.
BULK_WIDTH = 32768
#: A CUDA grid's z dimension holds at most this many chunks.
MAX_CHUNKS = 65535
#: Auto chunks start on multiples of this many elements where k allows (512 bytes of FP64: whole DRAM
#: bursts and L2 sectors for every chunk's first row segment). Measured on the H100 at k = 2^24: 16384
#: chunks of exactly 1024 ran 4-5% faster than 16368 whole-wave chunks of 1024-1025 (m = 8, 16 and 64).
ALIGN = 64
#: Blocks one SM holds at most, on every GPU since sm_70 (CUDA's limit): what bounds a wave from above where the
#: kernels' resources are unknown (:func:`widest`).
BLOCKS_PER_SM = 32
#: Below this inner dimension the library GEMM already has enough work per output tile.
MIN_K = 4096
#: Above this many outputs the output tiles alone fill the device: nothing to split for.
MAX_OUTPUTS = 512 * 512


@dataclass(frozen=True)
class SplitPlan:
    """An m x k by k x n split-K product cut into ``chunks`` balanced chunks of whole units of ``unit``
    elements (widths differ by at most one unit: the first :attr:`extra` chunks are one unit wider),
    added in groups of ``group`` (deterministic mode) or atomically; ``wide``: one wave of wide chunks,
    run by the kernel's wide form (:attr:`gpu.splitk.occupancy.Kernel.wide`)."""

    m: int
    n: int
    k: int
    chunks: int
    group: int
    deterministic: bool = True
    waves: int = 1
    unit: int = 1
    wide: bool = False

    def __post_init__(self) -> None:
        if self.unit < 1 or self.k % self.unit or not 1 <= self.chunks <= max(1, self.k // self.unit):
            raise ValueError(f"{self.chunks} chunks of whole {self.unit}-element units cannot cut k = {self.k}")

    @property
    def base(self) -> int:
        """Units in the narrower chunks."""
        return self.k // self.unit // self.chunks

    @property
    def extra(self) -> int:
        """How many chunks (the first ones) are one unit wider than :attr:`base` units."""
        return self.k // self.unit % self.chunks

    @property
    def width(self) -> int:
        """Width of the widest chunk, elements."""
        return self.unit * (self.base + (self.extra > 0))

    @property
    def groups(self) -> int:
        return -(-self.chunks // self.group)

    def bounds(self) -> list[tuple[int, int]]:
        """[start, stop) of each chunk along k."""
        starts = [self.unit * (h * self.base + min(h, self.extra)) for h in range(self.chunks + 1)]
        return list(zip(starts, starts[1:]))

    def workspace_elements(self) -> int:
        """Elements of the partials' buffer: one m x n partial per chunk (deterministic mode only)."""
        return self.chunks * self.m * self.n if self.deterministic else 0

    def as_dict(self) -> dict[str, Any]:
        return {"m": self.m, "n": self.n, "k": self.k, "chunks": self.chunks, "width": self.width,
                "group": self.group, "groups": self.groups, "deterministic": self.deterministic, "waves": self.waves,
                "unit": self.unit, "wide": self.wide}


def check_worth(m: int, n: int, k: int) -> None:
    """ValueError where splitting k cannot pay: a small k, or an output whose tiles alone fill
    the device; the library GEMM is the right call there."""
    if k < MIN_K:
        raise ValueError(f"k = {k} is small: split-K pays when k is at least {MIN_K} and the output is small; "
                         "call the library GEMM (A @ B) here")
    if m * n > MAX_OUTPUTS:
        raise ValueError(f"the {m} x {n} output is large: its own tiles fill the device, so splitting k only adds "
                         f"a reduction (split-K takes at most {MAX_OUTPUTS} outputs); call the library GEMM (A @ B)")


def _count(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive whole number, got {value!r}")
    return value


def plan(m: int, n: int, k: int, limits: SMLimits, kernel: Kernel, *, chunks: int | str = "auto",
         chunk_width: int | None = None, deterministic: bool = True) -> SplitPlan:
    """The split of an m x k by k x n product: ``chunks``, or the fewest chunks no wider than
    ``chunk_width``, or (``"auto"``) whole waves of the occupancy formula at about
    :data:`TARGET_WIDTH` per chunk, :data:`DETERMINISTIC_WIDTH` in the deterministic mode
    (see the module notes); an auto plan of one wave is a wave of ``kernel.wide`` where the
    kernel has a wide form."""
    if chunk_width is not None and chunks != "auto":
        raise ValueError("give chunks= or chunk_width=, not both")
    per_wave, wide = occupancy.chunks(max(m, 1), max(n, 1), limits, kernel), False
    if chunk_width is not None:
        p = -(-k // _count(chunk_width, "chunk_width"))
    elif chunks != "auto":
        p = _count(chunks, "chunks")
    else:
        waves = _waves(k, per_wave, deterministic, kernel.width)
        wide = waves == 1 and kernel.wide is not None
        if wide:
            per_wave = occupancy.chunks(max(m, 1), max(n, 1), limits, kernel.wide)
        p = per_wave * waves
    return _split(m, n, k, p, per_wave, deterministic, chunks == "auto" and chunk_width is None, wide)


def _waves(k: int, per_wave: int, deterministic: bool, width: int | None = None) -> int:
    """Waves of the automatic split (see the module notes) where a wave holds ``per_wave`` chunks, for a kernel
    that aims at chunks ``width`` wide in both modes where given."""
    target = width or (DETERMINISTIC_WIDTH if deterministic else TARGET_WIDTH)
    waves = max(1, min(round(k / (per_wave * target)), MAX_CHUNKS // per_wave))
    return 1 if not width and not deterministic and waves < NARROW_WAVES else waves


def _split(m: int, n: int, k: int, p: int, per_wave: int, deterministic: bool, auto: bool,
           wide: bool = False) -> SplitPlan:
    p = min(p, k)
    if p > MAX_CHUNKS:
        raise ValueError(f"{p} chunks exceed the {MAX_CHUNKS} a CUDA grid holds; use fewer chunks, or "
                         f"chunk_width >= {-(-k // MAX_CHUNKS)}")
    unit = ALIGN if auto and k % ALIGN == 0 and p <= k // ALIGN else 1
    return SplitPlan(m, n, k, p, math.isqrt(p - 1) + 1, deterministic, -(-p // per_wave), unit, wide)


def widest(m: int, n: int, k: int, sm_count: int, deterministic: bool) -> tuple[int, int]:
    """(width, chunks) of the automatic split with the largest width + chunks that any device of ``sm_count``
    SMs could take for an m x k by k x n product, whatever its kernels' resources and aims (:func:`_waves`,
    with or without :data:`BULK_WIDTH`): a wave holds 1 to
    :data:`BLOCKS_PER_SM` blocks per SM over 1 to ceil(m / 8) ceil(n / 8) output tiles (no tile is smaller than
    the 8 x 8 mma atom). Split-K's proven bound rests on width + chunks, so this is what a ranking made away
    from the device proves (:func:`gpu.frontdoor.contract.splitk_auto`)."""
    tiles = -(-max(m, 1) // 8) * -(-max(n, 1) // 8)
    chunks = set()
    for width in (None, BULK_WIDTH):            # either kernel's aim: the pipelined one's or the bulk one's
        waves = {per_wave: _waves(k, per_wave, deterministic, width)
                 for per_wave in range(max(1, -(-sm_count // tiles)), BLOCKS_PER_SM * sm_count + 1)}
        chunks |= {per_wave * w for per_wave, w in waves.items()}
        if 1 in waves.values():                 # one wave may run the wide kernel: a wave of any size
            chunks |= set(waves)
    found = []
    for p in chunks:
        try:
            split = _split(m, n, k, p, 1, deterministic, True)
        except ValueError:
            continue
        found.append((split.width, split.chunks))
    return max(found, key=sum, default=(k, 1))
