"""Plans: what a product decides once per operand signature, executed many times (after nvmath-python's ``Matmul``).

A family's plan is built for an **operand signature**: the backend, the device, the stream, the shapes, dtypes,
strides and writeability of A, B and ``out``, and the options. Building it runs every check that depends on
the signature alone and makes every decision (the configuration, the kernels, the workspace, where one is
used a CUDA graph); :meth:`MatmulPlan.execute` then does only the per-call work on the plan's stream, with
no wait for the device. The pattern::

    with strassen.Plan(A, B, options=strassen.Options(level=2)) as plan:
        for A, B in pairs:
            C = plan.execute(A, B)

Each family's stateless ``matmul`` is a plan from a bounded, thread-safe :class:`PlanCache` plus ``execute``,
so a loop of calls pays for the decisions once. A plan holds device memory (its workspace, its graphs) until
:meth:`MatmulPlan.free` or the end of its ``with`` block; the cache frees what it evicts.

Options are a frozen dataclass per family (:func:`resolve_options` accepts one, a dict of its fields, or
keywords), so that a long keyword list is one object that can be kept, compared and printed.
"""

from __future__ import annotations

import abc
import dataclasses
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from .checks import MemoryPlanError, check_output, require_memory
from .interface import Array, Backend

#: Plans a family's ``matmul`` keeps, least recently used evicted first.
MAX_PLANS = 64

O = TypeVar("O")


def resolve_options(kind: type[O], options: Any = None, **given: Any) -> O:
    """``options`` as a ``kind`` dataclass: an instance, a dict of its fields, or None (the defaults), with
    ``given`` keywords (those not None) replacing fields; TypeError naming an unknown field."""
    if options is None:
        base = kind()
    elif isinstance(options, kind):
        base = options
    elif isinstance(options, dict):
        base = _build(kind, options)
    else:
        raise TypeError(f"options must be a {kind.__name__}, a dict of its fields or None, got "
                        f"{type(options).__name__}")
    given = {name: value for name, value in given.items() if value is not None}
    return dataclasses.replace(base, **given) if given else base


def _build(kind: type[O], fields: dict[str, Any]) -> O:
    known = {f.name for f in dataclasses.fields(kind)}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise TypeError(f"{kind.__name__} has no option {', '.join(map(repr, unknown))}; its options are "
                        f"{', '.join(sorted(known))}")
    return kind(**fields)


def library_product(be: Backend, A: Array, B: Array, out: Array | None,
                    output: tuple[int, str, str]) -> Callable[[Array, Array, Array | None], Array]:
    """The library GEMM as a plan's product ``(A, B, out) -> C``, checked once for the signature of (A, B, ``out``):
    into ``out`` by a :class:`gpu.backend.calls.GemmCall` (an ``out`` that overlaps A or B refused in the
    caller's terms, :func:`gpu.backend.check_output`'s); without ``out`` by the backend's
    :meth:`~gpu.backend.Backend.product_call` into a new C, whose memory check (``output``: the bytes, what and
    advice of :func:`gpu.backend.require_memory`) says why where C does not fit."""
    if out is None:
        return be.product_call(A, B, lambda: require_memory(be, *output))
    call, shape, dtype = be.gemm_call(A, B, out), out.shape, out.dtype

    def into(A: Array, B: Array, out: Array) -> Array:
        try:
            call(A, B, out)
        except ValueError:
            check_output(be, out, shape, dtype, {"A": A, "B": B})     # names the overlap
            raise
        return out
    return into


def operand_signature(be: Backend, A: Any, B: Any, out: Any = None, stream: Any = None) -> tuple | None:
    """The signature of (A, B, out) on ``be``: shapes, strides, dtypes, writeability, device and stream; None
    where an operand is not a plain array of ``be`` (such a call converts it first and is not kept). Asked on
    every call of a family's ``matmul``: each attribute is read once, through the backend's cheapest way."""
    array = be.xp.ndarray
    if type(A) is not array or type(B) is not array or (out is not None and type(out) is not array):
        return None
    w = be._writeable
    given = (None,) if out is None else (out.shape, out.strides, out.dtype, w(out))
    return (be.name, be.device_key(A), be.stream_key(stream), A.shape, A.strides, A.dtype, w(A),
            B.shape, B.strides, B.dtype, w(B), *given)


class PlanMismatch(ValueError):
    """Operands given to :meth:`MatmulPlan.execute` that differ from the signature the plan was built for."""


class MatmulPlan(abc.ABC):
    """The base of every family's plan: built for one operand signature (see the module), executed per call.

    Subclasses set :attr:`signature` (from :func:`operand_signature`) and implement :meth:`_execute`;
    :meth:`free` releases what the plan holds (override :meth:`_release`)."""

    backend: Backend
    signature: tuple | None
    stream: Any = None

    def execute(self, A: Array, B: Array, out: Array | None = None, *, stream: Any = None, **per_call: Any) -> Array:
        """``A @ B`` (or the family's product) by this plan, on ``stream`` (default: the plan's stream, else
        the current one): only the per-call work. PlanMismatch where the operands differ from the plan's.
        ``per_call``: a family's per-call arguments (split-K's alpha and beta), passed to :meth:`_execute`."""
        if self.signature is None:
            raise ValueError("this plan was freed; build a new one")
        if stream is None:
            stream = self.stream
        got = operand_signature(self.backend, A, B, out, stream)
        if got != self.signature:
            raise PlanMismatch(self._mismatch(got))
        if stream is None:
            return self._execute(A, B, out, **per_call)
        with stream:
            return self._execute(A, B, out, **per_call)

    @abc.abstractmethod
    def _execute(self, A: Array, B: Array, out: Array | None) -> Array:
        """The per-call work, on the current stream, for operands of the plan's signature."""

    def free(self) -> None:
        """Release the plan's workspace and graphs; the plan cannot execute afterwards."""
        self._release()
        self.signature = None

    def _release(self) -> None:
        """Drop what the plan holds (subclasses with workspace or graphs override this)."""
        return None

    def __enter__(self) -> MatmulPlan:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.free()

    def _mismatch(self, got: tuple | None) -> str:
        if got is None:
            return "execute takes plain arrays of the plan's backend (and out= where the plan was built with one)"
        names = ("backend", "device", "stream", "A's shape", "A's strides", "A's dtype", "A's writeability",
                 "B's shape", "B's strides", "B's dtype", "B's writeability", "out")
        wrong = [name for name, a, b in zip(names, got, self.signature) if a != b]
        if len(got) != len(self.signature):
            wrong.append("out")
        return (f"these operands differ from the plan's in {', '.join(dict.fromkeys(wrong))}; build a plan for "
                f"them, or call the family's matmul, which keeps a plan per signature")


P = TypeVar("P", bound=MatmulPlan)


class PlanCache:
    """At most ``size`` plans by key, least recently used freed first; safe across threads. A plan is built
    outside the lock (building may compile kernels), so two threads may build the same key at once: the
    second one's plan is kept, the first one's is still returned to its caller and used once.

    The most recently used key and its plan are kept aside as well (:attr:`_last`): a loop of calls of one
    signature then finds its plan by one comparison of keys, with no hash of the key and no reordering (it is
    the newest entry already). That is most of the lookup's host time: 1.0 us of a 20 us call at N = 512 on the
    H200's host (``results/published/h200/h200-host-parts.json``)."""

    def __init__(self, size: int = MAX_PLANS) -> None:
        self.size = size
        self._plans: OrderedDict[Hashable, MatmulPlan] = OrderedDict()
        self._last: tuple[Hashable, MatmulPlan] | None = None
        self._lock = threading.Lock()
        _CACHES.add(self)

    def get(self, key: Hashable | None, build: Callable[[], P]) -> P:
        """The kept plan of ``key``, else ``build()`` (kept where ``key`` is not None, hashes and compares with the
        last key without raising; an unhashable key equal to the last one gets the last one's plan). A build refused
        for memory (:class:`MemoryPlanError`) is tried once more after the kept plans of every family are freed:
        the toolkit's own caches never refuse a caller's product."""
        if key is None:
            return build()
        last = self._last                              # one read: another thread may replace it meanwhile
        try:
            if last is not None and last[0] == key:
                return last[1]
            plan = self._plans.get(key)                # one dict read under the GIL, no lock
        except (TypeError, ValueError):                # an option that is no key (an array's == is elementwise)
            return build()
        if plan is not None:
            with self._lock:                           # only where the key differs from the last one
                if self._plans.get(key) is plan:       # not evicted or cleared meanwhile (then freed: run once)
                    self._plans.move_to_end(key)
                    self._last = (key, plan)
            return plan
        plan = freeing_kept_plans(build)
        evicted = []
        with self._lock:
            self._plans[key] = plan
            while len(self._plans) > self.size:
                evicted.append(self._plans.popitem(last=False)[1])
            self._last = (key, plan)
        for old in evicted:
            old.free()
        return plan

    def __len__(self) -> int:
        return len(self._plans)

    def clear(self, keep: tuple[MatmulPlan, ...] = ()) -> int:
        """Free and drop every kept plan but those of ``keep``; how many were freed."""
        with self._lock:
            held, self._last = self._plans, None
            self._plans = OrderedDict((k, p) for k, p in held.items() if any(p is q for q in keep))
            plans = [p for p in held.values() if not any(p is q for q in keep)]
        for plan in plans:
            plan.free()
        return len(plans)


_CACHES: weakref.WeakSet[PlanCache] = weakref.WeakSet()


def free_kept_plans(keep: tuple[MatmulPlan, ...] = ()) -> int:
    """Free the plans every family's ``matmul`` keeps (their workspaces, graphs and kernels' buffers), but those
    of ``keep``: the device memory they hold returns to the pool, and the next call of each signature plans
    again. Returns how many were freed."""
    return sum(cache.clear(keep) for cache in list(_CACHES))


def freeing_kept_plans(run: Callable[..., O], *args: Any, keep: tuple[MatmulPlan, ...] = ()) -> O:
    """``run(*args)``; where it raises :class:`MemoryPlanError` (refused before any work), once more after
    :func:`free_kept_plans` (but ``keep``), whose workspaces may be what held the memory; the error stands where
    no plan was kept. (The arguments are passed on, so that a per-call caller builds no ``partial``.)"""
    try:
        return run(*args)
    except MemoryPlanError:
        if not free_kept_plans(keep):
            raise
    return run(*args)

