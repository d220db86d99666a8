"""The rates an out-of-core plan is sized by, measured once per device and kept in its profile.

:func:`gpu.outofcore.plan.plan` chooses block and panel together where it knows the link's rate, the
GEMM's and HBM's (:func:`gpu.outofcore.plan.predict`). :func:`measure` times them on the backend's
device through the engine's own operations (``ops.rates``: pinned-to-device copies each way, a device
copy, a large GEMM; on NumPy the host's memory copies and BLAS), and :func:`save` writes them into the
device profile (:mod:`gpu.profile`, section :data:`SECTION`) beside the level tables, which
``gemmlab calibrate`` keeps when it rewrites them. :func:`gpu.outofcore.matmul` reads them from there
(:func:`from_profile`) unless the caller passes rates of its own.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..backend import Backend
from ..profile import FORMAT, VERSION, backend_profile, device_name, save_profile
from .ops import FAMILY

#: The profile's section holding the rates.
SECTION = "transfer"
#: The plan's rate arguments, in the order :func:`gpu.outofcore.plan.plan` takes them.
RATES = ("link_bytes_per_s", "gemm_flops_per_s", "hbm_bytes_per_s")
#: Bytes each copy of :func:`measure` moves, and the side of its GEMM.
COPY_BYTES, GEMM_SIDE = 2**30, 8192


def measure(backend: Backend, nbytes: int | None = None, side: int | None = None, reps: int = 5) -> dict[str, float]:
    """Median rates of ``reps`` timings on ``backend``'s device: ``h2d`` and ``d2h`` (pinned host memory
    to and from the device, bytes/s), ``staging`` (a panel of a pageable row-major matrix into pinned
    memory by the engine's staging threads), ``link_bytes_per_s`` (:func:`link_rate`: a panel's way from
    a host view to the device), ``hbm_bytes_per_s`` (a device copy: bytes read plus written per second) and
    ``gemm_flops_per_s`` (a ``side``-square GEMM; defaults :data:`COPY_BYTES` and :data:`GEMM_SIDE`)."""
    rates = backend.ops(FAMILY).rates(nbytes or COPY_BYTES, side or GEMM_SIDE, reps)
    return {**rates, "link_bytes_per_s": link_rate(rates)}


def link_rate(rates: dict[str, float]) -> float:
    """Bytes/s of a panel's whole way, staged into pinned memory and then copied by DMA:
    ``1 / (1 / staging + 1 / min(h2d, d2h))``. The two stages overlap in time but not in the host's memory
    bandwidth, which both draw on (the staging copy reads and writes it, the DMA reads the pinned buffer),
    so their costs add. On the H100 machine (staging 34.4, H2D 54.2 GB/s) that is 21.2 GB/s; the slowest
    stage alone (34.4 GB/s) let the rate model choose a 2 x 2 grid at N = 32768 whose 34 GB of loads took
    1.80 s (19 GB/s: copy-bound), against 1.37 s for the one-block plan."""
    dma = min(rates["h2d_bytes_per_s"], rates["d2h_bytes_per_s"])
    return 1.0 / (1.0 / rates["staging_bytes_per_s"] + 1.0 / dma)


def save(backend: Backend, rates: dict[str, float], directory: str | None = None) -> Path:
    """Write ``rates`` into the profile of ``backend``'s device (made where there is none), keeping the
    rest of the profile; its path."""
    old = backend_profile(backend, directory) or {"format": FORMAT, "version": VERSION, "backend": backend.name,
                                                   "device": device_name(backend)}
    when = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return save_profile({**old, SECTION: {**rates, "measured_at": when}}, directory)


def from_profile(profile: dict[str, Any] | None) -> dict[str, float]:
    """The plan's rate arguments stored in ``profile`` (empty where it holds none)."""
    section = (profile or {}).get(SECTION) or {}
    return {key: float(section[key]) for key in RATES if key in section} if all(k in section for k in RATES) else {}
