"""How many library GEMMs can run at once on separate streams (Otsuka 2020).

Concurrency is limited by registers. For one GEMM call the profiler reports
its threads n_th and registers per thread r_th; with r_max registers per SM
and SM_max SMs (Otsuka & Iguchi 2020, its stream-concurrency model):

    threads per SM      n_th_SM = r_max / r_th
    SMs used by a call  n_SM    = n_th / n_th_SM
    predicted streams   P_theo  = SM_max / n_SM     (1 if below 1; at most 7)

At most 7 because one Strassen level has 7 products to run side by side.
"""

from __future__ import annotations

import math

#: Products of one Strassen-Winograd level: no more streams than this can be busy.
MAX_STREAMS = 7


def sms_per_call(threads: int, registers_per_thread: int, registers_per_sm: int) -> float:
    """SMs one GEMM call fills when registers are the limit: n_th / (r_max / r_th)."""
    for name, v in (("threads", threads), ("registers_per_thread", registers_per_thread),
                    ("registers_per_sm", registers_per_sm)):
        if v <= 0:
            raise ValueError(f"{name} must be positive, got {v}")
    return threads / (registers_per_sm / registers_per_thread)


def concurrent_streams(threads: int, registers_per_thread: int, registers_per_sm: int, sm_count: int,
                       max_streams: int = MAX_STREAMS) -> int:
    """P_theo: how many such calls fit on the GPU at once, from 1 to ``max_streams``."""
    if sm_count <= 0 or max_streams < 1:
        raise ValueError(f"need sm_count > 0 and max_streams >= 1, got {sm_count} and {max_streams}")
    fit = sm_count / sms_per_call(threads, registers_per_thread, registers_per_sm)
    return int(min(max_streams, max(1, math.floor(fit))))
