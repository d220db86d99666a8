"""Published figures of NVIDIA data-centre GPUs: the inputs of the analytic model.

Peaks are the vendor's boost-clock figures for FP64 (vector units, and tensor
cores where the GPU has FP64 tensor cores; cuBLAS DGEMM runs on those), the
memory bandwidth and size, the SM count and the 32-bit registers per SM. The
source of each row is in the comment above it. Devices are matched by the
name CUDA reports (``cudaGetDeviceProperties().name``), so a stored run finds
its row.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class GPU:
    name: str
    fp64_tflops: float                 # FP64 on the vector units
    fp64_tensor_tflops: float | None   # FP64 on tensor cores (None: the GPU has none)
    bandwidth_gbs: float               # device memory, GB/s (10^9 bytes)
    sm_count: int
    registers_per_sm: int              # 32-bit registers
    memory_gb: float
    pattern: str                       # regular expression matching CUDA's device name

    @property
    def peak_flops(self) -> float:
        """FLOP/s a library DGEMM can reach: the tensor-core peak where there is one."""
        return 1e12 * (self.fp64_tensor_tflops or self.fp64_tflops)

    @property
    def bandwidth(self) -> float:
        """Bytes/s."""
        return 1e9 * self.bandwidth_gbs

    def as_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if k != "pattern"}


GPUS: dict[str, GPU] = {g.name: g for g in (
    # Tesla K20 (GK110): NVIDIA "Tesla K20 GPU Accelerator Board Specification" BD-06455-001 (2012):
    # 1.17 TFLOPS FP64, 208 GB/s, 5 GB; 13 SMX; 65,536 registers per SMX (Kepler GK110 whitepaper).
    GPU("K20", 1.17, None, 208, 13, 65536, 5, r"\bK20[cm]?\b"),
    # Tesla P100 SXM2 (GP100): NVIDIA Tesla P100 datasheet (2016) and "Pascal P100" whitepaper:
    # 5.3 TFLOPS FP64, 732 GB/s HBM2, 16 GB; 56 SMs; 65,536 registers per SM.
    GPU("P100", 5.3, None, 732, 56, 65536, 16, r"\bP100\b"),
    # Tesla V100 SXM2 (GV100): NVIDIA V100 datasheet (2020) and "Volta" whitepaper: 7.8 TFLOPS
    # FP64 (Volta's tensor cores are FP16 only), 900 GB/s HBM2, 16/32 GB; 80 SMs; 65,536 registers.
    GPU("V100", 7.8, None, 900, 80, 65536, 32, r"\bV100\b"),
    # A100 SXM4 80GB (GA100): NVIDIA A100 datasheet (2021) and "Ampere GA100" whitepaper: 9.7 TFLOPS
    # FP64, 19.5 TFLOPS FP64 tensor core, 2,039 GB/s HBM2e, 80 GB; 108 SMs; 65,536 registers per SM.
    GPU("A100", 9.7, 19.5, 2039, 108, 65536, 80, r"\bA100\b(?!.*PCIe)"),
    # H100 SXM5 80GB (GH100): NVIDIA H100 datasheet (2023) and "Hopper" whitepaper: 34 TFLOPS FP64,
    # 67 TFLOPS FP64 tensor core, 3.35 TB/s HBM3, 80 GB; 132 SMs; 65,536 registers per SM.
    # CUDA names it "NVIDIA H100 80GB HBM3".
    GPU("H100", 34, 67, 3350, 132, 65536, 80, r"\bH100\b(?!.*(PCIe|NVL))"),
    # H100 PCIe (GH100): same datasheet: 26 TFLOPS FP64, 51 TFLOPS FP64 tensor core, 2.0 TB/s HBM2e,
    # 80 GB; 114 SMs.
    GPU("H100-PCIe", 26, 51, 2000, 114, 65536, 80, r"\bH100\b.*PCIe"),
    # H200 SXM (GH100 with HBM3e): NVIDIA H200 datasheet (2024): 34 TFLOPS FP64, 67 TFLOPS FP64
    # tensor core, 4.8 TB/s, 141 GB; the GH100's 132 SMs and 65,536 registers per SM.
    GPU("H200", 34, 67, 4800, 132, 65536, 141, r"\bH200\b"),
)}


def lookup(name: str) -> GPU:
    """The table row for a short name (``H100``) or a CUDA device name
    (``NVIDIA H100 80GB HBM3``), case-insensitive; ValueError listing the rows otherwise."""
    for gpu in GPUS.values():
        if name.strip().lower() == gpu.name.lower():
            return gpu
    matches = [g for g in GPUS.values() if re.search(g.pattern, name, re.IGNORECASE)]
    if len(matches) == 1:
        return matches[0]
    raise ValueError(f"no hardware row for {name!r}; known: {', '.join(GPUS)} "
                     "(add a row to modeling/hardware.py with its datasheet as source)")
