"""The front door's error on the audit's inputs, in the scale its accuracy contract is stated in.

Inputs are the papers' phi distribution (:func:`accuracy.generate.phi_matrix`: a_ij = (ru - 0.5) exp(phi rn)),
drawn on the host by :func:`accuracy.audit.audit_inputs` where A and B hold at most :data:`HOST_ELEMENTS`
entries (the same numbers on every backend) and above it by the backend's array library where the data live,
block by block (the same distribution, other numbers; no full-size temporary). The timing operands are the
phi = 1 draw.

Per phi of :data:`PHIS`, ``gpu.matmul(A, B, accuracy=...)`` is compared on :data:`ERROR_ROWS` sampled rows of C
(:func:`experiments.core.lab.sample_rows`, the first and the last among them) with ``exact_matmul`` of those
rows, the correctly rounded R. The contract (:mod:`gpu.frontdoor.contract`) promises
|C - AB| <= t S + u |C| + eta, S in the accuracy's scale; the measured error is
max over the sampled entries of (|C - R| - eta)+ / S, the t the sample needs. It is judged against the bound
``bound_t``: the chosen candidate's proven t (which holds in every coarser scale), at most the accuracy's own,
plus :func:`slack`: R is within u |AB| of AB and the promise allows u |C| beside t S, both at most u S, so a
measured error above ``bound_t + slack`` proves the bound broken, and one below it is within the reference's
resolution of it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import gpu
from accuracy.audit import audit_inputs
from accuracy.reference import exact_matmul
from gpu.backend import Array, Backend, MemoryPlanError
from gpu.backend.plans import free_kept_plans
from gpu.frontdoor import Guarantee, as_accuracy
from gpu.frontdoor.contract import U64

from ..core.lab import REFILL_CHUNK_BYTES, free_memory, sample_rows
from .points import Shape, accuracy_text

PHIS = (0.1, 1.0, 2.0, 4.0)
#: The timing operands' phi, and the seed of every draw.
TIME_PHI, SEED = 1.0, 1
#: Rows of C the error is taken on (all of them where m is smaller).
ERROR_ROWS = 16
#: Operands of at most this many entries (A and B together) are drawn on the host, as the audit draws them.
HOST_ELEMENTS = 2**25
HOST_INPUTS = "phi_matrix (host)"
DEVICE_INPUTS = "(ru - 0.5) exp(phi rn) drawn on the device, block by block"


def _blocks(total: int, width: int, itemsize: int = 8) -> Iterator[slice]:
    """Slices of ``total`` lines of ``width`` entries, each block at most REFILL_CHUNK_BYTES (one line at least)."""
    step = max(1, REFILL_CHUNK_BYTES // max(1, width * itemsize))
    for i in range(0, total, step):
        yield slice(i, min(total, i + step))


def draw_phi(be: Backend, rows: int, cols: int, phi: float, rng: Any) -> Array:
    """A rows x cols phi matrix drawn by the backend's generator ``rng``, block of rows by block."""
    xp = be.xp
    out = xp.empty((rows, cols), dtype="float64")
    for part in _blocks(rows, cols):
        shape = (part.stop - part.start, cols)
        ru, rn = rng.random(shape), rng.standard_normal(shape)
        rn *= phi
        xp.exp(rn, out=rn)
        ru -= 0.5
        ru *= rn
        out[part] = ru
    return out


def phi_inputs(be: Backend, shape: Shape, phi: float, seed: int = SEED) -> tuple[Array, Array, str]:
    """A (m x k) and B (k x n) on phi inputs, and where they were drawn (see the module notes)."""
    m, k, n = shape
    if m * k + k * n <= HOST_ELEMENTS:
        a, b = audit_inputs(n, phi, seed, shape)
        return be.asarray(a), be.asarray(b), HOST_INPUTS
    rng = be.xp.random.default_rng(seed)
    return draw_phi(be, m, k, phi, rng), draw_phi(be, k, n, phi, rng), DEVICE_INPUTS


def _absmax(be: Backend, X: Array) -> float:
    return max((float(be.xp.abs(X[part]).max()) for part in _blocks(X.shape[0], X.shape[1])), default=0.0)


def _column_norms(be: Backend, X: Array) -> Array:
    """Euclidean norms of X's columns, summed block of rows by block."""
    total = be.xp.zeros(X.shape[1], dtype="float64")
    for part in _blocks(X.shape[0], X.shape[1]):
        total += (X[part] * X[part]).sum(axis=0)
    return be.xp.sqrt(total)


def scale_of(be: Backend, scale: str, A: Array, B: Array, A_rows: Array) -> Array:
    """S of the sampled rows in ``scale`` (:data:`gpu.frontdoor.SCALES`): (|A||B|)_ij, ||a_i|| ||b_j||, or
    k max|A| max|B| (a 0-d array)."""
    xp = be.xp
    if scale == "matrix":
        return xp.asarray(A.shape[1] * _absmax(be, A) * _absmax(be, B))
    if scale == "rowcol":
        return _column_norms(be, A_rows.T)[:, None] * _column_norms(be, B)[None, :]
    total = xp.zeros((A_rows.shape[0], B.shape[1]), dtype="float64")
    for part in _blocks(B.shape[0], B.shape[1]):
        total += xp.abs(A_rows[:, part]) @ xp.abs(B[part])
    return total


def contract_error(be: Backend, C_rows: Array, R: Array, S: Array, k: int) -> float:
    """max over the entries of (|C - R| - eta)+ / S (see the module notes): inf where C is not finite, or
    differs from R where S is 0."""
    xp = be.xp
    if not bool(xp.all(xp.isfinite(C_rows))):
        return math.inf
    excess = xp.maximum(xp.abs(C_rows - R) - math.ldexp(k, -1074), 0.0)
    S = xp.broadcast_to(S, excess.shape)
    scaled = xp.where(S > 0, excess / xp.where(S > 0, S, 1.0), xp.where(excess > 0, math.inf, 0.0))
    return float(scaled.max()) if scaled.size else 0.0


def slack(t: float) -> float:
    """What the measured error may exceed ``t`` by within the reference's resolution (see the module notes)."""
    return 2 * U64 * (1 + t)


def error_bound(level: Any, k: int, guarantee: Guarantee | None) -> dict[str, Any]:
    """The bound a point's errors are judged by: the accuracy's promise on an inner dimension of k and the
    chosen candidate's proven guarantee, ``bound_t`` the smaller t (see the module notes)."""
    need = as_accuracy(level).required(k)
    t = need.t if guarantee is None else min(need.t, guarantee.t)
    return {"scale": need.scale, "contract_t": need.t, "contract": need.describe(),
            "guarantee_t": None if guarantee is None else guarantee.t,
            "guarantee_scale": None if guarantee is None else guarantee.scale,
            "guarantee": None if guarantee is None else guarantee.describe(), "bound_t": t, "slack": slack(t)}


def measure_errors(be: Backend, shape: Shape, levels: Sequence[Any], phis: Sequence[float] = PHIS,
                   seed: int = SEED) -> dict[str, list[dict[str, Any]]]:
    """Per level (by :func:`~experiments.frontdoor.points.accuracy_text`), per phi: the front door's measured
    error on the sampled rows (None, with why, where its product could not be made), the rows and the inputs.
    One exact reference per phi serves every level; the kept plans are freed after each product."""
    m, k, _ = shape
    out: dict[str, list[dict[str, Any]]] = {accuracy_text(level): [] for level in levels}
    picks = sample_rows(m, ERROR_ROWS, seed)
    for phi in phis:
        A, B, source = phi_inputs(be, shape, phi, seed)
        index = be.asarray(picks)
        A_rows = A[index]
        R = exact_matmul(A_rows, B, backend=be)
        scales: dict[str, Array] = {}
        for level in levels:
            record: dict[str, Any] = {"phi": float(phi), "rows": len(picks), "inputs": source}
            try:
                C_rows = gpu.matmul(A, B, accuracy=level, backend=be)[index]
            except (MemoryPlanError, ValueError) as err:
                record.update(measured=None, why=str(err))
            else:
                scale = as_accuracy(level).required(k).scale
                if scale not in scales:
                    scales[scale] = scale_of(be, scale, A, B, A_rows)
                record["measured"] = contract_error(be, C_rows, R, scales[scale], k)
                del C_rows
            out[accuracy_text(level)].append(record)
            free_kept_plans()
        del A, B, A_rows, R, scales
        free_memory(be)
    return out


def worst(errors: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The phi record of the largest measured error (None where none was measured)."""
    found = [e for e in errors if e.get("measured") is not None]
    return max(found, key=lambda e: e["measured"]) if found else None
