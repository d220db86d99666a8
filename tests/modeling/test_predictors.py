"""The thesis rule, the recursive predictor and the analytic model against hand-computed cases."""

import math

import numpy as np
import pytest

from modeling.analytic import Fadd, Fmul, analytic_model
from modeling.crossover import (
    NoCrossover,
    crossing,
    crossover_point,
    find_crossing,
    find_crossover_point,
    interpolated_crossing,
    last_upward_crossing,
    one_level_time,
    speedup,
    thesis_boundaries,
    thesis_level,
)
from modeling.fits import from_coefficients
from modeling.hardware import GPUS, lookup
from modeling.recursive import RecursiveModel

# Gemm(x) = c x^3 and Geam(x) = d x^2 (ms): SpeedUp(x) = c x^3 / (7 c x^3 / 8 + 15 d x^2 / 4) = 1 at x = 30 d / c.
C, D = 1e-12, 1e-9
PURE = from_coefficients({"gemm": [C, 0, 0, 0], "geam": [D, 0, 0]})


def gemm(x):
    return C * x**3


def geam(x):
    return D * x**2


# --- thesis rule ------------------------------------------------------------------------------------

def test_speedup_and_crossover_of_pure_power_laws():
    assert one_level_time(PURE, 60000) == pytest.approx(7 * 216 / 8 + 15 * D * 30000**2)   # 189 + 13.5
    assert speedup(PURE, 60000) == pytest.approx(216 / 202.5)
    assert crossover_point(PURE, 1000, 1e6) == pytest.approx(30 * D / C, rel=1e-6)


def test_thesis_levels_double_from_P():
    assert [thesis_level(x, 1000, 4) for x in (999, 1000, 1999, 2000, 3999, 4000, 8000, 10**6)] == \
        [0, 1, 1, 2, 2, 3, 4, 4]
    assert thesis_level(10**6, 1000, 2) == 2
    assert thesis_boundaries(1000, 3) == [1000, 2000, 4000]
    with pytest.raises(ValueError, match="P > 0"):
        thesis_level(10, 0, 3)


def test_no_crossover_names_the_range_and_the_way_out():
    with pytest.raises(ValueError, match=r"no crossover in \[1000, 20000\].*calibrate larger sizes"):
        crossover_point(PURE, 1000, 20000)
    with pytest.raises(ValueError, match=r"already past the crossover at the lower end 40000"):
        crossover_point(PURE, 40000, 10**6)
    with pytest.raises(ValueError, match="give the size range"):
        crossover_point(PURE)          # given coefficients carry no calibrated range


def test_no_crossover_in_range_is_an_answer_for_find_crossing():
    found = find_crossover_point(PURE, 1000, 20000)
    assert isinstance(found, NoCrossover) and (found.lo, found.hi) == (1000, 20000)
    assert found.largest_gain < 0 and found.at == pytest.approx(20000)
    assert found.as_dict() == {"range": [1000, 20000], "largest_gain": found.largest_gain, "at": found.at}
    assert find_crossover_point(PURE, 1000, 10**6) == pytest.approx(30 * D / C, rel=1e-6)
    with pytest.raises(ValueError, match="already past the crossover"):
        find_crossover_point(PURE, 40000, 10**6)


def test_a_gain_that_rises_and_falls_back_is_not_said_to_stay_below_zero():
    hump = lambda x: 0.5 - abs(math.log2(x / 4000))          # > 0 on (2828, 5657) only
    found = find_crossing(hump, 1000, 20000, "hump")
    assert isinstance(found, NoCrossover) and found.largest_gain > 0
    assert "stays <= 0" not in str(found) and "the gain is <= 0 again at 20000" in str(found)
    with pytest.raises(ValueError, match=r"hump: no crossover in \[1000, 20000\] \(the gain is <= 0 again"):
        crossing(hump, 1000, 20000, "hump")


def test_crossing_takes_the_last_upward_zero():
    # Negative, positive, negative, then positive for good from 7: the answer is 7, not 2.
    assert crossing(lambda x: (x - 2) * (x - 4) * (x - 7), 1, 10, "t") == pytest.approx(7, rel=1e-6)
    assert last_upward_crossing([1, 2, 3, 4], [-1, 1, -1, 2]) == 2
    assert last_upward_crossing([1, 2], [1, 2]) is None and last_upward_crossing([1, 2], [-1, 0]) is None
    assert interpolated_crossing([1000, 2000, 3000], [-0.3, -0.1, 0.3]) == pytest.approx(2250)


# --- recursive predictor ----------------------------------------------------------------------------

def test_recursive_times_by_hand():
    model = RecursiveModel(gemm, geam)
    x = 40000
    assert model.time(x, 0) == pytest.approx(64)
    assert model.time(x, 1) == pytest.approx(56 + 6)                 # 7 c (x/2)^3 + 15 d (x/2)^2
    assert model.time(x, 2) == pytest.approx(49 + 10.5 + 6)          # 7 T_1(x/2) + 15 d (x/2)^2
    assert model.level(x, range(3)) == 1
    assert model.speedup(x, 1) == pytest.approx(64 / 62)


def test_inner_curves_price_the_calls_inside_a_product_only():
    slow_gemm, slow_geam = (lambda x: 1.1 * gemm(x)), (lambda x: 2 * geam(x))
    model = RecursiveModel(gemm, geam, inner_gemm=slow_gemm, inner_geam=slow_geam)
    x = 40000
    assert model.time(x, 0) == pytest.approx(64)                       # the baseline stays Gemm(x)
    assert model.time(x, 1) == pytest.approx(1.1 * 56 + 2 * 6)
    assert model.time(x, 2) == pytest.approx(1.1 * 49 + 2 * 10.5 + 2 * 6)
    # slower inner calls push the first boundary beyond the thesis rule's P
    assert model.boundary(1, 1000, 10**6) > 1.05 * RecursiveModel(gemm, geam).boundary(1, 1000, 10**6)


def test_without_overhead_the_recursion_reproduces_the_thesis_boundaries():
    model = RecursiveModel(gemm, geam)
    P = 30 * D / C
    assert model.boundaries(3, 1000, 10**6) == pytest.approx([P, 2 * P, 4 * P], rel=1e-6)
    assert model.boundaries(3, 1000, 100000)[2] is None              # 4P lies outside the range


def test_launch_overhead_shows_only_beyond_the_device_work():
    h, x = 0.01, 100.0
    own = 7 * gemm(x / 2) + 15 * geam(x / 2)
    assert own < 22 * h
    hidden = RecursiveModel(gemm, geam, launch_ms=h)
    assert hidden.time(x, 1) == pytest.approx(22 * h)                 # host-bound: max(own, 22 h)
    assert hidden.time(4e4, 1) == pytest.approx(RecursiveModel(gemm, geam).time(4e4, 1))  # device-bound
    assert hidden.time(x, 2) == pytest.approx(7 * 22 * h + 15 * h)
    synchronous = RecursiveModel(gemm, geam, launch_ms=h, overlap=False)
    assert synchronous.time(x, 1) == pytest.approx(own + 22 * h)
    assert hidden.level(2000, range(4)) == 0 and hidden.level(10**6, range(4)) == 3
    with pytest.raises(ValueError, match="launch_ms"):
        RecursiveModel(gemm, geam, launch_ms=-1)


def test_overhead_moves_the_first_boundary_up():
    P = 30 * D / C
    lifted = RecursiveModel(gemm, geam, launch_ms=5.0).boundary(1, 1000, 10**6)   # 22 x 5 ms of host time
    assert lifted > P * 1.01


# --- analytic model and hardware table ---------------------------------------------------------------

def test_fmul_and_fadd_by_hand():
    assert Fmul(1e12)(1000) == pytest.approx(1.999)       # (2 N - 1) N^2 / F, ms
    assert Fadd(1e12)(1000) == pytest.approx(0.024)       # 3 x 8 N^2 / G, ms
    assert Fadd(1e12, itemsize=4)(1000) == pytest.approx(0.012)


def test_analytic_speedup_by_hand():
    gpu = GPUS["V100"]
    model = analytic_model(gpu, gemm_efficiency=1.0, geam_efficiency=1.0)
    F, G = 7.8e12, 900e9
    t0 = 1e3 * (2 * 2000 - 1) * 2000**2 / F
    t1 = 7 * 1e3 * (2 * 1000 - 1) * 1000**2 / F + 15 * 1e3 * 24 * 1000**2 / G
    assert model.speedup(2000, 1) == pytest.approx(t0 / t1)
    scaled = analytic_model(gpu)                          # Otsuka's 0.90 / 0.92 efficiencies
    assert scaled.time(2000, 0) == pytest.approx(t0 / 0.90)


def test_allocation_time_counts_per_temporary():
    alloc = lambda n: 0.5
    lai = analytic_model(GPUS["A100"], "lai", alloc_ms=alloc)
    plain = analytic_model(GPUS["A100"], "lai")
    assert lai.time(4096, 1) - plain.time(4096, 1) == pytest.approx(2 * 0.5)          # 2 temporaries
    assert lai.time(4096, 2) - plain.time(4096, 2) == pytest.approx(2 * 0.5 + 7 * 2 * 0.5)
    rum = analytic_model(GPUS["A100"], alloc_ms=alloc)    # RUM allocates nothing
    assert rum.time(4096, 2) == analytic_model(GPUS["A100"]).time(4096, 2)


def test_analytic_crossover_moves_up_when_flops_outgrow_bandwidth():
    P = {name: analytic_model(g).boundary(1, 256, 2**20) for name, g in GPUS.items()}
    # P ~ 360 F / G for large N: the H100's FP64 tensor cores outgrow its bandwidth.
    assert P["H100"] == pytest.approx(360 * 67e12 * 0.9 / (3350e9 * 0.92), rel=0.01)
    assert P["V100"] < P["A100"] < P["H100"]


def test_hardware_rows_and_lookup():
    for gpu in GPUS.values():
        assert gpu.fp64_tflops > 0 and gpu.bandwidth_gbs > 0 and gpu.sm_count > 0 and gpu.memory_gb > 0
        assert gpu.registers_per_sm == 65536
        assert gpu.fp64_tensor_tflops is None or gpu.fp64_tensor_tflops >= gpu.fp64_tflops
    assert lookup("NVIDIA H100 80GB HBM3").name == "H100"
    assert lookup("NVIDIA H100 PCIe").name == "H100-PCIe"
    assert lookup("Tesla V100-SXM2-32GB").name == "V100"
    assert lookup("Tesla K20c").name == "K20" and lookup("h200").name == "H200"
    assert lookup("NVIDIA A100-SXM4-80GB").peak_flops == 19.5e12
    with pytest.raises(ValueError, match="no hardware row for 'RTX 3090'"):
        lookup("RTX 3090")
    with pytest.raises(ValueError, match="gemm_efficiency"):
        analytic_model(GPUS["H100"], gemm_efficiency=1.5)


def test_math_sanity_of_the_large_n_limit():
    model = analytic_model(GPUS["H100"])
    assert model.speedup(2**22, 1) == pytest.approx(8 / 7, rel=0.01)
    assert math.isclose(np.log2(model.boundary(2, 256, 2**20) / model.boundary(1, 256, 2**20)), 1, rel_tol=1e-3)
