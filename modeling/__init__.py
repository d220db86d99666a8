"""Performance models of GEMM methods.

``work`` counts the operations and bytes of the library kernels, the basis of
achieved-rate figures and of the analytic model.
"""
