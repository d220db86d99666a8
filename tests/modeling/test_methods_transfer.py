"""The methods transfer model (:mod:`modeling.methods_transfer`) on synthetic training sets: the fit recovers the
costs that made the times, a prediction is the cost model evaluated with the target's datasheet, split-K's ratios
move only within a memory family and a memory-bound shape, and a GPU without INT8 tensor cores gets no Ozaki."""

import json
import math
from dataclasses import replace

import pytest

from gpu.frontdoor.rank import rank
from gpu.frontdoor.table import Timed
from modeling.hardware import GPUS
from modeling.methods_transfer import (
    STREAM_S,
    MethodsModel,
    Observation,
    fit,
    fits_memory,
    predict,
    reproduction,
    splitk_kernel,
    splitk_ratio,
    streams,
)

OZAKI2 = Timed.of("ozaki2", {"moduli": "auto", "target": "dgemm"})
OZAKI1 = Timed.of("ozaki", {"slice_format": "int8", "target": "dgemm"})
ATOMIC = Timed.of("splitk", {"deterministic": False})
SQUARES = [(n, n, n) for n in (4096, 8192, 16384)] + [(1024, 2**18, 1024)]
#: The costs the synthetic times are made of.
ETA, C_IN, C_OUT, T0, EFFICIENCY = 0.7, 5.0, 4.0, 3e-4, 0.85


def ozaki2_seconds(gpu, shape, q):
    """Scheme II's time by the module's formula, written out here."""
    m, k, n = shape
    return (q * 2 * m * k * n / (ETA * gpu.int8_tops * 1e12)
            + (C_IN * (m * k + k * n) * q + C_OUT * m * n * q) / (gpu.bandwidth_gbs * 1e9) + T0)


def gemm_seconds(gpu, shape):
    m, k, n = shape
    return 2 * m * k * n / (EFFICIENCY * 1e12 * (gpu.fp64_tensor_tflops or gpu.fp64_tflops))


def synthetic(gpus=("H100", "H200")):
    out = []
    for name in gpus:
        gpu = GPUS[name]
        for shape in SQUARES:
            for q in (14, 15, 16):
                out.append(Observation(name, OZAKI2, shape, ozaki2_seconds(gpu, shape, q), gemm_seconds(gpu, shape), q))
    return out


def test_the_fit_recovers_the_costs_that_made_the_times():
    model = fit(synthetic(), {"ozaki2": 15})
    (f,) = model.fits
    assert f.eta == pytest.approx(ETA, rel=1e-6) and f.c_in == pytest.approx(C_IN, rel=1e-6)
    assert f.c_out == pytest.approx(C_OUT, rel=1e-6) and f.t0_s == pytest.approx(T0, rel=1e-6)
    assert f.rms < 1e-9 and f.count == 15 and set(f.shapes) == set(SQUARES)
    assert all(abs(error) < 1e-9 for _, error in reproduction(model, synthetic()))
    assert dict(model.gemm_efficiency) == pytest.approx({s: EFFICIENCY for s in SQUARES})
    assert json.loads(json.dumps(model.as_dict()))["cost"][0]["c_in"] == pytest.approx(C_IN)


def test_a_prediction_is_the_cost_model_on_the_targets_datasheet():
    model = fit(synthetic(["H100"]), {"ozaki2": 15})
    for name in ("A100", "B200", "L40S", "H200"):
        gpu = GPUS[name]
        section = predict(model, gpu)
        for point in section["points"]:
            shape = tuple(point["shape"])
            (entry,) = point["timed"]
            expected = gemm_seconds(gpu, shape) / ozaki2_seconds(gpu, shape, 15)
            assert entry["ratio"] == pytest.approx(expected, abs=1e-4), (name, shape)
            assert entry["waits"] and point["basis"] == "predicted (transfer model from H100)"
    # more bandwidth for the same INT8 and FP64 rates: the passes cost less, so the ratio rises (H100 -> H200)
    h100, h200 = (predict(model, GPUS[g])["points"][0]["timed"][0]["ratio"] for g in ("H100", "H200"))
    assert h200 > h100


def test_the_int8_share_of_a_product_is_what_the_phases_say():
    """Phase rows pin the products' share: times made with a 0.83 share of INT8 at N = 16384 fit back to it."""
    gpu, shape = GPUS["H100"], (16384, 16384, 16384)
    total = ozaki2_seconds(gpu, shape, 15)
    products = 15 * 2 * 16384**3 / (ETA * gpu.int8_tops * 1e12)
    seen = synthetic(["H100"]) + [Observation("H100", OZAKI2, shape, products, None, 15, "gemm"),
                                  Observation("H100", OZAKI2, shape, total - products, None, 15, "passes")]
    (f,) = fit(seen, {"ozaki2": 15}).fits
    share = 15 * 2 * 16384**3 / (f.eta * gpu.int8_tops * 1e12) / f.seconds(gpu, shape)
    assert share == pytest.approx(products / total, rel=1e-6) and 0.7 < share < 0.9


@pytest.mark.parametrize("name", ["K20", "P100", "V100"])
def test_a_gpu_without_int8_tensor_cores_gets_no_ozaki_and_stays_unmeasured(name):
    assert GPUS[name].int8_tops is None
    model = fit(synthetic() + [Observation("H100", OZAKI1, (4096,) * 3, 7e-3, 2.4e-3, 11)], {"ozaki2": 15, "ozaki": 11})
    section = predict(model, GPUS[name])
    assert not [e for p in section["points"] for e in p["timed"] if e["method"] in ("ozaki2", "ozaki")]
    ranking = rank(16384, 16384, 16384, "dgemm", methods=section)
    ozaki2 = next(r for r in ranking.entries if r.family == "ozaki2")
    assert ranking.winner.family == "gemm" and ozaki2.ratio is None and "not" in ozaki2.basis


def _splitk(ratios):
    return [Observation(gpu, ATOMIC, shape, 1.0, r) for (gpu, shape), r in ratios.items()]


def test_split_k_moves_within_its_memory_family_by_bandwidth_per_sm():
    tiny, wide = (16, 2**22, 16), (64, 2**22, 64)
    model = fit(_splitk({("H100", tiny): 1.3, ("H200", tiny): 0.9, ("H100", wide): 1.2, ("H200", wide): 0.8}), {})
    assert splitk_ratio(model, ATOMIC, tiny, GPUS["H100"]) == pytest.approx(1.3)
    assert splitk_ratio(model, ATOMIC, tiny, GPUS["H200"]) == pytest.approx(0.9)
    # below the H100's bandwidth per SM (H100 PCIe 17.5 GB/s) its ratio; above the H200's (B200), the H200's
    assert splitk_ratio(model, ATOMIC, tiny, GPUS["H100-PCIe"]) == pytest.approx(1.3)
    assert splitk_ratio(model, ATOMIC, tiny, GPUS["B200"]) == pytest.approx(0.9)
    # between them, linear in log bandwidth per SM: at the geometric mean, the mean
    middle = replace(GPUS["H100"], bandwidth_gbs=math.sqrt(3350 * 4800))
    assert splitk_ratio(model, ATOMIC, tiny, middle) == pytest.approx(1.1)
    # the B200's FP64 peak over bandwidth (5.2 flop/byte) is below m = n = 64's 8: computed there, not streamed
    assert splitk_ratio(model, ATOMIC, wide, GPUS["B200"]) is None
    # another memory family (GDDR) or another kernel (no FP64 tensor cores): nothing
    for name in ("L40S", "RTX 4090", "V100", "P100"):
        assert splitk_ratio(model, ATOMIC, tiny, GPUS[name]) is None, name
    alone = fit(_splitk({("H100", tiny): 1.3}), {})
    assert splitk_ratio(alone, ATOMIC, tiny, GPUS["H200"]) == pytest.approx(1.3), "one GPU: its ratio unchanged"
    assert splitk_ratio(alone, ATOMIC, (32, 2**20, 32), GPUS["H200"]) is None, "a shape nobody measured"


def test_split_k_moves_only_between_gpus_that_run_its_kernel():
    tiny, odd = (16, 2**20, 16), (17, 2**20, 17)
    model = fit(_splitk({("H100", tiny): 1.3, ("H100", odd): 1.1}), {})
    assert splitk_kernel(GPUS["H200"], 16, 16) == splitk_kernel(GPUS["H100"], 16, 16)
    for shape in (tiny, odd):       # sm_80 runs m8n8k4 kernels where sm_90 runs the tensor-map or m16n8k16 ones
        assert splitk_kernel(GPUS["A100"], shape[0], shape[2]) != splitk_kernel(GPUS["H100"], shape[0], shape[2])
        assert splitk_ratio(model, ATOMIC, shape, GPUS["A100"]) is None, shape
    assert splitk_ratio(model, ATOMIC, odd, GPUS["H200"]) == pytest.approx(1.1)
    assert splitk_ratio(model, ATOMIC, tiny, replace(GPUS["H100"], capability=None)) is None, "kernel unknown"


def test_split_k_is_not_transferred_where_the_host_sets_the_time():
    short, long = (16, 2**16, 16), (16, 2**20, 16)
    model = fit(_splitk({("H100", short): 1.6, ("H100", long): 1.3}), {})
    assert 8 * 2**16 * 32 / GPUS["H200"].bandwidth < STREAM_S < 8 * 2**20 * 32 / GPUS["H200"].bandwidth
    assert not streams(short, GPUS["H200"]) and streams(long, GPUS["H200"])
    assert splitk_ratio(model, ATOMIC, short, GPUS["H200"]) is None
    assert splitk_ratio(model, ATOMIC, long, GPUS["H200"]) == pytest.approx(1.3)
    shapes = {tuple(p["shape"]) for p in predict(model, GPUS["H200"])["points"]
              if any(e["method"] == "splitk" for e in p["timed"])}
    assert long in shapes and short not in shapes
    # nor a ratio its own GPU's host timed: 24 x 2^19 x 24 streams 42 us on the H200, 60 on the H100, 101 on its PCIe
    mid = (24, 2**19, 24)
    assert not streams(mid, GPUS["H200"]) and streams(mid, GPUS["H100"]) and streams(mid, GPUS["H100-PCIe"])
    assert splitk_ratio(fit(_splitk({("H200", mid): 1.3}), {}), ATOMIC, mid, GPUS["H100-PCIe"]) is None
    assert splitk_ratio(fit(_splitk({("H100", mid): 1.3}), {}), ATOMIC, mid, GPUS["H100-PCIe"]) == pytest.approx(1.3)


def test_the_front_door_reports_predicted_estimates_as_predictions():
    model = fit(synthetic() + _splitk({("H100", (16, 2**20, 16)): 1.3}), {"ozaki2": 15})
    assert not any(e["method"] == "splitk" for p in predict(model, GPUS["A100"])["points"] for e in p["timed"])
    assert not any(e["method"] == "splitk" for p in predict(model, GPUS["H100-PCIe"], splitk=False)["points"]
                   for e in p["timed"])
    section = predict(model, GPUS["H100-PCIe"])
    ranking = rank(16384, 16384, 16384, "dgemm", methods=section)
    assert ranking.winner.family == "ozaki2"
    assert ranking.winner.basis == "predicted (transfer model from H100, H200; square products; at N = 16384)"
    tiny = rank(16, 2**20, 16, "dgemm", methods=section)
    assert tiny.winner.name == "splitk(deterministic=False)" and tiny.winner.basis.startswith("predicted (")
    assert "not predicted for this class of shape" in tiny.explain()
    rect = rank(1024, 2**18, 1024, "dgemm", methods=section)
    assert any(r.basis == "predicted at this shape (transfer model from H100, H200)" for r in rect.entries)
    measured = rank(16384, 16384, 16384, "dgemm", methods={"points": [
        {"shape": [16384] * 3, "timed": [{"method": "ozaki2", "config": OZAKI2.options, "ratio": 1.4}]}]})
    assert measured.winner.basis.startswith("measured (square products")


def test_a_point_that_cannot_fit_in_the_targets_memory_is_not_predicted():
    rtx = GPUS["RTX 4090"]                                      # 24 GB
    assert fits_memory("ozaki2", rtx, (8192,) * 3, 15) and not fits_memory("ozaki2", rtx, (32768,) * 3, 15)
    assert fits_memory("ozaki", rtx, (4096,) * 3, 11) and not fits_memory("ozaki", rtx, (65536,) * 3, 11)
    big = [Observation(g, OZAKI2, (32768,) * 3, ozaki2_seconds(GPUS[g], (32768,) * 3, 15),
                       gemm_seconds(GPUS[g], (32768,) * 3), 15) for g in ("H100", "H200")]
    model = fit(synthetic() + big, {"ozaki2": 15})
    shapes = {tuple(p["shape"]) for p in predict(model, rtx)["points"]}
    assert (32768,) * 3 not in shapes and (8192,) * 3 in shapes
    assert (32768,) * 3 in {tuple(p["shape"]) for p in predict(model, GPUS["B200"])["points"]}


def test_the_library_gemms_efficiency_away_from_the_measured_shapes_is_the_squares_in_log_flops():
    model = MethodsModel((), (((4096,) * 3, 0.8), ((16384,) * 3, 0.9), ((1024, 2**18, 1024), 0.5)), (), ("X",))
    assert model.efficiency((1024, 2**18, 1024)) == 0.5, "measured where measured"
    assert model.efficiency((8192,) * 3) == pytest.approx(0.85), "halfway in log flops"
    assert model.efficiency((32768, 4096, 32768)) == pytest.approx(0.9), "its flops are 16384's: clamped beyond"
    assert model.efficiency((512,) * 3) == pytest.approx(0.8)
    assert model.efficiency((16, 2**20, 16)) is None, "a tiny output's GEMM is bound by bytes, not flops"
    assert MethodsModel((), (((1024, 2**18, 1024), 0.5),), (), ("X",)).efficiency((8192,) * 3) is None
