"""What a worker process loads to run a block task (``gpu.multigpu.worker``): the engine and the mapped handles,
not ``dask.array`` nor the client's front-end. On a new ``dask-cuda`` worker of two H200s importing the front-end
took 1.2-1.7 s, all of it before the first task of a one-shot product could start."""
import numpy as np
import pytest

HEAVY = ("dask.array", "gpu.multigpu.dask_matmul")


def test_a_worker_process_runs_a_mapped_product_without_importing_the_front_end(tmp_path, npy):
    distributed = pytest.importorskip("distributed", reason="the Dask front-end needs distributed")
    from gpu.multigpu import dask_matmul

    def loaded():
        import sys
        return sorted(m for m in (*HEAVY, "gpu.multigpu.worker") if m in sys.modules)

    rng = np.random.default_rng(3)
    A0, B0 = rng.uniform(-1, 1, (40, 24)), rng.uniform(-1, 1, (24, 30))
    out = np.lib.format.open_memmap(tmp_path / "c.npy", mode="w+", dtype=np.float64, shape=(40, 30))
    cluster = distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0")
    with cluster, distributed.Client(cluster) as client:
        assert list(client.run(loaded).values()) == [[]], "a new worker process has loaded neither yet"
        dask_matmul.matmul(npy(tmp_path / "a.npy", A0), npy(tmp_path / "b.npy", B0), client=client, backend="numpy",
                           out=out)
        assert list(client.run(loaded).values()) == [["gpu.multigpu.worker"]]
    np.testing.assert_allclose(out, A0 @ B0, rtol=1e-12, atol=1e-12)
