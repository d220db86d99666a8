"""The Ozaki scheme as a plan: :class:`Options`, :class:`Plan` (built once per operand signature) and its execution.

Building a :class:`Plan` runs every check that depends on the operands' signature and the options (dtypes,
shapes, ``out``, the format, the slice count or the target, the bound's memory), makes the slicing plan
(:class:`gpu.ozaki.plan.OzakiPlan`: alpha, the GEMM calls, the buffers) for a given ``slices``, compiles the
kernels the call needs (one module per configuration, :mod:`gpu.ozaki.kernels`) and, unless told not to,
allocates its workspace. :meth:`Plan.execute` then does the per-call work on the stream:

* **slices given**: the exponents of A's rows and B's columns, the slicing of A and B^T, the GEMMs and the
  fold, with **no wait for the device**. Rows of A and columns of B holding NaN or infinity are found on the
  device in the same pass as the exponents: their slices are zeros, and the fold's last launch computes
  their entries of C as the dot products of IEEE arithmetic, so C has NaN and infinity where the library
  GEMM's has them (the non-finite values come from the IEEE sum in k's order, where the library's order
  could differ only when finite terms overflow on the way).
* **target** (the default, ``target="dgemm"``): the slice count depends on the data: the bound's magnitude
  GEMM and one pass over its product run on the device (:mod:`gpu.ozaki.bound`), and a kernel turns the ratio
  into the slice count, one 32-bit word. By default (``verdict="device"``) the word stays on the device and a
  CUDA graph runs the products it asks for (:mod:`gpu.ozaki.deferred`): **no wait**. With
  ``verdict="host"`` the call reads the word back (:func:`read_verdict`): **one 4-byte device-to-host read
  per call**, the only wait.
  The word also says whether a line holds NaN or infinity, which ``check_finite=True`` needs, so the
  opt-in costs no second read there; with ``slices=`` and ``check_finite=True`` the call reads the word
  for that alone.

A plan that holds its workspace (``Plan(...)``, the default) reuses it on every call: calls of one plan from
several threads take turns issuing their work (a plan's stream orders them on the device). The stateless
:func:`gpu.ozaki.matmul` keeps plans that take their workspace from the array library's pool per call (no
wait: CuPy's pool serves it from its cached blocks), so that they hold no device memory, except a device
verdict's, which holds its workspace and graph (:mod:`gpu.ozaki.deferred`).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..backend import Array, Backend, check_output, get_backend, require_memory
from ..backend.checks import MemoryPlanError, reserve
from ..backend.plans import MatmulPlan, operand_signature, resolve_options
from .bound import ratio_on_device, require_bound_memory
from .common import NONFINITE, _operands, _phase
from .deferred import DeviceVerdict
from .formats import get_format
from .issue import Calls
from .ops import BAD, FINALIZE, LOAD_ACC, LOAD_OPEN, STORE_OPEN, decode, ops
from .plan import (
    MAX_SLICES,
    SUM_ERROR,
    OzakiPlan,
    WorkspaceError,
    _positive_int,
    choose_alpha,
    out_of_reach,
    plan,
    target_value,
)
from .slicing import slice_layout

#: Byte alignment of the parts of a workspace block.
ALIGN_BYTES = 256


@dataclass(frozen=True)
class Options:
    """The options of :func:`gpu.ozaki.matmul` (its keywords; see there), as one object a plan is built for."""

    slices: int | None = None
    slice_format: str = "fp32"
    target: float | str | None = None
    k_block: int | None = None
    remainder: bool = False
    overwrite_a: bool = False
    overwrite_b: bool = False
    check_finite: bool = False
    verdict: str = "device"
    max_slices: int | None = None

    def __post_init__(self) -> None:
        if self.verdict not in ("device", "host"):
            raise ValueError(f"verdict must be 'device' (the slice count decided on the device, no wait) or "
                             f"'host' (read back, one 4-byte wait per call), got {self.verdict!r}")
        if self.max_slices is not None:
            _positive_int(self.max_slices, "max_slices", 1, MAX_SLICES)


def request(slices: Any, target: Any, remainder: bool = False) -> tuple[int | None, Any]:
    """(slices, target) after checks: exactly one of them, ``target="dgemm"`` when neither is given."""
    if slices is not None and target is not None:
        raise ValueError("give either slices (a count) or target (an error bound), not both")
    if slices is None and remainder:
        raise ValueError("target picks slices for exact digits only; with remainder=True give slices")
    if slices is None:
        target = "dgemm" if target is None else target
        target_value(target)
        return None, target
    return _positive_int(slices, "slices", 1, MAX_SLICES), None


def _budget(target: Any) -> float:
    """What :func:`gpu.ozaki.plan.auto_slices` compares a slice count's bound with (ValueError if none can)."""
    budget = target_value(target) * (1 - 2.0**-40) - SUM_ERROR
    if budget <= 0:
        raise ValueError(f"target {target!r} is below what the float64 sum of the slice products guarantees "
                         f"(2^-91 of |A||B|); give a target of at least 2^-90")
    return budget


def read_verdict(be: Backend, word: Array) -> int:
    """The verdict word on the host: the one device-to-host read a ``target=`` call makes (4 bytes)."""
    return int(be.to_numpy(word)[0])


class Layout:
    """One slice count's configuration: the :class:`OzakiPlan`, the parts of its workspace, and per fold batch
    what the fold launch needs."""

    def __init__(self, p: OzakiPlan, deferred: bool = False) -> None:
        self.p = p
        fmt = p.format
        self.a_layout, self.b_layout = slice_layout(p, False), slice_layout(p, True)
        shapes = [("a", (p.m, self.a_layout["positions"] * p.ldk), fmt.storage),
                  ("b", (p.n_pad, self.b_layout["positions"] * p.ldk), fmt.storage),
                  ("buffers", (p.held, p.m, p.n_pad), fmt.accumulator)]
        if p.needs_open or deferred:
            shapes.append(("open", (p.m, p.n), "float64"))
        if len(p.batches) > 1 or deferred:
            shapes.append(("comp", (p.m, p.n), "float64"))
        if deferred:                                 # the sum between graph and last fold, and the verdict
            shapes += [("acc", (p.m, p.n), "float64"), ("word", (1,), "int32")]
        self.parts, offset = [], 0
        for name, shape, dtype in shapes:
            size = int(np.prod(shape)) * np.dtype(dtype).itemsize
            self.parts.append((name, offset, size, shape, np.dtype(dtype)))
            offset += -(-size // ALIGN_BYTES) * ALIGN_BYTES
        self.nbytes = offset
        self.calls = Calls(p)
        self.batches = []
        for number, batch in enumerate(p.batches):
            chunks = [p.chunks[i] for i in batch]
            flags = ((LOAD_ACC if number else 0)
                     | (LOAD_OPEN if number and not p.chunks[batch[0] - 1].closes else 0)
                     | (STORE_OPEN if not chunks[-1].closes else 0)
                     | (FINALIZE if number == len(p.batches) - 1 else 0))
            self.batches.append((chunks, [c.diagonal for c in chunks], [c.closes for c in chunks], flags))

    def carve(self, block: Array) -> dict[str, Array]:
        """The parts as views of ``block`` (uint8, at least :attr:`nbytes`)."""
        return {name: block[offset:offset + size].view(dtype).reshape(shape)
                for name, offset, size, shape, dtype in self.parts}


class Plan(MatmulPlan):
    """``A @ B`` by the Ozaki scheme for one operand signature (see the module and :func:`gpu.ozaki.matmul`).

    ``options``: an :class:`Options`, a dict of its fields, or None (the defaults: ``target="dgemm"``, decided
    on the device: :mod:`gpu.ozaki.deferred`).
    ``stream``: the CuPy stream the plan runs on (default: the current one at each call). ``hold``: keep
    the workspace between calls (False: take it from the pool per call, as :func:`gpu.ozaki.matmul` does with
    ``slices=`` or ``verdict="host"``; a device-verdict plan that holds its workspace captures its graph when
    it is built, one that does not on the first call of each workspace it gets, a call that then waits).
    Raises what :func:`gpu.ozaki.matmul` raises, before any work.
    """

    def __init__(self, A: Any, B: Any, *, out: Any = None, options: Any = None, backend: str | Backend = "auto",
                 stream: Any = None, hold: bool = True) -> None:
        be = get_backend(backend)
        opts = resolve_options(Options, options)
        A, B = _operands(be, A, B)
        (m, k), n = A.shape, B.shape[1]
        check_output(be, out, (m, n), np.float64, {"A": A, "B": B}, rows_contiguous=True)
        self.format = get_format(opts.slice_format)
        self.slices, self.target = request(opts.slices, opts.target, opts.remainder)
        self.alpha = choose_alpha(self.format, k, opts.k_block)[0]
        if opts.remainder and not self.format.floating:
            raise ValueError(f"{self.format.name} slices hold integers; the rounded-remainder form needs a float "
                             "format")
        self.budget = _budget(self.target) if self.target is not None else 0.0
        self.backend, self.stream, self.options, self.hold = be, stream, opts, hold
        self.shape, self.out_given = (m, k, n), out is not None
        self.signature = operand_signature(be, A, B, out, stream)
        self._layouts: dict[int, Layout] = {}
        self._held: tuple[int, Array] | None = None
        self._carved: dict[int, dict[str, Array]] = {}
        self._lock = threading.Lock()
        self._deferred: DeviceVerdict | None = None
        self._last: Array | None = None
        self._empty = not (m and n and k)
        if self._empty:
            return
        if out is None:
            _require_output(be, m, n)
        if self.target is not None:
            require_bound_memory(be, m, k, n, self.format)
        ops(be).prepare(self.format, self.target is not None)
        if self.target is not None and opts.verdict == "device" and not opts.check_finite:
            self._deferred = DeviceVerdict(self, Layout, opts.max_slices)
            if hold:
                self._deferred.ready(self._workspace(self._deferred.layout))
        elif self.slices is not None:
            self._workspace(self.layout(self.slices))

    @property
    def max_slices(self) -> int | None:
        """The most slices a device-verdict call uses (its workspace holds room for them); None otherwise."""
        return None if self._deferred is None else self._deferred.most

    def last_verdict(self) -> dict[str, Any] | None:
        """What the last call's verdict said (waits for that call; None before any call or without ``target``):
        ``slices`` (0: out of reach), ``nonfinite`` (a line held NaN or infinity), ``log2_ratio`` (the bound's
        ratio, None if infinite) and, for a device-verdict call, ``ieee``: whether every entry came from the
        IEEE dot products because the data need more slices than :attr:`max_slices` (or none reach)."""
        if self._last is None:
            return None
        slices, bad, spread = decode(int(self.backend.to_numpy(self._last)[0]))
        ieee = self._deferred is not None and not 1 <= slices <= self._deferred.most
        return {"slices": slices, "nonfinite": bad, "log2_ratio": spread, "ieee": ieee}

    def layout(self, slices: int) -> Layout:
        """The configuration of ``slices`` (made once, sized to the memory free then; WorkspaceError where not
        even one buffer fits)."""
        lay = self._layouts.get(slices)
        if lay is None:
            m, k, n = self.shape
            free = self.backend.memory_info()[0] + (8 * m * n if self.out_given else 0)
            lay = Layout(plan(m, k, n, slices, self.format, k_block=self.options.k_block, memory=free,
                              remainder=self.options.remainder))
            self._layouts[slices] = lay
        return lay

    def _workspace(self, lay: Layout) -> dict[str, Array]:
        """The workspace of ``lay``: the held block (grown where a larger count needs more), or a new one."""
        if self.hold and self._held is not None and self._held[0] >= lay.nbytes:
            carved = self._carved.get(id(lay))
            if carved is None:                       # a held block's views serve every call (carving costs ~30 us)
                carved = self._carved[id(lay)] = lay.carve(self._held[1])
            return carved
        self._held = None
        self._carved.clear()
        m, k, n = self.shape
        try:
            block = reserve(self.backend, lay.nbytes, f"the workspace of a {m} x {k} x {n} Ozaki product",
                            "use fewer slices, a format with smaller slices (int8), or split the product into "
                            "blocks of rows")
        except MemoryPlanError as exc:
            raise WorkspaceError(str(exc)) from exc
        if self.hold:
            self._held = (lay.nbytes, block)
        return lay.carve(block)

    def _release(self) -> None:
        self._held = None
        self._carved.clear()
        self._layouts.clear()
        if self._deferred is not None:
            self._deferred.release()

    def _execute(self, A: Array, B: Array, out: Array | None) -> Array:
        return self.run(A, B, out, None)

    def run(self, A: Array, B: Array, out: Array | None, phases: dict[str, float] | None) -> Array:
        """The product of operands of the plan's signature (``phases``: seconds per phase, each synchronized);
        a plan that holds its workspace issues one call's work at a time."""
        if not self.hold:
            return self._run(A, B, out, phases)
        with self._lock:
            return self._run(A, B, out, phases)

    def _run(self, A: Array, B: Array, out: Array | None, phases: dict[str, float] | None) -> Array:
        be = self.backend
        m, k, n = self.shape
        if out is not None:
            check_output(be, out, (m, n), np.float64, {"A": A, "B": B}, rows_contiguous=True)
        C = out if out is not None else _output(be, m, n)
        if not (m and n):
            return C
        if not k:
            C[...] = 0.0
            return C
        opts, family, fmt = self.options, ops(be), self.format
        if self._deferred is not None:
            work = self._workspace(self._deferred.layout)
            self._last = self._deferred.run(A, B, C, work, phases, _phase)
            return C
        with _phase(be, phases, "split"):
            erow, nnz_rows = family.line_exponents(A, 1, self.target is not None, fmt)
            ecol, nnz_cols = family.line_exponents(B, 0, self.target is not None, fmt)
            slices = self.slices
            if self.target is not None or opts.check_finite:
                ratio = None if self.target is None else ratio_on_device(be, A, B, erow, ecol, nnz_rows, nnz_cols,
                                                                          fmt)
                word = family.verdict(ratio, erow, ecol, self.alpha, self.budget, fmt)
                self._last = word
                count, bad, spread = decode(read_verdict(be, word))
                if bad and opts.check_finite:
                    _refuse(be, erow, ecol)
                if self.target is not None:
                    if not count:
                        raise ValueError(out_of_reach(self.target, self.alpha, spread))
                    slices = count
            lay = self.layout(slices)
            work = self._workspace(lay)
            overwrite_a, overwrite_b = opts.overwrite_a, opts.overwrite_b
            if (overwrite_a or overwrite_b) and be.xp.may_share_memory(A, B):
                overwrite_a = overwrite_b = False            # slicing A in place would change B (matmul(A, A.T))
            p = lay.p
            family.split(A, erow, p, p.m, lay.a_layout, overwrite_a, work["a"], ecol)
            family.split(B.T, ecol, p, p.n_pad, lay.b_layout, overwrite_b, work["b"], erow)
        _products_and_sum(be, lay, work, erow, ecol, C, A, B, phases)
        return C


def _require_output(be: Backend, m: int, n: int) -> None:
    """MemoryPlanError (before any work) where the device cannot give an m x n float64 output now."""
    require_memory(be, 8 * m * n, f"the output of a {m} x {n} product",
                   "pass out= (an array you allocated), or split the product into blocks of rows")


def _output(be: Backend, m: int, n: int) -> Array:
    """A new m x n float64 output (:meth:`gpu.backend.Backend.new_output`: :func:`_require_output` says why where
    it does not fit; on a device it is asked only then, since reading the free memory costs a call tens of us)."""
    return be.new_output((m, n), np.float64, lambda: _require_output(be, m, n))


def _refuse(be: Backend, erow: Array, ecol: Array) -> None:
    """ValueError (``check_finite=True``) naming how many rows of A and columns of B hold NaN or infinity."""
    rows, cols = (int((be.to_numpy(e) == BAD).sum()) for e in (erow, ecol))
    raise ValueError(f"A has NaN or infinity in {rows} rows and B in {cols} columns (check_finite=True); "
                     f"check the input, or pass check_finite=False: {NONFINITE}")


def _products_and_sum(be: Backend, lay: Layout, work: dict[str, Array], erow: Array, ecol: Array, C: Array,
                      A: Array, B: Array, phases: dict[str, float] | None) -> None:
    """The GEMM calls of every chunk, batch by batch, each batch folded into C."""
    p, fmt, family = lay.p, lay.p.format, ops(be)
    buffers = work["buffers"]
    for chunks, diagonals, closes, flags in lay.batches:
        with _phase(be, phases, "gemm"):
            lay.calls.issue(be, work, chunks)
        with _phase(be, phases, "sum"):
            family.fold(buffers, len(chunks), diagonals, closes, p.alpha, C, work.get("comp"), work.get("open"),
                        erow, ecol, flags, A, B, fmt)
