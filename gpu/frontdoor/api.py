"""``gpu.matmul`` and ``gpu.plan``: one front door that runs the fastest method keeping the caller's accuracy.

``matmul(A, B, accuracy="dgemm")`` is a kept :class:`gpu.frontdoor.frontplan.Plan` plus its execution: the plan of
the call's signature (backend, device, stream, shapes, strides, dtypes, writeability of A, B and ``out``, the
accuracy and ``deterministic``) comes from a bounded cache safe across threads (:data:`PLANS`), so a loop of
calls ranks and plans once; a device profile written since (``gemmlab calibrate``) frees them, so that the next
call ranks on the new tables. ``plan(A, B, ...)`` builds one to keep, run with ``execute`` and ask ``explain()``.

Accuracy (:mod:`gpu.frontdoor.contract`): ``"dgemm"`` (the default) is the library GEMM's bound gamma_k per
row of A and column of B; ``"sgemm"`` and a number t in (0, 1) are bounds over the whole matrix
(t k max|A| max|B|); ``Accuracy(level, scale=...)`` asks for a finer scale. Only proven bounds count: so
Strassen runs only under ``"sgemm"`` or a number its bound meets, Ozaki scheme II under ``"dgemm"`` with the
count its normwise bound picks, and ``"exact"`` is the correctly rounded product of
``accuracy.reference.exact_matmul`` alone (which registers itself here when ``accuracy`` is imported).
The candidates' times come from this device's profile (its ``configurations`` and ``methods`` sections, the
user's own first, then the one bundled for the H100 or H200); where none was measured the library GEMM runs.
"""

from __future__ import annotations

from typing import Any

from ..backend import Array, Backend, get_backend
from ..backend.checks import gemm_operands
from ..backend.plans import PlanCache, operand_signature
from ..profile import ProfileWatch
from ..zgemm.api import is_complex
from .complexmm import refuse_memory
from .contract import as_accuracy
from .frontplan import Plan
from .routes import dask_product, host_route, is_dask

#: The plans ``matmul`` keeps, by signature, accuracy and ``deterministic`` (least recently used freed first).
PLANS = PlanCache()
#: Per backend, the device profile's stamp when the kept plans were ranked (:class:`gpu.profile.ProfileWatch`).
_WATCHES: dict[str, ProfileWatch] = {}


def _fresh(be: Backend) -> None:
    """Free the kept plans where the device profile changed since they were ranked (this process calibrated, or
    the file is newer after :data:`gpu.profile.STAMP_TTL_S`): the next call of each signature ranks again."""
    watch = _WATCHES.get(be.name)
    if watch is None:
        _WATCHES[be.name] = ProfileWatch(be)
    elif watch.changed():
        PLANS.clear()


def plan(A: Any, B: Any, *, out: Any = None, accuracy: Any = "dgemm", deterministic: bool = False,
         memory: Any = None, backend: str | Backend = "auto", stream: Any = None) -> Plan:
    """The front door's plan for (A, B, ``out``): see :class:`gpu.frontdoor.frontplan.Plan` (``explain()`` says what it
    chose and why). Raises TypeError or ValueError for bad operands or accuracy, and ValueError where no method
    keeps the accuracy on this shape, naming each reason; all before any work."""
    return Plan(A, B, out=out, accuracy=accuracy, deterministic=deterministic, memory=memory, backend=backend,
                stream=stream)


def matmul(A: Any, B: Any, *, accuracy: Any = "dgemm", out: Any = None, deterministic: bool = False,
           memory: Any = None, client: Any = None, backend: str | Backend = "auto") -> Array:
    """``A @ B`` in float64 by the fastest method that keeps ``accuracy`` on this device (see the module notes):
    into ``out`` where given, else a new array. ``deterministic=True`` leaves out methods whose bits may change
    between runs (split-K's atomic additions). ``memory``: the bytes of device memory the product may take; host
    (NumPy) operands whose A, B and C need more than that (by default: more than the device has free) stream
    through the out-of-core engine and C comes back in host memory (:mod:`gpu.frontdoor.routes`). ``client``, or
    ``dask.array`` operands: the product runs on a Dask cluster's workers (the current client where none is
    given). Both routes sum with the library GEMM and wait for the device."""
    if client is not None:
        return dask_product(A, B, out, client, as_accuracy(accuracy), backend)
    be = get_backend(backend)
    key = operand_signature(be, A, B, out)
    if key is None and (is_dask(A) or is_dask(B)):  # a backend's own arrays (the kept plans' calls) are no Dask's
        return dask_product(A, B, out, client, as_accuracy(accuracy), backend)
    if memory is not None and is_complex(A, B):
        refuse_memory(memory)
    if (key is None or memory is not None) and host_route(be, A, B, out, memory):
        want = as_accuracy(accuracy)
        host = ("outofcore", operand_signature(get_backend("numpy"), A, B, out), want, memory)
        return PLANS.get(host, lambda: Plan(A, B, out=out, accuracy=want, memory=memory, backend=be))._execute(
            A, B, out)
    if key is None:                                  # array-likes: converted once, then planned like arrays
        A, B, out = gemm_operands(be, A, B, out)
        key = operand_signature(be, A, B, out)
    want = as_accuracy(accuracy)
    _fresh(be)
    chosen = PLANS.get((key, want, deterministic), lambda: Plan(A, B, out=out, accuracy=want,
                                                                deterministic=deterministic, backend=be))
    return chosen._execute(A, B, out)
