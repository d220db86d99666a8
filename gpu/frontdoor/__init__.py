"""The front door's parts: the accuracy contract (:mod:`gpu.frontdoor.contract`: what each accuracy level promises,
in one place, and which methods' proven bounds keep it), the measured time per class of shape
(:mod:`gpu.frontdoor.table`, a device profile's ``methods`` section) and the choice as data
(:mod:`gpu.frontdoor.rank`: every candidate ranked, with :meth:`~gpu.frontdoor.rank.Ranking.explain`), and
the front door itself (:mod:`gpu.frontdoor.api`: ``matmul`` and ``plan``, exported as ``gpu.matmul`` and
``gpu.plan``)."""

from .api import PLANS, matmul, plan
from .contract import LEVELS, SCALES, Accuracy, Guarantee, as_accuracy, gamma, keeps
from .frontplan import Plan
from .rank import MARGIN, MARGINS, TIE, Ranked, Ranking, rank

__all__ = ["LEVELS", "MARGIN", "MARGINS", "PLANS", "SCALES", "TIE", "Accuracy", "Guarantee", "Plan", "Ranked",
           "Ranking", "as_accuracy", "gamma", "keeps", "matmul", "plan", "rank"]
