"""Numerical accuracy of fast GEMM methods: exact and multiprecision references,
error metrics and input generators."""
