"""Ozaki scheme II's complex products (2M and 3M, :mod:`gpu.ozaki2.complex`) as a plan: made once per operand
signature, then each call only the per-call work.

:class:`Plan` checks the operands and options and takes, before any work, every buffer a call writes: A's and B's
parts stacked ([Re A, Im A] and [Re B; Im B]), the line statistics and shifts, the residues of the four parts (for
the most moduli under ``moduli="auto"``), the two parts' INT8 planes, the INT32 products of one k block (and 3M's
operand sums), and the float64 part the CRT writes. The INT8 GEMMs of each modulus and k block are planned once,
on those buffers (:func:`gpu.ozaki2.gemms.planned`), the first time a count needs them.

**No wait for the device** with a count given: the call returns once its work is queued. Under ``moduli="auto"``
the host reads the count (4 bytes), as the real scheme's plan does (:mod:`gpu.ozaki2.plan`). On the GPU a call
replays its work as a CUDA graph per address set of A, B and C from the second call of that set
(:mod:`gpu.backend.graphs`, mode ``"repeat"``): with a count given the whole product, under ``"auto"`` all that
follows the count's read. The work allocates nothing: every pass writes into the plan's buffers (a k block's parts
go straight into the planes, or are added into them modulo m). Replay computes what the eager work computes, bit
for bit, and the bits are those of :func:`gpu.ozaki2.complex.matmul` before it kept plans.

Why: eagerly, each call of the GPU path allocated its buffers and launched about a hundred kernels and GEMMs from
Python; on the H200 it held the host for 6-7 ms a call, so at N = 1024 the product ran at 0.03x ZGEMM
(``results/published/h200/h200-complex.csv``).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from ..backend import Array, Backend, MemoryPlanError, check_output, get_backend, matrix_pair
from ..backend.checks import gib
from ..backend.graphs import Graphs
from ..backend.plans import MatmulPlan, operand_signature
from ..ozaki.plan import _round_up
from ..zgemm.api import check_dtype
from . import fused, gauss
from .gemms import blocks, panels, planned, run_planned
from .moduli import GAUSSIAN_MODULI, MAX_MODULI, MODULI, moduli_table
from .normwise import LineStats, refusal, target_value
from .ops import ops
from .options import count as count_of
from .options import k_block as block_of
from .winograd import FAMILY, add

#: The way out of a product that does not fit.
ADVICE = "pass fewer moduli, or split the product into blocks of rows"


class Plan(MatmulPlan):
    """The complex128 product ``A @ B`` by Ozaki scheme II over both parts, scheme ``"2m"`` or ``"3m"`` (see
    :func:`gpu.ozaki2.complex.matmul` for the options), for one operand signature of (A, B, ``out``) on ``stream``.
    Raises TypeError, ValueError or MemoryPlanError before any work (the last from ``require``, given the bytes
    the plan takes and what it is, which frees other plans first where it can)."""

    def __init__(self, A: Any, B: Any, *, out: Any = None, moduli: Any = "auto", target: Any = None,
                 scheme: str = "2m", k_block: int | None = None, backend: str | Backend = "auto",
                 stream: Any = None, require: Any = None) -> None:
        if scheme not in ("2m", "3m"):
            raise ValueError(f"a complex plan runs scheme '2m' or '3m', not {scheme!r} (4M runs as real products "
                             "through gpu.ozaki2's kept plans: call gpu.ozaki2.complex.matmul)")
        self.fixed, self.block, self.scheme = count_of(moduli, target), block_of(k_block), scheme
        be = self.backend = get_backend(backend)
        A, B, _, _ = matrix_pair(be, A, B)
        check_dtype(A, "A")
        check_dtype(B, "B")
        (m, k), n = A.shape, B.shape[1]
        check_output(be, out, (m, n), np.complex128, {"A": A, "B": B})
        self.m, self.k, self.n, self.stream = m, k, n, stream
        self.target = "dgemm" if target is None else target
        self.goal = None if self.fixed else target_value(self.target, 2 * k)
        self.moduli_set = moduli_of(scheme)
        self.empty = not (m and n and k)
        if not self.empty:
            what, need = f"Ozaki scheme II on a complex {m} x {k} x {n} product", peak_bytes(
                m, k, n, self.fixed or MAX_MODULI, scheme)
            if require is not None:
                require(need, what)
            try:
                self._buffers()
            except MemoryError as exc:                # CuPy's OutOfMemoryError is a MemoryError
                raise MemoryPlanError(f"{what} needs {gib(need)} and the device could not give its buffers; "
                                      f"{ADVICE}") from exc
        self._tables: dict[int, Any] = {}
        self._gemms: dict[int, list[list[Any]]] = {}
        self._lock = threading.Lock()
        self.last_count = self.fixed
        self._graphs = Graphs(be, False if self.empty else "repeat", 0)
        if self.fixed and not self.empty:
            self._prepare(self.fixed)
        self.signature = operand_signature(be, A, B, out, stream)

    def _buffers(self) -> None:
        """Every array a call writes (see the module)."""
        be, (m, k, n) = self.backend, (self.m, self.k, self.n)
        xp, family, most = be.xp, ops(be), self.fixed or MAX_MODULI
        self.ldk, self.n_pad = _round_up(k), _round_up(n)
        self.ks = blocks(self.ldk, self.block)
        self.SA, self.SB = xp.empty((m, 2 * k)), xp.empty((2 * k, n))
        norms = self.fixed is None
        self.lines_a, self.lines_b = family.line_buffers(be, m, norms), family.line_buffers(be, n, norms)
        self.scratch = None if self.lines_a is None else \
            xp.empty(fused.workspace_bytes(max(m, n), 2 * k), dtype=np.uint8)
        self.shift_buffers = family.shift_buffers(be, m, n) or (None, None)
        self.count_buffers = None if self.fixed else family.count_buffers(be)
        self.res = [xp.empty((most, rows, self.ldk), dtype=np.int8) for rows in (m, m, self.n_pad, self.n_pad)]
        self.planes = [xp.empty((most, m, self.n_pad), dtype=np.int8) for _ in range(2)]
        products = 2 if self.scheme == "2m" else 3
        self.products = [xp.empty((m, self.n_pad), dtype=np.int32) for _ in range(products)]
        width = max(kb.stop - kb.start for kb in self.ks)
        self.sums = (xp.empty((m, width), dtype=np.int8), xp.empty((self.n_pad, width), dtype=np.int8)) \
            if self.scheme == "3m" else None
        self.found = (xp.empty((m, self.n_pad), dtype=np.int8), xp.empty((m, self.n_pad), dtype=np.int8)) \
            if len(self.ks) > 1 else None
        self.part = xp.empty((m, n))

    def _prepare(self, count: int) -> Any:
        """The table of ``count`` moduli, its kernels compiled and the INT8 GEMMs of its moduli planned (once)."""
        table = self._tables.get(count)
        if table is None:
            table = moduli_table(count, self.moduli_set)
            ops(self.backend).prepare(table, self.planes[0][:count, :, :self.n])
            for t in range(count):
                if t not in self._gemms:
                    self._gemms[t] = [self._block_gemms(t, kb) for kb in self.ks]
            self._tables[count] = table
        return table

    def _block_gemms(self, t: int, kb: slice) -> list[Any]:
        """Modulus ``t``'s INT8 GEMMs over k block ``kb`` into the INT32 products: U_A U_B and V_A V_B (2M, whose
        pairs replace the parts' residues), or Re A Re B, Im A Im B and their sums' product (3M)."""
        be, res, tiles = self.backend, self.res, panels(self.m, self.n_pad)
        a, b = [r[t][:, kb] for r in res[:2]], [r[t][:, kb] for r in res[2:]]
        if self.scheme == "3m":
            w = kb.stop - kb.start
            a.append(self.sums[0][:, :w])
            b.append(self.sums[1][:, :w])
        return [c for x, y, P in zip(a, b, self.products, strict=False) for c in planned(be, x, y, P, tiles)]

    def _execute(self, A: Array, B: Array, out: Array | None) -> Array:
        return self.run(A, B, out)

    def run(self, A: Array, B: Array, out: Array | None = None) -> Array:
        """The per-call work on the current stream, for operands of the plan's signature: ``out`` (checked apart
        from A and B) or a new complex128 C. One call at a time issues its work (the buffers are the plan's)."""
        be = self.backend
        with self._lock:
            if self.signature is None:
                raise ValueError("this plan was freed; build a new one")
            if out is not None:
                check_output(be, out, (self.m, self.n), np.complex128, {"A": A, "B": B})
            C = self._output() if out is None else out
            if self.empty:
                C[...] = 0
                return C
            family = ops(be)
            key = (be.pointer(A), be.pointer(B), be.pointer(C))
            if self.fixed:
                self._graphs.run((*key, self.fixed), lambda: self._whole(family, A, B, C))
                return C
            rows, cols = self._lines(family, A, B)
            count = self.last_count = self._count(family, rows, cols)
            self._graphs.run((*key, count), lambda: self._rest(family, count, rows, cols, C))
            return C

    def _output(self) -> Array:
        """A new complex128 C, or MemoryPlanError naming it."""
        try:
            return self.backend.xp.empty((self.m, self.n), dtype=np.complex128)
        except MemoryError as exc:
            raise MemoryPlanError(f"the {gib(16 * self.m * self.n)} complex output of {self.m} x {self.k} x {self.n} "
                                  f"does not fit beside the plan's buffers; pass out=, or {ADVICE}") from exc

    def _whole(self, family: Any, A: Array, B: Array, C: Array) -> None:
        rows, cols = self._lines(family, A, B)
        self._rest(family, self.fixed, rows, cols, C)

    def _lines(self, family: Any, A: Array, B: Array) -> tuple[LineStats, LineStats]:
        """A and B stacked into the plan's parts, and the line statistics of their 2k-term rows and columns."""
        fill_stacked(self.SA, A, 1)
        fill_stacked(self.SB, B, 0)
        norms = self.fixed is None
        rows = family.line_stats(self.SA, self.scratch, norms, self.lines_a)
        cols = family.line_stats(self.SB.T, self.scratch, norms, self.lines_b)
        return rows, cols

    def _count(self, family: Any, rows: LineStats, cols: LineStats) -> int:
        """``moduli="auto"``'s count: one 4-byte read on the GPU (see the module)."""
        k2, buffers, moduli = 2 * self.k, self.count_buffers, self.moduli_set
        count = family.auto_count(rows, cols, k2, self.goal, buffers, moduli)
        if count == 0:
            error = refusal(self.target, float(family.auto_errors(rows, cols, k2, buffers, moduli)[-1]))
            if moduli != MODULI:
                wider = float(family.auto_errors(rows, cols, k2, buffers, MODULI)[-1])
                error = ValueError(f"{error} (scheme='2m': {MAX_MODULI} Gaussian moduli; scheme='3m' takes "
                                   f"GEMMul8's wider ones, normwise bound {wider:.3g} here at {MAX_MODULI})")
            raise error
        return count

    def _rest(self, family: Any, count: int, rows: LineStats, cols: LineStats, C: Array) -> None:
        """The shifts, the residues, the INT8 products, and each part's CRT and IEEE repair into C."""
        table = self._prepare(count)
        sa, sb = self.shift_buffers
        shift_a, shift_b = family.shifts(rows, table, sa), family.shifts(cols, table, sb)
        k, SA, SB = self.k, self.SA, self.SB
        for X, res, shifts, stats, rows_pad in ((SA[:, :k], self.res[0], shift_a, rows, self.m),
                                                 (SA[:, k:], self.res[1], shift_a, rows, self.m),
                                                 (SB[:k].T, self.res[2], shift_b, cols, self.n_pad),
                                                 (SB[k:].T, self.res[3], shift_b, cols, self.n_pad)):
            family.residues(X, shifts, stats.e, table, rows_pad, self.ldk, out=res[:count])
        for t, modulus in enumerate(table.moduli):
            self._modulus(t, modulus)
        br, bi = SB[:k], SB[k:]
        for planes, (top, below, sign), name in ((self.planes[0], (br, bi, -1.0), "real"),
                                                 (self.planes[1], (bi, br, 1.0), "imag")):
            family.crt(planes[:count, :, :self.n], table, shift_a, shift_b, self.part)
            family.fix_nonfinite(SA, top, self.part, rows, cols, below, sign)
            setattr(C, name, self.part)

    def _modulus(self, t: int, modulus: int) -> None:
        """Modulus ``t``'s residues of Re C' and Im C' into the planes, summed over the k blocks."""
        be, res = self.backend, self.res
        if self.scheme == "2m":
            split = gauss.ops(be).split
            for x, y in ((res[0][t], res[1][t]), (res[2][t], res[3][t])):
                split(x, y, modulus, out=(x, y))
        for number, (kb, calls) in enumerate(zip(self.ks, self._gemms[t], strict=True)):
            if self.scheme == "3m":
                w = kb.stop - kb.start
                for a, b, into in ((res[0], res[1], self.sums[0]), (res[2], res[3], self.sums[1])):
                    add(a[t][:, kb], b[t][:, kb], modulus, out=into[:, :w])
            run_planned(be, calls)
            into = (self.planes[0][t], self.planes[1][t]) if number == 0 else self.found
            if self.scheme == "2m":
                gauss.ops(be).parts(*self.products, modulus, into)
            else:
                be.ops(FAMILY).karatsuba(*self.products, modulus, into)
            if number:
                for plane, found in zip((self.planes[0][t], self.planes[1][t]), self.found, strict=True):
                    add(plane, found, modulus, out=plane)

    def _release(self) -> None:
        with self._lock:
            self._graphs.clear()
            self._gemms, self._tables, self.signature = {}, {}, None
            for name in ("SA", "SB", "res", "planes", "products", "sums", "found", "part", "scratch", "lines_a",
                         "lines_b", "shift_buffers", "count_buffers"):
                if hasattr(self, name):
                    setattr(self, name, None)


def moduli_of(scheme: str) -> tuple[int, ...]:
    """The moduli a scheme draws its count from: the Gaussian ones for ``"2m"``, GEMMul8's for the others."""
    return GAUSSIAN_MODULI if scheme == "2m" else MODULI


def peak_bytes(m: int, k: int, n: int, count: int, scheme: str = "2m") -> int:
    """Bytes a product takes beyond A and B (an upper bound): the parts of A and B (float64, stacked:
    :func:`fill_stacked`), the residues of the four parts and the two parts' planes, one k block's INT32 products
    (three and the INT8 sums of 3M, two of 2M, whose pairs replace the residues) and their parts' residues, C
    (complex128), the float64 part the CRT writes, the line statistics' tile sums
    (:func:`gpu.ozaki2.fused.workspace_bytes`) and the vectors per line. A plan holds all but C."""
    ldk, n_pad = -(-k // 16) * 16, -(-n // 16) * 16
    parts = 8 * 2 * (m * k + k * n)
    residues = 2 * count * (m + n_pad) * ldk
    planes = 2 * count * m * n_pad
    products = 2 * m * n_pad * (4 + 1) if scheme == "2m" else 3 * m * n_pad * (4 + 2) + (m + n_pad) * ldk
    lines = fused.workspace_bytes(max(m, n), 2 * k) + 64 * (m + n) + 2**16
    return parts + residues + planes + products + 16 * m * n + 8 * m * n + lines


def fill_stacked(S: Array, X: Array, axis: int) -> None:
    """X's real and imaginary parts into ``S``, a float64 array, side by side (``axis`` 1: [Re X, Im X], what A's
    rows are scaled by) or one above the other (``axis`` 0: [Re X; Im X], B's columns): the statistics read it
    whole and the residues read its halves, so the parts are copied out of X once (a zero imaginary part for a
    real X)."""
    rows, cols = X.shape
    re, im = (S[:, :cols], S[:, cols:]) if axis else (S[:rows], S[rows:])
    complex_ = X.dtype.kind == "c"
    re[...] = X.real if complex_ else X
    im[...] = X.imag if complex_ else 0.0
