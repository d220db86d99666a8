"""The SMs' read speeds under a full load, measured once per device and process (CuPy only).

:func:`classes` launches ``splitk_sm_speed`` (:mod:`gpu.splitk.bulk_source`): one block per SM, each streaming
its own stretch of a scratch buffer through bulk copies as split-K's bulk kernel does, and reads back each SM's
time: the one synchronisation of this module, at the first balanced split-K plan of a device in a process (a
plan's construction, never a call). :func:`gpu.splitk.sm_classes.classify` makes the classes. Where the scratch
buffer does not fit, or the blocks did not land one per SM, the SMs stay one class and split-K's chunks equal.
"""

from __future__ import annotations

import statistics
from functools import cache

import cupy
import numpy as np

from .compiled import _function, _properties
from .sm_classes import SMClasses, classify

#: Bytes each block reads per pass (48 of the kernel's 32 KiB pieces), passes per launch, and launches: 1.5 MiB
#: per SM, about 200 MB on 132 SMs (over three times the H200's L2), read twice per launch; each SM's median
#: over the launches.
PER_SM, PASSES, LAUNCHES = 48 * 32768, 2, 5
#: The kernel's shared ring (4 pieces of 32 KiB): more than half an SM's shared memory, so one block per SM.
RING = 4 * 32768


@cache
def classes(device: int) -> SMClasses | None:
    """The SM classes of ``device`` (see the module notes), measured on the current stream the first time."""
    sms = _properties(device)["multiProcessorCount"]
    with cupy.cuda.Device(device):
        try:
            seconds, smids = _measure(sms)
        except (cupy.cuda.memory.OutOfMemoryError, cupy.cuda.runtime.CUDARuntimeError):
            return None
    return classify(smids, [PER_SM * PASSES / s for s in seconds])


def _measure(sms: int) -> tuple[list[float], list[int]]:
    """Each SM's median seconds over :data:`LAUNCHES`, and the SMs (one SM with no classes where the blocks did not
    land one per SM in every launch)."""
    kernel = _function("splitk_sm_speed")
    kernel.max_dynamic_shared_size_bytes = RING
    scratch = cupy.cuda.runtime.malloc(sms * PER_SM)
    try:
        out = cupy.empty((LAUNCHES, sms, 2), dtype=np.uint64)
        for i in range(LAUNCHES):
            kernel((sms,), (32,), (np.uint64(scratch), np.int64(PER_SM), np.int32(PASSES), out[i]), shared_mem=RING)
        got = out.get()
    finally:
        cupy.cuda.runtime.free(scratch)
    times: dict[int, list[float]] = {}
    for launch in got:
        if len({int(sm) for sm in launch[:, 0]}) != sms:
            return [1.0], [0]                        # two blocks shared an SM: the device was busy, no classes
        for sm, ns in launch:
            times.setdefault(int(sm), []).append(float(ns) * 1e-9)
    if len(times) != sms:
        return [1.0], [0]
    return [statistics.median(t) for t in times.values()], list(times)
