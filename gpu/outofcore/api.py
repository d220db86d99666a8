"""``matmul``: C = A B for host operands larger than the device, through a resident C block and streamed k-panels.

A, B and ``out`` live in host memory (NumPy arrays) whatever the backend; the backend is where the products
run: CuPy with its operations in :mod:`gpu.outofcore.kernels`, or NumPy (:class:`gpu.outofcore.ops.HostOps`,
the same schedule with NumPy buffers, for tests and machines without a GPU). The plan
(:mod:`gpu.outofcore.plan`) sizes the block and the panels to the device memory; :func:`run` is the one
executor of every plan. Everything is checked before any work (operands, output, the plan's device, pinned
and host memory) but NaN and infinity, where the caller asks (``check_finite=True``): operands of at least
:data:`OVERLAP_FINITE_BYTES` are checked by a thread beside the first loads and products, and :func:`run`
writes nothing into C before that check has passed (its ``gate``), so a refused product leaves C as it was.
The check reads every byte of A and B on the host: on two H200s at N = 32768 it took 0.14-0.22 s of a
0.85-1.6 s product when it ran before the product.

Accuracy: each entry of C is the library GEMM's sum over its k-panels (each panel's product added to the
block with beta = 1), a k-term sum in some order, so the library GEMM's bound holds:
|C - AB| <= gamma_k |A||B| componentwise (:meth:`gpu.backend.Backend.gemm`). Non-finite inputs
(``check_finite=False``, the default) flow through those sums as through one GEMM.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import numpy as np

from ..backend import (
    Array,
    Backend,
    blas,
    check_output,
    get_backend,
    matrix_pair,
    require_finite,
    require_host,
    require_memory,
)
from ..backend.checks import byte_count
from ..profile import backend_profile
from . import ops as _ops  # noqa: F401  (registers the "outofcore" operations)
from . import rates
from .ops import FAMILY
from .pagelock import extent
from .plan import OutOfCorePlan, plan
from .timeline import Timeline

NONFINITE = "NaN and infinity then flow through the panel sums as through any GEMM"
#: Share of the device's free memory a plan takes where ``device_memory`` is not given (cuBLAS's workspace
#: and the allocator's rounding need the rest).
HEADROOM = 0.9
#: Operands (A and B together) from this many bytes are checked for NaN beside the first products; smaller
#: ones before any work, where a thread would cost more than the check.
OVERLAP_FINITE_BYTES = 2**26


def _device_memory(value: Any, ops: Any, host_free: int, staged: tuple[bool, bool, bool]) -> int:
    if value is None:
        return int(ops.budget(host_free, staged) * HEADROOM)
    return byte_count(value, "device_memory")


def prepare(host: Backend, A: Any, B: Any, out: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """A, B and out as host arrays after every check of their own, before any work."""
    for name, x in (("A", A), ("B", B), ("out", out)):
        require_host(x, name, "the out-of-core engine streams host memory",
                     ", or use the in-core GEMM for operands already on the device")
    A, B, _, _ = matrix_pair(host, A, B)
    blas.check_dtypes(("A", A), ("B", B))
    host.layout(A, "A")
    host.layout(B, "B")
    C = check_output(host, out, (A.shape[0], B.shape[1]), A.dtype, {"A": A, "B": B})
    if C is not None:
        host.layout(C, "out")
    return A, B, C


def matmul(A: Any, B: Any, *, out: Any = None, block: int | tuple[int, int] | None = None, panel: int | None = None,
           device_memory: int | None = None, buffers: int = 2, c_buffers: int = 1, backend: str | Backend = "auto",
           check_finite: bool = False, link_bytes_per_s: float | None = None, gemm_flops_per_s: float | None = None,
           hbm_bytes_per_s: float | None = None, timeline: Timeline | None = None,
           before_write: Callable[[], None] | None = None) -> np.ndarray:
    """``A @ B`` into ``out`` where given (a new NumPy array otherwise), C block by C block on the device.

    A (m x k) and B (k x n) are host NumPy arrays of float64 or float32, row- or column-major views with a
    leading dimension; they are never written. ``block`` (a side or (rows, cols)) and ``panel`` fix the plan,
    else it comes from ``device_memory`` (default: :data:`HEADROOM` of what the operations say the plan may
    take: the free device memory, and no more than the host can pin beside ``out``) and the link, GEMM
    and HBM rates (:func:`gpu.outofcore.plan.plan`): those passed, else those measured
    once for the device and kept in its profile (:mod:`gpu.outofcore.rates`, ``gemmlab calibrate
    --transfer``), else none (the plan is then sized by memory alone). ``buffers``: panel slots (2 or
    3); ``c_buffers``: C blocks on the device (2 overlaps a block's write-back with the next one's products).
    ``timeline``: a :class:`gpu.outofcore.Timeline` that records when each copy and product of the run
    went (the checks before it are not in it). ``before_write``: called once before the first write into C
    (after the NaN check has passed); an exception it raises stops the product with C unwritten (the Dask
    front-end waits there for the checks made across its workers).
    Raises TypeError for device arrays and bad dtypes, ValueError for bad shapes, arguments or ``out``, and
    :class:`gpu.backend.MemoryPlanError` where the plan does not fit in device, pinned or host memory: all
    before any work; ValueError for non-finite input (``check_finite``) before any write into C.
    """
    be, host = get_backend(backend), get_backend("numpy")
    A, B, C = prepare(host, A, B, out)
    (m, k), n = A.shape, B.shape[1]
    ops = be.ops(FAMILY)
    staged = ops.staged(A, B, C)
    new_out = 0 if C is not None else m * n * A.itemsize
    host_free = max(0, host.memory_info()[0] - new_out)
    given = {"link_bytes_per_s": link_bytes_per_s, "gemm_flops_per_s": gemm_flops_per_s,
             "hbm_bytes_per_s": hbm_bytes_per_s}
    model = given if any(v is not None for v in given.values()) else rates.from_profile(backend_profile(be))
    p = plan(m, k, n, A.itemsize, device_memory=_device_memory(device_memory, ops, host_free, staged), block=block,
             panel=panel, buffers=buffers, c_buffers=c_buffers, **model)
    what = f"the out-of-core product {m} x {k} x {n} in {p.block[0]} x {p.block[1]} blocks and {p.panel}-wide panels"
    require_memory(be, p.device_bytes, what, "pass a smaller device_memory, block= or panel=")
    require_memory(host, new_out + ops.host_bytes(p, staged),
                   f"{what} (staging buffers{'' if C is not None else ', out'})",
                   "pass out=, a smaller block= or panel=, or buffers=2")
    C = np.empty((m, n), dtype=A.dtype) if C is None else C
    with finite_gate(host, check_finite, A, B, before_write) as gate:
        run(be, ops, p, A, B, C, timeline, gate)
    return C


@contextmanager
def finite_gate(host: Backend, check_finite: bool, A: np.ndarray, B: np.ndarray,
                before_write: Callable[[], None] | None = None) -> Iterator[Callable[[], None]]:
    """The gate :func:`run` calls before its first write into C: the NaN and infinity check of A and B has
    passed (run by a thread from entering, for operands of :data:`OVERLAP_FINITE_BYTES` or more; before
    yielding for smaller ones), then ``before_write``. On leaving without error the check's verdict is
    raised even where nothing was written (an empty C)."""
    after = before_write or (lambda: None)
    if not check_finite or A.nbytes + B.nbytes < OVERLAP_FINITE_BYTES:
        require_finite(host, check_finite, {"A": A, "B": B}, NONFINITE)
        yield after
        return
    with ThreadPoolExecutor(1, thread_name_prefix="gemmlab-finite") as pool:
        check = pool.submit(require_finite, host, True, {"A": A, "B": B}, NONFINITE)

        def gate() -> None:
            check.result()
            after()

        yield gate
        check.result()


def run(be: Backend, ops: Any, p: OutOfCorePlan, A: Array, B: Array, C: Array,
        timeline: Timeline | None = None, gate: Callable[[], None] | None = None) -> None:
    """The one executor of every plan: for each step of ``p.steps()``, load the panels of A and B into their
    slot where the step loads, multiply them into the block's C buffer (its strip of rows where the step has
    one; beta = 0 on the block's first panel, 1 after), and store a finished block (or strip) into its place
    in C; all through ``ops`` (see :mod:`gpu.outofcore.ops`), which holds the buffers of the call and is
    released even on error. ``be`` is the backend ``ops`` runs on. An empty inner dimension gives zeros, the
    sum of no products, as ``A @ B`` does; C is a host array on every backend. With a ``timeline``, the
    operations record into it when each copy, product and host staging ran. ``gate`` is called once before
    the first write into C; what it raises stops the run with C unwritten."""
    if not C.size:
        return
    if not p.k:
        if gate is not None:
            gate()
        C.fill(0)
        return
    ops.begin(p, A, B, C, timeline)
    try:
        for step in p.steps():
            if step.load:
                ops.load(step.slot, A[step.rows, step.panel], B[step.panel, step.cols])
            ops.multiply(step.slot, step.c_slot, step.first, step.strip)
            if step.last:
                if gate is not None:
                    gate, opened = None, gate
                    opened()
                ops.store(step.c_slot, C[step.rows, step.cols], step.strip)
        ops.finish()
    finally:
        ops.release()


@contextmanager
def page_locked(*arrays: np.ndarray, backend: str | Backend = "auto") -> Iterator[list[bool]]:
    """Lock the pages of host arrays for the ``with`` body, so that :func:`matmul` copies them in place
    instead of staging them (:mod:`gpu.outofcore.pagelock`: on the two-H200 machine 55 GB/s from a locked
    view against 26-41 GB/s for the staging copy, and no staging memory). An array that is written (the
    ``out`` of a product) must be writeable. Yields whether each array is locked: False where the
    registration failed (the product then stages it, as before). Locking costs about 0.05 s per GB, so it
    pays for arrays used in more than one product, or larger than the staging would be. On leaving, the
    ranges it locked are unlocked (with any locked range they were merged with); an array that was locked
    already (a kept mapping of :mod:`gpu.multigpu.mapped`, an outer ``page_locked``) stays locked."""
    for i, x in enumerate(arrays):
        require_host(x, f"array {i}", "only host memory is page-locked", "")
        if not isinstance(x, np.ndarray):
            raise TypeError(f"array {i} is a {type(x).__name__}, not a NumPy array: lock the array a product reads")
    be = get_backend(backend)
    ops = be.ops(FAMILY)
    spans = [(*extent(x), bool(x.flags.writeable)) for x in arrays]
    fresh = [not ops.pages_locked(*span) for span in spans]
    locked = [ops.lock_pages(*span) for span in spans]
    try:
        yield locked
    finally:
        be.synchronize()
        for (address, nbytes, _), new, done in zip(spans, fresh, locked):
            if new and done:
                ops.unlock_pages(address, nbytes)
