"""What the Ozaki scheme's modules share (and scheme II imports through :mod:`gpu.ozaki.api`): the operand check,
the phase timer, the output tiles and the text of what ``check_finite=False`` does."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from ..backend import Array, Backend, matrix_pair

#: What ``check_finite=False`` does (ValueError messages point here).
NONFINITE = ("rows of A and columns of B holding NaN or infinity then get the library GEMM's IEEE arithmetic "
             "(NaN and infinity where A @ B has them), the rest the Ozaki scheme")


def _operands(be: Backend, A: Any, B: Any) -> tuple[Array, Array]:
    A, B, _, _ = matrix_pair(be, A, B)
    for name, x in (("A", A), ("B", B)):
        if x.dtype != np.float64:
            raise TypeError(f"{name} has dtype {x.dtype}; the Ozaki scheme takes float64 inputs "
                            "(convert with .astype(np.float64))")
    return A, B


@contextmanager
def _phase(be: Backend, phases: dict[str, float] | None, name: str) -> Iterator[None]:
    if phases is None:
        yield
        return
    with be.timer() as t:
        yield
    phases[name] = phases.get(name, 0.0) + t.seconds


def _tiles(m: int, n: int, tile: int | tuple[int, int] | None) -> list[tuple[slice, slice]]:
    """Row and column ranges of the output tiles: ``tile`` square, or (rows, columns), or one tile (None)."""
    step_m, step_n = (tile, tile) if isinstance(tile, int) else tile or (m, n)
    return [(slice(i, min(i + step_m, m)), slice(j, min(j + step_n, n)))
            for i in range(0, m, step_m) for j in range(0, n, step_n)]
