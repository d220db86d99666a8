"""The GPU backend: CuPy arrays, cuBLAS called directly on views, exact allocation accounting.

CuPy's own ``cupy.cublas.gemm`` and ``cupy.matmul(out=view)`` copy non-contiguous operands. Here
``gemm``/``geam`` call ``cublas.dgemm``/``dgeam`` (``sgemm``/``sgeam`` for float32) with the view's pointer and
leading dimension, on the current CuPy stream, so a product on a quadrant makes no copy and no allocation;
``gemm_ex`` calls ``cublas.gemmEx`` the same way for TF32, FP16, BF16 and INT8 operands (INT8 over k >= 16384
through cublasLt where the device's preferred CTA tile is offered: :mod:`gpu.backend.lt_int8`).
"""

from __future__ import annotations

import gc
import math
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from functools import cache
from typing import Any

import numpy as np

try:
    import cupy
    from cupy.cuda import cublas
except ImportError as _missing:  # the backend is then unavailable, with the reason
    cupy = cublas = None
    _IMPORT_ERROR: ImportError | None = _missing
else:
    _IMPORT_ERROR = None
from .calls import _scalar, host_scalars, new_output_product
from .cutlass_int8 import built_kernel
from .hold import stream_hold
from .interface import AllocationReport, Backend, BackendUnavailable, Timer, check_policy
from .lt_int8 import Int8Routes
from .stream_blas import stream_blas
from .telemetry import cublas_version, cuda_version, driver_release, nvml_telemetry

#: cublasGemmAlgo_t CUBLAS_GEMM_DEFAULT: cuBLAS picks the kernel (tensor cores where the types allow).
_GEMM_DEFAULT = -1
#: NumPy arrays from this size on go to the device by a direct copy (see :meth:`CupyBackend.asarray`).
DIRECT_COPY_BYTES = 256 * 2**20
_INSTALL_HINT = ("install CuPy for your CUDA (pip install 'gemmlab[gpu]' for CUDA 13, "
                 "cupy-cuda12x for CUDA 12) or use --backend numpy")


def _import_cupy():
    """CuPy and its cuBLAS module; BackendUnavailable with the reason where they cannot run."""
    if _IMPORT_ERROR is not None:
        raise BackendUnavailable(f"CuPy or its cuBLAS cannot be imported ({_IMPORT_ERROR}); "
                                 f"{_INSTALL_HINT}") from _IMPORT_ERROR
    if not cupy.is_available():
        raise BackendUnavailable(
            "CuPy is installed but finds no usable CUDA GPU (no device, or no driver); "
            "run on a GPU machine or use --backend numpy"
        )
    return cupy, cublas


class CupyBackend(Backend):
    """Runs on the current CUDA device through CuPy and cuBLAS."""

    name = "cupy"
    asynchronous = True

    def __init__(self) -> None:
        self.xp, self._cublas = _import_cupy()
        self._policy = "pooled"
        self._tracker = None                    # the counting allocator of track_allocations, while one runs
        self._flush_buffer = None
        self._flag = self.xp.zeros(1, dtype=np.int32)   # the finiteness check's result, allocated once
        self._streams = stream_blas(self.xp)
        self.supports_graphs = self._streams is not None
        self._lt = Int8Routes(self.xp, self._streams) if self._streams is not None else None
        self._capture_stream = None
        if self._streams is not None:
            self._gemm_fn, self._geam_fn, self._gemm_ex_fn = (self._streams.gemm, self._streams.geam,
                                                              self._streams.gemm_ex)
        else:
            cb = self._cublas
            self._gemm_fn = {np.dtype(np.float64): cb.dgemm, np.dtype(np.float32): cb.sgemm}
            self._geam_fn = {np.dtype(np.float64): cb.dgeam, np.dtype(np.float32): cb.sgeam}
            self._gemm_ex_fn = cb.gemmEx

    def pointer(self, x) -> int:
        return x.data.ptr

    def _writeable(self, x) -> bool:
        return True                             # CuPy has no read-only arrays

    def device_key(self, x) -> int:
        return x.data.device_id

    def stream_key(self, stream=None) -> int:
        return (stream if stream is not None else self.xp.cuda.get_current_stream()).ptr

    def _handle(self) -> int:
        """The cuBLAS handle for a call on the current stream: nvmath-python's per-stream handle
        (capturable) where installed, else CuPy's."""
        if self._streams is not None:
            return self._streams.handle()
        return self.xp.cuda.device.get_cublas_handle()

    def _gemm(self, dtype, call, alpha, beta) -> None:
        al, be = host_scalars(dtype, alpha, beta)
        self._gemm_fn[dtype](self._handle(), call.transa, call.transb, call.m, call.n, call.k,
                             al, call.a, call.lda, call.b, call.ldb, be, call.c, call.ldc)

    def gemm_issuer(self, dtype, call, alpha, beta):
        """The cuBLAS call with its function and host scalars held (what :meth:`_gemm` looks up per call): per
        call only the current stream's handle."""
        (al, pa), (be, pb) = _scalar(dtype, alpha, math.copysign(1.0, alpha)), _scalar(dtype, beta,
                                                                                        math.copysign(1.0, beta))
        fn, handle, (ta, tb, m, n, k, _, lda, _, ldb, _, ldc) = self._gemm_fn[dtype], self._handle, call

        def issue(a: int, b: int, c: int, held=(al, be)) -> None:
            fn(handle(), ta, tb, m, n, k, pa, a, lda, b, ldb, pb, c, ldc)
        return issue

    def _gemm_ex(self, recipe, call, beta, arrays) -> None:
        if recipe.name == "int8" and self._lt is not None and self._lt.run(recipe, call, beta):
            return
        al, be = np.array(1, recipe.scalar), np.array(beta, recipe.scalar)
        self._gemm_ex_fn(self._handle(), call.transa, call.transb, call.m, call.n, call.k,
                            al.ctypes.data, call.a, recipe.cuda_operands, call.lda,
                            call.b, recipe.cuda_operands, call.ldb, be.ctypes.data,
                            call.c, recipe.cuda_output, call.ldc, recipe.compute, _GEMM_DEFAULT)

    def residue_gemm(self, a, b, r, modulus):
        return None if self._lt is None else self._lt.residues(a, b, r, modulus)

    residue_min_k = property(lambda self: None if self._lt is None else self._lt.residue_min_k())

    def _geam(self, dtype, call, alpha, beta, arrays, layouts) -> None:
        al, be = host_scalars(dtype, alpha, beta)
        self._geam_fn[dtype](self._handle(), call.transa, call.transb, call.m, call.n,
                             al, call.a, call.lda, be, call.b, call.ldb, call.c, call.ldc)

    def asarray(self, x, dtype=None):
        """x on the device. A NumPy array of :data:`DIRECT_COPY_BYTES` or more is copied straight from
        its pageable memory: ``cupy.asarray`` would first copy it into pinned memory of its size, which
        CuPy's pinned pool then keeps (38 GB for A and B at N = 49152, which the host does not have beside
        A, B and C)."""
        if not isinstance(x, np.ndarray) or x.nbytes < DIRECT_COPY_BYTES or x.dtype.kind not in "biufc":
            return self.xp.asarray(x, dtype=dtype)
        order = "F" if x.flags.f_contiguous and not x.flags.c_contiguous else "C"
        host = np.asarray(x, order=order)
        out = self.xp.empty(host.shape, host.dtype, order=order)
        out.set(host)
        return out if dtype is None or np.dtype(dtype) == out.dtype else out.astype(dtype)

    def to_numpy(self, x) -> np.ndarray:
        return self.xp.asnumpy(x)

    def stream(self):
        return self.xp.cuda.Stream(non_blocking=True)

    def current_stream(self):
        return self.xp.cuda.get_current_stream()

    def synchronize(self) -> None:
        self.xp.cuda.Device().synchronize()

    def capture(self, work: Any) -> Any:
        """Run ``work`` once, then capture it into a CUDA graph on a private stream; the graph (``graph.launch()``
        replays it on the current stream). The eager run comes first so that kernels compile, side streams get
        their cuBLAS handles and every buffer is made before the capture, which may allocate nothing. The host
        never waits: the eager run and the caller's stream wait for each other by events."""
        if not self.supports_graphs:
            raise BackendUnavailable("CUDA graphs need cuBLAS calls that can be captured: install "
                                     "nvmath-python (pip install 'gemmlab[gpu]')")
        if self._capture_stream is None:
            self._capture_stream = self.xp.cuda.Stream(non_blocking=True)
        stream, caller = self._capture_stream, self.current_stream()
        stream.wait_event(caller.record())
        with stream:
            work()
        done = stream.record()
        stream.begin_capture()
        try:
            with stream:
                work()
        finally:
            graph = stream.end_capture()
        caller.wait_event(done)
        return graph

    @contextmanager
    def timer(self, hide_launch: bool = False) -> Iterator[Timer]:
        """Time with CUDA events on the current stream.

        Work issued on other streams is timed only when joined back to the
        current stream (by an event wait) inside the block. ``hide_launch``:
        hold the stream until the block has issued all its work, so that the
        host's launch overhead is not counted (:mod:`gpu.backend.hold`).
        """
        cuda = self.xp.cuda
        t, stream = Timer(), cuda.get_current_stream()
        start, end = cuda.Event(), cuda.Event()
        hold = stream_hold(self.xp) if hide_launch else None
        with hold.held(stream) if hold else nullcontext():
            start.record(stream)
            yield t
            end.record(stream)
        end.synchronize()
        if hold:
            hold.check()
        t.seconds = cuda.get_elapsed_time(start, end) / 1e3

    @contextmanager
    def track_allocations(self) -> Iterator[AllocationReport]:
        """Count every CuPy allocation inside the block, exactly.

        A Python-function allocator stands in front of the active policy (the
        pool or raw cudaMalloc) and records each request's size. cuBLAS's own
        workspace is allocated outside CuPy and shows only in ``device_free``.
        """
        cuda = self.xp.cuda
        report, live = AllocationReport(), {}
        if self._policy == "raw":
            def malloc(size: int, device_id: int) -> int:
                ptr = cuda.runtime.malloc(size)
                live[ptr] = size
                report.allocated(size)
                return ptr

            def free(ptr: int, device_id: int) -> None:
                cuda.runtime.free(ptr)
                report.freed(live.pop(ptr))
        else:
            pool = self.xp.get_default_memory_pool()

            def malloc(size: int, device_id: int) -> int:
                mem = pool.malloc(size)
                live[mem.ptr] = (mem, size)
                report.allocated(size)
                return mem.ptr

            def free(ptr: int, device_id: int) -> None:
                report.freed(live.pop(ptr)[1])
        allocator = cuda.PythonFunctionAllocator(malloc, free)
        previous, self._tracker = self._tracker, allocator.malloc if self._policy == "pooled" else None
        try:
            with cuda.using_allocator(allocator.malloc):
                yield report
        finally:
            self._tracker = previous
            self.synchronize()
            report.device_free, report.device_total = self.memory_info()

    @contextmanager
    def allocation_policy(self, policy: str) -> Iterator[None]:
        """``"pooled"``: CuPy's memory pool; ``"raw"``: every allocation is cudaMalloc/cudaFree."""
        check_policy(policy)
        previous, self._policy = self._policy, policy
        allocator = None if policy == "raw" else self.xp.get_default_memory_pool().malloc
        try:
            with self.xp.cuda.using_allocator(allocator):
                yield
        finally:
            self._policy = previous

    def all_finite(self, x) -> bool:
        """One kernel pass over x (any strides, coalesced along its contiguous axis) that raises a
        flag allocated with the backend: no allocation at all, so zero-temporary methods stay zero."""
        if x.dtype.kind not in "fc" or x.size == 0:
            return True
        x2 = x[None, :] if x.ndim == 1 else x
        if x2.ndim != 2 or x.dtype.name not in _CTYPES:
            return bool(self.xp.isfinite(x).all())
        it = x2.itemsize
        (rows, cols), (rs, cs) = x2.shape, (s // it for s in x2.strides)
        if cs != 1 and rs == 1:
            rows, cols, rs, cs = cols, rows, cs, rs
        self._flag.fill(0)
        blocks = min(-(-(rows * cols) // 256), 4096)
        _nonfinite_kernel(x2.dtype.name)((blocks,), (256,), (x2, np.int64(rows), np.int64(cols), np.int64(rs),
                                                             np.int64(cs), self._flag))
        return int(self._flag.get()[0]) == 0

    def product(self, A: Any, B: Any) -> Any:
        """``A @ B`` into a new array by one cuBLAS call on the views as they are (``cupy.matmul`` copies)."""
        C = self.xp.empty((A.shape[0], B.shape[1]), dtype=A.dtype)
        self.gemm(A, B, C)
        return C

    def product_call(self, A: Any, B: Any, check: Any) -> Any:
        """:meth:`product` checked once (:func:`gpu.backend.calls.new_output_product`): a new C from the pool
        (:meth:`new_output`'s rule) and one :class:`gpu.backend.calls.GemmCall`, built on the first call's C."""
        return new_output_product(self, A, B, check)

    def new_output(self, shape: tuple[int, ...], dtype: Any, check: Any) -> Any:
        try:
            return self.xp.empty(shape, dtype=dtype)
        except MemoryError:
            check()
            raise

    def memory_info(self) -> tuple[int, int]:
        """(free, total) bytes: the driver's free memory, within the pool's limit where one is set
        (``cupy.get_default_memory_pool().set_limit``), plus the blocks CuPy's pool caches. Those are free to
        the pool but may be split across sizes: whether one block of a size can be had is :meth:`can_allocate`'s
        question (at N = 32768 on the H200, 82 GiB held by the pool could not give one block of 60 GiB)."""
        pool = self.xp.get_default_memory_pool()
        free, total = self.xp.cuda.runtime.memGetInfo()
        limit = pool.get_limit()
        return self._driver_free(pool, free) + pool.free_bytes(), min(total, limit) if limit else total

    def can_allocate(self, nbytes: int, free: int | None = None) -> bool:
        """Whether one block of ``nbytes`` can be allocated now. Where the driver has the bytes (within the
        pool's limit), yes, with nothing taken: a trial block would stay cached, and the first small array to
        split it keeps it from the driver for good (125 GiB stayed so on the H200). Else CuPy's pool is asked
        by taking the block and handing it back (a cached block may hold it; otherwise the pool hands its
        wholly free chunks back first, a wait: the rare path); with raw allocations, the driver decides."""
        if nbytes > (self.memory_info()[0] if free is None else free):
            return False
        pool = self.xp.get_default_memory_pool()
        if nbytes <= self._driver_free(pool):
            return True
        if self._policy == "pooled" and self.xp.cuda.get_allocator() in (pool.malloc, self._tracker):
            try:
                pool.malloc(nbytes)
            except self.xp.cuda.memory.OutOfMemoryError:
                return False
            return True
        pool.free_all_blocks()
        return nbytes <= self._driver_free(pool)

    def _driver_free(self, pool: Any, free: int | None = None) -> int:
        """Bytes the driver can give a new block now (``free``: its free memory, where just read), within the
        pool's limit where one is set."""
        free = self.xp.cuda.runtime.memGetInfo()[0] if free is None else free
        limit = pool.get_limit()
        return min(free, max(0, limit - pool.total_bytes())) if limit else free

    def release_memory(self) -> None:
        """Wait for queued work, collect arrays kept only by reference cycles (their memory would reach
        the pool only at some later collection), then return the blocks CuPy's pools cache (device and
        pinned host memory) to the driver. Free blocks inside a chunk that a live array still uses stay
        cached: CuPy returns whole chunks only (156 MiB of them stayed after the full GPU test run)."""
        self.synchronize()
        gc.collect()
        self.xp.get_default_memory_pool().free_all_blocks()
        self.xp.get_default_pinned_memory_pool().free_all_blocks()

    def cache_bytes(self) -> int:
        return self._properties()["l2CacheSize"]

    def flush_cache(self) -> None:
        if self._flush_buffer is None:
            self._flush_buffer = self.xp.zeros(2 * self.cache_bytes() // 8, dtype=np.float64)
        self._flush_buffer.sum()

    def _properties(self) -> dict[str, Any]:
        return self.xp.cuda.runtime.getDeviceProperties(self.xp.cuda.Device().id)

    def telemetry(self):
        """NVML's view of this CuPy device (matched by PCI bus id), made once; None without NVML."""
        if not hasattr(self, "_telemetry"):
            self._telemetry = nvml_telemetry(self.xp.cuda.Device().pci_bus_id)
        return self._telemetry

    def device_info(self) -> dict[str, Any]:
        rt, props = self.xp.cuda.runtime, self._properties()
        name = props["name"]
        limits = self.telemetry().limits() if self.telemetry() is not None else {}
        return {
            "backend": self.name,
            "device": name.decode() if isinstance(name, bytes) else str(name),
            "compute_capability": f"{props['major']}.{props['minor']}",
            "sm_count": props["multiProcessorCount"],
            "memory_bytes": props["totalGlobalMem"],
            "l2_bytes": props["l2CacheSize"],
            "driver": driver_release(),
            "cuda_driver_api": cuda_version(rt.driverGetVersion()),
            "cuda_runtime": cuda_version(rt.runtimeGetVersion()),
            "cublas": cublas_version(self._cublas.getVersion(self._handle())),
            "cupy": self.xp.__version__,
            "int8_kernel": built_kernel(f"{props['major']}.{props['minor']}"),
            **limits,
        }


_NONFINITE_SOURCE = r"""
extern "C" __global__ void gemmlab_nonfinite(const T* __restrict__ x, long long rows, long long cols,
                                             long long rs, long long cs, int* flag)
{
    const long long total = rows * cols;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        const long long r = i / cols, c = i - r * cols;
        if (!isfinite(x[r * rs + c * cs])) *flag = 1;
    }
}
"""
_CTYPES = {"float64": "double", "float32": "float"}


@cache
def _nonfinite_kernel(dtype: str):
    """Raises ``flag`` when any entry of a strided 2-D view is NaN or infinite (T: the dtype's C type)."""
    return cupy.RawKernel(f"#define T {_CTYPES[dtype]}\n" + _NONFINITE_SOURCE, "gemmlab_nonfinite")
