"""The correctly rounded complex product: real and imaginary parts each correctly rounded.

Each part of C = A B is one real inner product over twice the inner dimension,

    Re C = [Re A, -Im A] @ [Re B; Im B],    Im C = [Re A, Im A] @ [Im B; Re B],

whose terms are the exact products ``ar br``, ``-ai bi`` (``ar bi``, ``ai br``): negating a float64 is exact, so
:func:`accuracy.reference.exact_matmul` of the stacked real operands rounds each part once, correctly, from its
exact value. Real operands count as complex with a zero imaginary part. ``check_finite=False`` gives the rows of
A and columns of B holding NaN or infinity (in either part) the exact IEEE value of that real formula, entry by
entry (:mod:`accuracy.special`), as a complex GEMM of four real products computes them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gpu.backend import Array, Backend, get_backend, matrix_pair
from gpu.zgemm import is_complex, parts

from .operands import EXACT_DTYPES

__all__ = ["exact_complex", "is_complex"]


def exact_parts(be: Backend, X: Array, name: str) -> tuple[Array, Array]:
    """(real, imaginary) parts of X as float64 arrays of ``be`` (:func:`gpu.zgemm.parts`), for a real X only of
    the dtypes float64 holds exactly."""
    if X.dtype.kind != "c" and X.dtype.name not in EXACT_DTYPES:
        raise TypeError(f"{name} has dtype {X.dtype}, which float64 may not hold exactly; pass one of "
                        f"{', '.join(EXACT_DTYPES)} or a complex dtype")
    return parts(be, X, name)


def exact_complex(A: Any, B: Any, exact: Any, *, backend: str | Backend = "auto", check_finite: bool = True
                  ) -> Array:
    """The complex128 product with each part correctly rounded (see the module); ``exact``: the real reference
    (:func:`accuracy.reference.exact_matmul`), which checks the stacked operands as it checks real ones."""
    be = get_backend(backend)
    A, B, _, _ = matrix_pair(be, A, B)
    (ar, ai), (br, bi) = exact_parts(be, A, "A"), exact_parts(be, B, "B")
    xp = be.xp
    re = exact(xp.concatenate([ar, -ai], axis=1), xp.concatenate([br, bi], axis=0), backend=be,
               check_finite=check_finite)
    im = exact(xp.concatenate([ar, ai], axis=1), xp.concatenate([bi, br], axis=0), backend=be,
               check_finite=check_finite)
    C = xp.empty(re.shape, dtype=np.complex128)
    C.real, C.imag = re, im
    return C
