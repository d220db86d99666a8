"""Slice formats of the Ozaki scheme, as data: digit storage, accumulator and the GEMM recipe.

A format says how digits are stored (``storage``, ``bits`` per digit), how
their products are accumulated (``limit``: the largest integer the accumulator
holds exactly) and which :data:`gpu.backend.blas.GEMM_RECIPES` row multiplies
them. Planning, slicing and the audit names read these rows; nothing else
names a format's numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SliceFormat:
    """How one slice format stores digits and accumulates their products.

    ``bits``: digit magnitude bits the storage holds exactly (|m| <= 2**bits - 1);
    ``limit``: the largest integer magnitude the accumulator holds exactly
    (every partial sum must stay within it); ``min_alpha``: block the inner
    dimension rather than use fewer bits per slice than this; ``tile``: issue each
    GEMM as output tiles of at most this size (None: one call).
    """

    name: str
    storage: str
    bits: int
    limit: int
    accumulator: str
    recipe: str
    min_alpha: int
    description: str
    tile: int | None = None

    @property
    def itemsize(self) -> int:
        return np.dtype(self.storage).itemsize

    @property
    def tiny(self) -> float:
        """The smallest normal magnitude of the storage (rounded remainders below it are flushed to 0)."""
        return 2.0**-14 if self.storage == "float16" else 2.0**-126

    @property
    def floating(self) -> bool:
        return self.storage != "int8"

    def terms(self, alpha: int) -> int:
        """How many inner terms of digits below 2**alpha an accumulator sums exactly."""
        return self.limit // (2**alpha - 1) ** 2

    def alpha_for(self, terms: int) -> int:
        """The most bits per digit (at most ``bits``) for which ``terms`` inner terms sum exactly; 0 if none."""
        return max((a for a in range(1, self.bits + 1) if self.terms(a) >= terms), default=0)


#: The slice formats, as data. Tensor-core FP32 accumulation gets 22 exact bits, two below
#: FP32's 24: NVIDIA documents neither the alignment nor the rounding of its internal adds,
#: and the GPU tests check exactness at that bound. INT8 GEMMs are issued as output tiles of
#: at most 8192: cuBLAS 13.1 on the H100 ran INT8 at 752 TOPS for 16384 x 16384 x 16384 and
#: 662 for 16384 x 16384 x 131072, but at 1898 for 8192 x 8192 x 131072 (measured).
FORMATS: dict[str, SliceFormat] = {f.name: f for f in (
    SliceFormat("fp32", "float32", 24, 2**24, "float32", "fp32", 7,
                "FP32 slices, SGEMM (the paper's method)"),
    SliceFormat("tf32", "float32", 11, 2**22, "float32", "tf32", 5,
                "TF32 tensor cores (FP32 storage, 11-bit digits), FP32 accumulation"),
    SliceFormat("fp16", "float16", 11, 2**22, "float32", "fp16", 5,
                "FP16 tensor cores, FP32 accumulation"),
    SliceFormat("bf16", "uint16", 8, 2**22, "float32", "bf16", 5,
                "BF16 tensor cores (bit patterns in uint16), FP32 accumulation"),
    SliceFormat("int8", "int8", 7, 2**31 - 1, "int32", "int8", 7,
                "INT8 tensor cores, INT32 accumulation", tile=8192),
)}


def get_format(name: str) -> SliceFormat:
    """The slice format called ``name``; ValueError listing the known ones otherwise."""
    if isinstance(name, SliceFormat):
        return name
    try:
        return FORMATS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown slice format {name!r}; choose one of {', '.join(FORMATS)}") from None


def parse_variant(token: str) -> tuple[SliceFormat, bool]:
    """(format, remainder) of a variant name: a format (``int8``), or a float format with ``r``
    appended for the paper's rounded-tail form (``fp32r``)."""
    if isinstance(token, str) and token in FORMATS:
        return FORMATS[token], False
    if isinstance(token, str) and token.endswith("r") and token[:-1] in FORMATS and FORMATS[token[:-1]].floating:
        return FORMATS[token[:-1]], True
    names = list(FORMATS) + [f + "r" for f, v in FORMATS.items() if v.floating]
    raise ValueError(f"unknown slice format {token!r}; choose one of {', '.join(names)} "
                     "(r: the last diagonal multiplies rounded tails, the paper's form)")
