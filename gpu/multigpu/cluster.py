"""A local cluster of GPU workers set up as the Dask front-end wants them: :func:`local_cuda_cluster`.

``dask-cuda``'s ``LocalCUDACluster`` starts one worker per GPU. Two of its defaults cost the products of
:mod:`gpu.multigpu.dask_matmul` on host operands:

* **Memory limit.** A worker's resident memory counts the pages of the files it maps and its pinned staging,
  so under the default limit the memory monitor pauses (and may restart) workers in the middle of a product of
  mapped operands. Here ``memory_limit=0``: no limit.
* **Imports.** A new worker imports a task's module when its first task arrives: CuPy and :mod:`gpu.backend`
  delayed a one-shot product's first task by 0.55-0.72 s on two H200s. Here the workers import
  :data:`PRE_IMPORT` as they start (dask-cuda's ``pre_import``), so that time goes to the cluster's start
  (3.4-3.7 s there) and the first task starts 0.013-0.018 s after the call: a one-shot product at N = 65536
  into a filled C took 5.94 s against 6.71 s (``results/published/h200/h200x2-multigpu.csv``).

Anything else is passed to ``LocalCUDACluster`` as given, and the caller's own ``memory_limit`` or
``pre_import`` wins (its ``pre_import`` is added to :data:`PRE_IMPORT`).
"""

from __future__ import annotations

from typing import Any

try:
    from dask_cuda import LocalCUDACluster
except ImportError:
    LocalCUDACluster = None

#: Modules a GPU worker imports as it starts: the block task's module and what it loads.
PRE_IMPORT = ("cupy", "gpu.multigpu.worker")


def local_cuda_cluster(n_workers: int | None = None, **kwargs: Any) -> Any:
    """A ``dask_cuda.LocalCUDACluster`` of ``n_workers`` workers (one per visible GPU where None), on GPUs 0 ..
    n_workers - 1 unless ``CUDA_VISIBLE_DEVICES`` is given, with no memory limit and :data:`PRE_IMPORT`
    imported at each worker's start (see the module). ImportError naming the package where dask-cuda is
    missing."""
    if LocalCUDACluster is None:
        raise ImportError("a cluster of GPU workers needs dask-cuda (pip install dask-cuda); for CPU workers use "
                          "distributed.LocalCluster")
    if n_workers is not None:
        if n_workers < 1:
            raise ValueError(f"n_workers must be at least 1, got {n_workers}")
        kwargs["n_workers"] = n_workers
        kwargs.setdefault("CUDA_VISIBLE_DEVICES", list(range(n_workers)))
    kwargs.setdefault("memory_limit", 0)
    asked = kwargs.get("pre_import") or []
    asked = [asked] if isinstance(asked, str) else list(asked)
    kwargs["pre_import"] = list(PRE_IMPORT) + [m for m in asked if m not in PRE_IMPORT]
    return LocalCUDACluster(**kwargs)
