"""The level-prediction family of the lab: calibration (plain and in context), stored predictors,
the level-validation sweep, its leave-one-device-out check of the transfer model, the price of a
sweep before it runs, the device profile ``level="auto"`` reads, their figures, and the
``calibrate``, ``fit``, ``predict`` and ``levels`` commands (importing it registers them)."""

from . import (
    calibration,
    commands,
    estimate,
    experiments,
    figures,
    models,
    predict,
    profile,
    transfer_validation,
    validation,
)

__all__ = ["calibration", "commands", "estimate", "experiments", "figures", "models", "predict", "profile",
           "transfer_validation", "validation"]
