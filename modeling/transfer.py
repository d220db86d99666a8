"""The transfer model: the recursive predictor for a GPU nobody has measured.

The recursive predictor (:mod:`modeling.recursive`) needs Gemm(x) and Geam(x) of the GPU it
predicts for. This module learns them, as efficiencies against hardware parameters
(:mod:`modeling.efficiency`), from every device the project knows (:class:`Device`: a hardware row
with measured or published curves), and applies them to a datasheet row:

* the plain curves: GEMM's fraction of the FP64 peak against x / (128 sqrt(SMs)) and GEAM's
  fraction of the bandwidth against the bytes one call moves per SM, as saturating curves pooled
  over the devices with the same number of points each (spread evenly in log size over the sizes
  each device was measured at), the devices of the target's FP64 class weighted up
  (:func:`modeling.efficiency.class_weights`);
* the in-context curves, where devices of the target's class have them: the library's times
  *inside* a Strassen level (calls on quadrant views issued back to back, ``gemmlab calibrate
  --context``), the same two saturating curves fitted to those points. They decide the crossover:
  on the H100 and H200 a level's additions run 20-35% faster than the plain calibration's isolated
  GEAM at the half-sizes of the first boundary (2048-4096), so that on their sustained sweeps even a
  device's own plain calibration puts P 30-50% late, and the transferred plain curves no better;
* the per-call host time: the median of the devices where it is known, with their range;
* for a compute-starved target (FP64 per SM 9-10x below every training device's: RTX 4090/5090, L40S,
  RTX PRO 6000), DGEMM at the wave-fill limit of :mod:`modeling.fill` (its docstring has the
  arithmetic), not the learned rise. Item 3's question, for these parts, has both answers
  (``transfer.baseline``): against DGEMM Strassen pays earlier, P = 3600 on the RTX 4090 (2700-4900
  over cuBLAS's tile; 5090 4000, L40S 3900, PRO 6000 4200) against 6600-9500 measured on the
  H100/H200, set by the fill of the half-size products; and DGEMM is not the right baseline there
  (an Ozaki-scheme emulation on the FP32 units or tensor cores, at up to 64x the rate, is).

Uncertainty is a jackknife: the curves refitted with each training device left out. The predicted
level is reported with the range the fits give, so a size near a boundary shows as "1-2", and
:func:`leave_one_out` reports the range of the crossover P over the same ensemble.
:func:`leave_one_out` predicts a measured device with its own data removed from the training set
(it never reads that device's entry) and compares with its measured sweep.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from . import hardware, published
from .crossover import interpolated_crossing
from .efficiency import (
    GEAM_BYTES,
    TILE,
    EfficiencyCurve,
    Saturating,
    TransferredGeam,
    TransferredGemm,
    class_weights,
    fit_saturating,
    fp64_class,
    geam_efficiency,
    geam_scale,
    gemm_efficiency,
    gemm_scale,
)
from .fill import FILL_TILE, TILES, FillLimited, baseline_note, limit_text, rate_per_sm, starved
from .fits import measured_curves
from .hardware import GPU
from .recursive import RecursiveModel

__all__ = ["GEAM_BYTES", "TILE", "Device", "Efficiency", "Saturating", "Transfer", "TransferredGeam",
           "TransferredGemm", "calibrated_device", "fit_efficiency", "fit_saturating", "fit_transfer",
           "geam_efficiency", "geam_scale", "gemm_efficiency", "gemm_scale", "leave_one_out",
           "measured_boundaries", "published_devices", "reproduction_error", "samples"]

Curve = Callable[[float], float]  # size -> ms
#: Points per training device in the pooled fits.
POINTS = 16


@dataclass(frozen=True)
class Device:
    """A training device: its hardware row, Gemm/Geam in ms over ``sizes`` and, where known, the host
    time per library call (ms) and the in-context Gemm/Geam (``inner_*`` over ``inner_sizes``: the
    calls inside a Strassen level); ``measured`` says whether the curves are our measurement or published."""

    name: str
    gpu: GPU
    gemm: Curve
    geam: Curve
    sizes: tuple[float, float]
    launch_ms: float | None = None
    source: str = ""
    measured: bool = True
    inner_gemm: Curve | None = None
    inner_geam: Curve | None = None
    inner_sizes: tuple[float, float] | None = None


def calibrated_device(gpu: GPU, rows: Sequence[Mapping[str, Any]], launch_ms: float | None = None,
                      source: str = "", context: Sequence[Mapping[str, Any]] = ()) -> Device:
    """A device from calibration rows (``size``, ``gemm_s``, ``geam_s``), through the measured points;
    ``context``: its in-context calibration rows, where it has two or more."""
    gemm, geam = measured_curves(rows)
    inner: dict[str, Any] = {}
    if len(context) >= 2:
        g, a = measured_curves(context)
        inner = {"inner_gemm": g, "inner_geam": a, "inner_sizes": (g.sizes[0], g.sizes[-1])}
    return Device(gpu.name, gpu, gemm, geam, (gemm.sizes[0], gemm.sizes[-1]), launch_ms,
                  source or f"calibration of {gpu.name} ({len(rows)} sizes)", **inner)


def published_devices() -> dict[str, Device]:
    """Every usable thesis fit (``published.usable``: the flagged A100 and V100 rows are left out)."""
    out = {}
    for fit in published.usable(published.thesis_fits()):
        model = fit.time_model()
        out[fit.device] = Device(fit.device, hardware.lookup(fit.device), model.gemm, model.geam,
                                 tuple(float(s) for s in fit.sizes), None, str(fit.source), measured=False)
    return out


def samples(device: Device, points: int = POINTS, inner: bool = False) -> np.ndarray:
    """Sizes the fits take from a device: ``points`` spread evenly in log size over its measured range
    (of the in-context curves with ``inner``)."""
    return np.geomspace(*(device.inner_sizes if inner else device.sizes), points)


@dataclass(frozen=True)
class Efficiency:
    """The learned curves and host time, the devices they were learned from and with what weight, and
    the in-context curves (None where no device of the target's class has them). For a compute-starved
    target, ``gemm`` (and ``inner_gemm``) are the wave-fill limit and ``extrapolated`` the learned rise
    it replaced; ``rates``: the training devices' FP64 FLOP/s per SM (least, most)."""

    gemm: EfficiencyCurve
    geam: Saturating
    launch_ms: float
    launch_range: tuple[float, float] | None
    devices: tuple[str, ...]
    inner_gemm: EfficiencyCurve | None = None
    inner_geam: Saturating | None = None
    inner_devices: tuple[str, ...] = ()
    weights: Mapping[str, float] = field(default_factory=dict)
    extrapolated: Saturating | None = None
    rates: tuple[float, float] | None = None

    def with_tile(self, tile: str) -> Efficiency:
        """The same fits with the wave-fill limit of another tile (only for a compute-starved target)."""
        if not isinstance(self.gemm, FillLimited):
            raise ValueError("only the wave-fill limit of a compute-starved target has a tile")
        inner = self.inner_gemm.with_tile(tile) if isinstance(self.inner_gemm, FillLimited) else self.inner_gemm
        return replace(self, gemm=self.gemm.with_tile(tile), inner_gemm=inner)

    def model(self, gpu: GPU, schedule: str = "rum", fused: bool = False, launch_ms: float | None = None,
              overlap: bool = True) -> RecursiveModel:
        """The recursive predictor of a datasheet row with these efficiencies."""
        inner = {}
        if self.inner_gemm is not None and self.inner_geam is not None:
            inner = {"inner_gemm": TransferredGemm(gpu, self.inner_gemm),
                     "inner_geam": TransferredGeam(gpu, self.inner_geam)}
        return RecursiveModel(TransferredGemm(gpu, self.gemm), TransferredGeam(gpu, self.geam), schedule, fused,
                              self.launch_ms if launch_ms is None else launch_ms, overlap, **inner)

    def as_dict(self) -> dict[str, Any]:
        inner = None
        if self.inner_gemm is not None and self.inner_geam is not None:
            inner = {"devices": list(self.inner_devices), "gemm_fraction_of_fp64_peak": self.inner_gemm.as_dict(),
                     "geam_fraction_of_bandwidth": self.inner_geam.as_dict()}
        return {"devices": list(self.devices), "weights": dict(self.weights),
                "gemm_fraction_of_fp64_peak": self.gemm.as_dict(),
                "geam_fraction_of_bandwidth": self.geam.as_dict(), "in_context": inner,
                "launch_us": 1e3 * self.launch_ms,
                "launch_us_range": None if self.launch_range is None else [1e3 * t for t in self.launch_range],
                "gemm_learned_rise_not_used": None if self.extrapolated is None else self.extrapolated.as_dict()}


def _pooled(devices: Mapping[str, Device], weights: Mapping[str, float], points: int, inner: bool
            ) -> tuple[Saturating, Saturating]:
    """Saturating fits of GEMM and GEAM efficiency over the devices' plain (or in-context) curves."""
    u, e, v, g, w = [], [], [], [], []
    for name, d in devices.items():
        x = samples(d, points, inner)
        gemm, geam = (d.inner_gemm, d.inner_geam) if inner else (d.gemm, d.geam)
        u.append(gemm_scale(d.gpu, x))
        e.append(gemm_efficiency(d.gpu, x, [gemm(s) for s in x]))
        v.append(geam_scale(d.gpu, x))
        g.append(geam_efficiency(d.gpu, x, [geam(s) for s in x]))
        w.append(np.full(len(x), weights.get(name, 1.0)))
    weight = np.concatenate(w)
    return (fit_saturating(np.concatenate(u), np.concatenate(e), weight),
            fit_saturating(np.concatenate(v), np.concatenate(g), weight))


def fit_efficiency(devices: Mapping[str, Device], points: int = POINTS, target: GPU | None = None) -> Efficiency:
    """Pooled saturating fits over ``devices`` for a ``target`` (its FP64 class weighted up; None: all
    weigh 1), the in-context fits over those of its class that have in-context curves, and the median
    of the known launch overheads."""
    if not devices:
        raise ValueError("no training devices to learn the efficiency curves from")
    weights = class_weights({name: d.gpu for name, d in devices.items()}, target)
    gemm, geam = _pooled(devices, weights, points, inner=False)
    context = {name: d for name, d in devices.items() if d.inner_gemm is not None and d.inner_geam is not None
               and d.inner_sizes is not None and (target is None or fp64_class(d.gpu) == fp64_class(target))}
    inner: dict[str, Any] = {}
    if context:
        g, a = _pooled(context, {}, points, inner=True)
        inner = {"inner_gemm": g, "inner_geam": a, "inner_devices": tuple(context)}
    rates = [rate_per_sm(d.gpu) for d in devices.values()]
    limit: dict[str, Any] = {"gemm": gemm}
    if target is not None and starved(target, [d.gpu for d in devices.values()]):
        limit = {"gemm": FillLimited(gemm.e_inf), "extrapolated": gemm}
        if "inner_gemm" in inner:
            inner["inner_gemm"] = FillLimited(inner["inner_gemm"].e_inf)
    launch = [d.launch_ms for d in devices.values() if d.launch_ms is not None]
    known = (min(launch), max(launch)) if launch else None
    return Efficiency(geam=geam, launch_ms=float(np.median(launch)) if launch else 0.0, launch_range=known,
                      devices=tuple(devices), weights=weights, rates=(min(rates), max(rates)), **inner, **limit)


def reproduction_error(eff: Efficiency, device: Device, points: int = POINTS, lo: float | None = None
                       ) -> dict[str, float]:
    """Largest relative error of the transferred Gemm and Geam (and in-context Gemm and Geam, where both
    have them) against a device's own curves, over its measured sizes from ``lo`` on."""
    model = eff.model(device.gpu)
    pairs = [("gemm", device.gemm, model.gemm, device.sizes), ("geam", device.geam, model.geam, device.sizes)]
    if device.inner_sizes is not None and model.inner_gemm is not None and model.inner_geam is not None:
        pairs += [("inner_gemm", device.inner_gemm, model.inner_gemm, device.inner_sizes),
                  ("inner_geam", device.inner_geam, model.inner_geam, device.inner_sizes)]
    out = {}
    for name, mine, theirs, sizes in pairs:
        x = np.geomspace(max(lo or 0.0, sizes[0]), sizes[1], points)
        out[name] = max(abs(theirs(s) / mine(s) - 1) for s in x)
    return out


# --- prediction with uncertainty --------------------------------------------------------------

@dataclass(frozen=True)
class Transfer:
    """The pooled fit (``central``) and the jackknife refits (one per left-out training device), for
    GPUs of FP64 class ``fp64_class`` (None: fitted with every device weighing the same)."""

    central: Efficiency
    jackknife: dict[str, Efficiency] = field(default_factory=dict)
    fp64_class: str | None = None

    @property
    def members(self) -> dict[str, Efficiency]:
        """The pooled fit, the jackknife refits and, for a compute-starved target, the pooled fit with
        the wave-fill limit of the other tiles."""
        out = {"pooled": self.central, **{f"without {k}": e for k, e in self.jackknife.items()}}
        if isinstance(self.central.gemm, FillLimited):
            out.update({f"pooled, {t} tiles": self.central.with_tile(t) for t in TILES if t != FILL_TILE})
        return out

    def launch_members(self) -> list[float]:
        """Host times per call the ensemble tries: the median and the ends of the known range."""
        lo_hi = self.central.launch_range or (self.central.launch_ms,) * 2
        return sorted({self.central.launch_ms, *lo_hi})

    def models(self, gpu: GPU, schedule: str = "rum", fused: bool = False) -> dict[str, RecursiveModel]:
        """The recursive model of every ensemble member and host time; ValueError for a GPU of another
        FP64 class than the fit was weighted for."""
        if self.fp64_class is not None and fp64_class(gpu) != self.fp64_class:
            raise ValueError(f"this transfer was fitted for {self.fp64_class} FP64 GPUs, the {gpu.name} is "
                             f"{fp64_class(gpu)}: refit with fit_transfer(..., target=that GPU)")
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
                "transfer": self.describe(gpu, schedule, fused)}

    def boundaries(self, gpu: GPU, max_level: int = 4, lo: float = 64.0, hi: float = 2.0**20,
                   schedule: str = "rum", fused: bool = False) -> dict[str, list[float | None]]:
        return {name: m.boundaries(max_level, lo, hi) for name, m in self.models(gpu, schedule, fused).items()}

    def crossover(self, gpu: GPU, schedule: str = "rum", fused: bool = False) -> dict[str, Any]:
        """The one-level crossover P of the pooled fit, its range over the ensemble, and (for a
        compute-starved target) the P the learned rise, extrapolated, would give instead."""
        c, first = self.central, (lambda m: m.boundaries(1, 64.0, 2.0**20)[0])
        found = [p for m in self.models(gpu, schedule, fused).values() if (p := first(m)) is not None]
        rise = None if c.extrapolated is None else replace(c, gemm=c.extrapolated, inner_gemm=None, extrapolated=None)
        return {"P": first(c.model(gpu, schedule, fused)), "P_range": (min(found), max(found)) if found else None,
                "P_extrapolated": None if rise is None else first(rise.model(gpu, schedule, fused))}

    def describe(self, gpu: GPU, schedule: str = "rum", fused: bool = False) -> dict[str, Any]:
        """Which parts are measured, which transferred and which extrapolated, with the fits and their
        spread; for a part whose FP64 runs far below its FP32, the crossover and the baseline it is
        against (:func:`modeling.fill.baseline_note`)."""
        c = self.central
        spread = {}
        for curve, scale in (("gemm", gemm_scale), ("geam", geam_scale)):
            x = np.geomspace(1024, 65536, 7)
            at = np.array([[getattr(e, curve)(scale(gpu, s)) for s in x] for e in self.members.values()])
            spread[curve] = float(np.max(at.max(0) / at.min(0) - 1))
        launch = ("median of the known launch overheads" if c.launch_range else
                  "none known: 0 (no training device has a measured launch overhead)")
        inner = (f"in-context GEMM and GEAM (the calls inside a Strassen level) fitted the same way to "
                 f"{', '.join(c.inner_devices)}" if c.inner_devices else
                 f"none: no {fp64_class(gpu)} FP64 training device has in-context curves, so the calls inside a "
                 "level are priced by the plain curves")
        limited = isinstance(c.gemm, FillLimited)
        gemm = ("GEMM: the learned asymptote e_inf only (see extrapolated)" if limited else
                "GEMM fraction of FP64 peak vs x / (128 sqrt(SMs))")
        note = {"measured": f"nothing of the {gpu.name}: its datasheet row only (FP64 peak "
                            f"{gpu.peak_flops / 1e12:g} TFLOP/s, {gpu.bandwidth_gbs:g} GB/s, {gpu.sm_count} SMs)",
                "transferred": f"{gemm}; GEAM fraction of bandwidth vs "
                               f"bytes per SM; devices of the {fp64_class(gpu)} FP64 class weighted up "
                               f"({', '.join(f'{k}: {w:g}' for k, w in c.weights.items())}); {inner}; "
                               "launch overhead: " + launch,
                "training_devices": list(c.devices), "fits": c.as_dict(),
                "uncertainty": {"refits_leaving_out": list(self.jackknife),
                                "tiles_tried": list(TILES) if limited else None,
                                "largest_curve_spread_1024_to_65536": spread,
                                "launch_us_range": c.as_dict()["launch_us_range"]}}
        ratio = gpu.fp64_per_fp32
        if not limited and not (ratio is not None and ratio < 0.1):
            return {**note, "extrapolated": "nothing: the FP64 rate per SM lies within the training devices' range"}
        found = self.crossover(gpu, schedule, fused)
        if limited and c.rates is not None and c.extrapolated is not None:
            note["extrapolated"] = limit_text(gpu, c.rates, c.gemm.tile, found["P_extrapolated"])
        if ratio is not None and ratio < 0.1:
            note["baseline"] = baseline_note(gpu, found["P"], found["P_range"])
        return {**note, "crossover": found}


def fit_transfer(devices: Mapping[str, Device], points: int = POINTS, target: GPU | None = None) -> Transfer:
    """The pooled fit and, with two or more devices, the fits with each one left out, weighted for
    ``target``'s FP64 class (None: every device weighs the same)."""
    names = list(devices)
    jack = {}
    if len(names) > 1:
        for out in names:
            jack[out] = fit_efficiency({k: devices[k] for k in names if k != out}, points, target)
    return Transfer(fit_efficiency(devices, points, target), jack, None if target is None else fp64_class(target))


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
    model = fit_transfer(train, points, target=gpu)
    central = model.central.model(gpu, schedule, fused, launch_ms)
    if times is not None:
        best = {n: min(t, key=t.__getitem__) for n, t in times.items()}
    if best is None:
        raise ValueError("give the held-out device's measured times or best levels")
    levels_of = {n: sorted(times[n]) if times is not None else list(range(max_level + 1)) for n in best}
    picked = {n: central.level(n, levels_of[n]) for n in best}
    members = [replace(m, launch_ms=launch_ms) if launch_ms is not None else m
               for m in model.models(gpu, schedule, fused).values()]
    ranges = {}
    for n in best:
        found = [m.level(n, levels_of[n]) for m in members]
        ranges[n] = [min(found), max(found)]
    sizes = sorted(best)
    predicted_b = central.boundaries(max_level, sizes[0] / 2, 4.0 * sizes[-1])
    crossovers = [p for m in members if (p := m.boundaries(1, sizes[0] / 8, 8.0 * sizes[-1])[0]) is not None]
    crossovers += predicted_b[:1] if predicted_b[0] is not None else []      # the same P to the root's tolerance
    out: dict[str, Any] = {"held_out": held_out, "trained_on": list(train), "fits": model.central.as_dict(),
                           "launch_us": 1e3 * central.launch_ms, "predicted": picked, "range": ranges,
                           "best": dict(best), "mispredicted": sum(picked[n] != best[n] for n in sizes),
                           "predicted_boundaries": predicted_b,
                           "predicted_P_range": [min(crossovers), max(crossovers)] if crossovers else None}
    if times is not None:
        measured_b = measured_boundaries(times, max_level)
        lost = {n: times[n][picked[n]] / times[n][best[n]] - 1 for n in sizes}
        out.update(measured_boundaries=measured_b,
                   boundary_error_pct=[None if p is None or m is None else 100 * (p - m) / m
                                       for p, m in zip(predicted_b, measured_b)],
                   time_lost_sum=sum(lost.values()), time_lost_worst=max(lost.values()),
                   time_lost_sweep=sum(times[n][picked[n]] for n in sizes) / sum(times[n][best[n]] for n in sizes) - 1)
    return out
