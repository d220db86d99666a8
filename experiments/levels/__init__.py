"""The level-prediction family of the lab: calibration (plain and in context), stored predictors,
the level-validation sweep, the device profile ``level="auto"`` reads, their figures, and the
``calibrate``, ``fit``, ``predict`` and ``levels`` commands (importing it registers them)."""

from . import calibration, commands, experiments, figures, models, predict, profile, validation

__all__ = ["calibration", "commands", "experiments", "figures", "models", "predict", "profile", "validation"]
