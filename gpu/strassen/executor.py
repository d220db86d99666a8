"""One executor for every Strassen-Winograd schedule, on any backend, to any level.

It reads the schedule table: additions become ``geam`` on quadrant views,
products recurse (``gemm`` at level 0), temporaries are allocated per call
under the backend's allocation policy, supports chosen by the liveness
analysis are lent to the level below, and on several streams the waits come
from the hazard analysis (events only, no device-wide synchronisation).
With ``fused``, runs of additions on one stream become one generated kernel
(see :mod:`gpu.strassen.fusion`); with ``flat``, a top-level call runs all its levels as three
generated passes and 7^L GEMMs (:mod:`gpu.strassen.flat`). With an ``arena`` every scratch buffer (temporaries,
protective copies, support quadrants) is kept in a slot named by its depth, its name and
the stream it serves: made on the first pass, handed out again on every later pass and
shared by sibling calls at one depth on one stream (they run one after another), so the
arena holds what an eager product's peak holds, and a CUDA graph capture, which may not
allocate, finds every buffer made (:mod:`gpu.strassen.graphs`). After :meth:`Executor.begin` the stream a
product is issued from is its *home*, whatever stream that is: an eager pass on the caller's stream and a
capture on the backend's capture stream then use the same slots, so a plan's eager runs and its graphs
share one workspace.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..backend import Array, Backend
from . import flat, hazards
from .fusion import groups
from .liveness import protected, supports
from .schedules import Schedule, resolve


def quadrants(M: Array, prefix: str) -> dict[str, Array]:
    """The four quadrant views of an even-sized matrix, named ``prefix11`` .. ``prefix22``."""
    h, w = M.shape[0] // 2, M.shape[1] // 2
    return {f"{prefix}11": M[:h, :w], f"{prefix}12": M[:h, w:],
            f"{prefix}21": M[h:, :w], f"{prefix}22": M[h:, w:]}


#: Side streams by (backend, levels left, stream number), made once per process and shared by the
#: calls at one depth: a stream that issues cuBLAS calls keeps a handle and a 32 MiB workspace
#: (gpu.backend.stream_blas), so their number must stay small (at most 6 per depth), not grow with
#: the calls (a 7-stream schedule at 4 levels would make thousands).
_SIDE_STREAMS: dict[tuple[int, int, int], Any] = {}


class Executor:
    """Runs schedules recursively (or flat); one instance per (backend, parallel, fused, flat) choice."""

    def __init__(self, backend: Backend, *, parallel: bool = False, fused: bool = False,
                 arena: dict[tuple, Array] | None = None, flat: bool = False) -> None:
        self.backend = backend
        self.parallel = parallel
        self.fused = fused
        self.arena = arena
        self.flat = flat
        self._home: Any = None

    def begin(self) -> None:
        """Make the current stream this product's home (see the module notes)."""
        self._home = getattr(self.backend.current_stream(), "ptr", 0)

    def buffer(self, shape: tuple[int, ...], dtype: Any, slot: tuple) -> Array:
        """A scratch buffer: a new one, or with an arena the one of ``slot`` on the current stream
        (see the module notes)."""
        if self.arena is None:
            return self.backend.xp.empty(shape, dtype=dtype)
        ptr = getattr(self.backend.current_stream(), "ptr", 0)
        key = (*slot, 0 if ptr == self._home else ptr)
        buf = self.arena.get(key)
        if buf is None:
            buf = self.arena[key] = self.backend.xp.empty(shape, dtype=dtype)
        elif buf.shape != tuple(shape) or buf.dtype != dtype:
            raise RuntimeError(f"arena slot {key} holds {buf.shape} {buf.dtype}, asked for {shape} {dtype}")
        return buf

    def copy(self, x: Array, slot: tuple) -> Array:
        """A scratch copy of ``x`` (by the backend's GEAM: no allocation beyond the buffer)."""
        y = self.buffer(x.shape, x.dtype, slot)
        self.backend.geam(1.0, x, 0.0, x, y)
        return y

    def multiply(self, name: str, A: Array, B: Array, C: Array, levels: int,
                 support: Array | Mapping[str, Array] | None = None, top: bool = True) -> None:
        """``C = A @ B`` by ``levels`` levels of schedule ``name``.

        ``support``: for schedules that take one, either a matrix the size of A
        (its quadrants become S11..S22) or a mapping of the four support
        quadrants (at the top level, the aliased input quadrants).
        """
        if levels == 0:
            self.backend.gemm(A, B, C)
            return
        if self.flat and top:
            flat.multiply(self.backend, name, A, B, C, levels, self.buffer)
            return
        schedule = resolve(name, levels)
        spaces = {**quadrants(A, "A"), **quadrants(B, "B"), **quadrants(C, "C")}
        if schedule.support:
            spaces.update(support if isinstance(support, Mapping) else quadrants(support, "S"))
        h, w = A.shape[0] // 2, A.shape[1] // 2
        temps = {t: self.buffer((h, w), A.dtype, (levels, t)) for t in schedule.temporaries}
        spaces.update(temps)
        self._run(schedule, spaces, levels, self._active_aliases(schedule, spaces) if top else frozenset())
        del temps

    def _active_aliases(self, schedule: Schedule, spaces: dict[str, Array]) -> frozenset[str]:
        """Support quadrants that really are the input quadrants they may alias."""
        lay = self.backend.layout
        return frozenset(s for s, target in schedule.aliases.items()
                         if lay(spaces[s]) == lay(spaces[target]))

    def _run(self, schedule: Schedule, spaces: dict[str, Array], levels: int,
             aliases: frozenset[str]) -> None:
        lent = supports(schedule.name)
        guard = protected(schedule.name, levels) if levels > 1 else {}
        below = schedule.products_schedule
        lends = resolve(below, levels - 1).support if levels > 1 else False
        many = self.parallel and len(schedule.streams) > 1
        plan = hazards.plan(schedule.name, aliased=bool(aliases)) if many else None
        caller = self.backend.current_stream()
        streams = {k: self._stream(caller, levels, k) for k in schedule.streams} if many else {}
        if many:
            fork = caller.record()
            for k, stream in streams.items():
                if k != 1:
                    stream.wait_event(fork)
        events: dict[int, Any] = {}
        fused_backend = self.backend if self.fused else None
        for group in groups(schedule, plan, aliases=aliases, backend=fused_backend):
            stream = streams.get(group.stream, caller)
            for j in group.waits:
                stream.wait_event(events[j])
            with stream:
                if group.kernel is not None:
                    group.kernel(*(spaces[s] for s in group.arguments))
                else:
                    for i in group.steps:
                        self._step(schedule.steps[i], i, spaces, lent, below, lends, levels, guard.get(i, ()))
            if group.recorded:
                event = stream.record()
                events.update({i: event for i in group.steps})
        if many:
            for j in plan.join:
                caller.wait_event(events[j - 1])

    def _step(self, step, index: int, spaces: dict[str, Array], lent: dict[int, str], below: str,
              lends: bool, levels: int, guard: tuple[str, ...] = ()) -> None:
        dst, a = spaces[step.dst], spaces[step.a]
        if step.op == "*":
            sup = spaces[lent[index]] if lends else None
            b = spaces[step.b]
            a, b = (self.copy(x, (levels, "copy", role)) if role in guard else x for role, x in (("A", a), ("B", b)))
            self.multiply(below, a, b, dst, levels - 1, sup, top=False)
        elif step.op == "copy":
            self.backend.geam(1.0, a, 0.0, a, dst)
        else:
            self.backend.geam(1.0, a, 1.0 if step.op == "+" else -1.0, spaces[step.b], dst)

    def _stream(self, caller, levels: int, k: int):
        """Stream ``k`` of a call issued from ``caller`` at a depth (``levels`` left): stream 1 is
        the caller itself; side streams are not shared between depths, so a nested call's
        work does not queue behind its parent's. Calls at one depth share them: a call joins
        its side streams back to its caller before it returns, so the next call's work on a
        shared stream never meets a buffer the previous one still uses."""
        if k == 1:
            return caller
        key = (id(self.backend), levels, k)
        if key not in _SIDE_STREAMS:
            _SIDE_STREAMS[key] = self.backend.stream()
        return _SIDE_STREAMS[key]

