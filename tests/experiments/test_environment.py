"""Tests for experiments.environment: the environment record and its key."""
from __future__ import annotations

import re

import numpy as np
import pytest
import scipy

import gpu
from experiments.core.environment import KEY_FIELDS, env_key, environment

REQUIRED = ("backend", "device", "cpu", "cpu_count", "python", "numpy", "scipy", "blas",
            "numpy_blas", "git_commit", "recorded_at")


@pytest.fixture(scope="module")
def env():
    return environment(gpu.get_backend("numpy"))


def changed(env, **fields):
    return {**env, **fields}


def test_environment_has_required_fields(env):
    missing = [k for k in REQUIRED if k not in env]
    assert not missing
    empty = [k for k in REQUIRED if env[k] is None or str(env[k]).strip() == ""]
    assert not empty
    assert env["backend"] == "numpy"
    assert env["numpy"] == np.__version__ and env["scipy"] == scipy.__version__
    assert isinstance(env["cpu_count"], int) and env["cpu_count"] > 0


def test_key_is_16_hex_and_deterministic(env):
    key = env_key(env)
    assert re.fullmatch(r"[0-9a-f]{16}", key)
    assert env_key(dict(env)) == key
    assert env_key(environment(gpu.get_backend("numpy"))) == key  # a fresh record, same stack


def test_key_ignores_host_time_and_commit(env):
    other = changed(env, hostname="elsewhere", recorded_at="1999-01-01T00:00:00+00:00",
                    git_commit="0" * 40, git_dirty=not env.get("git_dirty"))
    assert env_key(other) == env_key(env)


@pytest.mark.parametrize("field,value", [("device", "NVIDIA H100 80GB HBM3"), ("numpy", "0.0.1"),
                                         ("backend", "cupy")])
def test_key_changes_with_identifying_fields(env, field, value):
    assert field in KEY_FIELDS
    assert env_key(changed(env, **{field: value})) != env_key(env)


def test_key_uses_python_minor_version_only(env):
    key = env_key(changed(env, python="3.11.7"))
    assert env_key(changed(env, python="3.11.9")) == key
    assert env_key(changed(env, python="3.12.7")) != key


def test_the_power_limit_identifies_a_gpu_environment_where_recorded(env):
    """A GPU capped at 700 W and one at 500 W do not give comparable times; a record
    without a power limit (the CPU, older GPU runs) keeps its key."""
    gpu = changed(env, backend="cupy", device="NVIDIA H100 80GB HBM3")
    assert env_key(changed(gpu, power_limit_w=None)) == env_key(gpu)
    assert env_key(changed(gpu, power_limit_w=700.0)) != env_key(changed(gpu, power_limit_w=500.0)) != env_key(gpu)


def test_a_built_int8_kernel_identifies_a_gpu_environment_where_recorded(env):
    """Points measured with the CUTLASS INT8 kernel are not resumed from points without it; a record from
    before the field keeps its key."""
    gpu = changed(env, backend="cupy", device="NVIDIA H200")
    built = changed(gpu, int8_kernel="cutlass_int8-i32_128x256x128_c21-sm90a-6090ce470378.so")
    assert env_key(changed(gpu, int8_kernel=None)) == env_key(gpu) != env_key(built)


@pytest.mark.parametrize("preset, want", [(None, "4x"), ("2x", "2x")])
def test_the_cli_scales_cuda_launch_queues_unless_the_caller_chose(monkeypatch, preset, want):
    """``gemmlab`` sets ``CUDA_SCALE_LAUNCH_QUEUES`` to 4x before any command runs (so before any CUDA context),
    keeps a value the caller set, and every environment record keeps the value the run had; the value does not
    enter the key (the device time is the same, only the host's wait in a long launch differs)."""
    from experiments.cli import main

    if preset is None:
        monkeypatch.delenv("CUDA_SCALE_LAUNCH_QUEUES", raising=False)
    else:
        monkeypatch.setenv("CUDA_SCALE_LAUNCH_QUEUES", preset)
    with pytest.raises(SystemExit):
        main(["--version"])
    record = environment(gpu.get_backend("numpy"))
    assert record["cuda_scale_launch_queues"] == want
    assert env_key(record) == env_key({**record, "cuda_scale_launch_queues": None})
