"""Scheme II's products modulo every modulus, the step of a :class:`gpu.ozaki2.plan.Plan` between the residues and
the CRT: the INT8 GEMMs in the direct layout, per modulus and k block with their reductions in the planes, or
by Winograd levels over the residues (:mod:`gpu.ozaki2.winograd`)."""

from __future__ import annotations

from typing import Any

from ..ozaki.api import _phase
from .gemms import blocks, run_planned
from .winograd import add, residue_product


def products(plan: Any, family: Any, part: Any, gemms: list[Any], phases: dict[str, float] | None) -> None:
    """A'B' modulo every modulus into ``part.planes``: in the direct layout the INT32 products themselves, a
    span's ``gemms`` (the CRT reduces them as it reads them); otherwise per modulus and k block one INT8 GEMM
    and its reduction into INT8 residues, added modulo m across blocks."""
    be = plan.backend
    if part.direct:
        with _phase(be, phases, "gemm"):
            run_planned(be, gemms)
        return
    if plan.options.level:
        winograd_products(plan, part, phases)
        return
    for t, modulus in enumerate(part.table.moduli):
        for number, calls in enumerate(part.plane_gemms[t]):
            with _phase(be, phases, "gemm"):
                run_planned(be, calls)
            with _phase(be, phases, "reduce"):
                family.reduce(part.products[:, :plan.n], part.planes[0][t], modulus, number > 0)


def winograd_products(plan: Any, part: Any, phases: dict[str, float] | None) -> None:
    """Per modulus and k block, the residues of the product by the options' Winograd levels, added modulo m
    across blocks into ``part.planes``."""
    be, level = plan.backend, plan.options.level
    for t, modulus in enumerate(part.table.moduli):
        for number, kb in enumerate(blocks(plan.ldk, plan.block)):
            with _phase(be, phases, "gemm"):
                found = residue_product(be, part.res_a[t][:, kb], part.res_b[t][:, kb], modulus, level)
            with _phase(be, phases, "reduce"):
                plane = part.planes[0][t]
                plane[...] = add(plane, found[:, :plan.n], modulus) if number else found[:, :plan.n]


__all__ = ["products", "winograd_products"]
