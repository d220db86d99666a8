"""The multi-GPU family of the lab: the ``multigpu`` experiment (products across 1, 2 and 4 workers of a Dask
cluster, one shot and steady, for host operands and for device-resident ``dask.array``s) and its command and
figure (importing it registers them)."""

from . import bench, commands, figures, points, report

__all__ = ["bench", "commands", "figures", "points", "report"]
