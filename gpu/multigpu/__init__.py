"""Products across GPUs and machines, through Dask.

:mod:`gpu.multigpu.dask_matmul` cuts C into blocks, one Dask task per block, each running the single-device
out-of-core engine (:func:`gpu.outofcore.matmul`) on its worker: on the worker's GPU where it has one
(``dask-cuda``'s ``LocalCUDACluster`` starts one worker per GPU), with NumPy otherwise. Dask schedules; the
module builds the tasks and says where each one runs, so that every worker reads its row panels of A and
column panels of B once. :mod:`gpu.multigpu.mapped` lets operands and output that view a file mapped shared
(host memory under ``/dev/shm``, or a shared file system) travel as handles: each worker maps its own
panels and writes its own C block, and no byte crosses between worker processes; each worker also
page-locks what it maps, so its engine copies it in place. :mod:`gpu.multigpu.finite` checks such operands
for NaN and infinity once across the workers, beside the block tasks, which write nothing before the checks pass.
:mod:`gpu.multigpu.worker` is what a block task runs on its worker, kept apart so that a worker imports
neither ``dask.array`` nor the front-end (1.2-1.7 s of a new worker's first task on two H200s).
:func:`gpu.multigpu.cluster.local_cuda_cluster` starts ``dask-cuda`` workers set up for these products (no
memory limit; the block task's module imported as each worker starts). :mod:`gpu.multigpu.resident`
multiplies ``dask.array`` operands whose chunks stay on the workers (CuPy chunks on their GPUs): one GEMM per
C block, placed block-cyclically, C left there as a ``dask.array``.

This package imports nothing, so ``import gpu`` (and ``import gpu.multigpu``) never loads Dask: import
:mod:`gpu.multigpu.dask_matmul` itself, which needs ``dask[array]`` and ``distributed`` (the ``dist`` extra).
"""
