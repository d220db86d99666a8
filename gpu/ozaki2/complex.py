"""Ozaki scheme II for complex products: the residues of the real and imaginary parts share one scaling, and the
INT8 products modulo each modulus are two over a Gaussian modulus (2M, the default under ``moduli="auto"``),
Karatsuba's three (3M) or the definition's four (4M).

Each part of C = A B is one real inner product of 2k terms (Re C = [Re A, -Im A] [Re B; Im B], Im C =
[Re A, Im A] [Im B; Re B]), so a row of A is scaled by the statistics of its 2k entries [Re a_i, Im a_i] (its
maximum, and the sum of its squared bars) and a column of B likewise, as scheme II scales a real product of 2k
terms (:mod:`gpu.ozaki2.scaling`), and ``moduli="auto"`` takes the fewest moduli whose normwise bound holds for
that product (:mod:`gpu.ozaki2.normwise`):

    |Re C_ij - Re (AB)_ij| <= t ||[Re a_i, Im a_i]||_2 ||[Re b_j; Im b_j]||_2 + 2**-53 |Re C_ij|

and the same for the imaginary part, t = 2**-56 sqrt(2k) for ``"dgemm"``. With the scaled integers A' = Ar' + i
Ai' and B' = Br' + i Bi', modulo each modulus m:

* ``"2m"`` (the default where the bound picks the count): over the Gaussian moduli, where -1 has a square root j
  modulo m (:data:`gpu.ozaki2.moduli.GAUSSIAN_MODULI`), P = (Ar' + j Ai')(Br' + j Bi') and
  Q = (Ar' - j Ai')(Br' - j Bi'), then Re C' = (P + Q) / 2 and Im C' = (P - Q) / (2 j) modulo m: two INT8 products
  (:mod:`gpu.ozaki2.gauss`). The Gaussian moduli are smaller than GEMMul8's, so ``"auto"`` counts over them (16
  where 3M takes 15 for the same bound, typically): 32 INT8 products where 3M takes 45;
* ``"3m"``: T1 = Ar' Br', T2 = Ai' Bi', T3 = (Ar' + Ai')(Br' + Bi') (the sums taken modulo m, INT8 again), then
  Re C' = T1 - T2 and Im C' = T3 - T1 - T2 modulo m: three INT8 products for four;
* ``"4m"``: Re C = [Ar, -Ai] [Br; Bi] and Im C = [Ar, Ai] [Bi; Br], each one real scheme II product of 2k
  terms through the real scheme's kept plans (:func:`gpu.ozaki2.matmul` under :func:`gpu.zgemm.matmul`): the
  INT8 work of 4M, but in the real scheme's fast layout, with its fused passes and no pass of its own.

Arithmetic modulo m is a ring, so 2M and 3M give the exact residues of Re C' and Im C', and the CRT recovers each
part as a real product's: 3M and 4M give the same bits (the real products of 4M have these rows, columns and
inner sums, so the same scaling and, under ``"auto"``, the same count), and 2M gives 3M's over the same moduli. 3M
in floating point loses accuracy on the imaginary part; over the residues it loses none. NaN and infinity give
the real formula's IEEE values in their rows and columns, as the real scheme does.

3M runs per modulus and k block: the operand sums (a pass each), three INT8 GEMMs into INT32, and both parts from
those in one pass (:meth:`gpu.ozaki2.winograd.HostResidueOps.karatsuba`); 2M forms each operand's pair U, V in place
of its parts' residues (a pass per modulus), then two INT8 GEMMs and one pass to both parts. Either writes the first
k block's parts straight into the two parts' planes and adds the later blocks' into them modulo m; the residues are
held for the whole product, and k is blocked as the real scheme blocks it. 2M and 3M run as a kept plan per operand
signature (:class:`gpu.ozaki2.complex_plan.Plan`: its buffers taken and its INT8 GEMMs planned once, its work
replayed as a CUDA graph, no wait for the device with a count given). A and B are copied once per call, into the
plan's [Re A, Im A] and [Re B; Im B] (:func:`~gpu.ozaki2.complex_plan.fill_stacked`): the statistics read them
whole, the residues their halves, and the IEEE repair A's whole with B's two halves in place (B's lower half signed,
so [Re B; -Im B] is never copied). At N = 16384 on the H200 the three INT8 GEMMs took 322 of the 407 ms of a 3M call
(``results/published/h200/h200-ozaki2-complex-probe.json``); the first version's six 4 GiB concatenations of the
statistics and the repair are now the two stacked parts. As called at 16384
(``results/published/h200/h200-complex.csv``), 2M ran at 2.65x ZGEMM, 3M at 2.08x and 4M through the real plans at
1.61x; the front door takes the scheme its device profile measured fastest (``gemmlab calibrate --methods`` times
all three).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

from ..backend import Array, Backend, check_output, get_backend, matrix_pair, require_memory
from ..backend.plans import PlanCache, freeing_kept_plans, operand_signature
from ..zgemm.api import matmul as zgemm_matmul
from .api import matmul as real_matmul
from .complex_plan import ADVICE, Plan, moduli_of, peak_bytes
from .options import count as count_of
from .options import k_block as block_of

__all__ = ["MAX_PLANS", "PLANS", "SCHEMES", "Plan", "matmul", "moduli_of", "peak_bytes", "scheme_of"]

SCHEMES = ("2m", "3m", "4m")
#: Plans :func:`matmul` keeps (each holds its buffers on the device: about 3 FP64 matrices per operand and
#: 0.2 per modulus at N x N x N).
MAX_PLANS = 4
#: The plans :func:`matmul` keeps, by backend, operand signature and options.
PLANS = PlanCache(MAX_PLANS)


def matmul(A: Any, B: Any, *, moduli: Any = "auto", target: Any = None, scheme: str | None = None,
           k_block: int | None = None, out: Any = None, backend: str | Backend = "auto") -> Array:
    """The complex128 product ``A @ B`` by Ozaki scheme II over the residues of both parts (see the module):
    ``moduli`` a count in 1..20 or ``"auto"`` (``target``: ``"dgemm"`` by default, ``"sgemm"`` or a number in
    (0, 1)), of the Gaussian moduli for ``scheme`` ``"2m"``, of GEMMul8's for ``"3m"`` and ``"4m"`` (these two give
    the same bits). ``scheme`` None (the default): ``"2m"`` where the bound chooses the count, ``"3m"`` for a count
    given, which then keeps its meaning (that many of GEMMul8's moduli; as many Gaussian ones span fewer bits).
    ``k_block``: most inner terms per INT8 GEMM, as :func:`gpu.ozaki2.matmul`'s. ``out``: a complex128 array of the
    backend for the result (apart from A and B). 2M and 3M run a kept :class:`~gpu.ozaki2.complex_plan.Plan` per
    operand signature and options. Raises TypeError and ValueError before any work, and MemoryPlanError before any
    work where the product does not fit."""
    fixed, block = count_of(moduli, target), block_of(k_block)
    scheme = scheme_of(scheme, fixed)
    be = get_backend(backend)
    if scheme == "4m":
        real = partial(real_matmul, moduli=moduli, target=target, k_block=k_block, backend=be)
        if out is not None:
            A, B, _, _ = matrix_pair(be, A, B)
            check_output(be, out, (A.shape[0], B.shape[1]), np.complex128, {"A": A, "B": B})
        C = zgemm_matmul(A, B, scheme="4m", real=real, backend=be)
        if out is None:
            return C
        out[...] = C
        return out
    signature = operand_signature(be, A, B, out)
    if signature is None:
        A, B, _, _ = matrix_pair(be, A, B)
        signature = operand_signature(be, A, B, out)
    goal = "dgemm" if target is None and fixed is None else target           # the front door names the default
    key = None if signature is None else (be, signature, moduli, goal, scheme, block)

    def build() -> Plan:
        return Plan(A, B, out=out, moduli=moduli, target=target, scheme=scheme, k_block=k_block, backend=be,
                    require=partial(_require, be))

    return PLANS.get(key, build).run(A, B, out)


def scheme_of(scheme: str | None, count: int | None) -> str:
    """The scheme a call runs: ``scheme`` where given (ValueError for an unknown one), else 2M under the bound's
    count (``count`` None) and 3M for a count given (see :func:`matmul`)."""
    if scheme is None:
        return "3m" if count else "2m"
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {', '.join(map(repr, SCHEMES))}, not {scheme!r}")
    return scheme


def _require(be: Backend, need: int, what: str) -> None:
    """:func:`require_memory`, once more after freeing the plans every family's ``matmul`` keeps where it refuses
    (their workspaces held the memory: at N = 16384 on the H200 the check found 96.7 GiB free but not 57 in one
    block, after other calls in the same process), as the front door does."""
    freeing_kept_plans(partial(require_memory, be, need, what, ADVICE))
