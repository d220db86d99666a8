"""NaN and infinity in mapped operands, checked once across the workers before any block task runs.

Each block task's engine call checks the panels it is given (``check_finite=True``), so where the
operands are mapped files every worker reads all of B (and its rows of A) before its products: p
workers read B p times. On the two-H200 machine that check was 0.35-0.5 s of a 2.8 s block task at
N = 49152 (A's half and all of B per worker, both workers at once). Here the operands are instead cut
into one band per worker along their contiguous axis, each worker checks its bands (every element read
once, by one worker), and :func:`gpu.multigpu.dask_matmul.submit` waits for the checks and raises
the first error before it sends any block task; the block tasks then run with ``check_finite=False``.
(Block tasks that took the checks as arguments would fetch their results, a few bytes, from the other
workers: transfers between workers that the mapped operands otherwise spare.) C is untouched where a
check fails, as with the engine's own check.
"""

from __future__ import annotations

from distributed import Client, wait

from ..backend import get_backend, require_finite
from ..outofcore.api import NONFINITE
from .mapped import MappedMatrix


def bands(handle: MappedMatrix, count: int) -> list[MappedMatrix]:
    """``handle`` cut into up to ``count`` bands of whole lines along its outer (larger-stride) axis, so
    that each band is one contiguous byte range where the view is."""
    outer = 0 if handle.strides[0] >= handle.strides[1] else 1
    lines = handle.shape[outer]
    cuts = sorted({lines * i // max(1, count) for i in range(count + 1)})
    whole = slice(None)
    return [handle[(slice(a, b), whole) if outer == 0 else (whole, slice(a, b))] for a, b in zip(cuts, cuts[1:])]


def check_band(handle: MappedMatrix, name: str) -> None:
    """ValueError where the band holds NaN or infinity (the engine's own message)."""
    require_finite(get_backend("numpy"), True, {name: handle.open()}, NONFINITE)


def check(client: Client, operands: dict[str, MappedMatrix], workers: list[str], token: str) -> None:
    """Check every band of each operand, band i of each on ``workers[i]``, all at once; raise the error of
    the first operand with NaN or infinity (A's before B's)."""
    futures = [client.submit(check_band, band, name, key=f"outofcore-check-{token}-{name}-{i}",
                             workers=[worker], allow_other_workers=False, pure=False)
               for name, handle in operands.items()
               for i, (band, worker) in enumerate(zip(bands(handle, len(workers)), workers))]
    wait(futures)
    for future in futures:
        future.result()
