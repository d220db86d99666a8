"""CUDA kernels of scheme II (CuPy only): the GPU twin of :class:`gpu.ozaki2.ops.HostOps`.

* ``ozaki2_rows`` (its source in :mod:`gpu.ozaki2.rows_source`, which a fused level's pass of residues and sums,
  :mod:`gpu.ozaki2.residue_sums`, compiles too): reads a 32 x 32 tile of X (A's rows, or B's columns as the rows
  of B^T) through shared memory, so that reads are coalesced whichever axis of X is contiguous, and writes, four
  consecutive entries per thread and one 32-bit store per plane, either the bars ``ceil(|x| 2**e_r)`` (``BARS``) or the
  symmetric residues of ``x' = round(fl(x 2**s_r rho_r))`` (the row's scale code: :mod:`gpu.ozaki2.scaling`)
  modulo every modulus (``RESIDUES``; to nearest where s_r is
  at least the row's bar exponent, toward zero elsewhere, as :func:`gpu.ozaki2.scaling.to_integers`).
  Where every |x'| of a warp's entries is below 2**79, x' = a 2**52 + b 2**26 + c exactly (a, b, c the
  nearest integers step by step: |a| <= 2**27, |b|, |c| <= 2**25), and y = a (2**52 mod m) + b (2**26 mod m)
  + c, two FMAs with compile-time constants, is an integer below 2**36 congruent to x'. Otherwise (a
  branch the whole warp takes: |x'| reaches 2**79 only where a line's bound leaves it far below the CRT's
  range) x' is n 2**e with an integer n < 2**53 (``frexp``), n = h 2**26 + l, and y = h (2**(26+e) mod m)
  + l (2**e mod m) with the powers from a table.
* the planes layout's reduction of an INT32 product into its modulus's plane, added to it where k is blocked
  (:mod:`gpu.ozaki2.plane_kernels`: 16 products a thread where the plane's rows allow).
* ``ozaki2_crt``: the double-double CRT of every entry (:mod:`gpu.ozaki2.crt_kernels`, with its measurements).

**Residues** (``residue_word``): for an integer y, |y| < 2**36, held as a double, q = the nearest integer to
y fl(1/m), from one FMA that adds ``MAGIC`` = 1.5 * 2**52 (the sum's low word is then q itself, and y +
MAGIC's low word is y: integers below 2**51 in magnitude). y fl(1/m) is within 2**-24 of y / m, which for
odd m is at least 1/(2m) from a half-integer, so q is the nearest integer to y / m and r = y - q m lies in
[-(m-1)/2, (m-1)/2], the symmetric residue; for m = 256, fl(1/m) is exact and r lies in [-128, 128], whose
low byte is the symmetric residue (+128 wraps to -128). r is computed in 32-bit integer arithmetic from the
two low words, so each residue costs two float64 operations beyond forming y (two FMAs on the limbs path)
and no conversion: the H100 converts to and from 64-bit types and rounds float64 to integers at a quarter of
its float64 rate. The residue is a function of the integer alone, so it equals NumPy's.

Every modulus is a compile-time constant (one kernel per modulus count, its loops unrolled; templates on m).
The kernel is bound by instruction issue, not memory: with the table path for every entry (the compiler
predicated its branch, so every entry paid for it) it executed 757 M warp instructions at 86% of issue slots
on an N = 8192 operand with 15 moduli (H100, ncu), 0.88 ms; the limbs path executes 380 M, 0.74 ms (3.35
against 2.87 ms at N = 16384), against 0.64 ms for a kernel that reads the same tiles and writes the same
planes with no arithmetic (``results/published/scripts/ozaki2_residues.py``; bitwise equal, also with shifts
raised by 20, 30 and 60 to exercise both paths). Computing y's low word from 32-bit integer limbs instead of
the ``MAGIC`` sum took more registers and ran at 0.87 ms. On the H200 (15 moduli, both operands of a real product
at N = 8192 and 16384, bitwise equal; ``results/published/h200/h200-ozaki2-passes-probe-740c7e0.json``) neither
more resident blocks nor keeping loads in flight through the arithmetic paid: the kernel held to five blocks an SM
(48 registers, 64 bytes spilled) ran 4-5% slower, and blocks that stay resident and load the next tile while
they write the current one's planes ran from 3% faster to 1.6% slower at three blocks an SM (0.676-2.770 against
0.698-2.737 ms) and up to 28% slower at four. Fast mode's line maxima and sums of squared bars take one read of
each operand (:mod:`gpu.ozaki2.fused`).
"""

from __future__ import annotations

from functools import cache
from typing import Any

import cupy
import numpy as np

from ..backend import Backend
from ..ozaki.kernels import TILE, TILE_ROWS
from . import crt_kernels, device, fused, level2_kernels
from .cuda_source import COMMON, for_each_modulus
from .fused_level import whole_tiles
from .moduli import ModuliTable
from .normwise import LineStats
from .ops import shifts_across
from .plane_kernels import reduce_into
from .residue_sums import residues_and_sums
from .rows_source import ROWS_SOURCE, element_strides, powers


@cache
def _rows_kernel(mode: str, moduli: tuple[int, ...]) -> Any:
    source = (f"#define BARS {int(mode == 'bars')}\n" + for_each_modulus(moduli) + COMMON + fused.TILE_SOURCE
              + ROWS_SOURCE)
    return cupy.RawKernel(source, "ozaki2_rows")


_SHIFT = ("int ex; const double fr = frexp(x < 1.0 ? 1.0 : x, &ex);"
          "const long long t = (long long)L - ex - (fr > mu ? 1 : 0);")


@cache
def _shift_kernel(half: bool) -> Any:
    """:func:`gpu.ozaki2.scaling.half_shift` (floor of t / 2: an arithmetic shift) or ``full_shift`` in one pass."""
    body = _SHIFT + ("s = t >> 1;" if half else "s = t;")
    return cupy.ElementwiseKernel("float64 x, float64 mu, int32 L", "int64 s", body,
                                  f"ozaki2_{'half' if half else 'full'}_shift")


@cache
def _scaled_max() -> Any:
    return cupy.ReductionKernel("T c, int32 s", "float64 y", "ldexp((double)c, s)", "max(a, b)", "y = a", "0",
                                "ozaki2_scaled_max")


def _launch_rows(X: Any, shifts: Any, exps: Any, out: Any, rows_pad: int, ldk: int, mode: str,
                 moduli: tuple[int, ...]) -> None:
    rows, cols = X.shape
    rs, cs = element_strides(X)
    pow2, length = powers(moduli)
    i64, i32 = np.int64, np.int32
    _rows_kernel(mode, moduli)(
        (-(-ldk // TILE), -(-rows_pad // TILE)), (TILE, TILE_ROWS),
        (X, i64(rs), i64(cs), i64(rows), i64(cols), i64(rows_pad), i64(ldk), shifts.astype(i32, copy=False),
         exps.astype(i32, copy=False), out, i64(rows_pad * ldk), pow2, i32(length)))


class CudaOps(device.DeviceOps):
    """Scheme II's operations on CuPy arrays, as CUDA kernels (see the module)."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def bars(self, X: Any, e: Any, rows_pad: int, ldk: int, out: Any = None) -> Any:
        out = cupy.empty((rows_pad, ldk), dtype=np.int8) if out is None else out
        _launch_rows(X, e, e, out, rows_pad, ldk, "bars", (1,))
        return out

    def residues(self, X: Any, shifts: Any, exps: Any, table: ModuliTable, rows_pad: int, ldk: int,
                 out: Any = None) -> Any:
        out = cupy.empty((table.count, rows_pad, ldk), dtype=np.int8) if out is None else out
        _launch_rows(X, shifts, exps, out, rows_pad, ldk, "residues", table.moduli)
        return out

    def residues_and_sums(self, X: Any, shifts: Any, exps: Any, table: ModuliTable, rows_pad: int, ldk: int,
                          out: Any, sums: Any, side: str) -> bool:
        """:meth:`residues` and a fused level's four sums of each modulus's blocks into ``sums`` in one pass
        (:mod:`gpu.ozaki2.residue_sums`) where the blocks are whole tiles; False (nothing done) otherwise."""
        if not whole_tiles(rows_pad, ldk) or not sums.flags.c_contiguous:
            return False
        residues_and_sums(X, shifts, exps, table, rows_pad, ldk, out, sums, side)
        return True

    def reduce(self, P: Any, plane: Any, modulus: int, accumulate: bool) -> None:
        reduce_into(P, plane, modulus, accumulate)

    def level2_operands(self, X: Any, shifts: Any, exps: Any, table: ModuliTable, out: Any, side: str, span0: int,
                        rows: int, quarter: int) -> None:
        level2_kernels.operands(X, shifts, exps, table, out, side, span0, rows, quarter)

    def crt_level2(self, products: Any, table: ModuliTable, shift_a: Any, shift_b: Any, C: Any, span0: int,
                   rows: int, quarter: int) -> None:
        level2_kernels.crt(products, table, shift_a, shift_b, C, span0, rows, quarter)

    def crt(self, planes: Any, table: ModuliTable, shift_a: Any, shift_b: Any, C: Any) -> None:
        crt_kernels.crt(planes, table, shift_a, shift_b, C)

    def crt_level(self, products: Any, table: ModuliTable, shift_a: Any, shift_b: Any, C: Any, rows: slice,
                  half: int) -> None:
        crt_kernels.crt_level(products, table, shift_a, shift_b, C, rows, half)

    def half_shift(self, R: Any, limit: float) -> Any:
        mu, L = np.frexp(limit)
        return _shift_kernel(True)(R, np.float64(mu), np.int32(L))

    def full_shift(self, W: Any, limit: float) -> Any:
        mu, L = np.frexp(limit)
        return _shift_kernel(False)(W, np.float64(mu), np.int32(L))

    def scaled_max(self, cbar: Any, shifts: Any, axis: int) -> Any:
        return _scaled_max()(cbar, shifts_across(shifts, axis), axis=axis)

    def line_stats(self, X: Any, scratch: Any = None, norms: bool = False, out: LineStats | None = None,
                   wide: bool = False) -> LineStats:
        return device.line_stats(X, scratch, norms, out, wide)

    def prepare(self, table: ModuliTable, planes: Any) -> None:
        """Compile the residue kernel of ``table``'s moduli and the CRT kernel for ``planes`` and upload their
        tables (each once per process)."""
        _rows_kernel("residues", table.moduli)
        powers(table.moduli)
        crt_kernels.prepare(table, planes)

    @staticmethod
    def scratch_bytes(m: int, k: int, n: int, count: int, scaling: str) -> int:
        """Device bytes a product allocates beyond its workspace block and C: vectors per row of A and column
        of B (maxima, sums of squared bars, exponents, bounds, shifts: under 128 bytes a line), the tables of
        2**e mod m its moduli take the first time (kept), and room for CuPy's 512-byte unit."""
        return 128 * (m + n) + 8 * 1040 * count + 64 * 512
