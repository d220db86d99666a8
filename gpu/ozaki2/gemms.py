"""Scheme II's INT8 GEMMs: one per modulus and k block, through :meth:`gpu.backend.Backend.gemm_ex`, in output panels.

Panels (rows, columns) from :data:`PANEL_FROM` rows of output up, whole products below. Measured on the H100
(15 INT8 GEMMs of N x N x N, cuBLAS 13.1, interleaved rounds; results/published/h100-ozaki2-panels.json, made
by results/published/scripts/ozaki2_panels.py): panels of 3072 rows and the full width ran 4-10% faster than
whole products or scheme I's 8192 x 8192 tiles at N = 6144-12288 (N = 8192: 12.48 against 13.07-13.54 ms)
and as fast at 16384 (98.9 against 97.5-105 ms); whole products at 16384 took 163 ms, and at N = 4096 panels
of 2048 rows ran 1.5x slower than the whole product.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..backend import Array, Backend, blas
from ..backend.cutlass_int8 import residue_depth
from ..ozaki.api import _tiles

PANEL_FROM, PANEL = 6144, (3072, 16384)


def panels(m: int, n_pad: int, whole: int | None = None, panel: tuple[int, int] | None = None
           ) -> list[tuple[slice, slice]]:
    """The output panels of an m x n_pad INT8 product (``panel``, default :data:`PANEL`, read when called);
    ``whole``: the rows of the product whose m rows these are, which decides the tiling (a row panel of a direct
    layout runs its rows' share of the whole product's GEMMs)."""
    return _tiles(m, n_pad, (panel or PANEL) if (whole or m) >= PANEL_FROM else None)


def blocks(ldk: int, block: int) -> list[slice]:
    """Consecutive slices of ``range(ldk)`` of at most ``block`` each: the k blocks of at most ``block`` terms, or a
    layout's spans of rows."""
    return [slice(lo, min(lo + block, ldk)) for lo in range(0, ldk, block)]


def int8_product(be: Backend, a: Array, b: Array, P: Array, tiles: list[tuple[slice, slice]] | None = None) -> None:
    """P = a @ b.T (INT8 rows, INT32 result), panel by panel (``tiles``, default :func:`panels`)."""
    for rows, cols in tiles or panels(P.shape[0], P.shape[1]):
        be.gemm_ex(a[rows], b[cols].T, P[rows, cols], recipe="int8")


def planned(be: Backend, a: Array, b: Array, P: Array, tiles: list[tuple[slice, slice]],
            modulus: int | None = None) -> list[tuple[Any, ...]] | None:
    """:func:`int8_product`'s GEMMs with their checks made once: (recipe, call, operands) per panel, for
    :func:`run_planned`. For a plan's own buffers only, whose addresses and layouts never change (the checks of
    :meth:`gpu.backend.Backend.gemm_ex`, 17 us a call on a 2-core CPU, are then made once per plan). INT8 ``P``:
    each panel's residues modulo ``modulus`` from :meth:`gpu.backend.Backend.residue_gemm` (None, issue, None),
    or None where it takes not every panel."""
    if P.dtype == np.int8:
        issuers = [be.residue_gemm(a[rows], b[cols], P[rows, cols], modulus) for rows, cols in tiles]
        return None if None in issuers else [(None, issue, None) for issue in issuers]
    recipe, out = blas.gemm_recipe("int8"), []
    for rows, cols in tiles:
        A, B, C = a[rows], b[cols].T, P[rows, cols]
        blas.check_recipe_dtypes(recipe, ("A", A), ("B", B), ("C", C))
        call = blas.plan_gemm(be.layout(A, "A"), be.layout(B, "B"), be.layout(C, "C"))
        if call is not None:
            out.append((recipe, call, (A, B, C)))
    return out


def run_planned(be: Backend, calls: list[tuple[Any, ...]]) -> None:
    """The GEMMs of :func:`planned`, each straight to the backend's library call (or its residue issuer)."""
    for recipe, call, arrays in calls:
        if recipe is None:
            call()
        else:
            be._gemm_ex(recipe, call, 0.0, arrays)


def as_residues(P: Array) -> Array:
    """An INT8 array of ``P``'s shape over the first quarter of its bytes (``P`` C-contiguous INT32)."""
    return P.reshape(-1).view(np.int8)[:P.size].reshape(P.shape)


def writes_residues(be: Backend, k: int) -> bool:
    """Whether the backend's INT8 GEMMs over ``k`` terms write residues (:attr:`gpu.backend.Backend.residue_min_k`;
    a plan's views are aligned as :meth:`~gpu.backend.Backend.residue_gemm` needs): a plan's direct layout then
    holds its products as INT8, a quarter of the bytes (:func:`gpu.ozaki2.memory.narrow_products`)."""
    least = be.residue_min_k
    return least is not None and residue_depth(k, least)


def direct_products(products: Array, spans: list[slice], moduli: tuple[int, ...],
                    plan_span: Callable[[Array, slice, tuple[int, ...] | None], list[Any] | None]
                    ) -> tuple[Array, list[list[Any]]]:
    """What the direct layout's INT8 GEMMs write and each span's GEMMs (``plan_span(P, span, moduli or None)``):
    every product's symmetric residues as INT8, from GEMMs that reduce modulo m as they write, where the backend
    has them for every span; else the INT32 products. INT8 ``products`` (a narrow layout, sized for the residues
    alone) take the residue GEMMs or raise; INT32 ones hold the residues in their first quarter
    (:func:`as_residues`). The CRT reads the same residues either way, so C keeps its bits; the residues are a
    quarter of the bytes to write and to read back."""
    narrow = products if products.dtype == np.int8 else as_residues(products)
    gemms = [plan_span(narrow, span, moduli) for span in spans]
    if all(g is not None for g in gemms):
        return narrow, gemms
    if narrow is products:
        raise RuntimeError("scheme II's plan holds its products as INT8 residues, but the backend declined a residue "
                           "GEMM on one of its views (Backend.residue_min_k promised them): a bug; please report it "
                           "with the operands' shapes")
    return products, [plan_span(products, span, None) for span in spans]
