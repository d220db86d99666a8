"""Measurement sweeps, the results database and the ``gemmlab`` command line."""
