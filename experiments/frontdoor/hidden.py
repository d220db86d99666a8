"""What the front door would choose on this GPU if it had never been measured: its profile hidden.

A GPU with no profile of its own gets the methods section the transfer model predicts from its datasheet, and
no Strassen configurations (:func:`gpu.profile.methods`, ``gemmlab choose --gpu``). To judge that choice on a
GPU that *was* measured, :func:`hidden_section` predicts this device's section from a model fitted on the
other training GPUs alone (its own measurements never read: :func:`experiments.frontdoor.transfer.trained`),
and :func:`hidden_choice` ranks a point with it. The ``frontdoor`` experiment times that choice beside the
front door's, so the time it would lose is measured, not estimated.
"""

from __future__ import annotations

from functools import cache, partial
from typing import Any

from gpu.backend import Backend
from gpu.frontdoor.frontplan import split_of
from gpu.frontdoor.rank import Ranked, rank
from gpu.profile import device_name
from modeling import hardware
from modeling.methods_transfer import predict


@cache
def _section(gpu: str) -> dict[str, Any] | None:
    from .transfer import TRAINED, trained  # reads experiments.levels, whose commands import this package: late
    others = [g for g in TRAINED if g != gpu]
    return predict(trained(others), hardware.GPUS[gpu]) if gpu in TRAINED and others else None


def hidden_section(be: Backend) -> tuple[dict[str, Any] | None, str | None]:
    """(the methods section predicted for this device from the other training GPUs, the model's GPUs); (None,
    None) where the device is no training GPU (nothing of its own to hide) or not a GPU."""
    if be.name != "cupy":
        return None, None
    found = [g.name for g in hardware.matches(device_name(be))]
    section = _section(found[0]) if found else None
    if section is None:
        return None, None
    return section, section["points"][0]["basis"].partition("from ")[2].rstrip(")") if section["points"] else ""


def hidden_choice(be: Backend, m: int, k: int, n: int, level: Any, deterministic: bool = False) -> Ranked | None:
    """The front door's winner for the point with this device's profile hidden (see the module notes): the tables
    are the prediction's, split-K's split (what its bound rests on) is this device's, as the front door's own
    plan takes it; None where nothing is hidden or no candidate keeps the accuracy."""
    section, _ = hidden_section(be)
    if section is None:
        return None
    try:
        return rank(m, k, n, level, configurations=None, methods=section, deterministic=deterministic,
                    splits=partial(split_of, be, m, k, n)).winner
    except ValueError:
        return None
