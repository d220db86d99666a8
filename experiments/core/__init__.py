"""The lab core shared by every family: the results database, the environment record, the
measurement protocol, the bench (operands, checked work, memory release), sweeps, the registries
of experiments, figures and commands, plotting and ``reproduce``."""
