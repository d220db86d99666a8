"""Scheme II's options, one frozen dataclass (:class:`Options`), checked when made."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..ozaki.plan import ALIGN
from ..ozaki.plan import target_value as componentwise_target
from .moduli import MAX_MODULI
from .normwise import target_value
from .reference import MAX_K
from .winograd import check_level

SCALINGS = ("accurate", "fast", "fine")
#: The scalings ``moduli="auto"`` takes (fine scaling needs a given count).
AUTO_SCALINGS = ("accurate", "fast")
#: How ``moduli="auto"`` bounds the error: ``"normwise"`` on the device from the scaling's read (the default,
#: :mod:`gpu.ozaki2.normwise`), or ``"componentwise"`` from a float64 GEMM of |A||B| (:mod:`gpu.ozaki2.auto`).
BOUNDS = ("normwise", "componentwise")
#: Where ``moduli="auto"``'s count is decided (:mod:`gpu.ozaki2.deferred`): on the device with no read
#: (``"device"``, the default), or read back by the host on every call (``"host"``).
VERDICTS = ("device", "host")


@dataclass(frozen=True)
class Options:
    """The options of :func:`gpu.ozaki2.matmul` and :class:`gpu.ozaki2.Plan` (see :func:`gpu.ozaki2.matmul`).

    ``moduli``: a count in 1..20 or ``"auto"``; ``target``: the error ``"auto"`` aims at (``"dgemm"`` when None);
    ``scaling``: ``"fast"`` (the default), ``"fine"`` or ``"accurate"`` (:mod:`gpu.ozaki2.scaling`); ``bound``:
    ``"normwise"`` (the default) or ``"componentwise"`` (:data:`BOUNDS`); ``k_block``: most inner terms per INT8
    GEMM; ``check_finite``: refuse NaN and infinity; ``overwrite_a`` / ``overwrite_b``: accepted for symmetry with
    scheme I; ``level``: Winograd levels over the residues (0..4, :mod:`gpu.ozaki2.winograd`), bitwise the plain
    product's result; ``workspace``: the most bytes a call takes beyond A, B and C (None: as the device allows), the
    product cut into tiles where it needs more (:mod:`gpu.ozaki2.tiled`); ``verdict``: where ``"auto"``'s count
    is decided (:data:`VERDICTS`, :mod:`gpu.ozaki2.deferred`)."""

    moduli: Any = "auto"
    target: Any = None
    scaling: str = "fast"
    bound: str = "normwise"
    k_block: int | None = None
    check_finite: bool = False
    overwrite_a: bool = False
    overwrite_b: bool = False
    level: int = 0
    workspace: int | None = None
    verdict: str = "device"

    def __post_init__(self) -> None:
        check_level(self.level)
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, not {self.verdict!r}")
        check_workspace(self.workspace)
        if self.scaling not in SCALINGS:
            raise ValueError(f"scaling must be one of {SCALINGS}, not {self.scaling!r}")
        if self.bound not in BOUNDS:
            raise ValueError(f"bound must be one of {BOUNDS}, not {self.bound!r}")
        if count(self.moduli, self.target) is None and self.scaling == "fine":
            raise ValueError("scaling='fine' needs a modulus count (moduli=N): its roundings of the scale factors "
                             "are outside the bounds by which moduli='auto' picks a count; use scaling='fast' with "
                             "'auto'")
        k_block(self.k_block)
        if self.target is not None:
            (target_value(self.target, 1) if self.bound == "normwise" else componentwise_target(self.target))

    @property
    def count(self) -> int | None:
        """The modulus count, None for ``"auto"``."""
        return count(self.moduli, self.target)

    @property
    def goal(self) -> Any:
        """The target ``"auto"`` aims at."""
        return "dgemm" if self.target is None else self.target


def count(moduli: Any, target: Any) -> int | None:
    """The modulus count (None: ``"auto"``), or ValueError."""
    if isinstance(moduli, str) and moduli == "auto":
        return None
    if target is not None:
        raise ValueError("give either a moduli count or target (with moduli='auto'), not both")
    if isinstance(moduli, bool) or not isinstance(moduli, (int, np.integer)) or not 1 <= moduli <= MAX_MODULI:
        raise ValueError(f"moduli must be 'auto' or a count in 1..{MAX_MODULI}, not {moduli!r}")
    return int(moduli)


def k_block(value: Any) -> int:
    """The k block (default and most 2**17 - 1; from 16 on a multiple of 16), or ValueError."""
    if value is None:
        return MAX_K // ALIGN * ALIGN
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 1 <= value <= MAX_K:
        raise ValueError(f"k_block must be an integer in 1..{MAX_K} (the INT8 GEMM's exact range), not {value!r}")
    return int(value) // ALIGN * ALIGN if value >= ALIGN else int(value)


def check_workspace(value: Any) -> int | None:
    """The workspace cap (None: no cap) as a positive number of bytes, or ValueError."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"workspace must be None or a positive number of bytes, not {value!r}")
    return int(value)
