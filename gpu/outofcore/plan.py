"""An out-of-core product as data: which block of C stays on the device, and which k-panels stream through it.

C = A B with A m x k and B k x n in host memory, larger than the device if need be. C is cut into a grid
of ``block = (rows, cols)`` blocks (the last row and column of the grid may be narrower). Each block stays
resident on the device while the k-panels of width ``panel`` of its rows of A and its columns of B stream
in, ``buffers`` panels in flight (2: double, 3: triple buffering); the products add up on the device (beta
= 1 after the first panel), and the finished block goes back to the host once. ``c_buffers = 2`` keeps a
second C block so that one block's write-back also overlaps the next block's products, not only its loads.
Two refinements hide the ends of a block: its first panels are narrower (:data:`RAMP`: the pipeline fills
quickly) and its last panels are multiplied strip by strip, each strip going back while the next is
multiplied (:data:`STRIPS`). :class:`OutOfCorePlan` fixes all of this, and :meth:`OutOfCorePlan.steps` is
the one schedule the NumPy and CUDA operations run (:mod:`gpu.outofcore.ops`,
:mod:`gpu.outofcore.kernels`).

Memory, in bytes (itemsize s, block br x bc, panel w, S buffers, c C buffers)::

    device = s (c br bc + S w (br + bc))     the C block(s) and S slots of an A and a B panel
    pinned = s (br bc + S w (br + bc))       host staging of the same (one C block: see gpu.outofcore.ops)

Link traffic and arithmetic intensity, with a grid of gr x gc blocks::

    traffic = s (k (m gc + n gr) + m n)      each block reads its rows of A and columns of B once; C goes back once
    flops   = 2 m n k
    per block: 2 br bc k / (s k (br + bc)) = 2 br bc / (s (br + bc)) flop per byte: b / s for a square side b

For FP64 that is b/8 flop per byte (b/4 counting one operand only): 60 TFLOP/s over 55 GB/s needs
b = 8 x 60e12 / 55e9, about 8,700, and b = 32768 needs 60e12 / 4096 = 14.6 GB/s. A larger block is the
only way to a higher intensity, so:

* **block** (when not given): the largest square side whose device bytes fit in ``device_memory`` with the
  panels, capped by m and n (where one side is capped, the other takes the memory left); then, with the
  fewest blocks that side allows along each dimension (each block row streams all of B again), the sides
  are evened out and rounded up to a multiple of :data:`ALIGN` where that still fits (m = 65536 with room
  for 41984 gives two blocks of 32768, not 41984 and 23552).
* **panel** (when not given), without rates: ``min(k, DEFAULT_PANEL)``, or narrower where the smallest
  block does not fit with it (see :data:`DEFAULT_PANEL`). With the link and GEMM rates (``link_bytes_per_s``
  L, ``gemm_flops_per_s`` F, optionally ``hbm_bytes_per_s`` H), panel and block are chosen together: the
  candidate width (ALIGN times a power of two, capped by k) and block (the largest that fits beside it, or
  one up to :data:`FINER` times finer per side, whose write-back shows less) whose plan :func:`predict` runs
  fastest. It times a panel step as::

      copy    = LATENCY + s w (br + bc) / L                      the A and B panels over the link
      compute = LATENCY + 2 br bc w / F + 2 s br bc / H          the GEMM, and C read and written once per call
      total   = copy + steps x max(copy, compute) + blocks x s br bc / L

  where the first copy fills the pipeline, and every block's write-back holds up the next block's first
  GEMM with one C buffer (with two, only the last block's shows: count 1 instead of blocks).

  The copies hide behind the products where copy <= compute. Both grow with w, so apart from the fixed
  costs that is a condition on the block, not the panel: 2 br bc / F >= s (br + bc) / L, b >= s F / L
  for a square block. The width then trades the fixed costs of each call (LATENCY, C's HBM traffic: wide
  panels) against the pipeline's fill and the memory the slots take from the block (narrow panels).

Plans that cannot fit even the smallest block (``min(ALIGN, m) x min(ALIGN, n)``) are refused with
:class:`gpu.backend.MemoryPlanError`, saying how many bytes they need and which argument to change.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

from ..backend import MemoryPlanError

#: Block sides and panel widths are multiples of this where the matrix allows (whole cuBLAS tiles).
ALIGN = 256
#: Panel width without rates. A GEMM call of width w reads and writes the C block once (beta = 1), 2 s b^2
#: bytes of HBM against 2 b^2 w flops: on the H100 (FP64 60 TFLOP/s, 3.35 TB/s) that is 10% of the call at
#: w = 1433 and about 3.5% at 4096, while two slots of 4096-wide panels take 2 x 2 x 4096 x 2b x 8 bytes,
#: under a tenth of a 32768 block's share of memory.
DEFAULT_PANEL = 4096
#: Every operand (A, B, C) through pinned staging: pageable host memory.
ALL_STAGED = (True, True, True)
#: Fixed cost (seconds) of one copy call or one GEMM call with its event in :func:`predict`: assumed, not
#: measured yet.
LATENCY = 10e-6
#: Plans the rate model predicts within this share of the fastest count as tied; of those it takes the one
#: moving the fewest bytes (the model leaves out the host's staging and the ends of each block, which cost
#: more where there are more blocks).
TIE = 0.02
#: Panel widths the rate model tries: ALIGN x 2^i for i below this (capped by k).
WIDTHS = 9
#: The rate model also tries blocks up to this many times finer along each side than the largest that fits.
FINER = 8


#: A block's first panel is cut into these fractions of the plan's width (those at least ALIGN wide): the
#: pipeline fills with a panel of width/8 (a few ms of staging and copy) instead of a whole one (0.1 s at
#: N = 32768 on the H100 machine), each next one staged while the previous one is multiplied, and the
#: later panels keep their whole width. Every block ramps, because its last panels hold every slot until
#: its last strip (see :data:`STRIPS`).
RAMP = (8, 8, 4, 2)
#: A block's last panels (as many as there are slots: all of them are on the device by then) are
#: multiplied in this many row strips (of at least ALIGN rows), each strip stored as soon as it is done, so
#: that the block's write-back (D2H and the host's placement, 0.36 s for a 32768 block) runs under the
#: products and only the last strip's shows.
STRIPS = 16


class Step(NamedTuple):
    """One product of the schedule: where ``load``, first load A[rows, panel] and B[panel, cols] into panel
    slot ``slot``; then multiply the slot's panels into C buffer ``c_slot``, only the block's rows ``strip``
    (relative to the block) where one is given; ``first``: the block's first panel (beta = 0); ``last``:
    then store the block (or its strip)."""

    index: int
    slot: int
    c_slot: int
    rows: slice
    cols: slice
    panel: slice
    first: bool
    last: bool
    load: bool = True
    strip: slice | None = None


class Prediction(NamedTuple):
    """Seconds :func:`predict` gives a plan: one panel's copy and compute, and the whole product."""

    copy: float
    compute: float
    seconds: float

    @property
    def hidden(self) -> bool:
        """Whether the copies hide behind the products."""
        return self.copy <= self.compute


def _ranges(total: int, width: int) -> list[tuple[int, int]]:
    return [(s, min(s + width, total)) for s in range(0, total, width)]


@dataclass(frozen=True)
class OutOfCorePlan:
    """C = A B (A m x k, B k x n) in ``block = (rows, cols)`` blocks resident on the device, k-panels of
    width ``panel`` streamed through ``buffers`` slots, ``c_buffers`` C blocks on the device; ``itemsize``
    bytes per element. Block and panel are at most the matrix (at least 1 each)."""

    m: int
    k: int
    n: int
    itemsize: int
    block: tuple[int, int]
    panel: int
    buffers: int = 2
    c_buffers: int = 1

    @property
    def grid(self) -> tuple[int, int]:
        """Blocks along m and along n."""
        return -(-self.m // self.block[0]), -(-self.n // self.block[1])

    def row_ranges(self) -> list[tuple[int, int]]:
        """[start, stop) of each block row of C (and of A)."""
        return _ranges(self.m, self.block[0])

    def col_ranges(self) -> list[tuple[int, int]]:
        """[start, stop) of each block column of C (and of B)."""
        return _ranges(self.n, self.block[1])

    def panels(self) -> list[tuple[int, int]]:
        """[start, stop) of each k-panel of a block, in the order they add up: the first panel cut as
        :data:`RAMP` says, then panels of the plan's width."""
        widths = [w for w in (self.panel // f for f in RAMP) if w >= ALIGN]
        out, start = [], 0
        for w in widths:
            if start + w < self.k:
                out.append((start, start + w))
                start += w
        return out + [(a + start, b + start) for a, b in _ranges(self.k - start, self.panel)]

    def strips(self, rows: int) -> list[slice | None]:
        """Row strips of a block of ``rows`` rows for its last panels: up to :data:`STRIPS` of at least ALIGN
        rows each ([None]: the whole block at once)."""
        count = max(1, min(STRIPS, rows // ALIGN))
        if count == 1:
            return [None]
        cuts = [rows * i // count for i in range(count + 1)]
        return [slice(a, b) for a, b in zip(cuts, cuts[1:])]

    def steps(self) -> Iterator[Step]:
        """The schedule: blocks row by row; in each block, its panels in order, each loaded into the next
        slot (in turn) and multiplied, except the last ones (as many as slots): those are loaded, then
        multiplied strip by strip (:meth:`strips`), each strip stored once its last panel is in. C buffers
        are used in turn by the blocks."""
        i, loads, panels = 0, 0, self.panels()
        for b, (rows, cols) in enumerate((r, c) for r in self.row_ranges() for c in self.col_ranges()):
            tail = min(self.buffers, len(panels))
            slots = [(loads + t) % self.buffers for t in range(len(panels))]
            loads += len(panels)
            head = [(t, None, True) for t in range(len(panels) - tail)]
            strips = self.strips(rows[1] - rows[0])
            order = head + [(t, strip, r == 0) for r, strip in enumerate(strips)
                            for t in range(len(panels) - tail, len(panels))]
            for t, strip, load in order:
                yield Step(i, slots[t], b % self.c_buffers, slice(*rows), slice(*cols), slice(*panels[t]), t == 0,
                           t == len(panels) - 1, load, strip)
                i += 1

    @property
    def a_panel_bytes(self) -> int:
        return self.block[0] * self.panel * self.itemsize

    @property
    def b_panel_bytes(self) -> int:
        return self.panel * self.block[1] * self.itemsize

    @property
    def c_block_bytes(self) -> int:
        return self.block[0] * self.block[1] * self.itemsize

    @property
    def device_bytes(self) -> int:
        """Device memory of the plan: the C block(s) and the panel slots."""
        return self.c_buffers * self.c_block_bytes + self.buffers * (self.a_panel_bytes + self.b_panel_bytes)

    @property
    def pinned_bytes(self) -> int:
        """Pinned host memory of the plan: a staging buffer per panel slot, and one for the C block."""
        return self.staging_bytes(ALL_STAGED)

    def staging_bytes(self, staged: tuple[bool, bool, bool]) -> int:
        """Pinned staging of the plan where only the operands flagged in ``staged`` (A, B, C) go through it
        (the others are page-locked and copied in place: :mod:`gpu.outofcore.pagelock`)."""
        a, b, c = staged
        return c * self.c_block_bytes + self.buffers * (a * self.a_panel_bytes + b * self.b_panel_bytes)

    def as_dict(self) -> dict[str, Any]:
        return {"m": self.m, "k": self.k, "n": self.n, "itemsize": self.itemsize, "block": list(self.block),
                "panel": self.panel, "buffers": self.buffers, "c_buffers": self.c_buffers, "grid": list(self.grid),
                "device_bytes": self.device_bytes, "pinned_bytes": self.pinned_bytes,
                "traffic_bytes": traffic_bytes(self), "flops": flops(self)}


def traffic_bytes(p: OutOfCorePlan) -> int:
    """Bytes over the link: every block reads its rows of A and columns of B once, C goes back once."""
    gr, gc = p.grid
    return p.itemsize * (p.k * (p.m * gc + p.n * gr) + p.m * p.n)


def flops(p: OutOfCorePlan) -> int:
    """Floating-point operations of the product (a multiply and an add per term)."""
    return 2 * p.m * p.n * p.k


def predict(p: OutOfCorePlan, link_bytes_per_s: float, gemm_flops_per_s: float,
            hbm_bytes_per_s: float | None = None) -> Prediction:
    """The model's seconds for plan ``p`` (see the module notes): one panel step's copy and compute at the
    plan's full block and panel, and the whole product (every panel of a block at its own width)."""
    (br, bc), s = p.block, p.itemsize

    def step(w: int) -> tuple[float, float]:
        copy = LATENCY + s * w * (br + bc) / link_bytes_per_s
        compute = LATENCY + 2 * br * bc * w / gemm_flops_per_s + (2 * s * br * bc / hbm_bytes_per_s
                                                                  if hbm_bytes_per_s else 0.0)
        return copy, compute

    blocks = p.grid[0] * p.grid[1]
    widths = [b - a for a, b in p.panels()]
    strip = p.c_block_bytes / len(p.strips(br)) / link_bytes_per_s
    back = strip * (blocks if p.c_buffers == 1 else 1)
    copy, compute = step(p.panel)
    fill = step(widths[0])[0] if widths else 0.0
    return Prediction(copy, compute, fill + blocks * sum(max(step(w)) for w in widths) + back)


def _whole(name: str, value: Any, low: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        raise ValueError(f"{name} must be a whole number of at least {low}, got {value!r}")
    return int(value)


def _rate(name: str, value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive number, got {value!r}")
    return float(value)


def _block_arg(block: Any, m: int, n: int) -> tuple[int, int]:
    pair = (block, block) if isinstance(block, numbers.Integral) and not isinstance(block, bool) else block
    if not isinstance(pair, (tuple, list)) or len(pair) != 2:
        raise ValueError(f"block must be a side or a (rows, cols) pair of positive whole numbers, got {block!r}")
    rows, cols = (_whole("block", x, 1) for x in pair)
    return max(1, min(rows, m)), max(1, min(cols, n))


def _bytes(br: int, bc: int, w: int, buffers: int, c_buffers: int, s: int) -> int:
    return s * (c_buffers * br * bc + buffers * w * (br + bc))


def _fit(budget: int, w: int, buffers: int, c: int, other: int | None = None) -> int:
    """The largest side x with c x y + S w (x + y) <= budget elements, y = x (square) or y = ``other``."""
    if other is not None:
        return max(0, (budget - buffers * w * other) // (c * other + buffers * w))
    x = max(0, int((math.sqrt((buffers * w) ** 2 + c * budget) - buffers * w) / c))
    while x > 0 and c * x * x + 2 * buffers * w * x > budget:
        x -= 1
    while c * (x + 1) ** 2 + 2 * buffers * w * (x + 1) <= budget:
        x += 1
    return x


def _side(dim: int, fitted: int) -> int:
    """A block side for ``dim`` no larger than ``fitted``, with as few blocks along dim as ``fitted`` allows
    (each block row or column streams all of k again) and those as even as can be: ``dim`` split evenly,
    rounded up to a multiple of ALIGN where that still fits (otherwise the even split as it is)."""
    side = min(dim, fitted)
    if side <= 0 or side == dim:
        return side
    even = -(-dim // -(-dim // side))
    aligned = -(-even // ALIGN) * ALIGN
    return aligned if aligned <= side else even


def _auto_block(m: int, n: int, w: int, buffers: int, c: int, budget: int) -> tuple[int, int]:
    """The largest block that fits ``budget`` elements beside S slots of w-wide panels (see the module notes)."""
    x = _fit(budget, w, buffers, c)
    if x >= m and x >= n:
        return m, n
    if x >= m:
        return m, _side(n, _fit(budget, w, buffers, c, m))
    if x >= n:
        return _side(m, _fit(budget, w, buffers, c, n)), n
    return _side(m, x), _side(n, x)


def _shapes(m: int, n: int, w: int, buffers: int, c: int, budget: int, fixed: tuple[int, int] | None,
            finer: bool) -> list[tuple[int, int]]:
    """Block shapes to try with w-wide panels: the given one; else the largest that fits and, with ``finer``
    (the rate model), the blocks of grids up to :data:`FINER` times finer along each side."""
    if fixed:
        return [fixed]
    rows, cols = _auto_block(max(m, 1), max(n, 1), w, buffers, c, budget)
    shapes = [(rows, cols)]
    for g in range(2, FINER + 1 if finer and rows and cols else 1):
        shapes.append((_side(m, -(-rows // g)) or 1, _side(n, -(-cols // g)) or 1))
    return list(dict.fromkeys(shapes))


def plan(m: int, k: int, n: int, itemsize: int, *, device_memory: int, block: int | tuple[int, int] | None = None,
         panel: int | None = None, buffers: int = 2, c_buffers: int = 1, link_bytes_per_s: float | None = None,
         gemm_flops_per_s: float | None = None, hbm_bytes_per_s: float | None = None) -> OutOfCorePlan:
    """The out-of-core plan of an m x k by k x n product of ``itemsize``-byte elements in ``device_memory``
    bytes: ``block`` (a side, or (rows, cols)) and ``panel`` as given, or from the model (module notes).
    ValueError for bad arguments; :class:`gpu.backend.MemoryPlanError` where the plan cannot fit."""
    m, k, n = (_whole(name, v) for name, v in (("m", m), ("k", k), ("n", n)))
    s, memory = _whole("itemsize", itemsize, 1), _whole("device_memory", device_memory)
    if buffers not in (2, 3) or isinstance(buffers, bool):
        raise ValueError(f"buffers must be 2 (double buffering) or 3 (triple buffering), got {buffers!r}")
    if c_buffers not in (1, 2) or isinstance(c_buffers, bool):
        raise ValueError(f"c_buffers must be 1 or 2 (C blocks resident on the device), got {c_buffers!r}")
    link, rate, hbm = (_rate(nm, v) for nm, v in (("link_bytes_per_s", link_bytes_per_s),
                                                   ("gemm_flops_per_s", gemm_flops_per_s),
                                                   ("hbm_bytes_per_s", hbm_bytes_per_s)))
    if (link is None) != (rate is None):
        raise ValueError("give both link_bytes_per_s and gemm_flops_per_s (the model compares the two), or neither")
    fixed = None if block is None else _block_arg(block, m, n)
    widths = [max(1, min(k, _whole("panel", panel, 1)))] if panel is not None else sorted(
        {max(1, min(k, ALIGN << i)) for i in range(WIDTHS)}, reverse=True)
    least = (min(ALIGN, m) or 1, min(ALIGN, n) or 1)
    fits = [OutOfCorePlan(m, k, n, s, shape, w, buffers, min(c_buffers, _count(m, n, shape)))
            for w in widths for shape in _shapes(m, n, w, buffers, c_buffers, memory // s, fixed, link is not None)
            if (fixed or (shape[0] >= least[0] and shape[1] >= least[1]))
            and _bytes(*shape, w, buffers, c_buffers, s) <= memory]
    if not fits:
        w, shape = widths[-1], fixed or least
        need = _bytes(*shape, w, buffers, c_buffers, s)
        ways = ["a larger device_memory (or free device memory)",
                *(["a smaller block= or panel="] if fixed else ["a narrower panel="] if panel is not None else []),
                *(["buffers=2"] if buffers == 3 else []), *(["c_buffers=1"] if c_buffers == 2 else [])]
        raise MemoryPlanError(
            f"an out-of-core plan of {m} x {k} x {n} ({s}-byte elements) needs {need} bytes "
            f"({need / 2**30:.3f} GiB) of device memory for {'the given' if fixed else 'the smallest'} block "
            f"({shape[0]} x {shape[1]}, {c_buffers} C buffer(s)) and {buffers} slots of {w}-wide panels, but "
            f"device_memory is {memory} bytes: pass {', or '.join(ways)}")
    if link is not None:
        seconds = {p: predict(p, link, rate, hbm).seconds for p in fits}
        best = min(seconds.values())
        return min((p for p in fits if seconds[p] <= best * (1 + TIE)), key=lambda p: (traffic_bytes(p), seconds[p]))
    return next((p for p in fits if p.panel <= DEFAULT_PANEL), fits[-1])


def _count(m: int, n: int, shape: tuple[int, int]) -> int:
    """Blocks in the grid (a second C buffer only helps where there are two blocks)."""
    return max(1, -(-m // shape[0]) * -(-n // shape[1]))
