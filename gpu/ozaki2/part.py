"""What a scheme II plan holds for one modulus count (:class:`Part`): its table, the workspace's views and the
INT8 GEMMs planned on them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..backend import Array
from .moduli import ModuliTable


@dataclass(frozen=True)
class Part:
    """What one modulus count needs: its table, the workspace's views (residues; what the INT8 GEMMs write: every
    modulus's product, INT32 or as INT8 residues, in the direct layout, else one; the planes the CRT reads), and
    the INT8 GEMMs, planned once: per span of C's rows in the direct layout (a layout of row panels runs each
    span's GEMMs, then its CRT, in turn), per modulus and k block in the planes."""

    table: ModuliTable
    res_a: Array
    res_b: Array
    products: Array | None         # None with Winograd levels' passes (their products come out as residues)
    planes: list[Array]            # what the CRT reads for each span of C's rows
    spans: list[slice]             # C's rows, whole or in the direct layout's row panels
    direct: bool
    gemms: list[list[Any]]         # each span's INT8 GEMMs in the direct layout
    plane_gemms: list[list[Any]]   # the planes layout's INT8 GEMMs per modulus and k block (none with levels)
    half: int | None = None        # a fused Winograd level's half of m (its spans run over the top half's rows)
    sums: tuple[Array, Array] | None = None    # and each modulus's four sums of A's blocks and of B's
    quarter: int | None = None     # the fused second level's quarter of m (its spans run over each quarter's rows;
                                   # res_a and res_b then hold A's span's and B's 49 operands per modulus)
