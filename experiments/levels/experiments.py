"""The level-prediction experiments: ``calibration`` and ``level-validation``. Each writes the
device profile afterwards, so ``level="auto"`` follows the newest measurements."""

from __future__ import annotations

from typing import Any

from ..core.registry import Context, experiment
from . import calibration, validation
from .profile import update_profile


@experiment(calibration.EXPERIMENT, "Gemm(x) and Geam(x) medians over a size sweep")
def run_calibration(ctx: Context) -> dict[str, Any]:
    rows, outcome = calibration.calibrate(ctx)
    best_gemm = max(rows, key=lambda r: r.tflops)
    best_geam = max(rows, key=lambda r: r.gbs)
    return {
        "points measured": outcome.measured,
        "points already stored": outcome.skipped,
        "sizes": f"{rows[0].size} to {rows[-1].size} ({len(rows)} sizes)",
        "best GEMM rate": f"{best_gemm.tflops:.3g} TFLOP/s at N = {best_gemm.size}",
        "best GEAM rate": f"{best_geam.gbs:.4g} GB/s at N = {best_geam.size}",
        "device profile": update_profile(ctx),
    }


@experiment(validation.EXPERIMENT, "Best Strassen level over a dense size sweep against the thesis rule and the "
                                   "recursive predictor")
def run_validation(ctx: Context) -> dict[str, Any]:
    summary = validation.run_plan(ctx, validation.PLANS[(ctx.backend.name, ctx.quick)])[0]
    return {**summary, "device profile": update_profile(ctx)}
