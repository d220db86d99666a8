"""The front-door family of the lab: the ``frontdoor`` experiment (``gpu.matmul`` as called against the library
GEMM and its own candidates, by shape and accuracy, with its error against its bound), its figure, the
``frontdoor`` and ``choose`` commands (importing it registers them), and the methods section of a device
profile built from as-called measurements (:mod:`experiments.frontdoor.methods`)."""

from . import bench, commands, errors, figures, methods, points, report, rows

__all__ = ["bench", "commands", "errors", "figures", "methods", "points", "report", "rows"]
