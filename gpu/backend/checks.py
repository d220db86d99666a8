"""The checks every public entry point makes before any work: operands, outputs, finiteness, memory.

One convention for every method, after SciPy's ``linalg``:

* **operands** (:func:`matrix_pair`): arrays of the backend are used as they
  are; anything else (lists, arrays of the other backend, ``np.matrix`` and
  other ndarray subclasses, objects with ``__array__``) is converted to a plain
  array of the backend, because a subclass's operators mean other things
  (``*`` is a product on ``np.matrix``). Masked arrays are refused: converting
  would silently use the values under the mask. Whether a conversion copied
  the data is reported, so a method never takes a view of the caller's array
  for a private scratch copy.
* **finiteness** (:func:`require_finite`): with ``check_finite=True`` (the
  default everywhere) NaN and infinity are refused before any work. The check
  reads each operand once, with no temporary of its size
  (:meth:`~gpu.backend.Backend.all_finite`).
* **overwrite rights** (:func:`require_writeable`): ``overwrite_a=True`` on an
  array that cannot be written (a read-only view, ``np.load(path, mmap_mode="r")``)
  is refused, whether or not the method would use the right this time.
* **outputs** (:func:`check_output`): ``out`` must be a plain, writeable array of
  the backend with the product's shape and dtype, sharing no memory with the
  operands (an ``out`` that aliases A would overwrite the caller's input).
* **memory** (:func:`require_memory`): bytes a call will allocate are compared
  with what the device (the host, for NumPy) has free, and whether the device
  can give them as one block is asked; a call that would not fit is refused
  with both numbers and a way out (:class:`MemoryPlanError`). A call that
  knows its buffers takes them as one block carved into views
  (:func:`reserve`), so that the check is the allocation itself.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any

import numpy as np

from . import blas
from .interface import Array, Backend


class MemoryPlanError(ValueError):
    """A call predicted not to fit in the memory free on its device (refused before any work)."""


def nbytes(shape: tuple[int, ...], dtype: Any) -> int:
    """Bytes of an array of ``shape`` and ``dtype``."""
    return math.prod(shape) * np.dtype(dtype).itemsize


def gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def require_host(x: Any, name: str, reads: str, alternative: str) -> None:
    """TypeError for a device array where a method reads host memory: ``reads`` says how ("the engine
    streams host memory"), ``alternative`` what else to pass besides ``name.get()`` (", or ...")."""
    if hasattr(x, "__cuda_array_interface__"):
        raise TypeError(f"{name} is a device array ({type(x).__module__}.{type(x).__name__}); {reads}: pass a "
                        f"NumPy array ({name}.get()){alternative}")


def byte_count(value: Any, name: str) -> int:
    """``value`` as a whole number of bytes; ValueError unless it is a positive real number (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value > 0:
        raise ValueError(f"{name} must be a positive number of bytes, got {value!r}")
    return int(value)


def require_memory(be: Backend, need: int, what: str, advice: str) -> None:
    """:class:`MemoryPlanError` unless ``need`` bytes can be allocated on ``be``'s device now.

    Two questions, both before any work: do they fit in the memory free (:meth:`Backend.memory_info`, which
    counts the blocks a pool caches), and can the device hand them out as one block
    (:meth:`Backend.can_allocate`)? The second matters on CuPy, whose cached blocks may be split across
    sizes that cannot hold a large buffer; one block of ``need`` bytes holds every smaller buffer a call
    takes in turn up to that total."""
    free = _free_for(be, need, what, advice)
    if need > 0 and not be.can_allocate(need, free):
        raise MemoryPlanError(f"{what} needs {gib(need)}: {gib(free)} are free on the {be.name} device, but not "
                              f"in one block (the memory pool's cached blocks are split); {advice}")


def _free_for(be: Backend, need: int, what: str, advice: str) -> int:
    """The bytes free on ``be``'s device, or :class:`MemoryPlanError` where ``need`` exceeds them."""
    free = be.memory_info()[0]
    if need > free:
        raise MemoryPlanError(f"{what} needs {gib(need)} but {gib(free)} are free on the {be.name} device; {advice}")
    return free


def reserve(be: Backend, nbytes: int, what: str, advice: str) -> Array:
    """One block of ``nbytes`` bytes (a uint8 array of ``be``) for a call to carve its buffers from, or
    :class:`MemoryPlanError` before any work. The block is the check: CuPy's pool serves it from a cached
    block where one holds it (no wait for the device), else from the driver, handing its wholly free cached
    chunks back first where the driver has too little (that waits for the device: the rare path)."""
    free = _free_for(be, nbytes, what, advice)
    try:
        return be.xp.empty(nbytes, dtype=np.uint8)
    except MemoryError as exc:           # CuPy's OutOfMemoryError is a MemoryError
        raise MemoryPlanError(f"{what} needs {gib(nbytes)} in one block, which the {be.name} device cannot give "
                              f"({gib(free)} free, counting cached blocks); {advice}") from exc


def matrix(be: Backend, x: Any, name: str) -> tuple[Array, bool]:
    """``x`` as a plain 2-D array of ``be``, and whether that is a private copy (see the module notes)."""
    if isinstance(x, np.ma.MaskedArray):
        raise TypeError(f"{name} is a masked array; the methods read every value, masked or not: pass "
                        f"{name}.filled(value) or {name}.data")
    if type(x) is be.xp.ndarray:
        arr = x
    else:
        shape, dtype = getattr(x, "shape", None), getattr(x, "dtype", None)
        copies = not isinstance(x, be.xp.ndarray)       # a subclass of the backend's array converts to a view
        if copies and shape is not None and dtype is not None and np.dtype(dtype).kind in "biufc":
            require_memory(be, nbytes(tuple(shape), dtype), f"converting {name} to a {be.xp.__name__} array",
                           f"pass {name} as a {be.xp.__name__}.ndarray")
        arr = be.asarray(x)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be 2-D, got shape {arr.shape}")
    return arr, arr is not x and not (isinstance(x, be.xp.ndarray) and bool(be.xp.may_share_memory(arr, x)))


def matrix_pair(be: Backend, A: Any, B: Any) -> tuple[Array, Array, bool, bool]:
    """A and B as 2-D arrays of ``be`` whose inner dimensions match, and whether each is a private
    copy; TypeError or ValueError otherwise (see the module notes)."""
    A, copied_a = matrix(be, A, "A")
    B, copied_b = matrix(be, B, "B")
    blas.check_inner(A, B)
    return A, B, copied_a, copied_b


def require_finite(be: Backend, check_finite: bool, operands: Mapping[str, Array], doc: str) -> None:
    """ValueError naming the first operand with NaN or infinity, where ``check_finite``; ``doc``
    says what the method does with such values when the check is off."""
    if not check_finite:
        return
    for name, x in operands.items():
        if not be.all_finite(x):
            raise ValueError(f"{name} contains NaN or infinity (check_finite=True); check the input, or pass "
                             f"check_finite=False: {doc}")


def writeable(x: Any) -> bool:
    """Whether ``x`` may be written (False for NumPy's read-only views, broadcasts and read-only mappings)."""
    return bool(getattr(getattr(x, "flags", None), "writeable", True))


def require_writeable(operands: Mapping[str, tuple[Array, bool]]) -> None:
    """ValueError naming the first operand whose overwrite right (``overwrite_a``: ``{"A": (A, True)}``) was
    given for an array that cannot be written; CuPy arrays are always writeable."""
    for name, (x, overwrite) in operands.items():
        if overwrite and not writeable(x):
            raise ValueError(f"{name} is read-only (a read-only view or a file mapped with mmap_mode='r') and "
                             f"overwrite_{name.lower()}=True asks to use it as scratch space; pass "
                             f"overwrite_{name.lower()}=False, or a writeable array")


def nonfinite_lines(be: Backend, X: Array, axis: int) -> Array:
    """Indices of X's rows (``axis=1``) or columns (``axis=0``) holding NaN or infinity."""
    return be.xp.flatnonzero(~be.xp.isfinite(X).all(axis=axis))


def zeroed_copies(be: Backend, A: Array, B: Array, bad_rows: Array, bad_cols: Array) -> tuple[Array, Array]:
    """Copies of A and B with the given rows of A and columns of B set to zero: with
    ``check_finite=False`` a method computes its finite entries from these (every entry outside
    those rows and columns is unchanged), and fills the rest by IEEE rules."""
    require_memory(be, A.nbytes + B.nbytes, "copies of A and B without their non-finite rows and columns",
                   "free memory, or keep check_finite=True and clean the input")
    A2, B2 = A.copy(), B.copy()
    A2[bad_rows] = 0
    B2[:, bad_cols] = 0
    return A2, B2


def _overlap(be: Backend, a: Array, b: Array) -> bool:
    try:
        return blas.overlaps(be.layout(a), be.layout(b))
    except ValueError:                      # a layout BLAS cannot read: the array library decides
        return bool(be.xp.may_share_memory(a, b))


def check_output(be: Backend, out: Any, shape: tuple[int, int], dtype: Any, operands: Mapping[str, Array], *,
                 rows_contiguous: bool = False) -> Array | None:
    """``out`` after every check (see the module notes), or None where none was given;
    ``rows_contiguous``: the method writes whole rows (C order within each row)."""
    if out is None:
        return None
    want = f"a {be.xp.__name__}.ndarray of shape {shape} and dtype {np.dtype(dtype)}"
    if type(out) is not be.xp.ndarray:
        raise TypeError(f"out is a {type(out).__module__}.{type(out).__name__}; pass {want}")
    if out.shape != shape or out.dtype != np.dtype(dtype):
        raise ValueError(f"out has shape {out.shape} and dtype {out.dtype}; pass {want}")
    if not getattr(out.flags, "writeable", True):        # CuPy arrays are always writeable
        raise ValueError("out is read-only (a broadcast or a read-only view); pass a writeable array")
    m, n = shape
    if rows_contiguous and m > 1 and n > 0 and (out.strides[1] != out.itemsize or out.strides[0] < out.itemsize * n):
        raise ValueError(f"out must have contiguous rows (C order); pass {want} made with xp.empty")
    for name, x in operands.items():
        if _overlap(be, out, x):
            raise ValueError(f"out overlaps {name}; pass a separate output array")
    return out


def gemm_operands(be: Backend, A: Any, B: Any, out: Any) -> tuple[Array, Array, Array | None]:
    """A, B and ``out`` of a product ``out = A @ B`` after every check of their own, before any work: 2-D arrays
    of ``be`` with matching inner dimensions, one supported dtype, BLAS layouts (a unit stride along one axis),
    and ``out`` (None where not given) of the product's shape and dtype, overlapping neither."""
    A, B, _, _ = matrix_pair(be, A, B)
    blas.check_dtypes(("A", A), ("B", B))
    be.layout(A, "A")
    be.layout(B, "B")
    C = check_output(be, out, (A.shape[0], B.shape[1]), A.dtype, {"A": A, "B": B})
    if C is not None:
        be.layout(C, "out")
    return A, B, C
