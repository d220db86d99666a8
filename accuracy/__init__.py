"""Numerical accuracy of fast GEMM methods: references, error metrics and input generators.

The package is the home of that work in the design card; its first modules
arrive with the accuracy issue.
"""
