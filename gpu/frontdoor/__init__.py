"""The front door's parts: the accuracy contract (:mod:`gpu.frontdoor.contract`: what each accuracy level promises,
in one place, and which methods' proven bounds keep it), the measured time per class of shape
(:mod:`gpu.frontdoor.table`, a device profile's ``methods`` section) and the choice as data
(:mod:`gpu.frontdoor.rank`: every candidate ranked, with :meth:`~gpu.frontdoor.rank.Ranking.explain`)."""

from .contract import LEVELS, SCALES, Accuracy, Guarantee, as_accuracy, gamma, keeps
from .rank import MARGIN, TIE, Ranked, Ranking, rank

__all__ = ["LEVELS", "MARGIN", "SCALES", "TIE", "Accuracy", "Guarantee", "Ranked", "Ranking", "as_accuracy", "gamma",
           "keeps", "rank"]
