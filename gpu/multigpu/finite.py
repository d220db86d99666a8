"""NaN and infinity in mapped operands, checked once across the workers, beside the block products.

Each block task's engine call could check the panels it is given (``check_finite=True``), but where the
operands are mapped files every worker would then read all of B (and its rows of A): p workers read B p
times. On the two-H200 machine that check was 0.35-0.5 s of a 2.8 s block task at N = 49152 (A's half and
all of B per worker, both workers at once). Here the operands are instead cut into one band per worker along
their contiguous axis, and each worker checks its bands (every element read once, by one worker): 0.14 s per
worker at N = 32768 and 0.29 s at 49152 there. The checks and the block tasks are sent together, so the
checks run beside the first products instead of before them (each check leaves its worker's thread pool, so
that the worker's block task starts beside it). Each block task's engine runs with
``check_finite=False`` and a gate (``before_write``, :func:`verdict`) that waits for the client's verdict
before the engine writes its first byte of C. :func:`settle` waits for the checks, publishes the verdict (a
``distributed.Variable``: "" where every band is finite, else the first error; and an ``Event`` set once it is
there) and raises that error; every block task then stops at its gate (one that had not started runs up to
its first write, at most one engine block of work). C is untouched where a check fails, as with the engine's
own check. (Block tasks that took the checks as arguments would wait for them, and fetch their results, a few
bytes, from the other workers: transfers between workers that the mapped operands otherwise spare.)
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable

from distributed import Client, Event, Future, Variable, secede, wait

from ..backend import get_backend, require_finite
from ..outofcore.api import NONFINITE
from .mapped import MappedMatrix

#: Priority of the check tasks over the block tasks (0) on their workers.
CHECK_PRIORITY = 1
#: Seconds a block task waits at its gate for the verdict before it gives up (the client that was to
#: publish it has gone): far beyond a check of all the host memory there is.
GATE_TIMEOUT = 600.0


def bands(handle: MappedMatrix, count: int) -> list[MappedMatrix]:
    """``handle`` cut into up to ``count`` bands of whole lines along its outer (larger-stride) axis, so
    that each band is one contiguous byte range where the view is."""
    outer = 0 if handle.strides[0] >= handle.strides[1] else 1
    lines = handle.shape[outer]
    cuts = sorted({lines * i // max(1, count) for i in range(count + 1)})
    whole = slice(None)
    return [handle[(slice(a, b), whole) if outer == 0 else (whole, slice(a, b))] for a, b in zip(cuts, cuts[1:])]


def check_band(handle: MappedMatrix, name: str) -> None:
    """ValueError where the band holds NaN or infinity (the engine's own message). The task leaves its
    worker's thread pool at once (``secede``), so that the worker's block task starts beside it."""
    secede()
    require_finite(get_backend("numpy"), True, {name: handle.open()}, NONFINITE)


def start(client: Client, operands: dict[str, MappedMatrix], workers: list[str], token: str) -> list[Future]:
    """Send the check of every band of each operand, band i of each to ``workers[i]``; not waiting. They are
    sent before the block tasks and with a higher priority, so that a worker starts its checks first (each
    then leaves the pool, :func:`check_band`): a block task waiting for the engine lock holds its thread."""
    return [client.submit(check_band, band, name, key=f"outofcore-check-{token}-{name}-{i}",
                          workers=[worker], allow_other_workers=False, pure=False, priority=CHECK_PRIORITY)
            for name, handle in operands.items()
            for i, (band, worker) in enumerate(zip(bands(handle, len(workers)), workers))]


def _name(token: str) -> str:
    return f"outofcore-finite-{token}"


def _published(token: str) -> str:
    return f"outofcore-published-{token}"


def gate(token: str) -> Callable[[], None]:
    """The block tasks' ``before_write``: :func:`verdict` of the checks ``token`` names (picklable)."""
    return functools.partial(verdict, token)


def verdict(token: str) -> None:
    """On a worker: wait for the client's verdict on the checks ``token`` names; raise where one failed.
    A verdict not published yet (its event not set) is waited for out of the worker's thread pool
    (``secede``), so that checks queued there (of this product, or of another one running at once) run
    meanwhile; only the task holding the engine lock reaches this gate, so at most one task per process
    leaves the pool at a time."""
    published = Event(_published(token))
    if not published.is_set():
        secede()
        if not published.wait(GATE_TIMEOUT):
            raise TimeoutError(f"no verdict on the finite checks within {GATE_TIMEOUT:.0f} s (the client that was "
                               "to publish it has gone): C was not written; run the product again")
    text = Variable(_name(token)).get(timeout=GATE_TIMEOUT)
    if text:
        raise ValueError(f"stopped before writing C: the finite check of the operands failed ({text})")


def settle(client: Client, checks: list[Future], token: str, blocks: list[Future]) -> None:
    """Wait for the checks and publish their verdict to the ``blocks``' gates; raise the error of a failed
    one (A's before B's). The blocks are not cancelled (a cancelled block may still be running on its worker,
    short of its gate): each runs to its gate and fails there, its C block unwritten. The verdict is deleted
    once every block is done (counted from its publication: a block that failed before its gate is done
    already, and the verdict must not be deleted before it is set)."""
    error: BaseException | None = None
    try:
        wait(checks)
        error = next((_failure(f) for f in checks if f.status != "finished"), None)
    except BaseException as interrupted:
        error = interrupted
    Variable(_name(token), client=client).set("" if error is None else f"{type(error).__name__}: {error}")
    Event(_published(token), client=client).set()
    _forget_when_done(client, blocks, token)
    if error is not None:
        raise error


def _failure(check: Future) -> BaseException:
    """A check that did not finish: its error, or why it has none (cancelled, lost with its worker)."""
    if check.status == "error":
        return check.exception()
    return RuntimeError(f"the finite check {check.key} ended {check.status}, unchecked; run the product again")


def _forget_when_done(client: Client, blocks: list[Future], token: str) -> None:
    """Delete the verdict once every block is done; the blocks are held until then, so that none is
    released (and cancelled) while its task may still wait for the verdict."""
    held, lock = list(blocks), threading.Lock()
    left = [len(held)]

    def done(_: Future) -> None:
        with lock:
            left[0] -= 1
            last = left[0] == 0
        if last:
            Variable(_name(token), client=client).delete()
            Event(_published(token), client=client).clear()
            held.clear()

    for block in held:
        block.add_done_callback(done)
