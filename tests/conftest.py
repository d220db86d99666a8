"""Shared fixtures: every backend test runs on NumPy, and on CuPy where a GPU is usable."""

import pytest

from gpu.backend import get_backend, gpu_available

HAVE_GPU = gpu_available()


def pytest_collection_modifyitems(config, items):
    if HAVE_GPU:
        return
    skip = pytest.mark.skip(reason="needs a usable CUDA GPU and CuPy")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(params=["numpy", pytest.param("cupy", marks=pytest.mark.gpu)])
def backend(request):
    return get_backend(request.param)


@pytest.fixture
def cupy_backend():
    return get_backend("cupy")


@pytest.fixture
def db_path(tmp_path):
    return tmp_path / "results.sqlite"
