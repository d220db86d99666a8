"""The property-based suite: every public product against the exact one, on NumPy.

Each test draws operands (the papers' phi generator up to phi = 4, rows of A and columns of B scaled by
2**+-300, odd and rectangular shapes, transposed, sliced and F-ordered views, float32 where a method takes
it) and checks a method's documented error bound against :func:`accuracy.reference.exact_matmul`, that its
inputs are unchanged, that ``out`` is honoured, and that a repeated call gives the same bits where the docs
promise it. The strategies and the registry of methods are in ``strategies.py`` (error bounds in
``bounds.py``): a new method is a few lines there.

Hypothesis profiles (the environment's ``HYPOTHESIS_PROFILE``, checked here and applied by
``strategies.profiled`` to this suite only; other tests keep their own settings):

* ``ci`` (the default): 20 examples per test (fewer for the Dask product), no deadline; the suite takes
  about 16 s on two cores;
* ``long``: 400 examples per test, for a search on demand (about half an hour), from the repository root::

      HYPOTHESIS_PROFILE=long make test PYTEST_ARGS=tests/property

  (or ``HYPOTHESIS_PROFILE=long python -m pytest tests/property``).

Examples that found a defect are kept as ``@example`` cases beside the strategies that found them.
"""

import pytest

from tests.property.strategies import profile_name

profile_name()                                     # an unknown HYPOTHESIS_PROFILE stops the run here


@pytest.fixture(scope="module")
def dask_client():
    """A Dask client of two single-thread workers in this process (the Dask product's examples), closed after its
    module: its threads allocate in the background, which tracemalloc's peaks in later tests would count."""
    distributed = pytest.importorskip("distributed", reason="the Dask product needs distributed (the dist extra)")
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0")
    with cluster, distributed.Client(cluster) as client:
        yield client
