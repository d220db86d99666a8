"""The front door's accuracy contract (:mod:`gpu.frontdoor.contract`): what each accuracy level promises, in one
place, and which methods' proven bounds keep it. The choice among the methods builds on it."""

from .contract import LEVELS, SCALES, Accuracy, Guarantee, as_accuracy, gamma, keeps

__all__ = ["LEVELS", "SCALES", "Accuracy", "Guarantee", "as_accuracy", "gamma", "keeps"]
