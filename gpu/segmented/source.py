"""The CUDA source of the one plain matrix-product kernel, and its index accessors as data.

The kernel (Sakai, Ino & Hagihara's decomposition paper; see the References in README.md) is the textbook shared-memory
tiled product C = A B of square N x N row-major matrices, written once. Every global access goes
through an accessor macro, ``A_AT(f)``, ``B_AT(f)``, ``C_AT(f)``, given the *full-array* flat index
``f = row * N + col`` that the unsplit kernel computes; block ids are offset by the kernel arguments
``by0`` and ``bx0`` so that one launch covers only a task's blocks. The body never changes: what an
access means is the accessor's, chosen by the launcher among :data:`ACCESSORS`:

* ``whole``: ``X[f]``, the plain kernel on whole arrays (the baseline);
* ``translated``: the spec's translation into a 2-D segment of width U with origin (ox, oy) (its
  first column and row), ``f2 = (f mod N - ox) + (f div N - oy) U``, origin and width passed per
  array as kernel arguments. The integer division and remainder on every access is what the paper
  measured as a 27-28% loss.

Each accessor is one formula kept as data (:class:`Accessor`): the same text gives the C macro and a
Python evaluator (NumPy arrays welcome), so the tests check the very formula the device runs. Kept
apart from the launching code, and free of CuPy, so that it can be compiled and checked anywhere.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: The kernel's tile side (threads per block along each axis), a compile-time constant of the source.
TILE = 32
#: Largest tile: a block of TILE x TILE threads may not exceed 1024.
MAX_TILE = 32
#: The kernel's name in the source (``extern "C"``: no mangling).
KERNEL = "segmented_matmul"
#: C type of each supported dtype.
CTYPES = {np.dtype(np.float32): "float", np.dtype(np.float64): "double"}
#: Flat indices fit in a 32-bit ``int`` up to this many elements per matrix; beyond, ``long long``.
INT32_ELEMENTS = 2**31 - 1
#: The names a formula may use, and what each becomes in the C macro of array ``x``: ``f`` the full flat
#: index, ``N`` the side, ``OX``/``OY`` the segment's origin (first column, first row), ``U`` its width.
_C_NAMES = {"f": "(f)", "N": "n", "OX": "{x}_ox", "OY": "{x}_oy", "U": "{x}_u"}


@dataclass(frozen=True)
class Accessor:
    """An access mode: the local flat index of full flat index ``f`` as one formula in Python syntax over
    ``f``, ``N``, ``OX``, ``OY`` and ``U`` (``//`` and ``%`` on non-negative integers, where C's ``/``
    and ``%`` agree with Python's)."""

    name: str
    formula: str
    doc: str
    _code: Any = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        names = set(re.findall(r"[A-Za-z_]\w*", self.formula))
        if not names <= set(_C_NAMES):
            raise ValueError(f"accessor {self.name!r} uses unknown names {sorted(names - set(_C_NAMES))}")
        object.__setattr__(self, "_code", compile(self.formula, f"<accessor {self.name}>", "eval"))

    def c_expression(self, array: str) -> str:
        """The formula in C for array ``array`` (``"a"``, ``"b"``, ``"c"``): ``//`` becomes ``/`` and the
        names become the kernel's arguments (``a_ox``...), ``f`` parenthesised for the macro."""
        text = self.formula.replace("//", "/")
        return re.sub(r"[A-Za-z_]\w*", lambda m: _C_NAMES[m[0]].format(x=array), text)

    def c_macro(self, array: str) -> str:
        """``#define A_AT(f) A[...]`` for array ``array``."""
        upper = array.upper()
        return f"#define {upper}_AT(f) {upper}[{self.c_expression(array)}]"

    def evaluate(self, f: Any, n: int, ox: int = 0, oy: int = 0, u: int = 0) -> Any:
        """The local flat index of full flat index ``f`` (an int or an integer NumPy array), in Python."""
        return eval(self._code, {"__builtins__": {}}, {"f": f, "N": n, "OX": ox, "OY": oy, "U": u})


#: The access modes, by name (see the module notes).
ACCESSORS: dict[str, Accessor] = {a.name: a for a in (
    Accessor("whole", "f", "the whole array: the unsplit kernel"),
    Accessor("translated", "(f % N - OX) + (f // N - OY) * U",
             "a 2-D segment of width U at (OX, OY), the spec's translation for 2-D arrays"),
)}

SOURCE = r"""
extern "C" __global__ void __launch_bounds__(TILE * TILE)
segmented_matmul(const real* __restrict__ A, const real* __restrict__ B, real* __restrict__ C,
                 const index_t n, const int by0, const int bx0,
                 const index_t a_ox, const index_t a_oy, const index_t a_u,
                 const index_t b_ox, const index_t b_oy, const index_t b_u,
                 const index_t c_ox, const index_t c_oy, const index_t c_u)
{
    __shared__ real As[TILE][TILE];
    __shared__ real Bs[TILE][TILE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const index_t row = (index_t)(by0 + (int)blockIdx.y) * TILE + ty;
    const index_t col = (index_t)(bx0 + (int)blockIdx.x) * TILE + tx;
    real acc = 0;
    for (index_t k0 = 0; k0 < n; k0 += TILE) {
        As[ty][tx] = A_AT(row * n + k0 + tx);
        Bs[ty][tx] = B_AT((k0 + ty) * n + col);
        __syncthreads();
#pragma unroll
        for (int q = 0; q < TILE; ++q) acc += As[ty][q] * Bs[q][tx];
        __syncthreads();
    }
    C_AT(row * n + col) = acc;
}
"""


def index_type(n: int) -> str:
    """C type of the flat indices for N x N matrices: ``int`` where N^2 fits (32-bit division, as the
    paper's sizes up to N = 46340), else ``long long``."""
    return "int" if n * n <= INT32_ELEMENTS else "long long"


def kernel_source(mode: str, dtype: Any, index: str = "int", tile: int = TILE) -> str:
    """The kernel's full source for one access ``mode``, dtype (float32 or float64), index type and tile:
    the typedefs, the tile and the three accessor macros prepended to the one body :data:`SOURCE`."""
    accessor = accessor_of(mode)
    if np.dtype(dtype) not in CTYPES:
        raise TypeError(f"dtype {np.dtype(dtype)} is not supported; use float32 or float64")
    if index not in ("int", "long long"):
        raise ValueError(f"index type must be 'int' or 'long long', got {index!r}")
    check_tile(tile)
    prelude = [f"typedef {CTYPES[np.dtype(dtype)]} real;", f"typedef {index} index_t;", f"#define TILE {tile}",
               *(accessor.c_macro(x) for x in "abc")]
    return "\n".join(prelude) + SOURCE


def accessor_of(mode: str) -> Accessor:
    """The accessor called ``mode``; ValueError naming the known ones otherwise."""
    try:
        return ACCESSORS[mode]
    except KeyError:
        raise ValueError(f"unknown access mode {mode!r}; choose one of {tuple(ACCESSORS)}") from None


def check_tile(tile: int) -> int:
    """``tile`` if it is a whole number in [1, :data:`MAX_TILE`] (one thread per output of a tile)."""
    if isinstance(tile, bool) or not isinstance(tile, (int, np.integer)) or not 1 <= tile <= MAX_TILE:
        raise ValueError(f"the tile side must be an integer from 1 to {MAX_TILE} (a block of tile^2 threads), "
                         f"got {tile!r}")
    return int(tile)
