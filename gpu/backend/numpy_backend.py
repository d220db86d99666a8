"""The CPU backend: NumPy arrays, SciPy's BLAS on raw pointers, tracemalloc accounting.

GEMM goes to the BLAS with the view's leading dimension (no copy, real
``beta``). Low-precision GEMMs (``gemm_ex``) are emulated in float64, which
gives the device's values wherever the device computes them exactly.
GEAM runs NumPy ufuncs with ``out=``: on contiguous operands in one
call, otherwise one row at a time, because a ufunc over a 2-D strided view
allocates iterator buffers (about 192 KiB) while a contiguous row needs none.
"""

from __future__ import annotations

import os
import platform
import time
import tracemalloc
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from time import perf_counter
from typing import Any

import numpy as np
import scipy

from . import blas, cpu_blas
from .interface import AllocationReport, Backend, NullStream, Timer, check_policy

#: tracemalloc also sees the interpreter's own objects made during a call (a few
#: hundred bytes to about 20 KiB: a level-2 Strassen call's first run on new arrays
#: made 16.5-20 KB); peaks below this are reported as zero. The smallest temporary the
#: tests must see, a 64 x 64 float64 block, is 32 KiB.
NOISE_BYTES = 24 * 1024
_FAST_PATH_MAX = 2**31 - 1
#: Elements checked at once by :meth:`NumpyBackend.all_finite` (a boolean temporary of 4 MiB).
FINITE_BLOCK = 2**22
#: Arrays of at least twice this many bytes are checked by threads, each band at least this large.
PARALLEL_FINITE_BYTES = 64 * 2**20
#: Threads of a parallel finite check.
FINITE_THREADS = max(1, min(16, os.cpu_count() or 1))


class NumpyBackend(Backend):
    """Runs everything on the CPU, synchronously."""

    name = "numpy"
    xp = np

    def __init__(self) -> None:
        self._flush_buffer: np.ndarray | None = None
        self._stream = NullStream()

    def pointer(self, x) -> int:
        return x.ctypes.data

    def _gemm(self, dtype, call, alpha, beta) -> None:
        cpu_blas.gemm(dtype, call, alpha, beta)

    def _gemm_ex(self, recipe, call, beta, arrays) -> None:
        """Emulate the recipe: the exact float64 product of the operands' values, cast to C."""
        A, B, C = arrays
        product = decode_operand(recipe, A) @ decode_operand(recipe, B)
        if C.dtype.kind == "i":
            total = product.astype(np.int64) + (np.int64(beta) * C if beta else 0)
            np.copyto(C, total.astype(C.dtype))          # wraps like the device's integer adds
        else:
            total = product.astype(C.dtype)
            np.copyto(C, total + C.dtype.type(beta) * C if beta else total)

    def _geam(self, dtype, call, alpha, beta, arrays, layouts) -> None:
        (A, B, C), (lay_a, lay_b, lay_c) = arrays, layouts
        if blas.same_view(lay_a, lay_b):
            alpha, beta = alpha + beta, 0.0
        c_is_b = beta != 0 and blas.same_view(lay_c, lay_b)
        if lay_c.order == "F":
            A, B, C = A.T, B.T, C.T
        if C.size <= _FAST_PATH_MAX and all(x.flags.c_contiguous for x in (A, B, C)):
            _axpby(alpha, A.reshape(-1), beta, B.reshape(-1), C.reshape(-1), c_is_b)
            return
        for a, b, c in zip(A, B, C):
            _axpby(alpha, a, beta, b, c, c_is_b)

    def asarray(self, x, dtype=None) -> np.ndarray:
        if hasattr(x, "get") and not isinstance(x, np.ndarray):
            x = x.get()
        return np.asarray(x, dtype=dtype)

    def to_numpy(self, x) -> np.ndarray:
        return self.asarray(x)

    def stream(self) -> NullStream:
        return NullStream()

    def current_stream(self) -> NullStream:
        return self._stream

    def synchronize(self) -> None:
        pass

    @contextmanager
    def timer(self, hide_launch: bool = False) -> Iterator[Timer]:
        """Wall-clock time of the block (every call is synchronous: there is no launch to hide)."""
        t = Timer()
        start = perf_counter()
        yield t
        t.seconds = perf_counter() - start

    @contextmanager
    def track_allocations(self) -> Iterator[AllocationReport]:
        """Peak bytes allocated inside the block, through tracemalloc.

        NumPy registers its array buffers with tracemalloc, so hidden
        temporaries show up. tracemalloc gives a peak, not a count, so
        ``count`` is None (0 when nothing above :data:`NOISE_BYTES` was seen)
        and ``exact`` is False. Trackers do not nest on this backend.
        """
        report = AllocationReport(count=None, exact=False)
        started = not tracemalloc.is_tracing()
        if started:
            tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        try:
            yield report
        finally:
            peak = tracemalloc.get_traced_memory()[1] - base
            if started:
                tracemalloc.stop()
            report.peak_bytes = peak if peak >= NOISE_BYTES else 0
            report.count = 0 if report.peak_bytes == 0 else None
            report.device_free, report.device_total = self.memory_info()

    @contextmanager
    def allocation_policy(self, policy: str) -> Iterator[None]:
        """Accepted for symmetry with CuPy: the CPU allocator has no pool to switch."""
        check_policy(policy)
        yield

    def all_finite(self, x: np.ndarray) -> bool:
        """By sums, which allocate nothing: any NaN or infinity makes a sum non-finite, so a finite
        sum proves a line finite. The whole array is one sum where it is contiguous, else one sum
        per outer line (a strided 2-D reduction would allocate iterator buffers). Only a
        non-finite sum (a non-finite entry, or finite entries that overflow) is looked at entry
        by entry, in blocks of :data:`FINITE_BLOCK` elements. A 2-D array of at least
        :data:`PARALLEL_FINITE_BYTES` is cut into bands along its outer axis, summed by
        :data:`FINITE_THREADS` threads at once (NumPy's sums let go of the GIL): one thread sums
        about 8 GB/s, and the out-of-core engine's operands are tens of GB."""
        if x.dtype.kind not in "fc" or x.size == 0:
            return True
        if x.ndim != 2 or x.nbytes < 2 * PARALLEL_FINITE_BYTES or FINITE_THREADS < 2:
            return _finite(x)
        outer = 0 if abs(x.strides[0]) >= abs(x.strides[1]) else 1
        count = min(FINITE_THREADS, x.shape[outer], x.nbytes // PARALLEL_FINITE_BYTES)
        cuts = [x.shape[outer] * i // count for i in range(count + 1)]
        bands = [x[a:b] if outer == 0 else x[:, a:b] for a, b in zip(cuts, cuts[1:]) if b > a]
        with ThreadPoolExecutor(len(bands)) as pool:
            return all(pool.map(_finite, bands))

    def memory_info(self) -> tuple[int, int]:
        """(available, total) host bytes: the kernel's MemAvailable (free memory plus the caches it
        can drop), else the free pages."""
        return _mem_available() or os.sysconf("SC_AVPHYS_PAGES") * _PAGE, _TOTAL

    def release_memory(self) -> None:
        """Nothing to hand back: NumPy frees an array's memory with its last reference."""

    def cache_bytes(self) -> int:
        return _last_level_cache() or 32 * 2**20

    def flush_cache(self) -> None:
        if self._flush_buffer is None:
            self._flush_buffer = np.zeros(2 * self.cache_bytes() // 8)
        self._flush_buffer.sum()

    def device_info(self) -> dict[str, Any]:
        cpu = cpu_model()
        return {
            "backend": self.name,
            "device": f"CPU: {cpu}",
            "cpu": cpu,
            "cpu_count": os.cpu_count(),
            "memory_bytes": self.memory_info()[1],
            "cache_bytes": self.cache_bytes(),
            "blas": blas_library(scipy),
            "blas_threads": {k: os.environ[k] for k in _THREAD_VARS if k in os.environ},
        }


_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def decode_operand(recipe, x: np.ndarray) -> np.ndarray:
    """The values of a low-precision operand as float64 (bfloat16 from its uint16 bit patterns)."""
    if recipe.name == "bf16":
        return (x.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return x.astype(np.float64)


def _axpby(alpha, a, beta, b, c, c_is_b: bool) -> None:
    """``c = alpha*a + beta*b`` on 1-D views without temporaries."""
    if beta == 0:
        np.multiply(a, alpha, out=c) if alpha != 1 else np.copyto(c, a)
    elif alpha == 0:
        np.multiply(b, beta, out=c)
    elif alpha == 1 and beta in (1, -1):
        (np.add if beta == 1 else np.subtract)(a, b, out=c)
    elif alpha == -1 and beta == 1:
        np.subtract(b, a, out=c)
    elif c_is_b:
        np.multiply(b, beta, out=c)
        cpu_blas.axpy(alpha, a, c)
    else:
        np.multiply(a, alpha, out=c)
        cpu_blas.axpy(beta, b, c)


def cpu_model() -> str:
    """The CPU's marketing name, from /proc/cpuinfo where it exists."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def blas_library(module) -> str:
    """Name and version of the BLAS that ``module`` (NumPy or SciPy) was built with."""
    try:
        info = module.show_config(mode="dicts")["Build Dependencies"]["blas"]
        return f"{info.get('name', '?')} {info.get('version', '')}".strip()
    except Exception:  # noqa: BLE001 - older builds have no dict mode
        return "unknown"


def _finite(x: np.ndarray) -> bool:
    """Whether x holds no NaN or infinity, on this thread (see :meth:`NumpyBackend.all_finite`)."""
    with np.errstate(over="ignore", invalid="ignore"):
        if x.flags.c_contiguous or x.flags.f_contiguous:
            return bool(np.isfinite(np.add.reduce(x, axis=None))) or _finite_blocks(x)
        lines = x if x.ndim != 2 or x.strides[1] == x.itemsize else x.T
        return all(bool(np.isfinite(np.add.reduce(line))) or _finite_blocks(line) for line in lines)


def _finite_blocks(x: np.ndarray) -> bool:
    """Whether every entry is finite, looked at in blocks of :data:`FINITE_BLOCK` elements."""
    flat = x.reshape(-1) if x.flags.c_contiguous else x.ravel(order="K")
    return all(bool(np.isfinite(flat[i:i + FINITE_BLOCK]).all()) for i in range(0, flat.size, FINITE_BLOCK))


_PAGE = os.sysconf("SC_PAGE_SIZE")
#: The host's physical memory, bytes (fixed for the process).
_TOTAL = os.sysconf("SC_PHYS_PAGES") * _PAGE
#: Seconds a reading of MemAvailable is used again: every product that plans memory asks, and one reading
#: costs 10 us, a tenth of a 128 x 128 product's time.
MEMINFO_TTL = 0.01
_READING: list[float] = [-1.0, 0.0]


def _mem_available() -> int | None:
    """The kernel's MemAvailable in bytes (None where /proc/meminfo cannot say), read with one system call at
    most every :data:`MEMINFO_TTL` seconds: a prediction whether memory fits needs no fresher figure."""
    now = time.monotonic()
    if now - _READING[0] < MEMINFO_TTL:
        return int(_READING[1])
    found = _read_mem_available()
    if found is not None:
        _READING[:] = [now, found]
    return found


def _read_mem_available() -> int | None:
    try:
        fd = os.open("/proc/meminfo", os.O_RDONLY)
        try:
            text = os.read(fd, 1 << 14)
        finally:
            os.close(fd)
        at = text.index(b"MemAvailable:")
        return int(text[at + 13:text.index(b"\n", at)].split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return None


def _last_level_cache() -> int:
    sizes = []
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            text = (index / "size").read_text().strip()
        except OSError:
            continue
        units = {"K": 2**10, "M": 2**20, "G": 2**30}
        sizes.append(int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text))
    return max(sizes, default=0)
