"""The operands of the exact references: float64 arrays of a backend, whose values float64 holds exactly."""

from __future__ import annotations

from typing import Any

import numpy as np

from gpu.backend import Array, Backend, matrix_pair, require_finite

#: What ``check_finite=False`` does (ValueError messages point here).
NONFINITE = ("rows of A and columns of B holding NaN or infinity then get the exact IEEE value of their "
             "entries, NaN or +-infinity (accuracy.special)")
EXACT_DTYPES = ("float16", "float32", "float64", "int8", "int16", "int32", "uint8", "uint16", "uint32")


def check_operands(be: Backend, A: Any, B: Any, check_finite: bool = True) -> tuple[Array, Array]:
    """A and B as float64 arrays of ``be`` with matching inner dimension (any 2-D array-likes; see
    :mod:`gpu.backend.checks`), finite where ``check_finite``.

    Accepts dtypes whose values float64 holds exactly. Never modifies the inputs.
    """
    A, B, _, _ = matrix_pair(be, A, B)
    out = []
    for name, arr in (("A", A), ("B", B)):
        if arr.dtype.name not in EXACT_DTYPES:
            raise TypeError(f"{name} has dtype {arr.dtype}, which float64 may not hold exactly; "
                            f"pass one of {', '.join(EXACT_DTYPES)} (convert with .astype(np.float64))")
        out.append(arr.astype(np.float64, copy=False))
    require_finite(be, check_finite, {"A": out[0], "B": out[1]}, NONFINITE)
    return out[0], out[1]
