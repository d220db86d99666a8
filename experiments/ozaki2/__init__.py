"""Ozaki scheme II against DGEMM: the ``ozaki2-pareto`` and ``ozaki2-breakdown`` experiments,
their figures, and the ``ozaki2`` command (importing it registers them; the audit methods
``ozaki2-<scaling>-<moduli>`` and ``cublas-emul-<bits>`` are registered by :mod:`accuracy.methods`)."""

from . import bench, breakdown, commands, errors, experiments, figures, table, timing

__all__ = ["bench", "breakdown", "commands", "errors", "experiments", "figures", "table", "timing"]
