"""Complex products from real ones: ``gpu.zgemm.matmul(A, B, scheme="4m" | "3m", real=...)``.

The real and imaginary parts of a complex128 product come from real float64 products by any of the toolkit's
real methods (the library GEMM by default, Strassen, Ozaki scheme II, ...): see :mod:`gpu.zgemm.api`.
"""

from .api import SCHEMES, bound_3m, check_dtype, is_complex, matmul, parts, real_product

__all__ = ["SCHEMES", "bound_3m", "check_dtype", "is_complex", "matmul", "parts", "real_product"]
