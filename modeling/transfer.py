"""The transfer model (issue 18): the recursive predictor for a GPU nobody has measured.

The recursive predictor (:mod:`modeling.recursive`) needs Gemm(x) and Geam(x) of the GPU it
predicts for. This module learns them, as efficiencies against hardware parameters, from every
device the project knows (:class:`Device`: a hardware row with measured or published curves), and
applies them to a datasheet row:

* GEMM's fraction of the FP64 peak, e = 2 x^3 / (t F), against u = x / (T sqrt(SMs)) with T = 128.
  A library DGEMM tiles the output into (x/T)^2 blocks of about T x T (cuBLAS's FP64 tiles are 64
  to 256 wide), so u^2 is the number of blocks per SM: below u ~ 1 the GPU is not full, and the
  efficiency rises towards its asymptote as the waves grow. T only scales u; the fit's u0 absorbs it.
* GEAM's fraction of the bandwidth, g = 24 x^2 / (t G), against the bytes one call moves per SM,
  v = 24 x^2 / SMs: a small call does not have enough bytes in flight per SM to hide latency.
* both as the saturating curve e(u) = e_inf (u/u0)^a / (1 + (u/u0)^a), fitted by least squares in
  log space (scipy.optimize.curve_fit), pooled over the devices with the same number of points
  each (spread evenly in log size over the sizes each device was measured at);
* the per-call host time: the median of the devices where it is known, with their range.

Uncertainty is a jackknife: the curves refitted with each training device left out. The predicted
level is reported with the range the fits give, so a size near a boundary shows as "1-2".
:func:`leave_one_out` predicts a measured device with its own data removed from the training set
(it never reads that device's entry) and compares with its measured sweep.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from scipy.optimize import curve_fit

from . import hardware, published
from .crossover import interpolated_crossing
from .fits import measured_curves
from .hardware import GPU
from .recursive import RecursiveModel

Curve = Callable[[float], float]  # size -> ms
#: Tile edge of the normalised GEMM size u = x / (TILE sqrt(SMs)).
TILE = 128
#: Points per training device in the pooled fits.
POINTS = 16
#: Bytes one n x n FP64 GEAM moves: two reads and a write.
GEAM_BYTES = 24


@dataclass(frozen=True)
class Device:
    """A training device: its hardware row, Gemm/Geam in ms over ``sizes`` and, where known, the host
    time per library call (ms); ``measured`` says whether the curves are our measurement or published."""

    name: str
    gpu: GPU
    gemm: Curve
    geam: Curve
    sizes: tuple[float, float]
    launch_ms: float | None = None
    source: str = ""
    measured: bool = True


def calibrated_device(gpu: GPU, rows: Sequence[Mapping[str, Any]], launch_ms: float | None = None,
                      source: str = "") -> Device:
    """A device from calibration rows (``size``, ``gemm_s``, ``geam_s``), through the measured points."""
    gemm, geam = measured_curves(rows)
    return Device(gpu.name, gpu, gemm, geam, (gemm.sizes[0], gemm.sizes[-1]), launch_ms,
                  source or f"calibration of {gpu.name} ({len(rows)} sizes)")


def published_devices() -> dict[str, Device]:
    """Every usable thesis fit (``published.usable``: the flagged A100 and V100 rows are left out)."""
    out = {}
    for fit in published.usable(published.thesis_fits()):
        model = fit.time_model()
        out[fit.device] = Device(fit.device, hardware.lookup(fit.device), model.gemm, model.geam,
                                 tuple(float(s) for s in fit.sizes), None, str(fit.source), measured=False)
    return out


# --- efficiency curves ------------------------------------------------------------------------

def gemm_efficiency(gpu: GPU, x: Any, ms: Any) -> Any:
    """Fraction of the FP64 peak (tensor cores where there are) a GEMM of size x taking ``ms`` reaches."""
    return 2 * np.asarray(x, float) ** 3 / (1e-3 * np.asarray(ms, float) * gpu.peak_flops)


def geam_efficiency(gpu: GPU, x: Any, ms: Any) -> Any:
    return GEAM_BYTES * np.asarray(x, float) ** 2 / (1e-3 * np.asarray(ms, float) * gpu.bandwidth)


def gemm_scale(gpu: GPU, x: Any) -> Any:
    """u = x / (TILE sqrt(SMs))."""
    return np.asarray(x, float) / (TILE * math.sqrt(gpu.sm_count))


def geam_scale(gpu: GPU, x: Any) -> Any:
    """Bytes one GEAM moves per SM."""
    return GEAM_BYTES * np.asarray(x, float) ** 2 / gpu.sm_count


def _log_saturating(logu: Any, log_einf: float, log_u0: float, a: float) -> Any:
    z = a * (logu - log_u0)
    return log_einf + z - np.logaddexp(0.0, z)


@dataclass(frozen=True)
class Saturating:
    """e(u) = e_inf (u/u0)^a / (1 + (u/u0)^a); ``rms``: RMS log residual of the fit (relative error)."""

    e_inf: float
    u0: float
    a: float
    rms: float = 0.0

    def __call__(self, u: Any) -> Any:
        return np.exp(_log_saturating(np.log(u), math.log(self.e_inf), math.log(self.u0), self.a))

    def as_dict(self) -> dict[str, float]:
        return {"e_inf": self.e_inf, "u0": self.u0, "a": self.a, "rms_log_residual": self.rms}


def fit_saturating(u: Sequence[float], e: Sequence[float]) -> Saturating:
    """Least squares on log e; e_inf in (0, 1.2] (a little above 1 allows a peak quoted low)."""
    lu, le = np.log(np.asarray(u, float)), np.log(np.asarray(e, float))
    p0 = (float(le.max()), float(np.median(lu)), 1.5)
    bounds = ([-6.0, lu.min() - 8, 0.2], [math.log(1.2), lu.max() + 8, 8.0])
    (le_inf, lu0, a), _ = curve_fit(_log_saturating, lu, le, p0=p0, bounds=bounds, maxfev=20000)
    rms = float(np.sqrt(np.mean((_log_saturating(lu, le_inf, lu0, a) - le) ** 2)))
    return Saturating(math.exp(le_inf), math.exp(lu0), float(a), rms)


def samples(device: Device, points: int = POINTS) -> np.ndarray:
    """Sizes the fits take from a device: ``points`` spread evenly in log size over its measured range."""
    return np.geomspace(*device.sizes, points)


@dataclass(frozen=True)
class Efficiency:
    """The learned curves and host time, and the devices they were learned from."""

    gemm: Saturating
    geam: Saturating
    launch_ms: float
    launch_range: tuple[float, float] | None
    devices: tuple[str, ...]

    def model(self, gpu: GPU, schedule: str = "rum", fused: bool = False, launch_ms: float | None = None,
              overlap: bool = True) -> RecursiveModel:
        """The recursive predictor of a datasheet row with these efficiencies."""
        gemm, geam = TransferredGemm(gpu, self.gemm), TransferredGeam(gpu, self.geam)
        return RecursiveModel(gemm, geam, schedule, fused, self.launch_ms if launch_ms is None else launch_ms,
                              overlap)

    def as_dict(self) -> dict[str, Any]:
        return {"devices": list(self.devices), "gemm_fraction_of_fp64_peak": self.gemm.as_dict(),
                "geam_fraction_of_bandwidth": self.geam.as_dict(), "launch_us": 1e3 * self.launch_ms,
                "launch_us_range": None if self.launch_range is None else [1e3 * t for t in self.launch_range]}


@dataclass(frozen=True)
class TransferredGemm:
    gpu: GPU
    e: Saturating

    def __call__(self, x: float) -> float:
        return float(1e3 * 2 * x**3 / (self.gpu.peak_flops * self.e(gemm_scale(self.gpu, x))))


@dataclass(frozen=True)
class TransferredGeam:
    gpu: GPU
    g: Saturating

    def __call__(self, x: float) -> float:
        return float(1e3 * GEAM_BYTES * x**2 / (self.gpu.bandwidth * self.g(geam_scale(self.gpu, x))))


def fit_efficiency(devices: Mapping[str, Device], points: int = POINTS) -> Efficiency:
    """Pooled saturating fits over ``devices`` and the median of their known launch overheads."""
    if not devices:
        raise ValueError("no training devices to learn the efficiency curves from")
    u, e, v, g, launch = [], [], [], [], []
    for name in devices:
        d = devices[name]
        x = samples(d, points)
        u.append(gemm_scale(d.gpu, x))
        e.append(gemm_efficiency(d.gpu, x, [d.gemm(s) for s in x]))
        v.append(geam_scale(d.gpu, x))
        g.append(geam_efficiency(d.gpu, x, [d.geam(s) for s in x]))
        if d.launch_ms is not None:
            launch.append(d.launch_ms)
    known = (min(launch), max(launch)) if launch else None
    return Efficiency(fit_saturating(np.concatenate(u), np.concatenate(e)),
                      fit_saturating(np.concatenate(v), np.concatenate(g)),
                      float(np.median(launch)) if launch else 0.0, known, tuple(devices))


def reproduction_error(eff: Efficiency, device: Device, points: int = POINTS, lo: float | None = None
                       ) -> dict[str, float]:
    """Largest relative error of the transferred Gemm and Geam against a device's own curves, over its
    measured sizes from ``lo`` on."""
    x = np.geomspace(max(lo or 0.0, device.sizes[0]), device.sizes[1], points)
    out = {}
    for name, mine, theirs in (("gemm", device.gemm, eff.model(device.gpu).gemm),
                               ("geam", device.geam, eff.model(device.gpu).geam)):
        out[name] = max(abs(theirs(s) / mine(s) - 1) for s in x)
    return out


# --- prediction with uncertainty --------------------------------------------------------------

@dataclass(frozen=True)
class Transfer:
    """The pooled fit (``central``) and the jackknife refits (one per left-out training device)."""

    central: Efficiency
    jackknife: dict[str, Efficiency] = field(default_factory=dict)

    @property
    def members(self) -> dict[str, Efficiency]:
        return {"pooled": self.central, **{f"without {k}": e for k, e in self.jackknife.items()}}

    def launch_members(self) -> list[float]:
        """Host times per call the ensemble tries: the median and the ends of the known range."""
        lo_hi = self.central.launch_range or (self.central.launch_ms,) * 2
        return sorted({self.central.launch_ms, *lo_hi})

    def models(self, gpu: GPU, schedule: str = "rum", fused: bool = False) -> dict[str, RecursiveModel]:
        out = {}
        for name, eff in self.members.items():
            for h in self.launch_members():
                tag = name if h == self.central.launch_ms else f"{name}, launch {1e3 * h:.0f} us"
                out[tag] = eff.model(gpu, schedule, fused, launch_ms=h)
        return out

    def predict(self, gpu: GPU, size: float, max_level: int = 4, schedule: str = "rum",
                fused: bool = False) -> dict[str, Any]:
        """Best level at ``size`` (pooled fit) with the range over the ensemble, and what is transferred."""
        levels = range(min(max_level, max(int(math.log2(size)), 0)) + 1)
        central = self.central.model(gpu, schedule, fused)
        picked = {name: m.level(size, levels) for name, m in self.models(gpu, schedule, fused).items()}
        lo, hi = min(picked.values()), max(picked.values())
        return {"level": central.level(size, levels), "level_range": [lo, hi],
                "level_text": str(lo) if lo == hi else f"{lo}-{hi}", "by_member": picked,
                "transfer": self.describe(gpu)}

    def boundaries(self, gpu: GPU, max_level: int = 4, lo: float = 64.0, hi: float = 2.0**20,
                   schedule: str = "rum", fused: bool = False) -> dict[str, list[float | None]]:
        return {name: m.boundaries(max_level, lo, hi) for name, m in self.models(gpu, schedule, fused).items()}

    def describe(self, gpu: GPU) -> dict[str, Any]:
        """Which parts are measured and which transferred, with the fits and their spread."""
        c = self.central
        spread = {}
        for curve, scale in (("gemm", gemm_scale), ("geam", geam_scale)):
            x = np.geomspace(1024, 65536, 7)
            at = np.array([[getattr(e, curve)(scale(gpu, s)) for s in x] for e in self.members.values()])
            spread[curve] = float(np.max(at.max(0) / at.min(0) - 1))
        launch = ("median of the known launch overheads" if c.launch_range else
                  "none known: 0 (no training device has a measured launch overhead)")
        note = {"measured": f"nothing of the {gpu.name}: its datasheet row only (FP64 peak "
                            f"{gpu.peak_flops / 1e12:g} TFLOP/s, {gpu.bandwidth_gbs:g} GB/s, {gpu.sm_count} SMs)",
                "transferred": "GEMM fraction of FP64 peak vs x / (128 sqrt(SMs)); GEAM fraction of bandwidth vs "
                               "bytes per SM; launch overhead: " + launch,
                "training_devices": list(c.devices), "fits": c.as_dict(),
                "uncertainty": {"refits_leaving_out": list(self.jackknife),
                                "largest_curve_spread_1024_to_65536": spread,
                                "launch_us_range": c.as_dict()["launch_us_range"]}}
        ratio = gpu.fp64_per_fp32
        if ratio is not None and ratio < 0.1:
            note["baseline"] = (f"FP64 runs at 1/{round(1 / ratio)} of FP32 on the {gpu.name}: DGEMM is not the right "
                                "baseline there; an FP32-emulated (e.g. Ozaki-scheme) DGEMM would be, and against "
                                "DGEMM Strassen pays from small sizes")
        return note


def fit_transfer(devices: Mapping[str, Device], points: int = POINTS) -> Transfer:
    """The pooled fit and, with two or more devices, the fits with each one left out."""
    names = list(devices)
    jack = {}
    if len(names) > 1:
        for out in names:
            jack[out] = fit_efficiency({k: devices[k] for k in names if k != out}, points)
    return Transfer(fit_efficiency(devices, points), jack)


# --- leave-one-device-out ---------------------------------------------------------------------

def measured_boundaries(times: Mapping[int, Mapping[int, float]], max_level: int) -> list[float | None]:
    """Where each level overtakes the one below, interpolated between measured sizes."""
    out = []
    for lv in range(1, max_level + 1):
        xs = [n for n in sorted(times) if lv in times[n] and lv - 1 in times[n]]
        out.append(interpolated_crossing(xs, [math.log(times[n][lv - 1] / times[n][lv]) for n in xs]) if xs else None)
    return out


def leave_one_out(devices: Mapping[str, Device], held_out: str, gpu: GPU, *,
                  times: Mapping[int, Mapping[int, float]] | None = None, best: Mapping[int, int] | None = None,
                  max_level: int = 4, schedule: str = "rum", fused: bool = False,
                  launch_ms: float | None = None, points: int = POINTS) -> dict[str, Any]:
    """Predict ``held_out`` (hardware row ``gpu``) from the other devices only (its entry in ``devices``
    is never read) and judge it against its measured per-level ``times`` ({size: {level: t}}) or its
    measured ``best`` levels. ``launch_ms``: the held-out device's own host time, where a user would
    know it; None: the transferred one. Time lost: sum of T(predicted)/T(best) - 1 over sizes, and
    over the sweep sum T(predicted) / sum T(best) - 1."""
    train = {name: devices[name] for name in devices if name != held_out}
    model = fit_transfer(train, points)
    central = model.central.model(gpu, schedule, fused, launch_ms)
    if times is not None:
        best = {n: min(t, key=t.__getitem__) for n, t in times.items()}
    if best is None:
        raise ValueError("give the held-out device's measured times or best levels")
    levels_of = {n: sorted(times[n]) if times is not None else list(range(max_level + 1)) for n in best}
    picked = {n: central.level(n, levels_of[n]) for n in best}
    ranges = {}
    for n in best:
        found = [m.level(n, levels_of[n]) for m in
                 (replace(m, launch_ms=launch_ms) if launch_ms is not None else m
                  for m in model.models(gpu, schedule, fused).values())]
        ranges[n] = [min(found), max(found)]
    sizes = sorted(best)
    predicted_b = central.boundaries(max_level, sizes[0] / 2, 4.0 * sizes[-1])
    out: dict[str, Any] = {"held_out": held_out, "trained_on": list(train), "fits": model.central.as_dict(),
                           "launch_us": 1e3 * central.launch_ms, "predicted": picked, "range": ranges,
                           "best": dict(best), "mispredicted": sum(picked[n] != best[n] for n in sizes),
                           "predicted_boundaries": predicted_b}
    if times is not None:
        measured_b = measured_boundaries(times, max_level)
        lost = {n: times[n][picked[n]] / times[n][best[n]] - 1 for n in sizes}
        out.update(measured_boundaries=measured_b,
                   boundary_error_pct=[None if p is None or m is None else 100 * (p - m) / m
                                       for p, m in zip(predicted_b, measured_b)],
                   time_lost_sum=sum(lost.values()), time_lost_worst=max(lost.values()),
                   time_lost_sweep=sum(times[n][picked[n]] for n in sizes) / sum(times[n][best[n]] for n in sizes) - 1)
    return out
