"""The Strassen family of the lab: the speed-up and memory experiments, their figures, and the
``strassen`` and ``schedule`` commands (importing it registers them)."""

from . import bench, commands, figures, memory

__all__ = ["bench", "commands", "figures", "memory"]
