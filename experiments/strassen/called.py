"""Strassen's calls as a user makes them, timed in the speed-up groups beside the executor.

Each configuration of a ``strassen-speedup`` group is timed twice in the same rounds: the executor on its
kept plan by CUDA events (the row's time, as always), and ``strassen.matmul(A, B, out=C, level=L, ...)`` with
the configuration's options as a user passes them, as called (:mod:`experiments.core.ascalled`: a loop of calls
then one synchronise, by the host's clock). Inputs are overwritten as the executor's are, so a sample issues
at most :data:`MAX_CALLS` calls (the inputs are re-drawn before every sample). The first group of each size
times ``strassen.matmul(A, B, out=C)`` at its defaults too, stored as the row :data:`DEFAULTS` (level 0,
schedule ``defaults``: it picks its own), whose time and speed-up are as called.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from gpu import strassen
from gpu.strassen import Config

from ..core.ascalled import AS_CALLED, Call, Called, call_text
from ..core.lab import Operands
from ..core.registry import Context
from .rows import DEFAULTS, EXPERIMENT

#: Calls one as-called sample of a configuration issues at most (its inputs grow as scratch from call to call).
MAX_CALLS = 8


def config_options(config: Config, level: int) -> dict[str, Any]:
    """The options of ``strassen.matmul`` that run ``config`` at ``level`` as the executor does (inputs
    overwritten); those at their defaults left out."""
    options: dict[str, Any] = {"level": level, "schedule": config.schedule}
    options.update({name: True for name in ("parallel", "fused", "flat", "graph") if getattr(config, name)})
    return {**options, "overwrite_a": True, "overwrite_b": True}


def config_call(config: Config, level: int, ops: Operands) -> Call:
    """``strassen.matmul`` with the configuration's options on the group's operands."""
    options = config_options(config, level)
    return Call(call_text("strassen.matmul", options),
                partial(strassen.matmul, ops.A, ops.B, out=ops.C, backend=ops.backend, **options), MAX_CALLS)


def public_calls(ops: Operands, configs: dict[str, tuple[Config, int]], defaults: bool) -> tuple[dict[str, Call], Call]:
    """Each configuration's call, the defaults' call where ``defaults``, and the library GEMM as a user calls it."""
    calls = {name: config_call(config, level, ops) for name, (config, level) in configs.items()}
    if defaults:
        calls[DEFAULTS] = Call(call_text("strassen.matmul", {}),
                               partial(strassen.matmul, ops.A, ops.B, out=ops.C, backend=ops.backend))
    xp = ops.backend.xp
    return calls, Call(f"{xp.__name__}.matmul(A, B, out=C)", partial(xp.matmul, ops.A, ops.B, out=ops.C))


def defaults_params(n: int, dtype: str, regime: str) -> dict[str, Any]:
    """The stored parameters of the defaults' row at size n."""
    return {"size": int(n), "level": 0, "schedule": "defaults", "parallel": False, "fused": False, "dtype": dtype,
            "regime": regime}


def store_defaults(ctx: Context, n: int, called: Called, dtype: str, error: float) -> None:
    """The defaults' row of size n: its time and speed-up as called, and its product's checked error."""
    timed, meta = called.result.timings[AS_CALLED + DEFAULTS], called.meta(DEFAULTS)
    ctx.db.add(ctx.run_id, EXPERIMENT, DEFAULTS, defaults_params(n, dtype, ctx.regime), value=timed.median, unit="s",
               samples=timed.samples, meta={**timed.meta(), "speedup": meta["ratio_as_called"],
                                            "gemm_s": meta["reference_s"], "check_error": error, **meta})
