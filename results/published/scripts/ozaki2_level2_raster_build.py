"""Variants of the library's CUTLASS INT8 kernel that set the persistent tile scheduler's raster order and swizzle,
for ``ozaki2_level2_raster_probe.py``: the library's source (``gpu/backend/kernels/cutlass_int8.cu``) with
``args.scheduler.raster_order`` (RASTER 1: along M, 2: along N) and ``max_swizzle_size`` (SWIZZLE) set where defined,
compiled with the library's own nvcc line (:func:`gpu.backend.cutlass_int8.build_command`) into ``$OUT_DIR``
(default ``.whl/variants``), one ``cutlass_int8-<tag>.so`` a variant. About a minute each on two cores.

    PYTHONPATH=<nvidia-cutlass site>:$PWD python3 results/published/scripts/ozaki2_level2_raster_build.py
"""

import os
import subprocess
from pathlib import Path

from gpu.backend import cutlass_int8 as ci

VARIANTS = {"r1": ["-DRASTER=1"], "r2": ["-DRASTER=2"], "r1s2": ["-DRASTER=1", "-DSWIZZLE=2"]}
ORDER = """#ifdef SWIZZLE
  args.scheduler.max_swizzle_size = SWIZZLE;
#endif
#ifdef RASTER
  using Raster = cutlass::gemm::kernel::detail::RasterOrderOptions;
  args.scheduler.raster_order = RASTER == 1 ? Raster::AlongM : Raster::AlongN;
#endif
"""


def main() -> None:
    out = Path(os.environ.get("OUT_DIR", ".whl/variants"))
    out.mkdir(parents=True, exist_ok=True)
    source = ci.SOURCE.read_text()
    anchor = "  setup(args);\n"
    assert source.count(anchor) == 1
    variant = out / "cutlass_int8_variant.cu"
    variant.write_text(source.replace(anchor, anchor + ORDER))
    choice, include = ci.KERNELS["9.0"], ci.cutlass_headers()
    for tag, flags in VARIANTS.items():
        command = ci.build_command(choice, include, out / f"cutlass_int8-{tag}.so", "nvcc")
        done = subprocess.run(command[:-1] + flags + [str(variant)], capture_output=True, text=True)
        print(tag, done.returncode, done.stderr[-400:], flush=True)


if __name__ == "__main__":
    main()
