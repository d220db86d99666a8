"""Scheme II in a bounded workspace: C in tiles, each tile a scheme II product of one row panel of A and one
column panel of B, so that only those panels' residues and the tile's products are held at once.

``ozaki2.matmul(..., workspace=bytes)`` caps the bytes a call takes beyond A, B and C (:func:`tile_bytes`: the
tile's workspace block and its scratch, as :func:`gpu.ozaki2.memory.peak_bytes` counts them). Where the whole
product's plan fits the cap it runs as one product; otherwise :func:`panels` picks the largest square tiles
that fit (rows and columns within one of each other, halving from the whole product) and each tile runs as its
own scheme II product straight into its block of C, one plan per tile shape, freed before the next shape is
planned (:class:`TiledPlan`, which keeps the one tile plan between calls where every tile has one shape). A cap
that not even tiles of :data:`MIN_TILE` lines fit is a :class:`~gpu.backend.MemoryPlanError` before any work.

What a tile computes is the whole product's: the fast and fine scalings' shifts depend on a row's (column's) own
entries only (and on k, which every tile keeps whole), so with a modulus count given (``moduli=N``) and
``scaling="fast"`` or ``"fine"`` the tiled product is **bitwise** the untiled one. Under ``moduli="auto"`` each tile
takes the fewest moduli whose proven bound holds on its own entries (decided on the device, as
:mod:`gpu.ozaki2.deferred` says: read back per tile on a first call only), and the accurate
scaling bounds each tile's own product: the result keeps the same proven bound, and may differ from the untiled one
in the last bits. Square tiles form a row panel's residues again for each column panel, and a column panel's for
each row panel: at a cap of 2 FP64 matrices at 15 moduli the tiles are N/4 wide, so each operand's residues are
formed 4 times. With a count given and the fast or fine scaling (a row's shifts then depend on its own entries), the
tiles may instead be row panels whose residues serve each of their column tiles (:func:`reusing_panels`,
:class:`Plan`'s ``keep_a``): A's residues are formed once per tile width (once where the tiles divide n) and B's
once per row panel, taken where that forms fewer (:func:`formed`; at 2 matrices and 15 moduli on the GPU: A once and
B twice, against four times each in square tiles of N/4; on the H200 at N = 16384, 90.5-92.1% of the uncapped speed
against 79% before, 95.2% at 3 matrices; ``results/published/h200/h200-ozaki2-capped.json``).
Each column of tiles keeps B's line statistics and shifts for the later row panels (a slot of the tile plan per
column, :class:`Plan`'s ``b_slots``). Of the column widths down to a quarter of the panel's height, the tiles take
the widest whose whole row panel holds every INT32 product, where that one INT8 GEMM does at least
:data:`~gpu.ozaki2.memory.MIN_PANEL_WORK` multiply-adds (:func:`one_span`): the panel is then one span, and its span
runs one INT8 GEMM per modulus, not panels of 3072 rows. At 2 matrices and 15 moduli those are tiles of N/2 x N/8
from N = 16384 up. On the H200 (fast-15, as called beside the uncapped product; ``h200-ozaki2-capped-shapes-*`` and
``h200-ozaki2-capped-d1256ad-*``) they ran at 99.0-99.1% of the uncapped speed at N = 32768 against 95.9% for the
earlier tiles of N/2 x N/4 (GEMM panels of 3072 rows); at 16384 at 92.5-95.2% in seven runs (median 93.9%) until
their INT8 GEMMs left ``cublasGemmEx``'s 128 x 128 kernel for cublasLt's 256 x 128 (:mod:`gpu.backend.lt_int8`),
then at 98.3%, 102.9% and 98.8% (``h200-ozaki2-capped-c22ccf0-16384-*``, ``-b2bb2a8-16384-3``); at 8192 and 4096,
where the guard keeps the earlier tiles, 84.7% against 86.6% for N/8 and 40% against 51%. Otherwise a tile's direct
layout takes spans as tall as the cap holds (:func:`gpu.ozaki2.memory.room_rows`: 91.8-93.1% at 2 matrices before,
``h200-ozaki2-capped-spans.json``). A tile plan keeps as many CUDA graphs per tile as a plan keeps per product (up
to :data:`gpu.backend.graphs.MAX_SEEN` in all), so a repeated call replays every tile, into alternating outputs too.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import numpy as np

from ..backend import Array, Backend, MemoryPlanError, check_output, get_backend, require_memory
from ..backend.checks import gib
from ..backend.graphs import MAX_GRAPHS
from ..backend.plans import MatmulPlan, operand_signature, resolve_options
from ..ozaki.api import _operands
from ..ozaki.plan import HEADROOM, _round_up
from .memory import MIN_PANEL_WORK, peak_bytes
from .moduli import MAX_MODULI
from .options import Options
from .plan import Plan
from .scaling import check_fine_k

#: The narrowest tile side a capped product is cut into.
MIN_TILE = 64


def halved(side: int) -> int:
    """The next tile side down: half of ``side``, rounded up, and at least :data:`MIN_TILE`."""
    return max(MIN_TILE, -(-side // 2))


def tile_bytes(be: Backend, m: int, k: int, n: int, count: int | None, scaling: str, bound: str,
               level: int = 0, keep_a: bool = False) -> int:
    """Bytes a tile of m x n over k takes beyond A, B and C in its least layout (``count`` None: ``"auto"``;
    ``keep_a``: A's residues kept past the call)."""
    return peak_bytes(be, m, k, n, count, scaling, direct=False, out_given=True, bound=bound, level=level,
                      keep_a=keep_a)


def panels(be: Backend, m: int, k: int, n: int, count: int | None, scaling: str, bound: str, cap: int,
           level: int = 0) -> tuple[int, int]:
    """(rows, columns) of the largest tiles whose :func:`tile_bytes` fit in ``cap`` (see the module); the whole
    product where it fits; MemoryPlanError where tiles of :data:`MIN_TILE` do not."""
    side = max(m, n)
    while True:
        rows, cols = min(m, side), min(n, side)
        if tile_bytes(be, rows, k, cols, count, scaling, bound, level) <= cap:
            return rows, cols
        if side <= MIN_TILE:
            least = tile_bytes(be, min(m, MIN_TILE), k, min(n, MIN_TILE), count, scaling, bound, level)
            raise MemoryPlanError(
                f"Ozaki scheme II on {m} x {k} x {n} with {count or f'up to {MAX_MODULI}'} moduli needs "
                f"{least:,} bytes ({gib(least)}) beyond A, B and C even in tiles of {MIN_TILE} x {MIN_TILE}, more "
                f"than the workspace of {cap:,} bytes allowed; allow a larger workspace, pass fewer moduli, or "
                "split k")
        side = halved(side)


def reusing_panels(be: Backend, m: int, k: int, n: int, count: int, bound: str, cap: int,
                   level: int = 0) -> tuple[int, int] | None:
    """(rows, columns) of tiles whose row panel keeps its residues for all its column tiles, within ``cap``: the
    tallest row panels (halving from m) whose widest fitting column tiles (halving from n) are at least a quarter
    as wide as the panels are tall, or all of n (narrower tiles would make narrow INT8 GEMMs), narrowed where
    that lets the whole panel run as one span (:func:`one_span`); None where none."""
    rows = m
    while True:
        cols, least = n, min(n, max(MIN_TILE, rows // 4))
        while tile_bytes(be, rows, k, cols, count, "fast", bound, level, keep_a=True) > cap and cols > MIN_TILE:
            cols = halved(cols)
        if tile_bytes(be, rows, k, cols, count, "fast", bound, level, keep_a=True) <= cap and cols >= least:
            return rows, one_span(be, rows, k, cols, count, bound, cap, level, least)
        if rows <= MIN_TILE:
            return None
        rows = halved(rows)


def one_span(be: Backend, rows: int, k: int, cols: int, count: int, bound: str, cap: int, level: int,
             least: int) -> int:
    """The widest column tiles, halving from ``cols`` down to ``least``, whose row panel of ``rows`` holds every
    INT32 product within ``cap`` (the whole direct layout: one span, one INT8 GEMM per modulus) and whose GEMM
    does at least :data:`~gpu.ozaki2.memory.MIN_PANEL_WORK` multiply-adds; ``cols`` where none does (see the
    module for what it measured). From level 2 up a plan that keeps A's residues takes the planes, with no direct
    layout to hold (:func:`gpu.ozaki2.memory.layouts`): ``cols``."""
    if level >= 2:
        return cols
    width, depth = cols, _round_up(max(k, 1))
    while width >= least and rows * _round_up(width) * depth >= MIN_PANEL_WORK:
        if peak_bytes(be, rows, k, width, count, "fast", direct=True, out_given=True, bound=bound, level=level,
                      keep_a=True) <= cap:
            return width
        if width <= MIN_TILE:
            break
        width = halved(width)
    return cols


def formed(m: int, n: int, rows: int, cols: int, reuse: bool) -> int:
    """Lines whose residues tiles of ``rows`` x ``cols`` form (A's rows and B's columns, each time formed): with
    ``reuse`` A's once per row panel and tile width (a narrower last column of tiles has a plan of its own)."""
    widths = 1 + (n % cols != 0)
    return m * (widths if reuse else -(-n // cols)) + n * -(-m // rows)


def tiles(m: int, n: int, rows: int, cols: int) -> Iterator[tuple[slice, slice]]:
    """C's tiles, those of one shape together (the full ones first, then the last column, row and corner)."""
    full_r, full_c = m // rows * rows, n // cols * cols
    row_parts = [(slice(i, i + rows)) for i in range(0, full_r, rows)]
    col_parts = [(slice(j, j + cols)) for j in range(0, full_c, cols)]
    last_r = [slice(full_r, m)] if full_r < m else []
    last_c = [slice(full_c, n)] if full_c < n else []
    for rs, cs in ((row_parts, col_parts), (row_parts, last_c), (last_r, col_parts), (last_r, last_c)):
        for r in rs:
            for c in cs:
                yield r, c


class TiledPlan(MatmulPlan):
    """Scheme II for one operand signature in tiles of C within a workspace cap (see the module): what
    :func:`gpu.ozaki2.matmul` and the front door run where the whole product's :class:`~gpu.ozaki2.plan.Plan`
    does not fit, or does not fit ``workspace=``. ``options.workspace`` is the cap; None takes
    :data:`gpu.ozaki.plan.HEADROOM` of the memory free when the plan is built (less C where the call makes it).
    Where every tile has one shape the plan keeps that tile's plan, built on the first call, so a repeated call
    plans nothing; otherwise each shape's plan is built per call and freed before the next (their workspaces
    are never held together). Under ``moduli="auto"`` each tile decides its own count (with ``verdict="host"``
    each tile reads it back: a 4-byte wait per tile).
    MemoryPlanError before any work where not even the least tiles fit."""

    def __init__(self, A: Any, B: Any, *, out: Any = None, options: Any = None, backend: str | Backend = "auto",
                 stream: Any = None) -> None:
        opts = resolve_options(Options, options)
        be = self.backend = get_backend(backend)
        self.stream = stream
        A, B = _operands(be, A, B)
        (m, k), n = A.shape, B.shape[1]
        check_output(be, out, (m, n), np.float64, {"A": A, "B": B}, rows_contiguous=True)
        if opts.scaling == "fine":
            check_fine_k(k)
        cap = opts.workspace if opts.workspace is not None else free_cap(be, m, k, n, out is not None)
        self.options = replace(opts, workspace=cap)
        self.m, self.n = m, n
        square = panels(be, m, k, n, opts.count, opts.scaling, opts.bound, cap, opts.level)
        reusing = None if opts.count is None or opts.scaling == "accurate" or square == (m, n) else reusing_panels(
            be, m, k, n, opts.count, opts.bound, cap, opts.level)
        self.reuse = reusing is not None and formed(m, n, *reusing, True) < formed(m, n, *square, False)
        self._cut(*(reusing if self.reuse else square))
        self._held: Plan | None = None
        self._lock = threading.Lock()
        self.signature = operand_signature(be, A, B, out, stream)

    @property
    def fused_levels(self) -> int:
        """0: the tiles' plans are made per call, and a tile's level may run its passes (the front door takes no
        Winograd level in tiles; :func:`gpu.frontdoor.frontplan.refuse_passes`)."""
        return 0

    def _cut(self, rows: int, cols: int) -> None:
        """Tiles of ``rows`` x ``cols`` from now on."""
        self.rows, self.cols = rows, cols
        self.one_shape = self.m % rows == 0 and self.n % cols == 0
        kept = ", each row panel's residues kept for its column tiles" if self.reuse else ""
        self.note = (f"in {self.tiles} tiles of {rows} x {cols} (at most {gib(self.options.workspace)} of workspace "
                     f"beside A, B and C{kept})")

    def _first(self, A: Array, B: Array, C: Array) -> Plan:
        """The first tile's plan. Where its block cannot be had although the cap counted the bytes as free (CuPy's
        pool counts cached blocks too small to hold it), the tiles are halved until one is, down to
        :data:`MIN_TILE`; nothing has run then, so the call goes on with the smaller tiles."""
        while True:
            r, c = next(tiles(self.m, self.n, self.rows, self.cols))
            try:
                return self._plan(A[r], B[:, c], C[r, c])
            except MemoryPlanError:
                if max(self.rows, self.cols) <= MIN_TILE:
                    raise
            self._cut(halved(self.rows), halved(self.cols))

    def _plan(self, a: Array, b: Array, part: Array) -> Plan:
        """The plan of one tile shape (with a slot of B's line vectors per column of tiles where it reuses)."""
        return Plan(a, b, out=part, options=self.options, backend=self.backend, keep_a=self.reuse,
                    address_sets=MAX_GRAPHS * self.tiles, b_slots=-(-self.n // self.cols) if self.reuse else 1)

    @property
    def tiles(self) -> int:
        """How many tiles a call runs."""
        return -(-self.m // self.rows) * -(-self.n // self.cols)

    def _execute(self, A: Array, B: Array, out: Array | None) -> Array:
        return self.run(A, B, out)

    def run(self, A: Array, B: Array, out: Array | None = None, phases: dict[str, float] | None = None) -> Array:
        """The tiles on the current stream (operands of the plan's signature); ``phases`` receives each phase's
        seconds summed over the tiles (:meth:`gpu.ozaki2.plan.Plan.run`)."""
        be, m, n = self.backend, self.m, self.n
        with self._lock:
            if self.signature is None:
                raise ValueError("this plan was freed; build a new one")
            C = out if out is not None else be.new_output(
                (m, n), np.float64, lambda: require_memory(be, 8 * m * n, f"the {m} x {n} output of Ozaki scheme II",
                                                           "pass out=, or split the product into blocks of rows"))
            plan, formed_rows, formed_cols = self._held or self._first(A, B, C), None, set()
            try:
                for r, c in tiles(m, n, self.rows, self.cols):
                    a, b, part = A[r], B[:, c], C[r, c]
                    if plan is not None and (plan.m, plan.n) != part.shape:
                        plan.free()
                        plan = None
                    if plan is None:
                        plan, formed_rows, formed_cols = self._plan(a, b, part), None, set()
                    slot = c.start // self.cols if self.reuse else 0
                    plan.run(a, b, part, phases, reuse_a=self.reuse and r == formed_rows,
                             reuse_b=self.reuse and slot in formed_cols, b_slot=slot)
                    formed_rows = r
                    formed_cols.add(slot)
            finally:
                self._held = plan if self.one_shape else None
                if plan is not None and not self.one_shape:
                    plan.free()
        return C

    def _release(self) -> None:
        with self._lock:
            if self._held is not None:
                self._held.free()
            self._held = None


def free_cap(be: Backend, m: int, k: int, n: int, out_given: bool) -> int:
    """The workspace cap within the memory free now: :data:`~gpu.ozaki.plan.HEADROOM` of it, less the new C's
    bytes where the call makes C; MemoryPlanError where nothing is left."""
    cap = int(HEADROOM * be.memory_info()[0]) - (0 if out_given else 8 * m * n)
    if cap < 1:
        raise MemoryPlanError(f"Ozaki scheme II on {m} x {k} x {n}: the memory free holds no workspace beside "
                              f"A, B and C; free some, pass out=, or split the product into blocks of rows")
    return cap


def plan_in_memory(A: Any, B: Any, *, out: Any = None, options: Any = None, backend: str | Backend = "auto",
                   stream: Any = None) -> Plan | TiledPlan:
    """The whole product's :class:`~gpu.ozaki2.plan.Plan` where its workspace fits, else (no ``workspace`` cap
    given) a :class:`TiledPlan` within the memory free: the front door's Ozaki II at a size whose plan for
    every count ``"auto"`` may take does not fit (N = 49152 on the H200)."""
    try:
        return Plan(A, B, out=out, options=options, backend=backend, stream=stream)
    except MemoryPlanError:
        if resolve_options(Options, options).workspace is not None:
            raise
    return TiledPlan(A, B, out=out, options=options, backend=backend, stream=stream)
