"""The audited complex methods (:mod:`accuracy.methods` registers them): each multiplies complex128 operands,
and an audit draws complex inputs for it (:func:`accuracy.audit.audit_inputs`).

* ``zgemm``: the backend's complex library GEMM (``numpy.matmul``, cuBLAS's ZGEMM on CuPy), the reference
  speed and accuracy;
* ``zgemm-<3m|4m>-<real method>``: :func:`gpu.zgemm.matmul` over any real audited method's product
  (``zgemm-4m-fp64``, ``zgemm-3m-strassen-winograd-L2``, ``zgemm-4m-ozaki2-fast-15``);
* ``ozaki2c-<2m|3m|4m>-<moduli>``: :func:`gpu.ozaki2.complex.matmul` (2M over the Gaussian moduli, 3M over the
  residues, 4M through the real plans), Ozaki scheme II over the residues of both
  parts with that many moduli (1..20) or ``auto``;
* ``zauto[-<zgemm|dgemm|sgemm|bound>]``: the front door on complex operands, ``gpu.matmul(A, B, accuracy=...)``
  (``zauto`` alone: its default, ``"dgemm"``), as the real ``auto[-<level>]`` family is on real ones; only complex
  operands take ``"zgemm"``, the complex library GEMM's componentwise promise.
"""

from __future__ import annotations

import re

from gpu import ozaki2, zgemm
from gpu.backend import Array, Backend
from gpu.frontdoor import Accuracy
from gpu.frontdoor import matmul as front_matmul
from gpu.ozaki2 import complex as complex_ii

from .methods import METHODS, Method, family, get_method


def _library(be: Backend, A: Array, B: Array) -> Array:
    return be.xp.matmul(A, B)


METHODS["zgemm"] = Method("zgemm", "the library complex GEMM (complex128)", _library, complex=True)


def zgemm_names() -> list[str]:
    return [f"zgemm-{scheme}-{real}" for scheme in zgemm.SCHEMES for real in ("fp64", "ozaki2-fast-15")]


@family(r"zgemm-(?P<scheme>3m|4m)-(?P<real>.+)", "zgemm-<3m|4m>-<real method>", zgemm_names)
def _zgemm(match: re.Match) -> Method:
    real = get_method(match["real"])
    if real.complex:
        raise ValueError(f"{real.name!r} is a complex method; name a real one")
    scheme = match["scheme"]

    def run(be: Backend, A: Array, B: Array) -> Array:
        return zgemm.matmul(A, B, scheme=scheme, real=lambda X, Y: real.run(be, X, Y), backend=be)

    parts = "two real products over 2k" if scheme == "4m" else "three real products (Karatsuba)"
    return Method(match.group(0), f"complex128 by {scheme.upper()}: {parts} by {real.name} ({real.description})",
                  run, requires=real.requires, complex=True)


def ozaki2c_names() -> list[str]:
    return [f"ozaki2c-{scheme}-{n}" for scheme in complex_ii.SCHEMES for n in (14, 15, 16, "auto")]


@family(r"ozaki2c-(?P<scheme>2m|3m|4m)-(?P<moduli>\d+|auto)", "ozaki2c-<2m|3m|4m>-<moduli>", ozaki2c_names)
def _ozaki2c(match: re.Match) -> Method:
    moduli = match["moduli"] if match["moduli"] == "auto" else int(match["moduli"])
    ozaki2.Options(moduli=moduli)                        # a count outside 1..20 is refused by its name
    scheme = match["scheme"]

    def run(be: Backend, A: Array, B: Array) -> Array:
        return complex_ii.matmul(A, B, moduli=moduli, scheme=scheme, backend=be)

    how = {"2m": "2M over the Gaussian moduli", "3m": "3M over the residues",
           "4m": "4M as two real products of 2k terms through the real plans"}[scheme]
    return Method(match.group(0), f"Ozaki scheme II for complex128, {moduli} moduli, {how} (one scaling for both "
                                  "parts)", run, complex=True)


def zauto_names() -> list[str]:
    return ["zauto-zgemm", "zauto-dgemm", "zauto-sgemm", "zauto-1e-10"]


@family(r"zauto(?:-(?P<level>zgemm|dgemm|sgemm|[0-9.]+e-[0-9]+))?", "zauto[-<zgemm|dgemm|sgemm|bound>]", zauto_names)
def _zauto(match: re.Match) -> Method:
    level = match["level"] or "dgemm"
    accuracy = level if level in ("zgemm", "dgemm", "sgemm") else float(level)
    Accuracy(accuracy)                                 # a bound outside (0, 1) is refused by its name

    def run(be: Backend, A: Array, B: Array) -> Array:
        return front_matmul(A, B, accuracy=accuracy, backend=be)

    return Method(match.group(0), f"the front door on complex operands, gpu.matmul(accuracy={accuracy!r}): the "
                                  "fastest complex method this device's profile measured that keeps the accuracy "
                                  "(complex128)", run, complex=True)
