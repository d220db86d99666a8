"""Complex products against ZGEMM: the ``complex-pareto`` experiment, its figure and the ``complex`` command
(importing it registers them; the complex audit methods, ``zgemm``, ``zgemm-<3m|4m>-<real method>``,
``ozaki2c-<2m|3m|4m>-<moduli>`` and ``zauto-<level>``, are registered by :mod:`accuracy.methods`)."""

from . import bench, commands, errors, figures, report, timing

__all__ = ["bench", "commands", "errors", "figures", "report", "timing"]
