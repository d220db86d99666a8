"""What the ``multigpu`` experiment measures: points (N, kind, workers) and the plans of sizes and worker counts.

A **kind** is where the operands are: ``"host"`` (NumPy arrays in the client's memory, multiplied by the Dask
front-end of the out-of-core engine, :mod:`gpu.multigpu.dask_matmul`, C gathered back) or ``"resident"``
(``dask.array``s whose chunks already sit on the workers, on their GPUs with CuPy, multiplied where they are,
:mod:`gpu.multigpu.resident`, C left there). Worker counts above the devices this machine has are left out.

A **protocol** is how the workers talk (:data:`PROTOCOLS`): Dask's TCP, or UCX through distributed-ucxx, which
moves CuPy chunks between GPUs of one host by CUDA IPC (over NVLink where the host has it) rather than through
host sockets. ``"auto"`` takes UCX on GPU workers where distributed-ucxx is installed. A point's parameters name
its protocol where it is not TCP (rows stored before protocols were recorded are TCP's).

A **page-locking strategy** (:data:`LOCKS`, host operands only; a plan may compare several) is the ``lock_pages`` of
:func:`gpu.multigpu.dask_matmul.matmul`: ``stream`` (the library's default since 21d63ff: A and B staged through a
small pinned ring, C's pieces locked beside the products), ``ahead`` (the engine locks every operand's pieces
beside its products; the default before), ``true`` (every range a worker maps is locked whole before its
product), ``reuse`` or ``false``. A host point's parameters name it where it is not ``true`` (the default of the
rows stored before ``ahead`` was).
An **output** (:data:`OUTPUTS`, host operands only) is C's file at the one shot: ``new`` (the default) or
``filled``; parameters name it where it is not new.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from gpu.backend import Backend

from .report import setting

KINDS = ("host", "resident")
PROTOCOLS = ("auto", "tcp", "ucx")
#: Page-locking strategies by name, as ``lock_pages`` takes them.
LOCKS = {"true": True, "reuse": "reuse", "false": False, "ahead": "ahead", "stream": "stream"}
#: Host outputs: C a new file at each point's one shot (its pages first touched by the product), or a file
#: whose pages were filled before it (an output that already exists, or that its user zeroed).
OUTPUTS = ("new", "filled")


@dataclass(frozen=True)
class Point:
    n: int
    kind: str
    workers: int
    protocol: str = "tcp"
    lock: str = "true"
    output: str = "new"

    @property
    def setting(self) -> str:
        """The point's setting as its rows name it (:func:`experiments.multigpu.report.setting`)."""
        return setting(self.kind, self.protocol, self.lock, self.output)


@dataclass(frozen=True)
class Plan:
    sizes: tuple[int, ...]
    workers: tuple[int, ...]
    kinds: tuple[str, ...] = KINDS
    protocol: str = "tcp"
    locks: tuple[str, ...] = ("stream",)
    outputs: tuple[str, ...] = ("new",)

    def __post_init__(self) -> None:
        if not self.sizes or any(n < 1 for n in self.sizes):
            raise ValueError(f"sizes must be positive N, got {list(self.sizes)}")
        if not self.workers or any(w < 1 for w in self.workers):
            raise ValueError(f"worker counts must be positive, got {list(self.workers)}")
        unknown = sorted(set(self.kinds) - set(KINDS))
        if unknown or not self.kinds:
            raise ValueError(f"kinds must be some of {', '.join(KINDS)}, got {list(self.kinds)}")
        if self.protocol not in PROTOCOLS[1:]:
            raise ValueError(f"protocol must be one of {', '.join(PROTOCOLS)}, got {self.protocol!r}")
        wrong = [lock for lock in self.locks if lock not in LOCKS]
        if wrong or not self.locks:
            raise ValueError(f"lock_pages must be some of {', '.join(LOCKS)}, got {list(self.locks)}")
        if not self.outputs or set(self.outputs) - set(OUTPUTS):
            raise ValueError(f"outputs must be some of {', '.join(OUTPUTS)}, got {list(self.outputs)}")

    def points(self) -> list[Point]:
        """Every point, each size's and kind's one-worker points first (the baseline of its speed-ups), host
        operands' outputs and page-locking strategies side by side per worker count."""
        return [Point(n, kind, w, self.protocol, lock, output) for n in self.sizes for kind in self.kinds
                for w in sorted(set(self.workers)) for output in (self.outputs if kind == "host" else ("new",))
                for lock in (self.locks if kind == "host" else ("true",))]


#: Plans by (backend, quick): the issue's N = 65536 on up to 4 GPUs; a small product on CPU workers.
PLANS = {("cupy", False): Plan((65536,), (1, 2, 4)), ("cupy", True): Plan((16384,), (1, 2)),
         ("numpy", False): Plan((512,), (1, 2)), ("numpy", True): Plan((256,), (1, 2))}


def devices(backend: Backend) -> int | None:
    """How many GPUs this machine has (None on the CPU, where workers are threads and any count runs)."""
    if backend.name != "cupy":
        return None
    return int(backend.xp.cuda.runtime.getDeviceCount())


def fitting(backend: Backend, plan: Plan) -> tuple[list[Point], list[str]]:
    """The plan's points whose worker count this machine has, and why each other count is left out (all of them on
    a machine of one GPU: a speed-up needs two)."""
    have = devices(backend)
    if have is not None and have < 2:
        return [], [f"every point: this machine has {have} GPU, nothing to spread a product over"]
    kept = [p for p in plan.points() if have is None or p.workers <= have]
    out = sorted({p.workers for p in plan.points()} - {p.workers for p in kept})
    return kept, [f"{w} workers: this machine has {have} GPUs" for w in out]


def protocol(backend: Backend, asked: str) -> str:
    """The protocol a run takes (``asked`` one of :data:`PROTOCOLS`; see the module), or ValueError where UCX is
    asked for and distributed-ucxx is not installed or the workers are not GPU workers."""
    have = backend.name == "cupy" and importlib.util.find_spec("distributed_ucxx") is not None
    if asked == "ucx" and not have:
        raise ValueError("protocol 'ucx' needs GPU workers (--backend cupy) and distributed-ucxx "
                         "(pip install distributed-ucxx-cu13); pass --protocol tcp")
    if asked not in PROTOCOLS:
        raise ValueError(f"protocol must be one of {', '.join(PROTOCOLS)}, got {asked!r}")
    return "ucx" if asked == "ucx" or (asked == "auto" and have) else "tcp"


def point_params(point: Point, regime: str) -> dict[str, object]:
    params: dict[str, object] = {"n": point.n, "kind": point.kind, "workers": point.workers, "regime": regime}
    if point.protocol != "tcp":
        params["protocol"] = point.protocol
    if point.lock != "true":
        params["lock_pages"] = point.lock
    if point.output != "new":
        params["output"] = point.output
    return params
