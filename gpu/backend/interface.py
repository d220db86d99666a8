"""One small execution interface over NumPy (CPU) and CuPy (GPU).

Schedules, sweeps and benchmarks are written once against :class:`Backend`: BLAS ``gemm``/``geam`` on 2-D
views with a leading dimension, streams and events, a timer, an allocation tracker, an allocation policy and
memory release. What a method family needs beyond that (the Ozaki scheme's slicing kernels, Strassen's fused
additions) is an *operations object* per backend, registered by the family with :func:`register_ops` and
fetched with :meth:`Backend.ops`: code above the backends never asks which backend it runs on. A backend is
chosen by name with :func:`gpu.backend.get_backend`.
"""

from __future__ import annotations

import abc
import functools
import importlib
import numbers
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import blas, calls
from .memo import LRU

#: A NumPy or CuPy array, as the backend in use expects.
Array = Any

POLICIES = ("pooled", "raw")
#: Operand signatures whose checked GEMM plan a backend keeps.
MAX_GEMM_PLANS = 4096


class BackendUnavailable(RuntimeError):
    """The requested backend cannot run on this machine."""


@dataclass
class AllocationReport:
    """Device allocations seen inside :meth:`Backend.track_allocations`.

    ``count`` is the number of allocations (None where the backend cannot count them exactly), ``peak_bytes``
    the highest number of bytes allocated inside the block and alive at once, and ``exact`` says whether both are
    exact. ``device_free`` and ``device_total`` are the device's free and total memory in bytes when the block
    ended.
    """

    count: int | None = 0
    peak_bytes: int = 0
    exact: bool = True
    device_free: int = 0
    device_total: int = 0
    sizes: list[int] = field(default_factory=list)
    _live: int = 0

    def allocated(self, nbytes: int) -> None:
        self.count = (self.count or 0) + 1
        self.sizes.append(nbytes)
        self._live += nbytes
        self.peak_bytes = max(self.peak_bytes, self._live)

    def freed(self, nbytes: int) -> None:
        self._live -= nbytes

    def as_dict(self) -> dict[str, Any]:
        return {"count": self.count, "peak_bytes": self.peak_bytes, "exact": self.exact,
                "device_free": self.device_free, "device_total": self.device_total}


class Timer:
    """Elapsed seconds of the work issued inside ``with backend.timer() as t``."""

    seconds: float = float("nan")


class Backend(abc.ABC):
    """What a schedule or benchmark needs from an array library.

    ``asynchronous``: library calls return before the device has finished (host time can hide behind device
    time); False where every call is synchronous (the CPU).
    """

    name: str
    xp: Any
    asynchronous: bool = False
    supports_graphs: bool = False
    #: The least depth k of the INT8 GEMMs :meth:`residue_gemm` takes (any multiple of 16 from there), or None.
    residue_min_k: int | None = None

    def ops(self, family: str) -> Any:
        """The operations object that method ``family`` registered for this backend (made once)."""
        cache = self.__dict__.setdefault("_ops_cache", {})
        if family not in cache:
            try:
                target = _OPS[(family, self.name)]
            except KeyError:
                raise NotImplementedError(f"{family!r} has no operations for the {self.name} backend") from None
            cache[family] = load(target)(self)
        return cache[family]

    def gemm(self, A: Array, B: Array, C: Array, alpha: float = 1.0, beta: float = 0.0) -> None:
        """``C = alpha * A @ B + beta * C`` in place, with no copy and no allocation.

        A, B, C are 2-D views (quadrants of larger matrices are fine) of one float dtype with unit stride along
        one axis; C must not overlap A or B. The checks of an operand signature (types, shapes, strides, dtypes)
        are kept (:class:`gpu.backend.blas.GemmPlan`, :data:`MAX_GEMM_PLANS` of them), so a repeated call costs
        the host its addresses' overlap test and the call.
        Rounding, in any summation order the library picks, with or without FMA (Higham, *Accuracy and
        Stability of Numerical Algorithms*, eq. 3.13): |C - AB| <= gamma_k |A||B| componentwise for
        alpha = 1, beta = 0 (gamma_k = k u / (1 - k u), u the unit roundoff of the dtype), plus k times the
        least subnormal where products underflow.
        """
        try:
            key = (type(A), A.shape, A.strides, A.dtype, type(B), B.shape, B.strides, B.dtype,
                   type(C), C.shape, C.strides, C.dtype, self._writeable(C))
        except AttributeError:                  # not arrays: the full check says what they are
            key = None
        plan = self._gemm_plans.get(key)
        call = None if plan is None or plan.call is None else plan.bind(self.pointer(A), self.pointer(B),
                                                                        self.pointer(C))
        if call is not None or plan is not None and plan.call is None:
            alpha, beta = _real(alpha, "alpha"), _real(beta, "beta")
        else:
            layouts, alpha, beta = self._prepare(A, B, C, alpha, beta)
            call = blas.plan_gemm(*layouts)
            if key is not None:
                self._gemm_plans[key] = blas.GemmPlan.of(*layouts, call)
        if call is not None:
            self._gemm(np.dtype(C.dtype), call, alpha, beta)

    def gemm_call(self, A: Array, B: Array, C: Array, alpha: float = 1.0, beta: float = 0.0) -> calls.GemmCall:
        """:meth:`gemm` checked once for operands of the signature of A, B and C: the returned
        :class:`gpu.backend.calls.GemmCall` runs ``C = alpha A @ B + beta C`` on any operands of that signature
        with only the overlap test of their addresses on the host (for plans, whose signature is checked)."""
        layouts, alpha, beta = self._prepare(A, B, C, alpha, beta)
        return calls.GemmCall(self, blas.GemmPlan.of(*layouts, blas.plan_gemm(*layouts)), np.dtype(C.dtype),
                              alpha, beta)

    def gemm_issuer(self, dtype: np.dtype, call: blas.BlasCall, alpha: float, beta: float
                    ) -> Callable[[int, int, int], None]:
        """``(a, b, c) -> None``: ``call`` (a checked GEMM's arguments) on the addresses a, b and c, with alpha and
        beta fixed: what a :class:`gpu.backend.calls.GemmCall` issues per call."""
        return lambda a, b, c: self._gemm(dtype, call._replace(a=a, b=b, c=c), alpha, beta)

    @functools.cached_property
    def _gemm_plans(self) -> LRU:
        return LRU(MAX_GEMM_PLANS)

    def device_key(self, x: Array) -> Any:
        """The device ``x`` lives on, for plan signatures (None where the backend has one device: NumPy)."""
        return None

    def stream_key(self, stream: Any = None) -> Any:
        """The handle of ``stream``, else of the current stream, for plan signatures (None without streams)."""
        return None

    def _writeable(self, x: Array) -> bool:
        """Whether ``x`` may be written (False for NumPy's read-only views and broadcasts)."""
        return getattr(getattr(x, "flags", None), "writeable", True)

    def gemm_ex(self, A: Array, B: Array, C: Array, *, recipe: str, beta: float = 0.0) -> None:
        """``C = A @ B + beta * C`` with low-precision operands, as cuBLAS ``gemmEx`` runs it.

        ``recipe`` names a row of :data:`gpu.blas.GEMM_RECIPES` (``fp32``, ``tf32``, ``fp16``, ``bf16``, ``int8``),
        which fixes the dtypes of A and B (bfloat16 as uint16 bit patterns) and of C (float32, or int32 for
        ``int8``). Views work as in :meth:`gemm`: no copy on the GPU. The NumPy backend emulates the recipe by a
        float64 GEMM of the operands' values, cast to C's dtype: the device's result wherever the device's
        arithmetic is exact (integer sums without overflow, or float sums whose every partial sum the accumulator
        holds), a more accurate one elsewhere.
        """
        rec = blas.gemm_recipe(recipe)
        layouts = self.layout(A, "A"), self.layout(B, "B"), self.layout(C, "C")
        blas.check_recipe_dtypes(rec, ("A", A), ("B", B), ("C", C))
        if not self._writeable(C):
            raise ValueError("C is read-only (a broadcast or a read-only view); pass a writeable array")
        beta = _real(beta, "beta")
        call = blas.plan_gemm(*layouts)
        if call is None:
            return
        if rec.name == "fp32":
            self._gemm(rec.output, call, 1.0, beta)
        else:
            self._gemm_ex(rec, call, beta, (A, B, C))

    @abc.abstractmethod
    def _gemm_ex(self, recipe: blas.GemmRecipe, call: blas.BlasCall, beta: float, arrays: tuple) -> None:
        """Run a validated low-precision gemm; ``arrays`` are (A, B, C)."""

    def residue_gemm(self, a: Array, b: Array, r: Array, modulus: int) -> Callable[[], None] | None:
        """An issuer of ``r = (a @ b.T) mod modulus`` as INT8 symmetric residues (a, b: k-contiguous INT8 rows) on
        the current stream, holding the views; None (the default) where no kernel takes them: gemm_ex's INT32.
        Views with a leading batch side (``r[i] = a[i] @ b[i].T``) are one launch where the backend batches."""
        return None

    def geam(self, alpha: float, A: Array, beta: float, B: Array, C: Array) -> None:
        """``C = alpha * A + beta * B`` in place, with no copy and no allocation.

        C may be the very same view as A or B (or both); any other overlap is an error. With ``beta == 0`` B is
        not read.
        """
        layouts, alpha, beta = self._prepare(A, B, C, alpha, beta)
        call = blas.plan_geam(*layouts)
        if call is not None:
            self._geam(np.dtype(C.dtype), call, alpha, beta, (A, B, C), layouts)

    def _prepare(self, A: Array, B: Array, C: Array, alpha: float, beta: float):
        """Layouts of the operands and real scalars, after every argument check."""
        layouts = self.layout(A, "A"), self.layout(B, "B"), self.layout(C, "C")
        blas.check_dtypes(("A", A), ("B", B), ("C", C))
        if not self._writeable(C):
            raise ValueError("C is read-only (a broadcast or a read-only view); pass a writeable array")
        return layouts, _real(alpha, "alpha"), _real(beta, "beta")

    def layout(self, x, name: str = "array") -> blas.Layout:
        """The BLAS layout of ``x``; TypeError if it is not this backend's array."""
        if not isinstance(x, self.xp.ndarray):
            raise TypeError(
                f"{name} is a {type(x).__module__}.{type(x).__name__}; the {self.name} backend "
                f"needs {self.xp.__name__}.ndarray (convert with backend.asarray)"
            )
        return blas.layout(x, self.pointer(x), name)

    @abc.abstractmethod
    def pointer(self, x) -> int:
        """Address of the first element of ``x``."""

    @abc.abstractmethod
    def _gemm(self, dtype: np.dtype, call: blas.BlasCall, alpha: float, beta: float) -> None:
        """Run a validated gemm."""

    @abc.abstractmethod
    def _geam(self, dtype: np.dtype, call: blas.BlasCall, alpha: float, beta: float,
              arrays: tuple, layouts: tuple[blas.Layout, ...]) -> None:
        """Run a validated geam; ``arrays`` and ``layouts`` are (A, B, C)."""

    @abc.abstractmethod
    def asarray(self, x, dtype=None):
        """``x`` as this backend's array (a copy only when needed)."""

    @abc.abstractmethod
    def to_numpy(self, x) -> np.ndarray:
        """``x`` as a NumPy array on the host."""

    def random(self, shape: tuple[int, ...], dtype=np.float64, seed: int = 0):
        """Uniform [0, 1) values, generated on the device, reproducible by ``seed``."""
        return self.xp.random.default_rng(seed).random(shape, dtype=dtype)

    @abc.abstractmethod
    def stream(self):
        """A new stream, used as ``with s:``; ``s.record()`` returns an event, ``s.wait_event(e)``."""

    @abc.abstractmethod
    def current_stream(self):
        """The stream work is issued on now."""

    @abc.abstractmethod
    def synchronize(self) -> None:
        """Wait for all work on the device."""

    @abc.abstractmethod
    def timer(self, hide_launch: bool = False) -> AbstractContextManager[Timer]:
        """Time the work issued inside the block (device events on GPU); ``hide_launch``: leave the
        host's time to issue it out (where the device runs asynchronously)."""

    @abc.abstractmethod
    def track_allocations(self) -> AbstractContextManager[AllocationReport]:
        """Report the allocations made inside the block."""

    @abc.abstractmethod
    def allocation_policy(self, policy: str) -> AbstractContextManager[None]:
        """Allocate through a pool (``"pooled"``) or directly (``"raw"``) inside the block."""

    @abc.abstractmethod
    def all_finite(self, x: Array) -> bool:
        """Whether every entry of ``x`` is finite, read once with no temporary of x's size."""

    def product(self, A: Array, B: Array) -> Array:
        """``A @ B`` by the array library's own product, into a new array (NumPy's ``matmul``; the CuPy backend
        makes it one cuBLAS call on the views): level 0 of a method is then the product its caller would write."""
        return self.xp.matmul(A, B)

    def product_call(self, A: Array, B: Array, check: Callable[[], None]) -> Callable[..., Array]:
        """``(A, B, out=None) -> A @ B`` into a new array for operands of A's and B's signature (a plan's level 0
        without ``out``, which it ignores); ``check`` as in :meth:`new_output`."""
        product = self.product

        def new(A: Array, B: Array, out: Array = None) -> Array:
            check()
            return product(A, B)
        return new

    def new_output(self, shape: tuple[int, ...], dtype: Any, check: Callable[[], None]) -> Array:
        """A plan's new output. ``check`` raises :class:`gpu.backend.MemoryPlanError` where it does not fit: first
        on the host (memory promised before it is touched); on a device only where its allocator fails."""
        check()
        return self.xp.empty(shape, dtype=dtype)

    @abc.abstractmethod
    def memory_info(self) -> tuple[int, int]:
        """(free, total) bytes of device memory; free counts what a memory pool caches for reuse."""

    def can_allocate(self, nbytes: int, free: int | None = None) -> bool:
        """Whether one block of ``nbytes`` can be allocated now (where there is no pool: whether they are
        free); :meth:`memory_info`'s free bytes may lie in cached blocks too small to hold it. ``free``: the
        free bytes :meth:`memory_info` just gave, where the caller has them (not read again)."""
        return nbytes <= (self.memory_info()[0] if free is None else free)

    @abc.abstractmethod
    def release_memory(self) -> None:
        """Hand memory cached by the array library (CuPy's pool) back to the device, after
        waiting for queued work, so that ``memory_info`` reports it free to anyone."""

    @abc.abstractmethod
    def cache_bytes(self) -> int:
        """Size of the last-level cache that repeated timings would hit (L2 on GPU)."""

    @abc.abstractmethod
    def flush_cache(self) -> None:
        """Evict operands from the last-level cache by reading a buffer twice its size. Reading leaves no
        written lines in the cache, so the next timed work owes no write-back: after a written flush (or a
        copy) the H100's next kernel ran 7-8 us longer (in the split-K benchmark)."""

    @abc.abstractmethod
    def device_info(self) -> dict[str, Any]:
        """Device name, memory and library versions for the environment record."""

    def capture(self, work: Callable[[], Any]) -> Any:
        """A CUDA graph of ``work`` (run once eagerly first); only where :attr:`supports_graphs`."""
        raise BackendUnavailable(f"CUDA graphs need the CuPy backend with nvmath-python; the {self.name} "
                                 "backend runs every call eagerly (pass graph=False, or graph='auto')")

    def telemetry(self) -> Any:
        """A reader of the device's SM clock, power and throttle reasons
        (:class:`gpu.backend.telemetry.NvmlTelemetry`), or None where there is none (the CPU)."""
        return None


def _real(x: Any, name: str) -> float:
    if not isinstance(x, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {x!r}")
    return float(x)


def check_policy(policy: str) -> str:
    if policy not in POLICIES:
        raise ValueError(f"allocation policy must be one of {POLICIES}, got {policy!r}")
    return policy


class NullEvent:
    """An event on the CPU: work there is synchronous, so it is always complete."""

    done = True

    def record(self, stream=None) -> None:
        pass

    def synchronize(self) -> None:
        pass


class NullStream:
    """A stream on the CPU: work runs in issue order, so waits are no-ops."""

    done = True

    def __enter__(self) -> NullStream:
        return self

    def __exit__(self, *exc) -> None:
        pass

    def record(self, event: NullEvent | None = None) -> NullEvent:
        return event or NullEvent()

    def wait_event(self, event: NullEvent) -> None:
        pass

    def synchronize(self) -> None:
        pass


#: (family, backend name) -> operations class, or "module:attribute" loaded on first use.
_OPS: dict[tuple[str, str], Any] = {}


def register_ops(family: str, backend: str, target: Any) -> None:
    """Declare the operations of method ``family`` on ``backend``: a class taking the backend, or
    ``"module:Class"`` for code that imports an optional library (CuPy) and is loaded only when asked."""
    _OPS[(family, backend)] = target


def load(target: Any) -> Any:
    """``target`` itself, or the object a ``"module:attribute"`` string names, imported now: the execution layer's
    one lazy import (CuPy and the code written for it load only when a CuPy backend or its operations are asked for)."""
    if not isinstance(target, str):
        return target
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)
