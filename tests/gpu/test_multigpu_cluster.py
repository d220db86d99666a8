"""``gpu.multigpu.cluster.local_cuda_cluster``: dask-cuda's cluster with no memory limit (mapped pages count as a
worker's memory) and the block task's module imported at each worker's start (0.55-0.72 s of a one shot's first
task on two H200s otherwise); the caller's own settings win. dask-cuda itself is faked: no GPU here."""

import importlib.util
import subprocess
import sys

import pytest

from gpu.multigpu import cluster


@pytest.fixture
def made(monkeypatch):
    kwargs = {}
    monkeypatch.setattr(cluster, "LocalCUDACluster", lambda **kw: kwargs.update(kw) or "cluster")
    return kwargs


def test_the_defaults_are_no_memory_limit_and_the_block_task_imported_at_the_start(made):
    assert cluster.local_cuda_cluster(2) == "cluster"
    assert made == {"n_workers": 2, "CUDA_VISIBLE_DEVICES": [0, 1], "memory_limit": 0,
                    "pre_import": list(cluster.PRE_IMPORT)}


def test_the_caller_s_settings_win_and_its_imports_are_added(made):
    cluster.local_cuda_cluster(CUDA_VISIBLE_DEVICES="2,3", memory_limit="40GB", pre_import="scipy",
                               protocol="ucx")
    assert made["CUDA_VISIBLE_DEVICES"] == "2,3" and made["memory_limit"] == "40GB" and made["protocol"] == "ucx"
    assert made["pre_import"] == [*cluster.PRE_IMPORT, "scipy"] and "n_workers" not in made
    cluster.local_cuda_cluster(1, pre_import=["cupy", "numpy"])
    assert made["pre_import"] == [*cluster.PRE_IMPORT, "numpy"], "each module once"


def test_bad_counts_and_a_missing_dask_cuda_are_refused_with_the_way_out(made, monkeypatch):
    with pytest.raises(ValueError, match="n_workers must be at least 1"):
        cluster.local_cuda_cluster(0)
    monkeypatch.setattr(cluster, "LocalCUDACluster", None)
    with pytest.raises(ImportError, match="pip install dask-cuda"):
        cluster.local_cuda_cluster(1)


def test_the_modules_imported_at_the_start_exist_and_leave_out_the_front_end():
    assert "gpu.multigpu.worker" in cluster.PRE_IMPORT
    names = [m for m in cluster.PRE_IMPORT if importlib.util.find_spec(m) is not None]
    code = ("import importlib, sys\n"
            f"for m in {names!r}: importlib.import_module(m)\n"
            "print(sorted(m for m in ('dask.array', 'gpu.multigpu.dask_matmul') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
