"""CuPy kernels of Strassen's fused additions: one ``ElementwiseKernel`` per run of additions.

Loaded by :meth:`gpu.backend.Backend.ops` for the CuPy backend only
(``"strassen-fusion"``), so the CPU path never imports CuPy.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import cupy

from ..backend import Backend
from .fusion import fused_source

Steps = tuple[tuple[str, str, str, "str | None"], ...]


class CupyFusion:
    """Compiles a run of addition steps into one kernel over strided quadrant views."""

    fuses = True

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def compile(self, steps: Steps, dead: frozenset[str] = frozenset()) -> tuple[Any, tuple[str, ...]]:
        """The kernel running ``steps`` and the space names of its arguments, in order."""
        return _kernel(steps, dead)


@cache
def _kernel(steps: Steps, dead: frozenset[str]) -> tuple[Any, tuple[str, ...]]:
    inputs, outputs, body = fused_source(steps, dead)
    read_only = [r for r in inputs if r not in outputs]
    params_in = ", ".join(f"T {r}" for r in read_only)
    params_out = ", ".join(f"T {w}" for w in outputs)
    name = "gemmlab_fused_" + "_".join(d for d, *_ in steps)
    kernel = cupy.ElementwiseKernel(params_in, params_out, body, name, no_return=True)
    return kernel, tuple(read_only + outputs)
