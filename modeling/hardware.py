"""Published figures of NVIDIA GPUs: the inputs of the analytic model and of the transfer model.

Peaks are the vendor's boost-clock figures for FP64 (vector units, and tensor
cores where the GPU has FP64 tensor cores; cuBLAS DGEMM runs on those), FP32 on
the vector units, dense INT8 on tensor cores (the Ozaki schemes' products, for
:mod:`modeling.methods_transfer`; sparse figures halved), the memory bandwidth,
kind and size, the SM count and the 32-bit registers per SM. The source of each
row is in the comment above it. Devices
are matched by the name CUDA reports (``cudaGetDeviceProperties().name``), so a
stored run finds its row; a name matches at most one row.

Ada and GeForce/RTX Blackwell parts (L40S, RTX 4090, RTX 5090, RTX PRO 6000) run
FP64 at 1/64 of FP32 (:attr:`GPU.fp64_per_fp32`): their DGEMM is so slow against
their bandwidth that the analytic crossover falls to a few hundred, and the
product a user wants there is rarely FP64 DGEMM at all. (The transfer model,
which also counts how the half-size products fill the waves of SMs, puts it at
3600-4200: :mod:`modeling.fill`.)
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
    memory_gb: float                   # device memory as the datasheet gives it, GB (10^9 bytes)
    pattern: str                       # regular expression matching CUDA's device name
    fp32_tflops: float | None = None   # FP32 on the vector units (None: no source found)
    int8_tops: float | None = None     # dense INT8 on tensor cores, TOPS (None: no INT8 tensor cores, or no source)
    memory_kind: str | None = None     # HBM2, HBM2e, HBM3, HBM3e, GDDR5, GDDR6, GDDR6X, GDDR7
    capability: int | None = None      # CUDA compute capability as 10 major + minor (90: sm_90), which kernels run

    @property
    def peak_flops(self) -> float:
        """FLOP/s a library DGEMM can reach: the tensor-core peak where there is one."""
        return 1e12 * (self.fp64_tensor_tflops or self.fp64_tflops)

    @property
    def fp64_per_fp32(self) -> float | None:
        """FP64 over FP32 vector rate: 1/2 on the data-centre parts, 1/64 on Ada and RTX Blackwell."""
        return self.fp64_tflops / self.fp32_tflops if self.fp32_tflops else None

    @property
    def bandwidth(self) -> float:
        """Bytes/s."""
        return 1e9 * self.bandwidth_gbs

    @property
    def memory_bytes(self) -> float:
        """Device memory in bytes, from the datasheet's GB (10^9 bytes; CUDA reports a few per cent more on
        the HBM parts, 85.5e9 bytes on the H100 80GB, so a product within that margin is judged not to fit)."""
        return 1e9 * self.memory_gb

    def as_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if k != "pattern"}


#: ``capability``: NVIDIA's table of CUDA GPUs and their compute capability (developer.nvidia.com/cuda-gpus) and the
#: CUDA C++ Programming Guide's list: Kepler GK110 3.5, Pascal GP100 6.0, Volta 7.0, A100 8.0, Ada 8.9, Hopper 9.0,
#: B200 10.0, GeForce and workstation Blackwell (GB202) 12.0.
GPUS: dict[str, GPU] = {g.name: g for g in (
    # Tesla K20 (GK110): NVIDIA "Tesla K20 GPU Accelerator Board Specification" BD-06455-001 (2012):
    # 1.17 TFLOPS FP64, 208 GB/s, 5 GB; 13 SMX; 65,536 registers per SMX (Kepler GK110 whitepaper).
    # FP32 3.52 TFLOPS: NVIDIA's Kepler family datasheet as quoted at coderapp.vercel.app/answer/27073517
    # (K20: 3.52 single, 1.17 double); tecnogaming.com's K20 launch specs give the same.
    # GDDR5 (the board specification above); no INT8 tensor cores (Kepler has none).
    GPU("K20", 1.17, None, 208, 13, 65536, 5, r"\bK20[cm]?\b", fp32_tflops=3.52, memory_kind="GDDR5", capability=35),
    # Tesla P100 SXM2 (GP100): NVIDIA Tesla P100 datasheet (2016) and "Pascal P100" whitepaper:
    # 5.3 TFLOPS FP64, 732 GB/s HBM2, 16 GB; 56 SMs; 65,536 registers per SM. FP32 10.6 TFLOPS: NVIDIA's
    # P100 launch figures (10.6 single, 5.3 double, 21.2 half) as restated at oreograce.blogg.se.
    # HBM2 (the datasheet above); no INT8 tensor cores (Pascal has no tensor cores).
    GPU("P100", 5.3, None, 732, 56, 65536, 16, r"\bP100\b", fp32_tflops=10.6, memory_kind="HBM2", capability=60),
    # Tesla V100 SXM2 (GV100): NVIDIA V100 datasheet (2020) and "Volta" whitepaper: 7.8 TFLOPS
    # FP64 (Volta's tensor cores are FP16 only), 900 GB/s HBM2, 16/32 GB; 80 SMs; 65,536 registers.
    # FP32 15.7 TFLOPS: hmc-tech.com/gpu/nvidia-b200-vs-nvidia-v100-sxm-16gb lists 15.67 for the V100 SXM2.
    # HBM2; no INT8 tensor cores (Volta's tensor cores take FP16 only, the whitepaper above).
    GPU("V100", 7.8, None, 900, 80, 65536, 32, r"\bV100\b", fp32_tflops=15.7, memory_kind="HBM2", capability=70),
    # A100 SXM4 80GB (GA100): NVIDIA A100 datasheet (2021) and "Ampere GA100" whitepaper: 9.7 TFLOPS
    # FP64, 19.5 TFLOPS FP64 tensor core, 2,039 GB/s HBM2e, 80 GB; 108 SMs; 65,536 registers per SM.
    # FP32 19.5 TFLOPS: hmc-tech.com/gpus/nvidia-a100-sxm-vs-nvidia-b200 lists 19.49 for the A100 SXM.
    # INT8 tensor 624 TOPS dense (1,248 with sparsity): the A100 datasheet's table as reproduced at
    # glennklockwood.com/garden/processors/A100 (nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf). HBM2e.
    GPU("A100", 9.7, 19.5, 2039, 108, 65536, 80, r"\bA100\b(?!.*PCIe)", fp32_tflops=19.5, int8_tops=624,
        memory_kind="HBM2e", capability=80),
    # H100 SXM5 80GB (GH100): NVIDIA H100 datasheet (2023) and "Hopper" whitepaper: 34 TFLOPS FP64,
    # 67 TFLOPS FP64 tensor core, 3.35 TB/s HBM3, 80 GB; 132 SMs; 65,536 registers per SM.
    # CUDA names it "NVIDIA H100 80GB HBM3". FP32 67 TFLOPS: the datasheet's table as reproduced at
    # archive-lib.hpctech.co.jp/gpuproduct/nvidia-h100.html (also glennklockwood.com: 66.9).
    # INT8 tensor 1,979 TOPS dense: glennklockwood.com/garden/processors/h100 (1978.9 matrix, 3957.8 sparse);
    # the hpctech.co.jp table gives 3,958 "with sparsity, 1/2 lower without". HBM3.
    GPU("H100", 34, 67, 3350, 132, 65536, 80, r"\bH100\b(?!.*(PCIe|NVL))", fp32_tflops=67, int8_tops=1979,
        memory_kind="HBM3", capability=90),
    # H100 PCIe (GH100): same datasheet: 26 TFLOPS FP64, 51 TFLOPS FP64 tensor core, 2.0 TB/s HBM2e,
    # 80 GB; 114 SMs. FP32 51 TFLOPS: same hpctech.co.jp table.
    # INT8 tensor 1,513 TOPS dense: the same hpctech.co.jp table's 3,026 with sparsity, halved. HBM2e.
    GPU("H100-PCIe", 26, 51, 2000, 114, 65536, 80, r"\bH100\b.*PCIe", fp32_tflops=51, int8_tops=1513,
        memory_kind="HBM2e", capability=90),
    # H200 SXM (GH100 with HBM3e): NVIDIA H200 datasheet (2024): 34 TFLOPS FP64, 67 TFLOPS FP64
    # tensor core, 4.8 TB/s, 141 GB; the GH100's 132 SMs and 65,536 registers per SM. FP32 67 TFLOPS:
    # the H100 SXM5's (glennklockwood.com/garden/processors/h100: the H200 is that GPU with HBM3e).
    # INT8 tensor 1,979 TOPS dense: the H100 SXM5's (glennklockwood.com, as above; itkb.uw.cz's H200 vs B300
    # table gives ~1,979 dense FP8, the same rate on Hopper). HBM3e.
    GPU("H200", 34, 67, 4800, 132, 65536, 141, r"\bH200\b", fp32_tflops=67, int8_tops=1979, memory_kind="HBM3e",
        capability=90),
    # B200 (HGX B200, 1000 W): NVIDIA's Blackwell datasheet as tabulated at
    # glennklockwood.com/garden/processors/B200: 40 TFLOPS FP64 vector and 40 matrix (tensor), 80 FP32;
    # Cornell CVW (cvw.cac.cornell.edu/gpu-architecture/horizon-gpus-blackwell-b200) also gives 40 FP64.
    # Some later tables list 37.5 FP64 / 75 FP32 (hmc-tech.com, verda.com); the datasheet's 40 is kept.
    # 7.7 TB/s and 180 GB: the per-GPU table at verda.com/blog/gb300-nvl72-architecture; the driver
    # reports a 7680-bit bus at 3996 MHz, 7.67 TB/s (github.com/pytorch/ao pull 4002; NVIDIA's 2024 brief
    # said 8 TB/s from 8192 bits). 148 SMs and 65,536 registers per SM: the device query in that pull
    # (Cornell CVW: 256 KB register file per SM). CUDA names it "NVIDIA B200"; "NVIDIA GB200" is not this
    # row (its per-GPU SM count and memory were not found; no GB200 row).
    # INT8 tensor 4,500 TOPS dense (9,000 with sparsity) at 1,000 W: glennklockwood.com (as above) and
    # hmc-tech.com/gpu/nvidia-b200-vs-nvidia-gb200 (4.5 POPS, 9 sparse). HBM3e.
    GPU("B200", 40, 40, 7700, 148, 65536, 180, r"\bB200\b", fp32_tflops=80, int8_tops=4500, memory_kind="HBM3e",
        capability=100),
    # L40S (AD102): NVIDIA L40S datasheet table as reproduced at mullet.se (product 355414) and
    # omegaco.ae: 91.6 TFLOPS FP32, 864 GB/s GDDR6, 48 GB; no FP64 tensor cores. FP64 1,431 GFLOPS
    # (1:64) and 142 SMs: TechPowerUp's figures as given at itcreations.com/nvidia-gpu/nvidia-l40s-gpu-
    # accelerator and m.reach.dog. 256 KB register file per SM (65,536 registers): NVIDIA's Ada
    # architecture whitepaper as summarised at thefpsreview.com (AD102 SM). CUDA: "NVIDIA L40S".
    # INT8 tensor 733 TOPS dense: hmc-tech.com/gpu/nvidia-l40s-vs-nvidia-t40 (732.86 TOPS, 1.47 POPS with
    # sparsity; the mullet.se table gives FP8 733 | 1,466*, the same rate on Ada). GDDR6.
    GPU("L40S", 1.431, None, 864, 142, 65536, 48, r"\bL40S\b", fp32_tflops=91.6, int8_tops=733,
        memory_kind="GDDR6", capability=89),
    # GeForce RTX 4090 (AD102): 82.58 TFLOPS FP32, 1,290.2 GFLOPS FP64 (1:64), 1.01 TB/s, 128 SMs,
    # 24 GB: TechPowerUp's figures as given at fpsbench.com/compare/gpu/amd-radeon-pro-duo-vs-nvidia-
    # geforce-rtx-4090; 1008 GB/s and 82.6 TFLOPS FP32: NVIDIA's launch table as restated at
    # holynerdvana.blogspot.com (Nvidia GeForce RTX 4090 Specifications). Registers as the L40S (AD102).
    # The China-only "RTX 4090 D" (114 SMs) and the laptop part (another chip) are not this row.
    # INT8 tensor 660.6 TOPS dense (1,321.2 with sparsity, the Ada whitepaper's figures): waredb.com/processor/
    # nvidia-geforce-rtx-4090. GDDR6X.
    GPU("RTX 4090", 1.29, None, 1008, 128, 65536, 24, r"\bRTX 4090\b(?!\s*(D\b|Laptop))", fp32_tflops=82.58,
        int8_tops=660.6, memory_kind="GDDR6X", capability=89),
    # GeForce RTX 5090 (GB202): 104.8 TFLOPS FP32, 1.637 TFLOPS FP64 (1:64), 170 SMs: TechPowerUp's
    # figures as given at fpsbench.com/compare/gpu/nvidia-geforce-rtx-4090-d-vs-nvidia-geforce-rtx-5090;
    # 1,792 GB/s GDDR7, 32 GB, 170 SMs: NVIDIA's figures as restated at pocketmags.com (Linux Format,
    # May 2025) and spheron.network. NVIDIA's RTX Blackwell whitepaper: 256 KB register file per SM
    # (quoted in github.com/NVIDIA/cudnn-frontend pull 1164) and "the FP64 TFLOP rate is 1/64th the
    # TFLOP rate of FP32" (quoted on r/nvidia). CUDA: "NVIDIA GeForce RTX 5090".
    # INT8 tensor 838 TOPS dense: NVIDIA's 3,352 AI TOPS (FP4 with sparsity) over 4, as analysis.castromedia.org
    # (compute/entities/rtx-5090) converts it; spheron.network lists FP8 1,676.8 with sparsity. Derived, not
    # printed by NVIDIA as an INT8 figure. GDDR7.
    GPU("RTX 5090", 1.637, None, 1792, 170, 65536, 32, r"\bRTX 5090\b(?!\s*(D\b|Laptop))", fp32_tflops=104.8,
        int8_tops=838, memory_kind="GDDR7", capability=120),
    # RTX PRO 6000 Blackwell Workstation Edition (GB202, 600 W): 125.95 TFLOPS FP32 and 1.97 TFLOPS FP64:
    # hmc-tech.com/gpu/nvidia-rtx-pro-6000-blackwell-vs-amd-radeon-pro-duo-polaris (NVIDIA: "up to 125
    # TFLOPS" FP32); 188 SMs, 96 GB GDDR7, 1,792 GB/s: NVIDIA's GTC 2025 figures as reported at
    # topcpu.net and gpu.name (VideoCardz). Registers as the RTX 5090 (GB202). The Max-Q Workstation
    # Edition (300 W, lower clocks) and the Server Edition share SMs and memory, but no FP32/FP64 figure
    # of theirs was found in a source: they have no row, and their CUDA names match none.
    # INT8 tensor 1,000 TOPS dense: NVIDIA's 4,000 AI TOPS (FP4 with sparsity; topcpu.net's GTC 2025 report)
    # over 4, the ratio of hmc-tech.com/gpu/nvidia-rtx-pro-4000-blackwell-sff (INT8 191.67 dense, FP4 766.69
    # sparse). Derived, as the RTX 5090's. GDDR7.
    GPU("RTX PRO 6000", 1.97, None, 1792, 188, 65536, 96, r"\bRTX PRO 6000 Blackwell Workstation Edition\b",
        fp32_tflops=125.95, int8_tops=1000, memory_kind="GDDR7", capability=120),
)}


def matches(name: str) -> list[GPU]:
    """The rows whose pattern matches a CUDA device name (case-insensitive); more than one is a table bug."""
    return [g for g in GPUS.values() if re.search(g.pattern, name, re.IGNORECASE)]


def lookup(name: str) -> GPU:
    """The table row for a short name (``H100``) or a CUDA device name
    (``NVIDIA H100 80GB HBM3``), case-insensitive; ValueError listing the rows otherwise."""
    for gpu in GPUS.values():
        if name.strip().lower() == gpu.name.lower():
            return gpu
    found = matches(name)
    if len(found) == 1:
        return found[0]
    raise ValueError(f"no hardware row for {name!r}; known: {', '.join(GPUS)} "
                     "(add a row to modeling/hardware.py with its datasheet as source)")
