"""The lab bench every benchmark shares: operands, their refills, checked timed work, memory release.

* :class:`Operands`: A, B and C of one product, with a generator that re-draws A
  and B in place (methods that use their inputs as scratch, like RUM, make
  the values grow from one run to the next) and float32 copies for SGEMM;
* :func:`check_product`: a method's product checked once against ``A (B x)``
  before it is timed, so a wrong product is never stored;
* :func:`time_group`: methods timed interleaved by the protocol
  (:mod:`experiments.core.timing`), inputs re-drawn before every sample where
  they can be, the cache flushed where the operands fit in it;
* :func:`free_memory`: free device bytes after the array library's cached
  blocks are handed back (:meth:`gpu.backend.Backend.release_memory`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpu.backend import Array, Backend
from gpu.backend.plans import free_kept_plans

from .timing import Comparison, compare

#: Share of free memory that a benchmark's operands may take (the rest: library workspaces, flush buffer).
HEADROOM = 0.9
#: Largest block of A or B re-drawn at once (CuPy's ``random(out=)`` draws into a temporary first).
REFILL_CHUNK_BYTES = 64 * 2**20

Work = Callable[[], Any]


def operand_bytes(n: int, dtype: np.dtype | str = "float64") -> int:
    """Memory of A, B and C for an n x n x n product."""
    return 3 * n * n * np.dtype(dtype).itemsize


def free_memory(backend: Backend) -> int:
    """Free device bytes, after the plans every family keeps are freed (their workspaces of an earlier point
    would crowd the next one) and the array library hands its cached blocks back (the pool's blocks of an
    earlier sweep look used to the driver)."""
    free_kept_plans()
    backend.release_memory()
    return backend.memory_info()[0]


@dataclass
class Operands:
    """A, B and C of one product on ``backend``, and the generator that re-draws A and B in place
    (None: the inputs were given, as the accuracy benchmarks draw them)."""

    backend: Backend
    A: Array
    B: Array
    C: Array
    rng: Any = None
    _copies: dict[str, Operands] = field(default_factory=dict, repr=False)

    @classmethod
    def uniform(cls, backend: Backend, n: int, dtype: str = "float64", seed: int = 7) -> Operands:
        """n x n operands of uniform [0, 1) values drawn on the device, re-drawable."""
        xp = backend.xp
        ops = cls(backend, xp.empty((n, n), dtype), xp.empty((n, n), dtype), xp.zeros((n, n), dtype),
                  xp.random.default_rng(seed))
        ops.refill()
        return ops

    @classmethod
    def given(cls, backend: Backend, A: Array, B: Array) -> Operands:
        """Fixed inputs A and B, with a C for their product."""
        return cls(backend, A, B, backend.xp.empty((A.shape[0], B.shape[1]), dtype=A.dtype))

    @property
    def size(self) -> int:
        return int(self.A.shape[0])

    def refill(self) -> None:
        """New uniform [0, 1) values in A and B, drawn in row blocks (no full-size temporary)."""
        if self.rng is None:
            raise ValueError("these operands were given, not drawn: there is nothing to re-draw them from")
        for M in (self.A, self.B):
            rows = max(1, REFILL_CHUNK_BYTES // (M.shape[1] * M.itemsize))
            for i in range(0, M.shape[0], rows):
                block = M[i:i + rows]
                self.rng.random(block.shape, dtype=M.dtype, out=block)

    def astype(self, dtype: Any) -> Operands:
        """A and B rounded to ``dtype``, with a C of their own (made once and kept)."""
        name = np.dtype(dtype).name
        if name not in self._copies:
            self._copies[name] = Operands.given(self.backend, self.A.astype(dtype), self.B.astype(dtype))
        return self._copies[name]

    def refill_and_wait(self) -> None:
        """The per-sample setup: fresh A and B, then an idle device, so that no queued refill
        hides the host's launch overhead inside the timed region."""
        self.refill()
        self.backend.synchronize()

    def needs_flush(self) -> bool:
        """Flush the cache before samples where the operands would fit in twice its size."""
        return operand_bytes(self.size, self.A.dtype) < 2 * self.backend.cache_bytes()


def product_error(ops: Operands, work: Work) -> float:
    """Relative error of ``C x`` against ``A (B x)`` after one run of ``work`` (on fresh inputs
    where the operands can be re-drawn)."""
    if ops.rng is not None:
        ops.refill()
    xp = ops.backend.xp
    x = xp.random.default_rng(0).random(ops.B.shape[1], dtype=ops.A.dtype)
    expected = ops.A @ (ops.B @ x)
    work()
    ops.backend.synchronize()
    return float(xp.linalg.norm(ops.C @ x - expected) / xp.linalg.norm(expected))


def require_correct(error: float, what: str, tolerance: float, measure: str = "relative error") -> float:
    """``error``, or RuntimeError naming ``what`` where it is beyond ``tolerance`` (NaN included): the
    product is wrong, and nothing is timed or stored for it. ``measure`` names the error in the message."""
    if not error <= tolerance:
        raise RuntimeError(f"{what} computed a wrong product ({measure} {error:.2e}, tolerance {tolerance:.2e}); "
                           "nothing was stored for it")
    return error


def check_product(ops: Operands, work: Work, what: str) -> float:
    """:func:`product_error`, or RuntimeError naming ``what`` when the product is wrong
    (beyond the square root of the dtype's epsilon): nothing is timed or stored for it."""
    return require_correct(product_error(ops, work), what, np.finfo(ops.A.dtype).eps ** 0.5)


def time_group(ops: Operands, works: Mapping[str, Work | list[Work]], baseline: str, *, refill: bool = True,
               **protocol: Any) -> Comparison:
    """Time ``works`` interleaved with speed-ups over ``baseline``; with ``refill`` A and B are
    re-drawn before every sample, and the cache is flushed where the operands fit in it;
    ``protocol``: the options of :func:`experiments.core.timing.measure_interleaved` (``regime``...)."""
    setup = {name: ops.refill_and_wait for name in works} if refill else None
    return compare(works, ops.backend, baseline=baseline, flush=ops.needs_flush(), setup=setup, **protocol)


#: Rows of C a benchmark checks a product on before timing it (all of them where N is smaller).
CHECK_ROWS = 64


def row_error(got: np.ndarray, expected: np.ndarray) -> float:
    """Largest relative error of sampled rows ``got`` against ``expected`` (host arrays); infinite where
    ``got`` holds NaN or infinity."""
    if not np.all(np.isfinite(got)):
        return float("inf")
    return float(np.max(np.abs(got - expected) / np.maximum(np.abs(expected), np.finfo(expected.dtype).tiny),
                        initial=0.0))


def sample_rows(n: int, count: int = CHECK_ROWS, seed: int = 0) -> np.ndarray:
    """``count`` distinct rows of N, sorted, always with the first and the last (fringe blocks)."""
    if n <= count:
        return np.arange(n)
    picked = np.random.default_rng(seed).choice(np.arange(1, n - 1), count - 2, replace=False)
    return np.sort(np.concatenate([[0, n - 1], picked]))
