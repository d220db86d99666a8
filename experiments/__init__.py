"""The lab: measurement sweeps, the results database, figures and the ``gemmlab`` command line.

:mod:`experiments.core` is shared by every family; :mod:`experiments.levels`,
:mod:`experiments.strassen`, :mod:`experiments.audit` and :mod:`experiments.ozaki`
each keep their benchmark, experiments, figures and commands together.
"""

__version__ = "0.1.0"
