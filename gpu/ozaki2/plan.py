"""Scheme II's plan: everything that depends only on the operand signature, made once; each call the per-call work.

:class:`Plan` (on :class:`gpu.backend.plans.MatmulPlan`) checks the operands and options, reserves the workspace
block (:mod:`gpu.ozaki2.memory`: for the count given, or for the most moduli under ``moduli="auto"``), the
line vectors, and for a given count its table, kernels and the INT8 GEMMs' panels; a count that ``"auto"`` picks
gets these the first time it is picked (its kernels compile then, once per process), in the block carved anew
for that count (:meth:`~gpu.ozaki2.memory.Carved.for_count`: the spans of rows its fewer moduli leave room for).
A call then issues, on one stream: the one read of each operand that gives the line statistics
(:mod:`gpu.ozaki2.fused`), under ``"auto"`` the count (:mod:`gpu.ozaki2.normwise`), the shifts, the residues,
the INT8 GEMMs (writing residues where the backend's kernel can: :func:`gpu.ozaki2.gemms.direct_products`), the
CRT and the library's IEEE values where a row of A or a column of B holds NaN or infinity.

**No wait for the device:** with a count given (and ``check_finite=False``) the call returns as soon as its work is
queued; under ``moduli="auto"`` too, on an address set seen before (:mod:`gpu.ozaki2.deferred`: one graph runs the
product at the count the device computed; ``verdict="host"`` reads it back each call). NaN and infinity need no wait:
the scaling finds the lines holding them on the device (their maxima), gives them no weight in the count (and zero
bars in accurate mode, so the other lines' shifts are those of the operands with those lines zeroed), and the last
kernel replaces their entries of C by the sums of the products in IEEE arithmetic: NaN or infinity in any summation
order, so exactly where ``A @ B`` has them. ``check_finite=True`` reads the maxima and raises before the products (a
wait). ``bound="componentwise"`` (auditors) waits for its float64 GEMM.

**Replayed as a graph.** A call launches dozens of kernels and INT8 GEMMs (1.1 ms of host time at 15 moduli on the
H200's host). With the fast scaling (the default) and without ``check_finite``, a plan replays its work as a CUDA
graph per address set of A, B and C from the second call of that set (:mod:`gpu.backend.graphs`, mode ``"repeat"``):
with a count given the whole product, under ``moduli="auto"`` all that follows the count's read (one graph per count
it picks). The graphs run on the plan's buffers and compute the eager bits, in the direct layout and in the planes
(whose INT8 GEMMs are planned once per modulus and k block, as the direct layout's per span): their work allocates
nothing. So does a Winograd level's fused form (:mod:`gpu.ozaki2.fused_level`: its sums and 7 products per modulus in
the block); the levels' passes, whose products come out of scratch taken per call, stay eager. A graph of more
operations than CUDA's launch queues hold keeps the host in its launch while the device drains them (level 1 at
N = 32768 in 2048-row spans, 1727 nodes: 318-335 ms of a 750 ms call on the H200) unless the process set
``CUDA_SCALE_LAUNCH_QUEUES=4x`` before its first CUDA call (the ``gemmlab`` command does).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from ..backend import Array, Backend, MemoryPlanError, check_output, get_backend
from ..backend.checks import gib, require_writeable
from ..backend.graphs import MAX_GRAPHS, Graphs
from ..backend.plans import MatmulPlan, operand_signature, resolve_options
from ..ozaki.api import NONFINITE, _operands, _phase
from ..ozaki.plan import _round_up
from .auto import choose_moduli
from .bounds import bounds
from .deferred import deferred
from .fused_level import form_operands, span_gemms
from .fused_level2 import level2_part
from .fused_level2 import run as level2
from .gemms import blocks, direct_products, panels, planned
from .memory import ADVICE, Carved, reserve_workspace
from .moduli import moduli_table
from .normwise import LineStats, refusal, target_value
from .ops import ops
from .options import Options
from .options import k_block as k_block_of
from .part import Part
from .products import products
from .scaling import FINE_BITS, check_fine_k, headroom


class Plan(MatmulPlan):
    """``A @ B`` in float64 by Ozaki scheme II for one operand signature (see the module and
    :func:`gpu.ozaki2.matmul`): ``options`` an :class:`~gpu.ozaki2.options.Options`, a dict of its fields or None;
    ``stream`` the CUDA stream to run on (default: the current one at each call). Raises TypeError, ValueError or
    MemoryPlanError before any work. ``make_room``: called where the faster workspace does not fit, to free other
    plans' blocks (returns whether it freed any). ``keep_a`` (a given count and the fast scaling, whose shifts of
    A's rows depend on A alone): A's line statistics, shifts and residues outlive a call, and a call with
    ``reuse_a`` on the same A skips them (:meth:`run`: a row panel's later column tiles in :mod:`gpu.ozaki2.tiled`);
    B's line statistics and shifts outlive it too, in one of ``b_slots`` sets of vectors, and a call with
    ``reuse_b`` on the same B and slot skips them (the later row panels' tiles of a column). ``address_sets``: the
    graphs kept, one per address set of A, B and C (a tile plan keeps one per tile it runs)."""

    def __init__(self, A: Any, B: Any, *, out: Any = None, options: Any = None, backend: str | Backend = "auto",
                 stream: Any = None, make_room: Callable[[], bool] | None = None, keep_a: bool = False,
                 address_sets: int = MAX_GRAPHS, b_slots: int = 1) -> None:
        self.options = opts = resolve_options(Options, options)
        if keep_a and (opts.count is None or opts.scaling == "accurate"):
            raise ValueError("keep_a needs a given modulus count and the fast or fine scaling: the shifts of A's rows "
                             "then depend on A alone")
        self.keep_a, self._kept, self.stream = keep_a, None, stream
        be = self.backend = get_backend(backend)
        A, B = _operands(be, A, B)
        require_writeable({"A": (A, opts.overwrite_a), "B": (B, opts.overwrite_b)})
        (m, k), n = A.shape, B.shape[1]
        check_output(be, out, (m, n), np.float64, {"A": A, "B": B}, rows_contiguous=True)
        if opts.scaling == "fine":
            check_fine_k(k)
        self.m, self.k, self.n, self.fixed, self.wide = m, k, n, opts.count, opts.scaling == "fine"
        self.normwise = self.fixed is None and opts.bound == "normwise"
        self.goal = target_value(opts.goal, k) if self.normwise else None
        self.ldk, self.n_pad, self.block = _round_up(max(k, 1)), _round_up(max(n, 1)), k_block_of(opts.k_block)
        self.work: Carved | None = None
        self._parts: dict[int, Part] = {}
        self._lock = threading.Lock()
        self._last_count: int | None = self.fixed
        self.empty = not (m and n and k)
        if not self.empty:
            self.work = reserve_workspace(be, m, k, n, self.fixed, opts.scaling, self.block, out is not None,
                                          opts.bound, make_room, opts.level, opts.workspace, keep_a)
            family = ops(be)
            self.lines_a = family.line_buffers(be, m, self.normwise, self.wide)
            self.lines_b = family.line_buffers(be, n, self.normwise, self.wide)
            self.shift_buffers = family.shift_buffers(be, m, n)
            self._b_side = [(self.lines_b, (self.shift_buffers or (None, None))[1])] + [
                (family.line_buffers(be, n, False, self.wide),
                 (family.shift_buffers(be, 0, n) or (None, None))[1])
                for _ in range(b_slots - 1 if keep_a else 0)]
            self._b_kept: list[tuple[int | None, Any]] = [(None, None)] * len(self._b_side)
            self.count_buffers = family.count_buffers(be) if self.normwise else None
            if self.fixed:
                self.part(self.fixed)
        replay = opts.scaling != "accurate" and (self.fixed or self.normwise) and not opts.check_finite
        self._graphs = Graphs(be, "repeat" if replay and not self.empty else False, 0, address_sets)
        self.deferred = deferred(self)
        self.signature = operand_signature(be, A, B, out, stream)

    @property
    def last_count(self) -> int | None:
        """The modulus count of the last call (0: no count met the target and C is the library GEMM's); after a
        call that decided it on the device (:mod:`gpu.ozaki2.deferred`), reading it waits for that call."""
        if self.deferred is not None and self.deferred.pending():
            self.deferred.wait()
        return self._last_count

    @last_count.setter
    def last_count(self, count: int | None) -> None:
        self._last_count = count

    @property
    def fused_levels(self) -> int:
        """The Winograd levels the plan's workspace runs fused (0 at level 0, and where a level runs its passes)."""
        return self.work.layout.levels if self.work is not None else (self.options.level if self.empty else 0)

    def part(self, count: int) -> Part:
        """The views, table, kernels and panels of ``count`` moduli, made the first time they are asked for."""
        if count not in self._parts:
            table, work, be, m = moduli_table(count), self.work.for_count(count), self.backend, self.m
            if work.layout.levels == 2:
                self._parts[count] = level2_part(be, m, table, work)
                return self._parts[count]
            res_a, res_b, tiles = work.view("res_a")[:count], work.view("res_b")[:count], panels(m, self.n_pad)
            plane_gemms: list[list[Any]] = []
            half, sums = (m // 2, (work.view("sums_a")[:count], work.view("sums_b")[:count])) if work.layout.fused \
                else (None, None)
            if work.direct:
                products, spans = work.view("products")[:count], blocks(half or m, work.layout.rows)
                plan_span = (partial(span_gemms, be, res_a, res_b, *sums) if half
                             else partial(self._span_gemms, res_a, res_b))
                products, gemms = direct_products(products, spans, table.moduli, plan_span)
                planes = [products[:, :, :s.stop - s.start] if half else products[:, :s.stop - s.start, :self.n]
                          for s in spans]
            else:
                products = None if self.options.level else work.view("product")
                spans, planes, gemms = [slice(None)], [work.view("planes")[:count]], [[]]
                if products is not None:
                    plane_gemms = [[planned(be, res_a[t][:, kb], res_b[t][:, kb], products, tiles)
                                    for kb in blocks(self.ldk, self.block)] for t in range(count)]
            ops(be).prepare(table, planes[0])
            self._parts[count] = Part(table, res_a, res_b, products, planes, spans, work.direct, gemms, plane_gemms,
                                      half, sums)
        return self._parts[count]

    def _span_gemms(self, res_a: Array, res_b: Array, products: Array, span: slice,
                    moduli: tuple[int, ...] | None) -> list[Any] | None:
        """The INT8 GEMMs of every modulus for C's rows ``span`` into ``products`` (INT8: residues modulo ``moduli``,
        None where not all are taken), as the whole product's panels, or one a modulus for a kept A in one span."""
        rows = span.stop - span.start
        one = self.keep_a and rows == self.m
        tiles = [(slice(0, rows), slice(0, self.n_pad))] if one else panels(rows, self.n_pad, self.m)
        found = [planned(self.backend, res_a[t][span], res_b[t], products[t][:rows], tiles, moduli and moduli[t])
                 for t in range(len(res_a))]
        return None if None in found else [c for calls in found for c in calls]

    def _release(self) -> None:
        with self._lock:
            self._graphs.clear()
            if self.deferred is not None:
                self.deferred.release()
            self.work, self._parts, self.signature, self._kept = None, {}, None, None
            self._b_side, self._b_kept = [], []

    def _execute(self, A: Array, B: Array, out: Array | None) -> Array:
        return self.run(A, B, out)

    def run(self, A: Array, B: Array, out: Array | None = None, phases: dict[str, float] | None = None,
            reuse_a: bool = False, reuse_b: bool = False, b_slot: int = 0) -> Array:
        """The per-call work on the current stream (operands of the plan's signature); ``phases``: a dict that
        receives seconds per phase, each synchronized; ``reuse_a`` (a ``keep_a`` plan): where the plan's last
        call formed A at this address, its line statistics, shifts and residues are used again (the caller
        vouches that A's values have not changed since); ``reuse_b``: likewise B's line statistics and shifts,
        where the last call on slot ``b_slot`` (of ``b_slots``) took them from B at this address. One call at a
        time issues its work (the plan's buffers are shared by its calls, which the stream then orders)."""
        with self._lock:
            if self.signature is None:
                raise ValueError("this plan was freed; build a new one")
            return self._run(A, B, out, phases, reuse_a, reuse_b, b_slot)

    def _run(self, A: Array, B: Array, out: Array | None, phases: dict[str, float] | None,
             reuse_a: bool = False, reuse_b: bool = False, b_slot: int = 0) -> Array:
        be = self.backend
        C = self._output(A, B, out)
        if self.empty:
            C[...] = 0.0
            return C
        family = ops(be)
        kept = reuse_a and self._kept is not None and self._kept[0] == be.pointer(A)
        kept_b = self.keep_a and reuse_b and self._b_kept[b_slot][0] == be.pointer(B)
        if self.keep_a and not kept and self._kept is not None:
            self._kept = (None, *self._kept[1:])          # A's buffers are overwritten from here on
        if phases is None and self._graphs.mode:
            self._replayed(family, A, B, C, kept, kept_b, b_slot)
        else:
            self._whole(family, A, B, C, kept, phases, kept_b, b_slot)
        if self.keep_a and not kept and self._kept is not None:
            self._kept = (be.pointer(A), *self._kept[1:])
        if self.keep_a and not kept_b:
            self._b_kept[b_slot] = (be.pointer(B), self._b_kept[b_slot][1])
        return C

    def _whole(self, family: Any, A: Array, B: Array, C: Array, kept: bool = False,
               phases: dict[str, float] | None = None, kept_b: bool = False, b_slot: int = 0) -> None:
        """The whole product: the scaling (:meth:`_sides` in a ``keep_a`` plan), then :meth:`_rest`."""
        with _phase(self.backend, phases, "scaling"):
            scaled = self._sides(family, A, B, kept, kept_b, b_slot) if self.keep_a else self._scaling(family, A, B)
        if scaled is None:
            with _phase(self.backend, phases, "gemm"):
                self.backend.gemm(A, B, C)
            return
        part, shift_a, shift_b, rows, cols = scaled
        self._rest(family, part, A, B, C, shift_a, shift_b, rows, cols, phases, form_a=not kept)

    def _sides(self, family: Any, A: Array, B: Array, kept: bool, kept_b: bool,
               b_slot: int) -> tuple[Part, Array, Array, LineStats, LineStats]:
        """A ``keep_a`` plan's scaling (a given count, the fast scaling: each line's shifts are its own), as
        :meth:`_scaling` gives it: A's line statistics and shifts unless ``kept``, B's into slot ``b_slot``'s
        vectors unless ``kept_b`` (then those the slot holds)."""
        part, tiles = self.part(self.fixed), self.work.region("tiles")
        if kept:
            _, _, shift_a, rows = self._kept
        else:
            rows = family.line_stats(A, tiles, False, self.lines_a, self.wide)
            shift_a = family.shifts(rows, part.table, (self.shift_buffers or (None, None))[0], self._fine_k)
        if kept_b:
            cols, shift_b = self._b_kept[b_slot][1]
        else:
            lines, out = self._b_side[b_slot]
            cols = family.line_stats(B.T, tiles, False, lines, self.wide)
            shift_b = family.shifts(cols, part.table, out, self._fine_k)
            self._b_kept[b_slot] = (None, (cols, shift_b))
        if self.options.check_finite:
            _refuse_nonfinite(self.backend, rows, cols)
        return part, shift_a, shift_b, rows, cols

    def _rest(self, family: Any, part: Part, A: Array, B: Array, C: Array, shift_a: Array, shift_b: Array,
              rows: LineStats, cols: LineStats, phases: dict[str, float] | None = None, form_a: bool = True) -> None:
        """Everything after the shifts: the residues (A's only where ``form_a``), the INT8 products, the CRT and the
        IEEE repair. A ``keep_a`` plan keeps what formed A's for a later call (:meth:`run`)."""
        be = self.backend
        if self.keep_a and form_a:
            self._kept = (None, part, shift_a, rows)
        if part.quarter is not None:
            level2(self, family, part, A, B, C, shift_a, shift_b, rows.e, cols.e, phases)
        else:
            self._residues_to_crt(family, part, A, B, C, shift_a, shift_b, rows, cols, phases, form_a)
        with _phase(be, phases, "crt"):
            family.fix_nonfinite(A, B, C, rows, cols)

    def _residues_to_crt(self, family: Any, part: Part, A: Array, B: Array, C: Array, shift_a: Array,
                         shift_b: Array, rows: LineStats, cols: LineStats, phases: dict[str, float] | None,
                         form_a: bool) -> None:
        """The residues (and a fused level's sums), then each span's INT8 products and CRT."""
        be, sums = self.backend, part.sums or (None, None)
        form_operands(be, family, part.table, self.ldk,
                      ((A if form_a else None, shift_a, rows.e, self.m, part.res_a, sums[0], "a"),
                       (B.T, shift_b, cols.e, self.n_pad, part.res_b, sums[1], "b")),
                      lambda name: _phase(be, phases, name))
        for span, planes, gemms in zip(part.spans, part.planes, part.gemms, strict=True):
            products(self, family, part, gemms, phases)
            with _phase(be, phases, "crt"):
                if part.half is None:
                    family.crt(planes, part.table, shift_a[span], shift_b, C[span])
                else:
                    family.crt_level(planes, part.table, shift_a, shift_b, C, span, part.half)

    def _replayed(self, family: Any, A: Array, B: Array, C: Array, kept: bool = False, kept_b: bool = False,
                  b_slot: int = 0) -> None:
        """The call's work as a CUDA graph per address set of (A, B, C), count and whether A's residues are
        ``kept`` (:mod:`gpu.backend.graphs`, mode ``"repeat"``): with a count given the whole product, under
        ``moduli="auto"`` all that follows the count's read (the line statistics and the count stay eager, since
        the count picks the graph), or the whole call as :mod:`gpu.ozaki2.deferred`'s graph (eager where it
        declines). Not with the Winograd levels' passes, whose products take scratch per call."""
        be = self.backend
        if self.fixed:
            count = self.fixed

            def work() -> None:
                self._whole(family, A, B, C, kept, None, kept_b, b_slot)
        else:
            if self.deferred is not None and self.deferred.run(family, A, B, C):
                return
            rows, cols, found, count = self._lines(family, A, B)
            if self.deferred is not None:
                self.deferred.note(count)
            if count == 0:
                self.backend.gemm(A, B, C)
                return

            def work() -> None:
                shift_a, shift_b = self._shifts(family, part, rows, cols, found)
                self._rest(family, part, A, B, C, shift_a, shift_b, rows, cols)
        part = self.part(count)
        if part.products is not None and self.deferred is None:
            self._graphs.run((be.pointer(A), be.pointer(B), be.pointer(C), count, kept, kept_b, b_slot), work)
        else:
            work()

    def _output(self, A: Array, B: Array, out: Array | None) -> Array:
        """C: ``out`` (its overlap with A and B checked, the addresses being the call's), or a new array."""
        be = self.backend
        if out is not None:
            return check_output(be, out, (self.m, self.n), np.float64, {"A": A, "B": B}, rows_contiguous=True)
        try:
            return be.xp.empty((self.m, self.n), dtype=np.float64)
        except MemoryError as exc:
            raise MemoryPlanError(f"the {gib(8 * self.m * self.n)} output of Ozaki scheme II on {self.m} x {self.k} x "
                                  f"{self.n} does not fit beside the plan's workspace; {ADVICE}") from exc

    def _scaling(self, family: Any, A: Array, B: Array) -> tuple[Part, Array, Array, LineStats, LineStats] | None:
        """The line statistics (one read of each operand), the count, and the shifts of A's rows and B's columns;
        None where no count meets the target (``verdict="device"``: C is then the library GEMM's)."""
        rows, cols, found, count = self._lines(family, A, B)
        if count == 0:
            return None
        part = self.part(count)
        return (part, *self._shifts(family, part, rows, cols, found), rows, cols)

    def _lines(self, family: Any, A: Array, B: Array) -> tuple[LineStats, LineStats, Any, int]:
        """The line statistics of A's rows and B's columns, the accurate scaling's bounds (None in fast mode), and
        the count (read under ``moduli="auto"``)."""
        opts, be = self.options, self.backend
        rows, cols = self._stats(family, A, B)
        if opts.check_finite:
            _refuse_nonfinite(be, rows, cols)
        found = None if opts.scaling != "accurate" and opts.bound == "normwise" else bounds(
            be, A, B, rows, cols, opts.scaling, self.work)
        count = self.last_count = self.fixed or self._count(family, A, B, rows, cols, found)
        return rows, cols, found, count

    def _stats(self, family: Any, A: Array, B: Array) -> tuple[LineStats, LineStats]:
        """The line statistics of A's rows and B's columns, into the plan's vectors (one read of each operand)."""
        tiles = self.work.region("tiles")
        return (family.line_stats(A, tiles, self.normwise, self.lines_a, self.wide),
                family.line_stats(B.T, tiles, self.normwise, self.lines_b, self.wide))

    def _shifts(self, family: Any, part: Part, rows: LineStats, cols: LineStats, found: Any) -> tuple[Array, Array]:
        """The scale codes of A's rows and B's columns for ``part``'s moduli (:mod:`gpu.ozaki2.scaling`)."""
        if self.options.scaling != "accurate":
            out_a, out_b = self.shift_buffers or (None, None)
            return (family.shifts(rows, part.table, out_a, self._fine_k),
                    family.shifts(cols, part.table, out_b, self._fine_k))
        u, v = headroom(found, part.table)
        return (((rows.e + u) << FINE_BITS).astype(np.int32), ((cols.e + v) << FINE_BITS).astype(np.int32))

    @property
    def _fine_k(self) -> int | None:
        """The k of fine scaling's bound (None: powers of two)."""
        return self.k if self.options.scaling == "fine" else None

    def _count(self, family: Any, A: Array, B: Array, rows: LineStats, cols: LineStats, found: Any) -> int:
        """``moduli="auto"``: the normwise count (read back on the GPU), or the componentwise one."""
        opts = self.options
        if not self.normwise:
            xp = self.backend.xp
            A0 = xp.where(xp.isfinite(rows.mx)[:, None], A, 0.0)
            B0 = xp.where(xp.isfinite(cols.mx)[None, :], B, 0.0)
            return choose_moduli(A0, B0, found, opts.goal)
        if found is not None:
            rows, cols = rows._replace(R=found.rows), cols._replace(R=found.cols)
        count = family.auto_count(rows, cols, self.k, self.goal, self.count_buffers)
        if count == 0 and opts.verdict == "host":
            raise refusal(opts.goal, float(family.auto_errors(rows, cols, self.k, self.count_buffers)[-1]))
        return count


def _refuse_nonfinite(be: Backend, rows: LineStats, cols: LineStats) -> None:
    """ValueError (``check_finite=True``) naming how many rows of A and columns of B hold NaN or infinity."""
    xp = be.xp
    bad_rows, bad_cols = int((~xp.isfinite(rows.mx)).sum()), int((~xp.isfinite(cols.mx)).sum())
    if bad_rows or bad_cols:
        raise ValueError(f"A has NaN or infinity in {bad_rows} rows and B in {bad_cols} columns (check_finite=True); "
                         f"check the input, or pass check_finite=False: {NONFINITE}")
