"""The memory plan of one scheme II product, made before any work: its workspace block, C, and the rest.

A plan (:class:`gpu.ozaki2.plan.Plan`) allocates its workspace (:mod:`gpu.ozaki2.workspace`) once, as one
block, no larger by default than GEMMul8's (the planes layout's bytes, 6.12 FP64 matrices at 15 moduli): the
direct layout (every modulus's INT32 product, no pass that reduces them to planes) whole where it fits within
those bytes, else in balanced row panels within them (the same INT8 GEMMs and CRT, panel by panel) where each
panel's INT8 GEMM does at least :data:`MIN_PANEL_WORK` multiply-adds, else the planes. (Below about 50 rows of C
not one panel of 16 rows fits within them, and the whole direct layout, at most 4 count n bytes a row, is taken
as it is.) A ``workspace=`` that holds the whole direct layout (11.25 matrices at 15 moduli) lets it be taken
first. Where the INT8 GEMMs write residues (:func:`narrow_products`), the direct layouts hold them as INT8: the
whole direct layout is then 5.6 matrices at 15 moduli, within GEMMul8's bytes, and is taken by default (on the H200 at
N = 16384 1.015x the speed of the row panels: ``results/published/h200/h200-ozaki2-narrow-probe-563a3f5-16384.json``).
The block is taken where the device holds it with :data:`HEADROOM` to spare (room for cuBLAS's own workspace);
where a cache of plans holds other blocks, it frees them first (``make_room``) rather than settle for a slower
layout. On the H200 (``results/published/h200/h200-ozaki2-row-panels-probe.json``) the row panels ran within
1.5% of the whole direct layout at N = 8192-32768 (4 panels of 2048 rows at 8192: 2.8 against 5.6 GiB), and the
planes 3-7% slower than it (``h200-ozaki2-layout-probe.json``); below, the panels' smaller GEMMs lost more than
the planes' reduction pass costs (:data:`MIN_PANEL_WORK`).

Then the bytes a call allocates outside the block are asked for (:func:`gpu.backend.checks.require_memory`):
C where ``out`` is not given (each call allocates its own), the operations' vectors and scratch
(``ops.scratch_bytes``: a few bytes per line on the GPU, NumPy's temporaries on the CPU) and the componentwise
bound's arrays where it is taken (:func:`auto_bytes`). Each step raises :class:`~gpu.backend.MemoryPlanError`
before any work where the device cannot give it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from ..backend import Array, Backend, MemoryPlanError, require_memory
from ..backend.checks import gib, reserve
from ..ozaki.plan import ALIGN, HEADROOM, _round_up
from .fused_level import fusable, span_rows
from .fused_level2 import gemm_depth, shape_fits
from .fused_level2 import span_rows as level2_spans
from .gemms import PANEL, PANEL_FROM, writes_residues
from .moduli import MAX_MODULI
from .ops import ops
from .reference import MAX_K
from .winograd import scratch_bytes as winograd_bytes
from .workspace import Workspace, layout, product_type

ADVICE = "pass fewer moduli, out=, or split the product into blocks of rows"
#: The fewest multiply-adds (rows x padded columns x padded k) of a row panel's INT8 GEMM, per modulus, for the row
#: panels to be taken before the planes. Measured on the H200 (kept plans as called beside DGEMM, fast-15 /
#: moduli="auto"; results/published/h200/h200-ozaki2-layout-probe-4096-8192.json): panels of 2048 x 8192 x 8192
#: ran at 1.280x / 1.275x against the planes' 1.240x / 1.216x at N = 8192, but 1536 x 6144 x 6144 at 1.104x /
#: 1.093x against 1.171x / 1.145x at 6144, 1280 x 5120 x 5120 at 0.927x / 0.921x against 1.148x / 1.124x, and
#: 1024 x 4096 x 4096 at 0.713x / 0.691x against 0.943x / 0.907x (the whole direct layout: 1.077x / 1.021x at
#: 4096); in a capped product at N = 16384 (2 matrices: tiles of 8192 x 4096), panels of 2048 x 4096 x 16384 ran
#: the product at 0.90x the uncapped speed, the planes at 0.88x (h200-ozaki2-capped-planes.json).
MIN_PANEL_WORK = 2048 * 8192 * 8192
#: The step of a capped product's taller row panels (:func:`room_rows`), in rows of C, from PANEL_FROM rows up: whole
#: INT8 GEMM panels (:data:`~gpu.ozaki2.gemms.PANEL`) cut a span into GEMMs of 3072 rows and a multiple of 1024.
#: Measured on the H200 (N = 16384, 15 moduli, as called beside the uncapped product; results/published/
#: h200/h200-ozaki2-capped-spans.json, three runs): at 2 FP64 matrices (tiles of 8192 x 4096, the tiles before
#: :func:`gpu.ozaki2.tiled.one_span` narrowed them to one span of 8192 x 2048) spans of 4096 rows ran the product at
#: 0.919-0.927x the uncapped speed, 3072 at 0.913-0.922x and GEMMul8's 2048 at 0.902-0.913x; at 3 matrices (tiles of
#: 16384 x 4096) 4096 and 3072 tie (0.9485 and 0.9494x), while balanced spans of 5472 rows (GEMMs of 3072 and 2400 rows)
#: ran at 0.920x (h200-ozaki2-capped-13b68a7.json).
ROOM_STEP = 1024


@dataclass(frozen=True)
class Carved:
    """A product's workspace: its layout, the block it is carved from, and the product's columns n; ``offer``
    (``moduli="auto"``, whose block is sized for the most moduli): the layouts offered to a modulus count."""

    layout: Workspace
    block: Array
    n: int
    offer: Callable[[int], list[Workspace]] | None = None

    @property
    def direct(self) -> bool:
        return self.layout.direct

    def for_count(self, count: int) -> Carved:
        """The block carved for ``count`` moduli: under ``moduli="auto"`` the fastest layout offered to that count of
        the block's kind (the direct layout or the planes, a fused Winograd level's or not) that the block holds,
        so that a count below the most takes the bytes the moduli it leaves free (taller spans of rows: at
        N = 32768 a fused level's spans of 2048 rows at 20 moduli are 4096 at 15, half the INT8 GEMM launches);
        else this carving."""
        if self.offer is None or count == self.layout.buffers["res_a"].shape[0]:
            return self
        fits = [ws for ws in self.offer(count) if ws.direct == self.direct and ws.levels == self.layout.levels
                and ws.nbytes <= self.layout.nbytes]
        return replace(self, layout=fits[0], offer=None) if fits else self

    def view(self, name: str) -> Array:
        return self.layout.view(self.block, name)

    def region(self, name: str) -> Array:
        return self.layout.region(self.block, name)


def auto_bytes(m: int, k: int, n: int) -> int:
    """Bytes of the componentwise bound (``bound="componentwise"``, :func:`gpu.ozaki2.auto.predicted_error`) at
    its peak: A and B with their non-finite lines zeroed, |A| and |B| scaled, with their unscaled copies while
    they are made, and six m x n float64 arrays (|A~||B~|, its rounded-down copy, and the terms of E_ij's
    numerator and quotient). The normwise bound (the default) takes a few vectors (``scratch_bytes``)."""
    return 24 * (m * k + k * n) + 48 * m * n


def beyond_bytes(be: Backend, m: int, k: int, n: int, count: int | None, scaling: str, out_given: bool,
                 bound: str = "normwise", level: int = 0) -> int:
    """Bytes a call allocates outside its block: C unless ``out`` is given, the operations' vectors and
    scratch, the componentwise bound's arrays where ``moduli="auto"`` (``count`` None) takes it, and the
    Winograd levels' sums and products (:func:`gpu.ozaki2.winograd.scratch_bytes`)."""
    counted = count or MAX_MODULI
    return ((0 if out_given else 8 * m * n) + ops(be).scratch_bytes(m, k, n, counted, scaling)
            + (auto_bytes(m, k, n) if count is None and bound == "componentwise" else 0)
            + winograd_bytes(m, min(k, MAX_K), n, level))


def layouts(m: int, k: int, n: int, count: int, scaling: str, block: int, level: int = 0,
            whole: bool = False, keep_a: bool = False, room: int | None = None,
            narrow: bool = False) -> list[Workspace]:
    """The layouts the call may take, fastest first. A Winograd level in its fused form
    (:func:`gpu.ozaki2.fused_level.fusable`) first takes its layout whole, then in spans of the top half's rows
    (:func:`~gpu.ozaki2.fused_level.span_rows`), and two levels where the INT8 GEMMs write residues (``narrow``)
    theirs in spans of A's quarters' rows (:mod:`gpu.ozaki2.fused_level2`; not with ``keep_a``); other levels the
    planes. Where the INT8 GEMMs take k in one block
    and no Winograd level forms its products (which come out as residues, the planes' layout): the direct
    layout, whole where it fits within the planes layout's bytes (GEMMul8's workspace) or where not one row panel
    does (below about 50 rows), else in row panels within them (:func:`panel_rows`) where a panel's GEMM does at
    least :data:`MIN_PANEL_WORK` multiply-adds; ``whole``: the whole direct layout is offered first whatever its size (a
    ``workspace=`` that holds it); ``room``: the bytes a ``workspace=`` leaves the block, whose taller row panels
    (:func:`room_rows`) come next. The planes layout last. ``keep_a``: each keeps A's residues past the call
    (:func:`gpu.ozaki2.workspace.layout`); ``narrow``: the direct layouts hold INT8 residues, not INT32 products
    (:func:`gpu.ozaki2.gemms.writes_residues`)."""
    planes = layout(m, k, n, count, scaling, direct=False, level=level, keep_a=keep_a)
    if narrow and not keep_a and shape_fits(m, k, n, level, block):
        return [layout(m, k, n, count, scaling, True, level, rows=rows, narrow=True)
                for rows in level2_spans(m // 4)] + [planes]
    if fusable(m, k, n, level, block):
        return [layout(m, k, n, count, scaling, True, level, rows=rows, keep_a=keep_a, narrow=narrow)
                for rows in span_rows(m // 2)] + [planes]
    if _round_up(max(k, 1)) > block or level:
        return [planes]
    rows = panel_rows(m, k, n, count, scaling, keep_a, narrow)
    direct = layout(m, k, n, count, scaling, direct=True, keep_a=keep_a, narrow=narrow)
    if rows is None:
        return [direct, planes]
    first = [direct] if whole else []
    work = _round_up(max(n, 1)) * _round_up(max(k, 1))
    taller = None if room is None else room_rows(m, k, n, count, scaling, keep_a, room, narrow)
    if taller is not None and rows < taller < m and taller * work >= MIN_PANEL_WORK:
        first.append(layout(m, k, n, count, scaling, direct=True, rows=taller, keep_a=keep_a, narrow=narrow))
    if rows * work < MIN_PANEL_WORK:
        return first + [planes]
    return first + [layout(m, k, n, count, scaling, direct=True, rows=rows, keep_a=keep_a, narrow=narrow), planes]


def room_rows(m: int, k: int, n: int, count: int, scaling: str, keep_a: bool, room: int,
              narrow: bool = False) -> int | None:
    """The rows of the fewest balanced row panels, in whole steps of :data:`ROOM_STEP` rows from
    :data:`~gpu.ozaki2.gemms.PANEL_FROM` rows up (else, or where not one such step fits, of
    :data:`~gpu.ozaki.plan.ALIGN`), whose direct layout fits in ``room`` bytes, or None where not one panel of ALIGN
    rows does. A capped product's tiles take them beyond GEMMul8's bytes where the cap allows (see
    :data:`ROOM_STEP`)."""
    found = _most_rows(m, k, n, count, scaling, keep_a, room, (ROOM_STEP, ALIGN) if m >= PANEL_FROM else (ALIGN,),
                       narrow)
    return None if found is None else _balanced(m, *found)


def panel_rows(m: int, k: int, n: int, count: int, scaling: str, keep_a: bool = False,
               narrow: bool = False) -> int | None:
    """The rows of C per panel of a direct layout that holds their products (INT32, or INT8 residues where
    ``narrow``) within the planes layout's bytes (GEMMul8's workspace: the residues, INT8 planes and one INT32
    product): the fewest panels, their rows balanced, in whole INT8 GEMM panels (:data:`gpu.ozaki2.gemms.PANEL`
    rows from :data:`~gpu.ozaki2.gemms.PANEL_FROM` up, else 16), so that its GEMMs are the whole product's and no
    pass reduces them to planes; None where not one row panel fits, or where one holds every row."""
    budget = layout(m, k, n, count, scaling, direct=False, keep_a=keep_a).nbytes
    found = _most_rows(m, k, n, count, scaling, keep_a, budget, (PANEL[0], ALIGN) if m >= PANEL_FROM else (ALIGN,),
                       narrow)
    return None if found is None or found[0] >= m else _balanced(m, *found)


def _balanced(m: int, most: int, step: int) -> int:
    """The rows of the fewest panels of at most ``most`` rows (a multiple of ``step``), balanced in steps."""
    return min(most, _round_up(-(-m // -(-m // most)), step))


def _most_rows(m: int, k: int, n: int, count: int, scaling: str, keep_a: bool, budget: int,
               steps: tuple[int, ...], narrow: bool = False) -> tuple[int, int] | None:
    """The most rows of a direct layout's panel within ``budget`` bytes, in whole steps of the first of ``steps``
    of which one fits (at least m rounded up to it where all of m fits), with that step; None where none does."""
    per_row = product_type(narrow).itemsize * count * _round_up(max(n, 1))

    def size(rows: int) -> int:
        return layout(m, k, n, count, scaling, True, rows=rows, keep_a=keep_a, narrow=narrow).nbytes
    for step in steps:
        rows = (budget - size(step)) // per_row // step * step + step
        while rows >= step and size(rows) > budget:
            rows -= step
        while step <= rows < m and size(rows + step) <= budget:        # the estimate is linear; alignment is not
            rows += step
        if step <= rows:
            return rows, step
    return None


def narrow_products(be: Backend, m: int, k: int, n: int, level: int, block: int) -> bool:
    """Whether a product's direct layout may hold its products as INT8 residues: the backend's INT8 GEMMs write
    them over the product's GEMM depth (k, or half of it in a fused level, a quarter in the fused second level;
    :func:`gpu.ozaki2.gemms.writes_residues`)."""
    ldk = _round_up(max(k, 1))
    if shape_fits(m, k, n, level, block):
        return writes_residues(be, gemm_depth(k))
    if fusable(m, k, n, level, block):
        return writes_residues(be, ldk // 2)
    return not level and ldk <= block and writes_residues(be, ldk)


def reserve_workspace(be: Backend, m: int, k: int, n: int, count: int | None, scaling: str, block: int,
                      out_given: bool, bound: str = "normwise", make_room: Callable[[], bool] | None = None,
                      level: int = 0, cap: int | None = None, keep_a: bool = False) -> Carved:
    """The workspace block of a plan (``count`` None: ``moduli="auto"``, sized for the most moduli), with room
    checked for the rest (C where ``out`` is not given, which each call allocates), or MemoryPlanError before
    any work (module). ``make_room``: called where the faster layout does not fit (a cache of plans frees the
    blocks it keeps, and says whether it freed any); the check is then made once more. ``cap``: the most bytes
    beyond A, B and C (``workspace=``): layouts above it are not taken. ``keep_a``: layouts that keep A's residues
    past a call (:func:`gpu.ozaki2.workspace.layout`). Where the backend's INT8 GEMMs over this k write residues,
    the direct layouts hold those (:func:`narrow_products`)."""
    what = f"Ozaki scheme II on {m} x {k} x {n} with {count or f'up to {MAX_MODULI}'} moduli"
    narrow = narrow_products(be, m, k, n, level, block)
    beyond = beyond_bytes(be, m, k, n, count, scaling, out_given, bound, level)
    fused_beyond = beyond - winograd_bytes(m, min(k, MAX_K), n, level)  # the fused level makes no scratch of its own

    def need(ws: Workspace) -> int:
        return ws.nbytes + (fused_beyond if ws.levels else beyond)
    room = None if cap is None else cap - beyond + (0 if out_given else 8 * m * n)

    def offer(counted: int) -> list[Workspace]:
        return layouts(m, k, n, counted, scaling, block, level, whole=cap is not None, keep_a=keep_a, room=room,
                       narrow=narrow)
    options = offer(count or MAX_MODULI)
    if cap is not None:
        within = [ws for ws in options if need(ws) - (0 if out_given else 8 * m * n) <= cap]
        if not within:
            raise MemoryPlanError(f"{what} needs {gib(need(options[-1]))} beyond A, B and C, more than "
                                  f"the workspace of {gib(cap)} allowed; {ADVICE}")
        options = within
    for last in (make_room is None, True):
        free = be.memory_info()[0]
        faster, least = [ws for ws in options[:-1] if need(ws) <= HEADROOM * free], options[-1]
        if (len(faster) == len(options) - 1 and need(least) <= free) or last or not make_room():
            break
    if need(least) > free:
        raise MemoryPlanError(f"{what} needs {gib(need(least))} (workspace {gib(least.nbytes)}, output and scratch "
                              f"{gib(need(least) - least.nbytes)}) but {gib(free)} are free on the {be.name} device; "
                              f"{ADVICE}")
    recarve = None if count else offer
    for ws in faster:
        try:
            return _take(be, ws, need(ws) - ws.nbytes, n, what, recarve)
        except MemoryPlanError:
            continue
    return _take(be, least, need(least) - least.nbytes, n, what, recarve)


def _take(be: Backend, ws: Workspace, beyond: int, n: int, what: str,
          offer: Callable[[int], list[Workspace]] | None) -> Carved:
    """Layout ``ws``'s block, then room for the rest, or MemoryPlanError (the block is dropped with it)."""
    carved = Carved(ws, reserve(be, ws.nbytes, what, ADVICE), n, offer)
    require_memory(be, beyond, f"{what}, beside its workspace of {gib(ws.nbytes)},", ADVICE)
    return carved


def peak_bytes(be: Backend, m: int, k: int, n: int, count: int | None, scaling: str, direct: bool,
               out_given: bool = False, bound: str = "normwise", level: int = 0, keep_a: bool = False) -> int:
    """The most bytes a call allocates by this plan in the given layout: its block and everything beyond it
    (``count`` None: ``moduli="auto"``, whose block is sized for the most moduli)."""
    return (layout(m, k, n, count or MAX_MODULI, scaling, direct, level, keep_a=keep_a).nbytes
            + beyond_bytes(be, m, k, n, count, scaling, out_given, bound, level))
