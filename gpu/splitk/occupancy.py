"""How many chunks a split-K product needs: the occupancy formula of Hattori & Fujimoto (2016).

C = sum_h A_h B_h over p chunks of the inner dimension, one grid layer per
chunk. The GPU runs at once (the paper's occupancy formula)

    M * min(floor(T / t), floor(S / s), floor(R / (r t)), B)

blocks, with per block t threads, s bytes of shared memory and r registers
per thread, and per SM T resident threads, S bytes of shared memory, R
registers and B blocks, on M SMs. Generate at least that many blocks, and
preferably a multiple of it: blocks do equal work, so a partial last wave
leaves SMs idle. :func:`gpu.splitk.plan.plan` reads this with the device's real
limits and the kernel's real resources; :mod:`modeling.splitk` adds the time model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class SMLimits:
    """Per-SM resources and the SM count (K20c: 2048, 49152, 65536, 16 blocks, 13 SMs)."""

    threads: int
    shared_bytes: int
    registers: int
    blocks: int
    sm_count: int


@dataclass(frozen=True)
class Kernel:
    """Per-block needs of the chunk kernel (the paper's: 64 threads, 4096 bytes, 55 registers, 16 x 16 tile),
    and its output tile: ``tile`` rows by ``tile_n`` columns (square where ``tile_n`` is None); ``wide``: the
    needs of the kernel that runs one wave of wide chunks instead, where there is one (deeper stages, so
    fewer blocks: see :func:`gpu.splitk.plan.plan`); ``width``: the chunk width the automatic split aims at
    in both modes where the kernel has one of its own (the bulk-copy kernel's
    :data:`gpu.splitk.plan.BULK_WIDTH`)."""

    threads: int
    shared_bytes: int
    registers_per_thread: int
    tile: int = 16
    tile_n: int | None = None
    wide: Kernel | None = None
    width: int | None = None

    def tiles(self, m: int, n: int) -> int:
        """Output tiles (blocks per chunk) of an m x n output."""
        return math.ceil(m / self.tile) * math.ceil(n / (self.tile_n or self.tile))


def resident_blocks(sm: SMLimits, kernel: Kernel) -> int:
    """Blocks the GPU runs at once: M min(T/t, S/s, R/(r t), B), each ratio rounded down."""
    if min(kernel.threads, kernel.registers_per_thread) <= 0:
        raise ValueError("a block needs at least one thread and one register per thread")
    per_sm = min(sm.threads // kernel.threads,
                 sm.shared_bytes // kernel.shared_bytes if kernel.shared_bytes else sm.blocks,
                 sm.registers // (kernel.registers_per_thread * kernel.threads),
                 sm.blocks)
    if per_sm == 0:
        raise ValueError(f"the kernel does not fit on one SM: {kernel} against {sm}")
    return sm.sm_count * per_sm


def chunks(m: int, n: int, sm: SMLimits, kernel: Kernel, waves: int = 1) -> int:
    """Chunks p so that the grid (m/tile x n/tile x p) holds at least ``waves`` full waves."""
    if waves < 1:
        raise ValueError(f"waves must be at least 1, got {waves}")
    return math.ceil(waves * resident_blocks(sm, kernel) / kernel.tiles(m, n))


def chunk_width(k: int, p: int) -> int:
    """Inner-dimension width of each of p chunks (the last may be shorter)."""
    if not 1 <= p <= k:
        raise ValueError(f"need 1 <= p <= k, got p = {p} and k = {k}")
    return math.ceil(k / p)
