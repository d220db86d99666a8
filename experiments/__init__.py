"""Measurement sweeps, the results database and the ``gemmlab`` command line."""

__version__ = "0.1.0"
