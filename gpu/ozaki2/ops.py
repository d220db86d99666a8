"""Scheme II's element-wise operations per backend: bounds, residues, reduction and the CRT.

:func:`gpu.ozaki2.api.matmul` is written once; what differs between the CPU and the GPU is fetched as
``backend.ops("ozaki2")``: :class:`HostOps` here (NumPy, built on the reference steps of
:mod:`gpu.ozaki2.residues` and :mod:`gpu.ozaki2.crt`) and :class:`gpu.ozaki2.kernels.CudaOps` (CUDA
kernels, loaded only with CuPy). Every step is integer arithmetic or an exactly specified sequence of
float64 operations (no fused multiply-add where it would change a rounding), so both give identical
bits; the GPU tests check it.

Operands are handled as *rows*: A's rows, and B's columns read as the rows of ``B.T`` (any strides),
written k-contiguous into ``rows_pad x ldk`` INT8 arrays (padding zero), the layout of the INT8 GEMM
``R_A[t] @ R_B[t].T`` (as scheme I's slices).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..backend import Backend, register_ops
from .crt import reconstruct
from .fused_level import operands, quadrants
from .moduli import MODULI, ModuliTable
from .normwise import BAD_E, LineStats, first_meeting, predicted_error
from .residues import residues, symmetric
from .scaling import WIDE_BITS, code_parts, codes, full_shift, half_shift, to_integers, unscale
from .winograd import HostResidueOps

FAMILY = "ozaki2"


def _rows(X: np.ndarray, rows_pad: int, ldk: int, lead: tuple[int, ...] = (), out: np.ndarray | None = None
          ) -> np.ndarray:
    """A zeroed INT8 array ``(*lead, rows_pad, ldk)`` for X's rows: ``out`` zeroed, or a new one."""
    if rows_pad < X.shape[0] or ldk < X.shape[1]:
        raise ValueError(f"padding ({rows_pad}, {ldk}) is smaller than the rows {X.shape}")
    if out is None:
        return np.zeros((*lead, rows_pad, ldk), dtype=np.int8)
    out[...] = 0
    return out


def shifts_across(shifts: Any, axis: int) -> Any:
    """Row shifts as a column (reducing over axis 0) or column shifts as a row (axis 1), as int32."""
    shifts = shifts.astype(np.int32)
    return shifts[:, None] if axis == 0 else shifts[None, :]


class HostOps:
    """Scheme II's operations on NumPy arrays (see the module)."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def bars(self, X: np.ndarray, e: np.ndarray, rows_pad: int, ldk: int, out: np.ndarray | None = None
             ) -> np.ndarray:
        """``ceil(|X| 2**e)`` per row (row maxima scale below 2**6, so entries are at most 64), as INT8."""
        out = _rows(X, rows_pad, ldk, out=out)
        with np.errstate(invalid="ignore"):
            bars = np.ceil(np.ldexp(np.abs(X), e[:, None].astype(np.int64)))
            out[:X.shape[0], :X.shape[1]] = np.where(bars <= 64, bars, 0)   # a line that is not finite: 0
        return out

    def residues(self, X: np.ndarray, shifts: np.ndarray, exps: np.ndarray, table: ModuliTable, rows_pad: int,
                 ldk: int, out: np.ndarray | None = None) -> np.ndarray:
        """The symmetric residues of X's rows scaled by their codes ``shifts`` (rho 2**s:
        :func:`~gpu.ozaki2.scaling.code_parts`) and rounded (to nearest where s is at least the row's bar exponent
        in ``exps``, toward zero elsewhere: :func:`to_integers`) modulo every modulus: INT8
        ``(N, rows_pad, ldk)``, into ``out`` where given."""
        out = _rows(X, rows_pad, ldk, (table.count,), out)
        s, rho = code_parts(shifts)
        with np.errstate(invalid="ignore", over="ignore"):
            scaled = to_integers(np.ldexp(X, s[:, None]) * rho[:, None], (s >= exps)[:, None])
        scaled[~np.isfinite(scaled)] = 0                 # lines that are not finite (replaced by the IEEE values)
        out[:, :X.shape[0], :X.shape[1]] = residues(scaled, table.moduli)
        return out

    def residues_and_sums(self, X: np.ndarray, shifts: np.ndarray, exps: np.ndarray, table: ModuliTable,
                          rows_pad: int, ldk: int, out: np.ndarray, sums: np.ndarray, side: str) -> bool:
        """The residues and a fused level's sums in one pass: only the GPU has it (False: the caller forms them in
        two, :func:`gpu.ozaki2.fused_level.form_operands`)."""
        return False

    def reduce(self, P: np.ndarray, plane: np.ndarray, modulus: int, accumulate: bool) -> None:
        """``plane = sym(P mod m)``, or with ``accumulate`` ``sym(plane + P mod m)`` (k blocks)."""
        U = P.astype(np.int64) % modulus
        if accumulate:
            U = (U + plane) % modulus
        plane[...] = symmetric(U, modulus)

    def crt(self, planes: np.ndarray, table: ModuliTable, shift_a: np.ndarray, shift_b: np.ndarray,
            C: np.ndarray) -> None:
        """C = C', the double-double CRT of ``planes`` (N, m, n), scaled back by the codes of A's rows and B's
        columns (:func:`~gpu.ozaki2.scaling.unscale`); ``planes``: symmetric residues (INT8), or INT32 products of
        one k block, reduced here first. Lines that are not finite are replaced afterwards."""
        if planes.dtype == np.int32:
            planes = np.stack([symmetric(P.astype(np.int64) % m, m) for P, m in zip(planes, table.moduli, strict=True)])
        C[...] = unscale(reconstruct(planes, table), shift_a, shift_b)

    def crt_level(self, products: np.ndarray, table: ModuliTable, shift_a: np.ndarray, shift_b: np.ndarray,
                  C: np.ndarray, rows: slice, half: int) -> None:
        """The fused Winograd level's CRT (:mod:`gpu.ozaki2.fused_level`): C's rows ``rows`` and ``rows`` + ``half``
        from the 7 INT32 products per modulus (``products``: count x 7 x lines x w) of the top half's ``rows``,
        each output block's residues combined from them (:meth:`HostResidueOps.combine_products`), then
        :meth:`crt` block by block: the GPU's one pass gives the same bits."""
        (lines, w), combine = products.shape[2:], HostResidueOps().combine_products
        blocks = np.empty((4, table.count, lines, w), dtype=np.int8)
        for t, modulus in enumerate(table.moduli):
            combine(tuple(products[t]), modulus, tuple(blocks[:, t]))
        for q, (down, right) in enumerate(((0, 0), (0, w), (half, 0), (half, w))):
            at = slice(rows.start + down, rows.stop + down)
            self.crt(blocks[q], table, shift_a[at], shift_b[right:right + w], C[at, right:right + w])

    def level2_operands(self, X: np.ndarray, shifts: np.ndarray, exps: np.ndarray, table: ModuliTable,
                        out: np.ndarray, side: str, span0: int, rows: int, quarter: int) -> None:
        """The fused second level's 49 operands per modulus (:mod:`gpu.ozaki2.fused_level2`) of X's ``rows`` rows
        from ``span0`` of each of its four quarters (``quarter`` rows each) into ``out`` (count x 49 x span x
        ldk / 4; its first ``rows`` rows): the residues of those rows, then two levels of
        :meth:`HostResidueOps.operand_sums`, operand (p, q) the inner operand q of the level's outer operand p.
        The GPU's one pass gives the same bits."""
        ldk, sums = 4 * out.shape[-1], HostResidueOps().operand_sums
        bands = [slice(span0 + j * quarter, span0 + j * quarter + rows) for j in range(4)]
        res = np.concatenate([self.residues(X[b], shifts[b], exps[b], table, rows, ldk) for b in bands], axis=1)
        pick = 0 if side == "a" else 1

        def seven(x: np.ndarray, m: int) -> list[np.ndarray]:
            s = sums(*quadrants(x, side), m, side)
            return [pair[pick] for pair in operands(x, x, s, s)[2]]
        for t, m in enumerate(table.moduli):
            for p, outer in enumerate(seven(res[t], m)):
                for q, inner in enumerate(seven(outer, m)):
                    out[t, 7 * p + q, :rows] = inner

    def crt_level2(self, products: np.ndarray, table: ModuliTable, shift_a: np.ndarray, shift_b: np.ndarray,
                   C: np.ndarray, span0: int, rows: int, quarter: int) -> None:
        """The fused second level's CRT: C's rows ``span0`` .. ``span0 + rows`` of each quarter (``quarter`` rows),
        all its columns, from the 49 INT8 residue products per modulus (count x 49 x span x n / 4; their first
        ``rows`` rows): each output block's residues combined from them (inner, then outer:
        :meth:`HostResidueOps.combine_products`), then :meth:`crt` block by block."""
        combine, w = HostResidueOps().combine_products, products.shape[-1]
        blocks = np.empty((4, 4, table.count, rows, w), dtype=np.int8)
        for t, modulus in enumerate(table.moduli):
            inner = np.empty((7, 4, rows, w), dtype=np.int8)
            for p in range(7):
                combine(tuple(products[t, 7 * p:7 * p + 7, :rows]), modulus, tuple(inner[p]))
            for i in range(4):
                combine(tuple(inner[:, i]), modulus, tuple(blocks[:, i, t]))
        for o in range(4):
            for i in range(4):
                top = (o >> 1) * 2 * quarter + (i >> 1) * quarter + span0
                left = (o & 1) * 2 * w + (i & 1) * w
                at, cols = slice(top, top + rows), slice(left, left + w)
                self.crt(blocks[o, i], table, shift_a[at], shift_b[cols], C[at, cols])

    @staticmethod
    def scratch_bytes(m: int, k: int, n: int, count: int, scaling: str) -> int:
        """Host bytes of NumPy's temporaries beyond the workspace block and C, at the peak of the step that
        takes most (bytes per entry, measured by tracemalloc with some room: tests/gpu/test_ozaki2_memory.py):
        the residues of the larger operand (scaled copies, mantissas and shifts, each modulus's residues
        before they are stored: at most 65 + N bytes an entry), the maxima and bars (32), one emulated INT8
        GEMM (its operands and product in float64), the reduction of one product (40 an entry of C), and
        the CRT (each product's residues, then stacked, and the double-double sums: at most 2 N + 80)."""
        ldk, n_pad, operand = -(-k // 16) * 16, -(-n // 16) * 16, max(m * k, k * n)
        return max((88 + count) * operand, 40 * operand, 8 * (m + n_pad) * ldk + 32 * m * n_pad,
                   (2 * count + 112) * m * n) + 2**17

    half_shift = staticmethod(half_shift)
    full_shift = staticmethod(full_shift)

    def scaled_max(self, cbar: np.ndarray, shifts: np.ndarray, axis: int) -> np.ndarray:
        """max over ``axis`` of ``cbar * 2**shifts`` (shifts along the other axis), exact in float64."""
        return np.ldexp(cbar.astype(np.float64), shifts_across(shifts, axis)).max(axis=axis)

    def line_stats(self, X: np.ndarray, scratch: np.ndarray | None = None, norms: bool = False,
                   out: LineStats | None = None, wide: bool = False) -> LineStats:
        """:class:`~gpu.ozaki2.normwise.LineStats` of X's rows: the maximum |x| (NaN where the row holds NaN),
        the bar exponent e = 6 - exp(max) (:data:`~gpu.ozaki2.normwise.BAD_E` where the row is not finite), R =
        the sum of the squared bars (:meth:`bars`), exactly (0 for a row that is not finite), and with ``norms``
        the row's 1-norm and squared 2-norm scaled by 2**e, with ``wide`` fine scaling's Rw. Several passes here,
        with no use for the GPU's ``scratch`` and ``out``; its passes give the same maxima, exponents, R and Rw
        (:mod:`gpu.ozaki2.fused`)."""
        mx = np.abs(X).max(axis=1) if X.shape[1] else np.zeros(X.shape[0])
        finite = np.isfinite(mx)
        e = np.full(X.shape[0], BAD_E, dtype=np.int32)
        e[finite] = 6 - np.frexp(mx[finite])[1]
        R = np.zeros(X.shape[0])
        bars = self.bars(X[finite], e[finite], int(finite.sum()), X.shape[1]).astype(np.int64)
        R[finite] = (bars**2).sum(axis=1)
        Rw = None
        if wide:
            Rw = np.zeros(X.shape[0], dtype=np.uint64)
            fine_bars = np.ceil(np.ldexp(np.abs(X[finite]), e[finite, None] + WIDE_BITS)).astype(np.uint64)
            Rw[finite] = (fine_bars * fine_bars).sum(axis=1, dtype=np.uint64)
        if not norms:
            return LineStats(mx, e, R, Rw=Rw)
        n1, n2sq = np.zeros(X.shape[0]), np.zeros(X.shape[0])
        scaled = np.ldexp(np.abs(X[finite]), e[finite, None])
        n1[finite], n2sq[finite] = scaled.sum(axis=1), (scaled * scaled).sum(axis=1)
        return LineStats(mx, e, R, n1, n2sq, Rw)

    def auto_count(self, rows: LineStats, cols: LineStats, k: int, goal: float, buffers: Any = None,
                   moduli: tuple[int, ...] = MODULI) -> int:
        """The fewest of ``moduli`` whose normwise bound meets ``goal`` (:mod:`gpu.ozaki2.normwise`; 0: none)."""
        return first_meeting(predicted_error(rows, cols, k, moduli), goal)

    def auto_errors(self, rows: LineStats, cols: LineStats, k: int, buffers: Any = None,
                    moduli: tuple[int, ...] = MODULI) -> np.ndarray:
        """The normwise bound E for every count 1..20 of ``moduli``, as NumPy."""
        return predicted_error(rows, cols, k, moduli)

    def shifts(self, stats: LineStats, table: ModuliTable, out: np.ndarray | None = None,
               fine_k: int | None = None) -> np.ndarray:
        """The scale codes of fast scaling ((e + u) 2**8, u = :func:`half_shift` of R against the table's L_N), or with
        ``fine_k`` (the product's k) of fine scaling: :func:`~gpu.ozaki2.scaling.codes`, as int32."""
        return codes(stats.e, stats.R, table, fine_k, stats.Rw)

    def fix_nonfinite(self, A: np.ndarray, B: np.ndarray, C: np.ndarray, rows: LineStats, cols: LineStats,
                      below: np.ndarray | None = None, sign: float = 1.0) -> None:
        """The entries of C in rows of A or columns of B holding NaN or infinity: the library GEMM's (IEEE).
        ``below``: B's lower rows, ``sign`` times this block (B is then [B; sign below], stacked only where a
        line needs it)."""
        bad_rows, bad_cols = np.flatnonzero(~np.isfinite(rows.mx)), np.flatnonzero(~np.isfinite(cols.mx))
        if below is not None and (bad_rows.size or bad_cols.size):
            B = np.concatenate((B, below if sign == 1 else -below), axis=0)
        with np.errstate(all="ignore"):
            if bad_rows.size:
                C[bad_rows] = A[bad_rows] @ B
            if bad_cols.size:
                C[:, bad_cols] = A @ B[:, bad_cols]

    @staticmethod
    def line_buffers(be: Backend, lines: int, norms: bool, wide: bool = False) -> None:
        """NumPy makes its vectors per call (a plan on the GPU keeps them)."""
        return None

    @staticmethod
    def shift_buffers(be: Backend, m: int, n: int) -> None:
        return None

    @staticmethod
    def count_buffers(be: Backend) -> None:
        return None

    def prepare(self, table: ModuliTable, planes: np.ndarray) -> None:
        """Nothing to compile or upload on NumPy (the GPU's kernels and tables for ``table``)."""


def ops(backend: Backend) -> Any:
    """Scheme II's operations of ``backend``."""
    return backend.ops(FAMILY)


register_ops(FAMILY, "numpy", HostOps)
register_ops(FAMILY, "cupy", "gpu.ozaki2.kernels:CudaOps")
