"""Work done by the library kernels: floating-point operations and bytes moved.

These are the counts behind achieved-rate figures (TFLOP/s, GB/s) and the
analytic model's Fmul and Fadd.
"""

from __future__ import annotations


def gemm_flops(m: int, n: int, k: int) -> int:
    """Operations of C = A B with A m x k: one multiply and one add per term, 2 m n k."""
    return 2 * m * n * k


def geam_bytes(m: int, n: int, itemsize: int = 8) -> int:
    """Bytes moved by C = alpha A + beta B on m x n matrices: two reads and one write."""
    return 3 * m * n * itemsize
