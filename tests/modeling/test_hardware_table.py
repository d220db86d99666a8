"""The hardware table: every row positive and sourced, CUDA names matching at most one row, and the
consumer parts' FP64 at 1/64 of FP32 (where the analytic crossover falls to a few hundred)."""

import re
from pathlib import Path

import pytest

from modeling import hardware
from modeling.analytic import analytic_model
from modeling.hardware import GPUS, lookup, matches

# Names as CUDA reports them (cudaGetDeviceProperties().name), with the row each must find.
CUDA_NAMES = {
    "Tesla K20c": "K20", "Tesla K20m": "K20",
    "Tesla P100-SXM2-16GB": "P100", "Tesla P100-PCIE-16GB": "P100",
    "Tesla V100-SXM2-32GB": "V100", "Tesla V100-PCIE-16GB": "V100",
    "NVIDIA A100-SXM4-80GB": "A100", "NVIDIA A100-SXM4-40GB": "A100",
    "NVIDIA H100 80GB HBM3": "H100", "NVIDIA H100 PCIe": "H100-PCIe",
    "NVIDIA H200": "H200",
    "NVIDIA B200": "B200",
    "NVIDIA L40S": "L40S",
    "NVIDIA GeForce RTX 4090": "RTX 4090",
    "NVIDIA GeForce RTX 5090": "RTX 5090",
    "NVIDIA RTX PRO 6000 Blackwell Workstation Edition": "RTX PRO 6000",
}
# Real CUDA names with no row (another chip, another clock, or no sourced figures): they must match none.
NO_ROW = [
    "NVIDIA GB200", "NVIDIA B300 SXM6 AC", "NVIDIA L40", "NVIDIA A100 80GB PCIe", "NVIDIA H100 NVL",
    "NVIDIA GeForce RTX 4090 D", "NVIDIA GeForce RTX 4090 Laptop GPU", "NVIDIA GeForce RTX 5090 D",
    "NVIDIA RTX PRO 6000 Blackwell Server Edition", "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition",
    "NVIDIA RTX 6000 Ada Generation", "NVIDIA GeForce RTX 3090",
]
CONSUMER = ("L40S", "RTX 4090", "RTX 5090", "RTX PRO 6000")


def test_rows_are_positive_and_consistent():
    for gpu in GPUS.values():
        assert gpu.fp64_tflops > 0 and gpu.bandwidth_gbs > 0 and gpu.sm_count > 0 and gpu.memory_gb > 0, gpu
        assert gpu.registers_per_sm > 0 and gpu.fp32_tflops and gpu.fp32_tflops > 0, gpu
        assert gpu.fp64_tensor_tflops is None or gpu.fp64_tensor_tflops >= gpu.fp64_tflops, gpu
        assert gpu.peak_flops > 0 and gpu.bandwidth == 1e9 * gpu.bandwidth_gbs
        assert "pattern" not in gpu.as_dict() and gpu.as_dict()["fp32_tflops"] == gpu.fp32_tflops


def test_every_row_has_a_source_comment():
    """The comment block right above each row names where its figures come from."""
    lines = Path(hardware.__file__).read_text().splitlines()
    rows = [i for i, line in enumerate(lines) if re.match(r'\s+GPU\("', line)]
    assert len(rows) == len(GPUS)
    for i in rows:
        comment = []
        while lines[i - 1 - len(comment)].strip().startswith("#"):
            comment.append(lines[i - 1 - len(comment)])
        text = " ".join(comment)
        assert len(comment) >= 2 and re.search(r"datasheet|whitepaper|\.com|\.se|github|TechPowerUp", text), lines[i]


@pytest.mark.parametrize("name", sorted(CUDA_NAMES))
def test_cuda_names_match_exactly_one_row(name):
    assert [g.name for g in matches(name)] == [CUDA_NAMES[name]]
    assert lookup(name).name == CUDA_NAMES[name]


@pytest.mark.parametrize("name", NO_ROW)
def test_cuda_names_of_other_parts_match_no_row(name):
    assert matches(name) == []
    with pytest.raises(ValueError, match="no hardware row"):
        lookup(name)


def test_short_names_find_their_own_row_only():
    for gpu in GPUS.values():
        assert lookup(gpu.name) is gpu and lookup(gpu.name.lower()) is gpu
        assert matches(gpu.name) in ([], [gpu])


def test_consumer_parts_run_fp64_at_a_64th_of_fp32():
    for name in CONSUMER:
        assert GPUS[name].fp64_per_fp32 == pytest.approx(1 / 64, rel=0.01)
        assert GPUS[name].fp64_tensor_tflops is None
    for name in set(GPUS) - set(CONSUMER):
        assert GPUS[name].fp64_per_fp32 >= 0.33


def test_analytic_crossover_of_fp64_starved_parts_is_a_few_hundred():
    """P ~ 360 F / G: at 1/64-rate FP64 the products are so slow against the bandwidth that the
    additions cost almost nothing, and one level pays from a few hundred."""
    P = {name: analytic_model(g).boundary(1, 64, 2**20) for name, g in GPUS.items()}
    assert all(200 < P[name] < 700 for name in CONSUMER)
    assert min(P[name] for name in set(GPUS) - set(CONSUMER)) > 1500
    assert P["RTX 4090"] == pytest.approx(360 * 1.29e12 * 0.9 / (1008e9 * 0.92) - 3, rel=0.01)
