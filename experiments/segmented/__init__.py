"""The segmented family of the lab: the ``segmented`` experiment (one kernel run over 1-D and 2-D segments
with index translation, :mod:`gpu.segmented`, against the same kernel on whole arrays) and the
``segmented`` command (importing it registers them)."""

from . import bench, commands, points, report

__all__ = ["bench", "commands", "points", "report"]
