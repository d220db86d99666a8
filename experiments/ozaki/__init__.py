"""The Ozaki family of the lab: the ``ozaki-accuracy``, ``ozaki-time``, ``ozaki-breakdown`` and
``ozaki-pareto`` experiments, their figures, and the ``ozaki`` command (importing it registers
them; the audit methods ``ozaki-<format>-<slices>`` are registered by :mod:`accuracy.methods`)."""

from . import bench, commands, errors, experiments, figures, table, timing

__all__ = ["bench", "commands", "errors", "experiments", "figures", "table", "timing"]
