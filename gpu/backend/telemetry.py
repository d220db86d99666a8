"""Power and clock telemetry of a GPU through NVML (``nvidia-ml-py``): the state a measurement ran in.

The H100 and H200 are capped at 700 W: under sustained DGEMM the SM clock falls from 1980 MHz to
1500-1700 MHz with the software power cap as the throttle reason, so a time means little without
the clock and power beside it. :class:`NvmlTelemetry` reads the SM clock, the power draw and the
clocks-event (throttle) reasons of one device, and its limits, for the measurement protocol
(``experiments.core.timing``) to store with each sample. Where NVML is missing, the backend has
no telemetry (``Backend.telemetry()`` returns None) and samples carry none.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import asdict, dataclass
from typing import Any

try:
    import pynvml
except ImportError:  # nvidia-ml-py is in the gpu extra; without it samples carry no telemetry
    pynvml = None

#: NVML's clocks-event (throttle) reason bits, as nvidia-smi names them.
REASONS = {0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
           0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
           0x80: "hw_power_brake_slowdown", 0x100: "display_clock_setting"}


def reason_names(mask: int) -> list[str]:
    """The names of the reasons set in an NVML clocks-event mask (unknown bits as hex)."""
    names = [name for bit, name in REASONS.items() if mask & bit]
    rest = mask & ~sum(REASONS)
    return names + ([hex(rest)] if rest else [])


@dataclass(frozen=True)
class Reading:
    """One look at the device: SM clock (MHz), power draw (W) and the throttle-reason mask."""

    sm_mhz: int
    power_w: float
    reasons: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class NvmlTelemetry:
    """Reads one device, found by its PCI bus id (the id CUDA and NVML share)."""

    def __init__(self, pci_bus_id: str) -> None:
        pynvml.nvmlInit()
        self._handle = pynvml.nvmlDeviceGetHandleByPciBusId(pci_bus_id)
        get = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        self._reasons = get or pynvml.nvmlDeviceGetCurrentClocksThrottleReasons

    def read(self) -> Reading:
        h = self._handle
        return Reading(int(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)),
                       pynvml.nvmlDeviceGetPowerUsage(h) / 1e3, int(self._reasons(h)))

    def limits(self) -> dict[str, Any]:
        """The enforced power limit (W) and the SM clock's maximum (MHz), for the environment record."""
        h = self._handle
        return {"power_limit_w": pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1e3,
                "sm_clock_max_mhz": int(pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM))}


def nvml_telemetry(pci_bus_id: str) -> NvmlTelemetry | None:
    """Telemetry of the device at ``pci_bus_id``, or None where NVML cannot be used."""
    if pynvml is None:
        return None
    try:
        return NvmlTelemetry(pci_bus_id)
    except pynvml.NVMLError:
        return None


def cuda_version(v: int) -> str:
    """A CUDA version number (13020) as text (13.2)."""
    return f"{v // 1000}.{(v % 1000) // 10}"


def cublas_version(v: int) -> str:
    """A cuBLAS version number (130100) as text (13.1.0)."""
    return f"{v // 10000}.{(v % 10000) // 100}.{v % 100}"


def driver_release() -> str:
    """The NVIDIA driver release (for example 580.159.04), from NVML or nvidia-smi."""
    if pynvml is not None:
        try:
            pynvml.nvmlInit()
            version = pynvml.nvmlSystemGetDriverVersion()
            return version.decode() if isinstance(version, bytes) else str(version)
        except pynvml.NVMLError:
            pass
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=20, check=True)
            return out.stdout.strip().splitlines()[0]
        except (subprocess.SubprocessError, OSError, IndexError):
            pass
    return "unknown"
