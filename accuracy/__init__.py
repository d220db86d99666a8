"""Numerical accuracy of fast GEMM methods: references, error metrics and input generators.

* :mod:`accuracy.generate`: seeded inputs (the papers' phi distribution, normal,
  uniform, integer, wide-exponent, exact zeros and cancellation);
* :mod:`accuracy.reference`: the correctly rounded float64 product, at BLAS speed
  (``exact_matmul``: :mod:`accuracy.slicing` and :mod:`accuracy.limbs`) and with
  gmpy2 (``mpfr_matmul``);
* :mod:`accuracy.metrics`: ``error_report``, the errors of a product against it;
* :mod:`accuracy.methods`: the GEMM methods an audit can run, by name;
* :mod:`accuracy.audit`: one audit point (inputs, reference, every method's report).
"""
