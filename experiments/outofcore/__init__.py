"""The out-of-core family of the lab: the ``outofcore`` experiment (the streaming engine
:func:`gpu.outofcore.matmul` against the in-core DGEMM, host memory to host memory), its figure,
and the ``outofcore`` command (importing it registers them)."""

from . import bench, commands, figures, points, report, rows, timeline

__all__ = ["bench", "commands", "figures", "points", "report", "rows", "timeline"]
