"""The front door for complex operands: the complex library GEMM, or Ozaki scheme II over both parts, by the
contract's complex reading (:mod:`gpu.frontdoor.contract`: each part a real product of 2k terms).

The candidates are the library's complex GEMM (``numpy.matmul`` or cuBLAS's ZGEMM: entry scale, gamma_2k, the
reference) and :func:`gpu.ozaki2.complex.matmul` at ``moduli="auto"`` (rowcol, 2**-56 sqrt(2k): it keeps
``"dgemm"`` and the looser levels, not ``"zgemm"``'s componentwise reading). A device profile's ``methods``
section times the latter as method ``"ozaki2c"`` in points that say ``"dtype": "complex128"`` (``gemmlab
calibrate --methods``); unmeasured, it is a candidate only where the library GEMM
cannot prove the accuracy asked for, as for real products (:mod:`gpu.frontdoor.rank`). Complex operands go
neither out of core nor to Dask: the front door refuses a complex product a route would take.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..backend import Array, Backend, check_output, matrix_pair
from ..backend.plans import MatmulPlan, operand_signature
from ..ozaki2 import complex as complex_ii
from ..zgemm.api import check_dtype
from . import contract
from .contract import Accuracy
from .rank import Ranked, Ranking, ranking_of
from .table import Timed, estimate_all, library_seconds

LIBRARY = "zgemm (the library complex GEMM)"
OZAKI2C = Timed.of("ozaki2c", {"moduli": "auto", "target": "dgemm"})
#: The dtype the complex points of a ``methods`` section say they timed.
DTYPE = "complex128"


def refuse_memory(memory: Any) -> None:
    """ValueError where ``memory=`` is given for complex operands: no route takes them out of core."""
    if memory is not None:
        raise ValueError("complex products take no out-of-core route, so memory= does not apply to them; leave it "
                         "out (the operands must fit on the device)")


def rank_complex(m: int, k: int, n: int, want: Accuracy, methods: Mapping[str, Any] | None = None) -> Ranking:
    """The complex candidates of an m x k by k x n product for ``want``, ranked as real ones are; ValueError where
    none keeps it."""
    k2 = 2 * k
    lib = contract.library(k2)
    keeps, why = contract.keeps(lib, want, k2)
    found = [Ranked(LIBRARY, "gemm", {}, 1.0, "the reference (each part a real sum of 2k products)", lib, keeps,
                    why=why)]
    g = contract.ozaki2("dgemm", k2, "normwise")
    keeps, why = contract.keeps(g, want, k2)
    timed = {t: e for t, e in estimate_all(methods, m, k, n, DTYPE).items() if t.method == OZAKI2C.method}
    for t, e in timed.items() or [(OZAKI2C, None)]:
        basis = e.basis if e else "not measured for complex products on this device"
        found.append(Ranked(t.name, "ozaki2c", dict(t.options), e.ratio if e else None, basis, g, keeps,
                            waits=True, why=why))
    return ranking_of(found, want, (m, k, n), library_seconds((methods,), m, k, n, DTYPE), DTYPE)


class ComplexPlan(MatmulPlan):
    """A complex candidate's product into ``out`` or a new complex128 C (its family's checks made here)."""

    def __init__(self, r: Ranked, A: Array, B: Array, out: Array | None, be: Backend) -> None:
        A, B, _, _ = matrix_pair(be, A, B)
        check_dtype(A, "A")
        check_dtype(B, "B")
        check_output(be, out, (A.shape[0], B.shape[1]), np.complex128, {"A": A, "B": B})
        self.backend, self.family, self.options = be, r.family, dict(r.options)
        self.signature = operand_signature(be, A, B, out)

    def _execute(self, A: Array, B: Array, out: Array | None) -> Array:
        xp = self.backend.xp
        if self.family == "gemm":
            A, B = (X.astype(np.complex128, copy=False) for X in (A, B))
            return xp.matmul(A, B) if out is None else xp.matmul(A, B, out=out)
        return complex_ii.matmul(A, B, out=out, backend=self.backend, **self.options)
