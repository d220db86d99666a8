"""The accuracy-audit family of the lab: the ``accuracy-phi`` and ``accuracy-strassen`` experiments,
their figures, and the ``audit`` command (importing it registers them)."""

from . import bench, commands, figures

__all__ = ["bench", "commands", "figures"]
