"""Performance models of GEMM methods, from counts, fits and datasheets.

* :mod:`modeling.work`: operations and bytes of the library kernels;
* :mod:`modeling.fits`: cubic Gemm(x) and quadratic Geam(x) by least squares, and measured curves;
* :mod:`modeling.crossover`: the thesis rule (SpeedUp, crossover P, OptimLevel);
* :mod:`modeling.recursive`: the recursive level predictor over the schedule tables' counts
  (:mod:`gpu.strassen.costs`);
* :mod:`modeling.profile`: a device profile's level tables, and the predictor back from a profile;
* :mod:`modeling.analytic` and :mod:`modeling.hardware`: Otsuka's model and the GPU table;
* :mod:`modeling.published` (and :mod:`modeling.published_methods`): the five seed papers' published
  numbers as data (``published.json``: fits, boundaries, speed-ups, memory, split-K, decomposition and
  Ozaki rows), with the checks that leave inconsistent rows out;
* :mod:`modeling.transfer` over :mod:`modeling.efficiency`: the recursive predictor of a GPU nobody
  has measured, from efficiency curves learned on the devices that were, with leave-one-out;
  :mod:`modeling.fill`: DGEMM's wave-fill limit, for parts whose FP64 rate per SM lies far below them;
* :mod:`modeling.concurrency`, :mod:`modeling.splitk`, :mod:`modeling.decomposition`: the
  stream, split-K occupancy and segment-size formulas of the other methods, and the
  decomposition's segment plans;
* :mod:`modeling.access`: per-dimension access ranges of affine index maps (what a segment holds).
"""
