"""The transfer model of the front door's ``methods`` section: each method's ratio to the library GEMM on a GPU
nobody measured, from the GPUs that were and the target's datasheet (:mod:`modeling.hardware`).

The front door (:mod:`gpu.frontdoor.rank`) ranks Ozaki scheme II (``moduli="auto"``), Ozaki I at a target and
split-K by a profile's measured ratios (:mod:`gpu.frontdoor.table`). This module predicts that section for a
:class:`~modeling.hardware.GPU` row, one small physical model per method, its parameters fitted as data
(:class:`MethodsModel`, which :meth:`~MethodsModel.as_dict` writes out):

* **The library GEMM** runs at a fraction ``e(shape)`` of the FP64 peak (tensor cores where there are some):
  ``T_lib = 2 m k n / (e F64)``. ``e`` is taken per measured shape from the training GPUs' GEMM times (the
  median over them), so a target's GEMM is as efficient as theirs were at that shape. At a square or rectangle
  no training GPU measured (a prediction also covers the acceptance grid's: :data:`PREDICTED`), ``e`` is the
  measured squares' interpolated in log flops: held out, the H100 alone (which never measured a rectangle) then
  predicts Ozaki II at 4096 x 2^16 x 4096 and 32768 x 4096 x 32768 (1.13x and 1.45x, where the H200 measured
  1.35x and 1.26x), the H200's own choice there.
* **Ozaki scheme II and Ozaki I** (INT8 slices) spend their time in low-precision products and memory-bound
  passes (scaling, residues or slices, the CRT or the folds of the products, the final FP64 write)::

      T = W / (eta P_low) + (c_in (m k + k n) q + c_out m n g) / BW + t0

  with W the products' operations (``q`` moduli of ``2 m k n`` each; Ozaki I: its plan's ``flops``,
  :func:`gpu.ozaki.plan.plan`), ``P_low`` the dense INT8 tensor rate of the datasheet, ``BW`` its bandwidth,
  ``q`` the moduli or slices and ``g`` the products (moduli, or Ozaki I's GEMM calls). ``eta`` (the products'
  efficiency), ``c_in`` and ``c_out`` (bytes moved per input element and slice, per output element and product,
  the passes' share of the bandwidth folded in) and ``t0`` (fixed time per call) are fitted by non-negative least
  squares in relative error on every training time, phase breakdowns included (the products alone, the passes
  alone), so the INT8 share (83% of a fast-15 product at N = 16384 on the H100) is pinned by measurement. The
  count ``q`` a prediction uses is what the call chose on phi = 1 data (15 moduli, 11 slices): a property of
  the data and the bound, not of the GPU. A target with no INT8 tensor rate gets no prediction: the method
  stays unmeasured, which the front door already handles.
* **split-K** (tiny outputs, huge k) is memory-bound for both it and the library, so its ratio is the ratio of the
  bandwidth each reaches: the measured ratio of the same (m, k, n) and mode is transferred, on a target whose memory
  is of the same family (HBM), which runs the same chunk kernel today as the GPU that measured it
  (:func:`gpu.splitk.variants.choose` by compute capability, down to its tensor-core instruction and tile: sm_90
  feeds m16n8k16 through tensor maps, sm_80 m8n8k4 through registers, so an H100's ratio says nothing of an A100)
  and on which the shape stays memory-bound (``m n / (4 (m + n))`` flop per byte within its FP64 peak over
  bandwidth). Where training GPUs differ (the H200 reaches less of its bandwidth in split-K than the H100 in ratio
  to cuBLAS: a kernel whose bytes in flight per SM are fixed gains less from more bandwidth per SM), the ratio is
  interpolated in log bandwidth per SM between the two that bracket the target, and taken from the nearest outside
  them; with one training GPU it is that GPU's ratio unchanged. The ratios are device times (the H100's) or
  as-called times of long calls (the H200's), so a shape is predicted only where the target, and each GPU whose
  ratio is used, streams its operands for at least :data:`STREAM_S` (:func:`streams`): below that a call is decided
  by its host time, which no device ratio carries. Held out, the H200 predicted from the H100 alone takes the H200's
  measured choice at every judged tiny output (the H100's ratios, 1.20x and 1.16x at m = n = 16 and 64, k = 2^20,
  against 1.34x and 1.04x measured). The H100's ratios come from the cp.async kernel sm_90 ran before the tensor-map
  one, which ran 1-34% faster on the H200 (``results/published/h200/h200-splitk-as-called-d50ac74.json`` against
  ``h200-splitk-as-called.json``), so they likely understate the H100 now; on that earlier kernel the H200 had
  measured 0.83x where the H100's 1.16x was predicted, and the bundled predictions left split-K out until the H200
  ran the kernel the H100 would. The Ozaki schemes' predictions erred the other way (0.802x predicted against 1.031x
  measured at 4096): a lost gain, not a slowdown.

Strassen's configurations are the transfer model of :mod:`modeling.transfer` (``transfer-levels.json``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy.optimize import nnls

from gpu.frontdoor.table import Timed, classify
from gpu.ozaki.plan import WorkspaceError
from gpu.ozaki.plan import plan as ozaki_plan
from gpu.ozaki2.moduli import MAX_MODULI
from gpu.ozaki2.workspace import layout
from gpu.splitk import variants

from .hardware import GPU, lookup
from .methods_validation import GRID

#: The shapes a prediction covers besides the training GPUs' own: the acceptance grid's squares and rectangles
#: (:data:`modeling.methods_validation.GRID`), its tiny outputs left out (split-K's class: predicted only at the
#: shapes a training GPU measured).
PREDICTED = tuple(s for s in GRID if classify(*s)[0] != "tiny")
#: The methods the cost model covers (each on the dense INT8 tensor rate), and the one transferred as a table.
COST_METHODS = ("ozaki2", "ozaki")
SPLITK = "splitk"
#: Seconds a tiny output must take to stream its operands at the target's bandwidth for split-K's ratio to be
#: transferred: above the host time of one call (28-43 us for split-K on the H200, 21-45 us for ``cupy.matmul``;
#: results/published/h200/h200-splitk-as-called.json), so that the device, not the host, sets the time.
STREAM_S = 50e-6
#: The datasheet field of each cost method's low-precision unit.
RATE = {"ozaki2": "int8_tops", "ozaki": "int8_tops"}
#: Calls that read a value back before they finish (the front door prefers one that does not, within a tie).
WAITS = {"ozaki2": True, "ozaki": True, SPLITK: False}
#: The terms of the cost model (products, input passes, output passes, fixed time) each phase's time holds.
MASKS = {"total": np.array([1, 1, 1, 1]), "gemm": np.array([1, 0, 0, 0]), "passes": np.array([0, 1, 1, 1])}


@dataclass(frozen=True)
class Observation:
    """One measured time on a training GPU (a hardware-table row): a method's call at ``shape`` with ``count``
    moduli or slices, ``seconds`` for the whole call (``phase`` "total", beside the library GEMM's ``gemm_s`` of
    the same group) or for one of its phases ("gemm": the low-precision products; "passes": the rest, with the
    fixed time per call, which its many short kernels incur)."""

    gpu: str
    timed: Timed
    shape: tuple[int, int, int]
    seconds: float
    gemm_s: float | None = None
    count: int | None = None
    phase: str = "total"
    source: str = ""

    @property
    def ratio(self) -> float | None:
        """The library GEMM's time over the method's (above 1: faster), where both are known."""
        return self.gemm_s / self.seconds if self.gemm_s and self.phase == "total" else None


@dataclass(frozen=True)
class CostFit:
    """The fitted cost of one method (see the module notes): ``eta``, ``c_in``, ``c_out`` (bytes), ``t0_s``, the
    count a prediction uses, the shapes it was fitted on, and the relative error of the fit (rms, worst)."""

    timed: Timed
    eta: float
    c_in: float
    c_out: float
    t0_s: float
    count: int
    shapes: tuple[tuple[int, int, int], ...]
    rms: float = 0.0
    worst: float = 0.0

    def seconds(self, gpu: GPU, shape: tuple[int, int, int], count: int | None = None) -> float | None:
        """The predicted time of the call on ``gpu`` (None where it has no rate for the method's products)."""
        row = features(self.timed.method, gpu, shape, count or self.count)
        return None if row is None else float(np.dot(row, self.coefficients))

    @property
    def coefficients(self) -> np.ndarray:
        return np.array([1 / self.eta if self.eta else 0.0, self.c_in, self.c_out, self.t0_s])


@dataclass(frozen=True)
class MethodsModel:
    """The fitted model: per cost method a :class:`CostFit`, the library GEMM's efficiency per shape, split-K's
    measured ratios per (mode, shape) and training GPU, and the GPUs it was trained on."""

    fits: tuple[CostFit, ...]
    gemm_efficiency: tuple[tuple[tuple[int, int, int], float], ...]
    splitk: tuple[tuple[Timed, tuple[int, int, int], str, float], ...]
    trained_on: tuple[str, ...]

    def efficiency(self, shape: tuple[int, int, int]) -> float | None:
        """The library GEMM's share of the FP64 peak at ``shape``: measured there, else that of the measured
        squares interpolated in log flops (clamped at their ends; see the module notes); None for a tiny output,
        whose GEMM the bytes bound, or where no square was measured."""
        measured = dict(self.gemm_efficiency)
        if tuple(shape) in measured:
            return measured[tuple(shape)]
        if classify(*shape)[0] == "tiny":
            return None
        squares = sorted((math.log(float(m) * k * n), e) for (m, k, n), e in measured.items() if m == k == n)
        if not squares:
            return None
        x = min(max(math.log(float(shape[0]) * shape[1] * shape[2]), squares[0][0]), squares[-1][0])
        return float(np.interp(x, [f for f, _ in squares], [e for _, e in squares]))

    def as_dict(self) -> dict[str, Any]:
        """The parameters as plain data (what ``transfer-methods.json`` records beside its predictions)."""
        return {"trained_on": list(self.trained_on),
                "cost": [{**{k: v for k, v in asdict(f).items() if k not in ("timed", "shapes")},
                          "method": f.timed.method, "config": f.timed.options, "shapes": [list(s) for s in f.shapes]}
                         for f in self.fits],
                "gemm_efficiency": [[list(s), round(e, 4)] for s, e in self.gemm_efficiency],
                "splitk": [[t.options, list(s), g, r] for t, s, g, r in self.splitk]}


def family(gpu: GPU) -> str:
    """The memory system's family: ``HBM`` or ``GDDR`` (empty where the table does not say)."""
    kind = gpu.memory_kind or ""
    return "HBM" if kind.startswith("HBM") else "GDDR" if kind.startswith("GDDR") else ""


def features(method: str, gpu: GPU, shape: tuple[int, int, int], count: int) -> np.ndarray | None:
    """The cost model's row of a call on ``gpu`` (its products' seconds at the full rate, its input and output
    element-slices over the bandwidth, 1): the coefficients' factors; None where ``gpu`` has no such rate."""
    rate = getattr(gpu, RATE[method])
    if not rate:
        return None
    m, k, n = shape
    if method == "ozaki2":
        work, products = count * 2.0 * m * k * n, count
    else:
        p = ozaki_plan(m, k, n, count, "int8")
        work, products = float(p.flops), p.gemm_calls
    return np.array([work / (1e12 * rate), (m * k + k * n) * count / gpu.bandwidth,
                     m * n * products / gpu.bandwidth, 1.0])


def fit(observations: Iterable[Observation], counts: Mapping[str, int]) -> MethodsModel:
    """The model of ``observations`` (see the module notes); ``counts``: the moduli or slices each cost method's
    predictions use."""
    seen = list(observations)
    fits = tuple(_fit_cost(t, [o for o in seen if o.timed == t], counts[t.method])
                 for t in sorted({o.timed for o in seen if o.timed.method in COST_METHODS}, key=lambda t: t.name))
    efficiency: dict[tuple[int, int, int], list[float]] = {}
    for o in seen:
        if o.gemm_s and o.phase == "total" and o.timed.method in COST_METHODS:
            m, k, n = o.shape
            efficiency.setdefault(o.shape, []).append(2.0 * m * k * n / (o.gemm_s * lookup(o.gpu).peak_flops))
    table: dict[tuple[Timed, tuple[int, int, int], str], list[float]] = {}
    for o in seen:
        if o.timed.method == SPLITK and o.ratio:
            table.setdefault((o.timed, o.shape, o.gpu), []).append(o.ratio)
    return MethodsModel(fits, tuple(sorted((s, statistics.median(e)) for s, e in efficiency.items())),
                        tuple((t, s, g, statistics.median(r)) for (t, s, g), r in sorted(
                            table.items(), key=lambda item: (item[0][0].name, item[0][1], item[0][2]))),
                        tuple(sorted({o.gpu for o in seen})))


def _fit_cost(timed: Timed, seen: list[Observation], count: int) -> CostFit:
    """Non-negative least squares in relative error over every time of ``timed`` (phases included)."""
    rows, targets = [], []
    for o in seen:
        row = features(timed.method, lookup(o.gpu), o.shape, o.count or count)
        if row is None:
            continue
        rows.append(row * MASKS[o.phase] / o.seconds)
        targets.append(1.0)
    if not rows:
        raise ValueError(f"no training time of {timed.name} on a GPU with a rate for its products")
    scale = np.abs(np.array(rows)).max(axis=0)
    scale[scale == 0] = 1.0
    x, _ = nnls(np.array(rows) / scale, np.array(targets))
    x = x / scale
    errors = np.array(rows) @ x - 1.0
    totals = sorted({o.shape for o in seen if o.phase == "total"})
    return CostFit(timed, 1 / x[0] if x[0] else 0.0, float(x[1]), float(x[2]), float(x[3]), count, tuple(totals),
                   float(np.sqrt(np.mean(errors**2))), float(np.max(np.abs(errors))))


def streams(shape: tuple[int, int, int], gpu: GPU) -> bool:
    """Whether an m x k by k x n FP64 product reads its operands for at least :data:`STREAM_S` on ``gpu`` (a call
    the device, not the host, times)."""
    m, k, n = shape
    return 8.0 * k * (m + n) / gpu.bandwidth >= STREAM_S


def splitk_ratio(model: MethodsModel, timed: Timed, shape: tuple[int, int, int], gpu: GPU) -> float | None:
    """split-K's predicted ratio at ``shape`` on ``gpu`` (see the module notes), or None where it does not
    transfer: another memory family, no FP64 tensor cores, a shape the target computes rather than streams,
    another chunk kernel than the measuring GPUs run (or a capability the table lacks), or a call the host
    would time (:func:`streams`, on the target and on each measuring GPU)."""
    m, _, n = shape
    if gpu.fp64_tensor_tflops is None or m * n / (4.0 * (m + n)) > gpu.peak_flops / gpu.bandwidth:
        return None
    kernel = splitk_kernel(gpu, m, n)
    if kernel is None or not streams(shape, gpu):
        return None
    measured = [(lookup(g), r) for t, s, g, r in model.splitk if t == timed and s == tuple(shape)]
    measured = [(math.log(d.bandwidth / d.sm_count), r) for d, r in measured
                if family(d) == family(gpu) != "" and splitk_kernel(d, m, n) == kernel and streams(shape, d)]
    if not measured:
        return None
    at = math.log(gpu.bandwidth / gpu.sm_count)
    by: dict[float, list[float]] = {}
    for x, r in measured:
        by.setdefault(x, []).append(r)
    xs = sorted(by)
    ys = [statistics.mean(by[x]) for x in xs]
    return float(np.interp(at, xs, ys))


def splitk_kernel(gpu: GPU, m: int, n: int) -> str | None:
    """The split-K chunk kernel ``gpu`` runs today for an m x n FP64 output (its template instantiation: the kernel,
    its tensor-core instruction and tile), None where the table does not give its compute capability. A training
    GPU's ratios may have been timed on an earlier kernel of its class (see the module notes)."""
    if gpu.capability is None:
        return None
    return variants.choose(np.float64, m, n, gpu.capability).name


def fits_memory(method: str, gpu: GPU, shape: tuple[int, int, int], count: int) -> bool:
    """Whether the operands, the output and the method's workspace fit in ``gpu``'s memory (a point that could
    not run there is not predicted)."""
    m, k, n = shape
    operands = 8 * (m * k + k * n)
    if method == "ozaki2":
        return operands + 8 * m * n + layout(m, k, n, MAX_MODULI, "fast", direct=False).nbytes <= gpu.memory_bytes
    if method == "ozaki":
        try:
            ozaki_plan(m, k, n, count, "int8", memory=int(gpu.memory_bytes) - operands)
        except (WorkspaceError, ValueError):
            return False
        return True
    return operands + 8 * m * n <= gpu.memory_bytes


def predict(model: MethodsModel, gpu: GPU, regime: str = "sustained", splitk: bool = True,
            shapes: Iterable[tuple[int, int, int]] = PREDICTED) -> dict[str, Any]:
    """The predicted ``methods`` section of ``gpu`` (the format of :mod:`gpu.frontdoor.table`): per shape the
    training GPUs measured, and per shape of ``shapes`` (by default the acceptance grid's squares and rectangles,
    :data:`PREDICTED`), each method the model transfers there, its ratio and predicted seconds; every point
    says ``"basis": "predicted"``, so the front door reports its estimates as predictions; ``"sm_count"``, the
    GPU's SMs, on which split-K's bound rests where no split was recorded. ``splitk``: split-K's transferred
    ratios too, where they carry (:func:`splitk_ratio`; see the module notes)."""
    basis = f"predicted (transfer model from {', '.join(model.trained_on)})"
    points: dict[tuple[int, int, int], dict[str, Any]] = {}

    def add(shape: tuple[int, int, int], gemm_s: float | None, timed: Timed, ratio: float) -> None:
        gemm_s = None if gemm_s is None else float(f"{gemm_s:.4g}")
        point = points.setdefault(tuple(shape), {"shape": list(shape), "gemm_s": gemm_s, "basis": basis,
                                                 "reference": "the library GEMM (predicted)", "timed": []})
        point["gemm_s"] = point["gemm_s"] or gemm_s
        seconds = float(f"{point['gemm_s'] / ratio:.4g}") if point["gemm_s"] else None
        point["timed"].append({"method": timed.method, "config": timed.options, "ratio": round(ratio, 4),
                               "seconds": seconds, "waits": WAITS[timed.method], "source": "transfer model"})

    for f in model.fits:
        for shape in dict.fromkeys((*f.shapes, *(tuple(x) for x in shapes))):
            efficiency, seconds = model.efficiency(shape), f.seconds(gpu, shape)
            if efficiency is None or seconds is None or not fits_memory(f.timed.method, gpu, shape, f.count):
                continue
            m, k, n = shape
            gemm_s = 2.0 * m * k * n / (efficiency * gpu.peak_flops)
            add(shape, gemm_s, f.timed, gemm_s / seconds)
    for timed, shape in sorted({(t, s) for t, s, _, _ in model.splitk} if splitk else (),
                               key=lambda ts: (ts[1], ts[0].name)):
        ratio = splitk_ratio(model, timed, shape, gpu)
        if ratio is not None and fits_memory(SPLITK, gpu, shape, 0):
            add(shape, None, timed, ratio)
    return {"regime": regime, "written_by": "gemmlab profile --transfer-methods", "basis": basis,
            "sm_count": gpu.sm_count, "points": [points[s] for s in sorted(points)]}


def reproduction(model: MethodsModel, observations: Iterable[Observation]) -> list[tuple[Observation, float]]:
    """Each training time's relative error under the model on its own GPU (predicted over measured, minus 1): the
    seconds of a cost method's call or phase, split-K's ratio."""
    out = []
    for o in observations:
        if o.timed.method == SPLITK:
            predicted = splitk_ratio(model, o.timed, o.shape, lookup(o.gpu))
            if predicted is not None and o.ratio:
                out.append((o, predicted / o.ratio - 1))
            continue
        f = next(f for f in model.fits if f.timed == o.timed)
        row = features(o.timed.method, lookup(o.gpu), o.shape, o.count or f.count)
        if row is None:
            continue
        out.append((o, float(np.dot(row * MASKS[o.phase], f.coefficients)) / o.seconds - 1))
    return out
