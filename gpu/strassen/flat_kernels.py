"""CuPy kernels of flat Strassen passes: one generated ``RawKernel`` per program.

Loaded by :meth:`gpu.backend.Backend.ops` for the CuPy backend only (``"strassen-flat"``).
A thread owns one element position of the blocks: it loads that element of every input
block, runs the program's additions in registers and stores every output block's element.
Threads run along the input's unit-stride axis, so loads are coalesced; the block grid's
offsets are ``i * block_row + j * block_col`` with the block coordinates written into the
source, and the steps along the element grid come as arguments, so one kernel serves any
size, leading dimension and memory order.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import cupy
import numpy as np

from ..backend import Backend
from .flat import Program

THREADS = 256
#: Most blocks along the grid's second dimension; rows beyond it are looped over.
MAX_GRID_Y = 65535
CTYPES = {np.dtype(np.float64): "double", np.dtype(np.float32): "float"}


def source(program: Program, ctype: str, name: str) -> str:
    """CUDA source of ``program`` on elements of type ``ctype``."""
    loads = [f"const T {r} = x[{i}LL * xbi + {j}LL * xbj];" for r, (i, j) in program.loads]
    body = [f"const T {d} = {a};" if op == "copy" else f"const T {d} = {a} {op} {b};" for d, op, a, b in program.steps]
    stores = [f"y[{i}LL * ybi + {j}LL * ybj] = {r};" for r, (i, j) in program.stores]
    lines = "\n        ".join(loads + body + stores)
    return f"""typedef {ctype} T;
extern "C" __global__ void {name}(const T* __restrict__ x0, long long xf, long long xs, long long xbi,
        long long xbj, T* __restrict__ y0, long long yf, long long ys, long long ybi, long long ybj,
        long long nf, long long ns) {{
    const long long f = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (f >= nf) return;
    for (long long s = blockIdx.y; s < ns; s += gridDim.y) {{
        const T* __restrict__ x = x0 + f * xf + s * xs;
        T* __restrict__ y = y0 + f * yf + s * ys;
        {lines}
    }}
}}
"""


@cache
def _kernel(program: Program, dtype: np.dtype) -> Any:
    name = f"gemmlab_flat_{abs(hash(program)) % 10**12}_{CTYPES[dtype]}"
    return cupy.RawKernel(source(program, CTYPES[dtype], name), name)


class CupyFlat:
    """Runs a flat program as one kernel over strided grids and stacks of blocks."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def run(self, program: Program, X: Any, Y: Any, rows: int, cols: int) -> None:
        """Loads from the blocks of rows x cols of ``X``, stores to those of ``Y``."""
        item = X.itemsize
        (xr, xc), (yr, yc) = (tuple(s // item for s in M.strides) for M in (X, Y))
        fast_rows = xr < xc                       # column-major input: threads run down its columns
        nf, ns = (rows, cols) if fast_rows else (cols, rows)
        xf, xs = (xr, xc) if fast_rows else (xc, xr)
        yf, ys = (yr, yc) if fast_rows else (yc, yr)
        grid = (-(-nf // THREADS), min(ns, MAX_GRID_Y))
        args = (X, xf, xs, rows * xr, cols * xc, Y, yf, ys, rows * yr, cols * yc, nf, ns)
        _kernel(program, np.dtype(X.dtype))(grid, (THREADS,), tuple(np.int64(a) if isinstance(a, int) else a
                                                                   for a in args))
