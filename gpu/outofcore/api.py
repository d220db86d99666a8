"""``matmul``: C = A B for host operands larger than the device, through a resident C block and streamed k-panels.

A, B and ``out`` live in host memory (NumPy arrays) whatever the backend; the backend is where the products
run: CuPy with its operations in :mod:`gpu.outofcore.kernels`, or NumPy (:class:`gpu.outofcore.ops.HostOps`,
the same schedule with NumPy buffers, for tests and machines without a GPU). The plan
(:mod:`gpu.outofcore.plan`) sizes the block and the panels to the device memory; :func:`run` is the one
executor of every plan; :class:`Plan` keeps the checks, the rates and that decision for one operand
signature, and :func:`matmul` keeps a :class:`Plan` per signature. Unlike the other families' calls, this
one waits for the device: it returns C complete in host memory (see :class:`Plan`). Everything is checked
before any work (operands, output, the plan's device, pinned and host memory) but NaN and infinity, where
the caller asks (``check_finite=True``): operands of at least :data:`OVERLAP_FINITE_BYTES` are checked by a
thread beside the first loads and products, and :func:`run` writes nothing into C before that check has
passed (its ``gate``), so a refused product leaves C as it was.
The check reads every byte of A and B on the host: on two H200s at N = 32768 it took 0.14-0.22 s of a
0.85-1.6 s product when it ran before the product.

Accuracy: each entry of C is the library GEMM's sum over its k-panels (each panel's product added to the
block with beta = 1), a k-term sum in some order, so the library GEMM's bound holds:
|C - AB| <= gamma_k |A||B| componentwise (:meth:`gpu.backend.Backend.gemm`). Non-finite inputs
(``check_finite=False``, the default) flow through those sums as through one GEMM.
"""

from __future__ import annotations

import mmap
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..backend import (
    Array,
    Backend,
    MemoryPlanError,
    check_output,
    get_backend,
    require_finite,
    require_host,
    require_memory,
)
from ..backend.checks import byte_count, gemm_operands
from ..backend.plans import MatmulPlan, PlanCache, PlanMismatch, operand_signature, resolve_options
from ..profile import backend_profile
from . import ops as _ops  # noqa: F401  (registers the "outofcore" operations)
from . import rates
from .ahead import Ahead, first_uses
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
#: The ways pageable operands reach the device (see :class:`Options`).
STAGING = ("auto", "pinned", "direct", "lock", "stream")
#: A's and B's bytes (together) from which ``staging="auto"`` streams rather than locks (see :class:`Options`):
#: between the measured 17.2 GB, where locking was ahead, and 38.7 GB, where streaming was.
STREAM_FROM = 24 * 2**30


def staging_for(staging: str, A: np.ndarray, B: np.ndarray) -> str:
    """``staging`` with ``"auto"`` resolved for operands A and B (see :class:`Options`)."""
    if staging != "auto":
        return staging
    return "stream" if A.nbytes + B.nbytes >= STREAM_FROM else "lock"


def _device_memory(value: Any, ops: Any, host_free: int, staged: tuple[bool, bool, bool]) -> int:
    if value is None:
        return int(ops.budget(host_free, staged) * HEADROOM)
    return byte_count(value, "device_memory")


def prepare(host: Backend, A: Any, B: Any, out: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """A, B and out as host arrays after every check of their own, before any work."""
    for name, x in (("A", A), ("B", B), ("out", out)):
        require_host(x, name, "the out-of-core engine streams host memory",
                     ", or use the in-core GEMM for operands already on the device")
    return gemm_operands(host, A, B, out)


@dataclass(frozen=True)
class Options:
    """How the engine cuts the product (see :func:`matmul`): ``block`` (a side, or (rows, cols)) and ``panel``,
    else chosen from ``device_memory`` and the rates; ``buffers`` panel slots (2 or 3), ``c_buffers`` C blocks on
    the device (1 or 2); ``check_finite``; the rates ``link_bytes_per_s``, ``gemm_flops_per_s`` and
    ``hbm_bytes_per_s`` (those of the device profile where none is given); ``staging`` (:data:`STAGING`):
    ``"pinned"`` copies pageable operands through pinned staging buffers, ``"direct"`` straight from and to
    them (the driver stages them itself: no pinned memory to allocate), ``"lock"`` page-locks their pieces
    just ahead of the copies that read them (:mod:`gpu.outofcore.ahead`), ``"stream"`` stages A's and B's
    panels band by band through a small pinned ring (:mod:`gpu.outofcore.ring`) and locks C's pieces ahead;
    those two unlock what they locked when the call ends unless ``keep_locked`` (memory whose lifetime the
    caller manages and that no other code copies to or from a device: a copy across two pieces fails);
    ``"auto"`` (the default) locks ahead, or streams where A and B together hold :data:`STREAM_FROM` bytes
    or more. On one H200 of ``nvidia-h200-x2``, a first call then later ones took, in s, at N = 16384, 32768,
    49152 and 65536: ``"lock"`` 0.55/0.44, 1.90/1.87, 5.64/5.53, 13.6/13.8; ``"stream"`` 0.79/0.54,
    2.11/1.76, 5.18/5.13, 12.0/11.8; ``"direct"`` on a first call, then ``"pinned"`` (allocating its buffers
    on the second call), 5.99/7.23/1.42 at 32768, 11.8/23.0/4.90 and 25.0/41.2 (the toolkit's default until
    then; ``results/published/h200/h200-outofcore-first-call.json``, section ``stream_1007efa``). Pinned
    staging gets ahead only from the third call on, and ``"lock"`` with ``keep_locked`` repeats faster still
    (1.36 s at N = 32768 on ``nvidia-h200``)."""

    block: int | tuple[int, int] | None = None
    panel: int | None = None
    device_memory: int | None = None
    buffers: int = 2
    c_buffers: int = 1
    check_finite: bool = False
    link_bytes_per_s: float | None = None
    gemm_flops_per_s: float | None = None
    hbm_bytes_per_s: float | None = None
    staging: str = "auto"
    keep_locked: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.block, list):                 # a (rows, cols) pair given as a list: one key
            object.__setattr__(self, "block", tuple(self.block))
        if self.staging not in STAGING:
            raise ValueError(f"staging must be one of {STAGING}, got {self.staging!r}")


class Plan(MatmulPlan):
    """``A @ B`` of host operands by the out-of-core engine, for operands of the signature of (A, B, ``out``):
    built once, executed per call (after nvmath-python's ``Matmul``; see :mod:`gpu.backend.plans`).

    Building it checks the operands (host arrays, dtypes, layouts, ``out``), reads the link, GEMM and HBM
    rates (the options', else the device profile's, once) and decides the blocks and panels
    (:attr:`schedule`, a :class:`gpu.outofcore.OutOfCorePlan`) for the memory free then. A call
    (:meth:`execute`) checks what can change between calls: ``out``'s overlap with A and B, which operands
    are page-locked, the device and host memory the schedule needs (where it no longer fits and
    ``device_memory`` was not given, the schedule is decided again for what is free now, and kept), and the
    values where ``check_finite``. The device buffers and the pinned staging come from CuPy's pools per
    call (the pools keep them for the next one), so a kept plan holds no device or pinned memory.

    **This call waits for the device**, the one exception to the rule that a default call does not: its
    result lives in host memory, and it hands C back complete, every block copied back and placed. So it
    takes no ``stream``: the engine runs its own three (:mod:`gpu.outofcore.kernels`)."""

    def __init__(self, A: Any, B: Any, *, out: Any = None, options: Options | dict | None = None,
                 backend: str | Backend = "auto", stream: Any = None) -> None:
        if stream is not None:
            raise ValueError("the out-of-core engine runs on streams of its own and returns C complete in host "
                             "memory: pass no stream")
        host = get_backend("numpy")
        self.device = get_backend(backend)
        self.options = o = resolve_options(Options, options)
        A, B, out = prepare(host, A, B, out)
        self.ops = self.device.ops(FAMILY)
        given = {"link_bytes_per_s": o.link_bytes_per_s, "gemm_flops_per_s": o.gemm_flops_per_s,
                 "hbm_bytes_per_s": o.hbm_bytes_per_s}
        self.rates = given if any(v is not None for v in given.values()) else rates.from_profile(
            backend_profile(self.device))
        self.backend, self.stream = host, None
        self.staging = staging_for(o.staging, A, B)
        self.schedule = self._decide(A, B, out)
        self._require(self.schedule, self._staged(A, B, out), out is None)
        self.signature = operand_signature(host, A, B, out)

    def execute(self, A: np.ndarray, B: np.ndarray, out: np.ndarray | None = None, *,
                timeline: Timeline | None = None, before_write: Callable[[], None] | None = None,
                stream: Any = None) -> np.ndarray:
        """``A @ B`` into ``out`` (a new NumPy array where None) for operands of the plan's signature
        (:class:`gpu.backend.plans.PlanMismatch` otherwise); ``timeline`` and ``before_write`` as in
        :func:`matmul`. Returns once C is complete in host memory."""
        if self.signature is None:
            raise ValueError("this plan was freed; build a new one")
        if stream is not None:
            raise ValueError("the out-of-core engine runs on streams of its own: pass no stream")
        got = operand_signature(self.backend, A, B, out)
        if got != self.signature:
            raise PlanMismatch(self._mismatch(got))
        return self._run(A, B, out, timeline, before_write)

    def _execute(self, A: np.ndarray, B: np.ndarray, out: np.ndarray | None) -> np.ndarray:
        return self._run(A, B, out, None, None)

    def _run(self, A: np.ndarray, B: np.ndarray, out: np.ndarray | None, timeline: Timeline | None,
             before_write: Callable[[], None] | None) -> np.ndarray:
        """The per-call work for operands of the plan's signature (see the class notes)."""
        (m, _), n = A.shape, B.shape[1]
        if out is not None and (np.may_share_memory(out, A) or np.may_share_memory(out, B)):
            check_output(self.backend, out, (m, n), A.dtype, {"A": A, "B": B})
        p = self._fitting(A, B, out)
        C = np.empty((m, n), dtype=A.dtype) if out is None else out
        ahead = Ahead(self.ops.ranges, self.options.keep_locked, timeline=timeline) if self._locks_ahead() else None
        try:
            with finite_gate(self.backend, self.options.check_finite, A, B, before_write) as gate:
                run(self.device, self.ops, p, A, B, C, timeline, gate, self._direct(), ahead, self._streams())
        finally:
            if ahead is not None:
                mine = ahead.close()
                if out is None and ahead.keep:           # a C made here is not the caller's to keep locked
                    lo, n = extent(C)
                    for a, b in mine:                    # this call's ranges in C's pages, no caller's range
                        if lo - lo % mmap.PAGESIZE <= a and b <= lo + n + mmap.PAGESIZE:
                            self.ops.ranges.unlock(a, b - a)
        return C

    def _locks_ahead(self) -> bool:
        """Whether a call page-locks the operands' pieces ahead of its copies (:attr:`staging`)."""
        return self.staging in ("lock", "stream")

    def _direct(self) -> bool:
        """Whether a call copies pageable operands without the pinned staging buffers (:attr:`staging`)."""
        return self.staging in ("direct", "lock", "stream")

    def _streams(self) -> bool:
        return self.staging == "stream"

    def _staged(self, A: np.ndarray, B: np.ndarray, out: np.ndarray | None) -> tuple[bool, bool, bool]:
        return self.ops.staged(A, B, out, self._direct())

    def _decide(self, A: np.ndarray, B: np.ndarray, out: np.ndarray | None) -> OutOfCorePlan:
        """The blocks and panels for the memory free now (see :func:`gpu.outofcore.plan.plan`)."""
        o, (m, k), n = self.options, A.shape, B.shape[1]
        new_out = 0 if out is not None else m * n * A.itemsize
        host_free = max(0, self.backend.memory_info()[0] - new_out)
        memory = _device_memory(o.device_memory, self.ops, host_free, self.ops.staged(A, B, out, self._streams()))
        return plan(m, k, n, A.itemsize, device_memory=memory, block=o.block, panel=o.panel, buffers=o.buffers,
                    c_buffers=o.c_buffers, **self.rates)

    def _fitting(self, A: np.ndarray, B: np.ndarray, out: np.ndarray | None) -> OutOfCorePlan:
        """The kept schedule where the memory it needs is free now; else, where ``device_memory`` was not
        given, one decided again for what is free (kept from then on); else MemoryPlanError."""
        try:
            self._require(self.schedule, self._staged(A, B, out), out is None)
        except MemoryPlanError:
            if self.options.device_memory is not None:
                raise
            fresh = self._decide(A, B, out)
            self._require(fresh, self._staged(A, B, out), out is None)
            self.schedule = fresh
        return self.schedule

    def _require(self, p: OutOfCorePlan, staged: tuple[bool, bool, bool], new_out: bool) -> None:
        """MemoryPlanError unless the device buffers, the staging and a new ``out`` fit now."""
        what = f"the out-of-core product {p.m} x {p.k} x {p.n} in {p.block[0]} x {p.block[1]} blocks and " \
               f"{p.panel}-wide panels"
        require_memory(self.device, p.device_bytes, what, "pass a smaller device_memory, block= or panel=")
        require_memory(self.backend, new_out * p.m * p.n * p.itemsize + self.ops.host_bytes(p, staged, self._streams()),
                       f"{what} (staging buffers{', out' if new_out else ''})",
                       "pass out=, a smaller block= or panel=, or buffers=2")


#: The plans :func:`matmul` keeps, one per operand signature and options.
PLANS = PlanCache()


def matmul(A: Any, B: Any, *, out: Any = None, block: int | tuple[int, int] | None = None, panel: int | None = None,
           device_memory: int | None = None, buffers: int | None = None, c_buffers: int | None = None,
           backend: str | Backend = "auto", check_finite: bool | None = None, link_bytes_per_s: float | None = None,
           gemm_flops_per_s: float | None = None, hbm_bytes_per_s: float | None = None,
           timeline: Timeline | None = None, before_write: Callable[[], None] | None = None,
           staging: str | None = None, keep_locked: bool | None = None,
           options: Options | dict | None = None) -> np.ndarray:
    """``A @ B`` into ``out`` where given (a new NumPy array otherwise), C block by C block on the device.

    A (m x k) and B (k x n) are host NumPy arrays of float64 or float32, row- or column-major views with a
    leading dimension; they are never written. ``block`` (a side or (rows, cols)) and ``panel`` fix the plan,
    else it comes from ``device_memory`` (default: :data:`HEADROOM` of what the operations say the plan may
    take: the free device memory, and no more than the host can pin beside ``out``) and the link, GEMM
    and HBM rates (:func:`gpu.outofcore.plan.plan`): those passed, else those measured
    once for the device and kept in its profile (:mod:`gpu.outofcore.rates`, ``gemmlab calibrate
    --transfer``), else none (the plan is then sized by memory alone). ``buffers``: panel slots (2, the
    default, or 3); ``c_buffers``: C blocks on the device (1, the default; 2 overlaps a block's write-back with
    the next one's products); ``check_finite`` (default False): refuse NaN and infinity before any write into
    C. ``options``: the same fields as one :class:`Options` (or a dict of them); keywords given beside it
    replace its fields. ``timeline``: a :class:`gpu.outofcore.Timeline` that records when each copy and product
    of the run went (the checks before it are not in it). ``before_write``: called once before the first write
    into C (after the NaN check has passed); an exception it raises stops the product with C unwritten (the
    Dask front-end waits there for the checks made across its workers). ``staging``: how pageable operands
    reach the device, ``"auto"`` (the default), ``"pinned"``, ``"direct"``, ``"lock"`` or ``"stream"``, and
    ``keep_locked`` (see :class:`Options`).

    The call is a :class:`Plan` kept per operand signature and options (:data:`PLANS`) plus its execution, so a
    repeated call reads no profile and makes no decision again. It returns once C is complete in host memory:
    it waits for the device (see :class:`Plan`).
    Raises TypeError for device arrays and bad dtypes, ValueError for bad shapes, arguments or ``out``, and
    :class:`gpu.backend.MemoryPlanError` where the plan does not fit in device, pinned or host memory: all
    before any work; ValueError for non-finite input (``check_finite``) before any write into C.
    """
    be, host = get_backend(backend), get_backend("numpy")
    signature = operand_signature(host, A, B, out)
    if signature is None:                   # not plain NumPy arrays: checked and converted first
        A, B, out = prepare(host, A, B, out)
        signature = operand_signature(host, A, B, out)
    if isinstance(block, list):
        block = tuple(block)
    key = None if signature is None else (be.name, signature, options, block, panel, device_memory, buffers,
                                          c_buffers, check_finite, link_bytes_per_s, gemm_flops_per_s,
                                          hbm_bytes_per_s, staging, keep_locked)
    plan_ = PLANS.get(key, lambda: Plan(A, B, out=out, backend=be, options=resolve_options(
        Options, options, block=block, panel=panel, device_memory=device_memory, buffers=buffers,
        c_buffers=c_buffers, check_finite=check_finite, link_bytes_per_s=link_bytes_per_s,
        gemm_flops_per_s=gemm_flops_per_s, hbm_bytes_per_s=hbm_bytes_per_s, staging=staging,
        keep_locked=keep_locked)))
    return plan_._run(A, B, out, timeline, before_write)


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
        timeline: Timeline | None = None, gate: Callable[[], None] | None = None, direct: bool = False,
        ahead: Ahead | None = None, ring: bool = False) -> None:
    """The one executor of every plan: for each step of ``p.steps()``, load the panels of A and B into their
    slot where the step loads, multiply them into the block's C buffer (its strip of rows where the step has
    one; beta = 0 on the block's first panel, 1 after), and store a finished block (or strip) into its place
    in C; all through ``ops`` (see :mod:`gpu.outofcore.ops`), which holds the buffers of the call and is
    released even on error. ``be`` is the backend ``ops`` runs on. An empty inner dimension gives zeros, the
    sum of no products, as ``A @ B`` does; C is a host array on every backend. With a ``timeline``, the
    operations record into it when each copy, product and host staging ran. ``gate`` is called once before
    the first write into C; what it raises stops the run with C unwritten. ``direct``: copy pageable operands
    without staging (:class:`Options`); ``ahead``: lock their pieces ahead of the copies, in the order the
    schedule reads them (:mod:`gpu.outofcore.ahead`; the caller closes it once the run has returned), only
    C's where ``ring`` streams A's and B's panels through a pinned ring (:mod:`gpu.outofcore.ring`)."""
    if not C.size:
        return
    if not p.k:
        if gate is not None:
            gate()
        C.fill(0)
        return
    try:
        ops.begin(p, A, B, C, timeline, direct, ahead, ring)
        for view, writeable in first_uses(p.steps(), A, B, C, not ring) if ahead is not None else ():
            ahead.request(view, writeable)
        for step in p.steps():
            if step.load:
                ops.load(step.slot, A[step.rows, step.panel], B[step.panel, step.cols])
            ops.multiply(step.slot, step.c_slot, step.first, step.strip)
            if step.last:
                if gate is not None:
                    gate, opened = None, gate
                    opened()
                ops.store(step.c_slot, C[step.rows, step.cols], step.strip)
            if ahead is not None:
                ahead.advance(ops.busy)
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
