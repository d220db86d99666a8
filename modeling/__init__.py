"""Performance models: fitted Gemm/Geam curves, crossover size, optimal Strassen level,
analytic and memory models."""
