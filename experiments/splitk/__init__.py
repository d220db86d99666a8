"""The split-K family of the lab: the ``splitk`` experiment (split-K against the library GEMM and a
device copy, for a tiny output and a huge inner dimension), its figures, and the ``splitk``
command (importing it registers them)."""

from . import bench, commands, figures, points, report, rows

__all__ = ["bench", "commands", "figures", "points", "report", "rows"]
