"""The environment record kept with every run: hardware, driver and library versions.

Results are only comparable on the same stack (the papers saw different
Strassen speed-ups from the same code on CUDA 10.1 and 11.7), so each run
stores this record, and its :func:`env_key` decides whether a stored point can
stand in for a new measurement when a sweep resumes.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import scipy

from gpu.backend import Backend
from gpu.backend.numpy_backend import blas_library, cpu_model

from .. import __version__

#: Fields that identify a measuring environment. Host name, time and git commit
#: are recorded but left out: a resumed sweep on the same stack may follow a
#: commit or a reboot.
KEY_FIELDS = ("backend", "device", "compute_capability", "sm_count", "memory_bytes", "driver",
              "cuda_runtime", "cublas", "cupy", "numpy", "scipy", "blas", "numpy_blas", "cpu",
              "cpu_count", "blas_threads", "python")
#: Identifying where recorded (a GPU's enforced power limit moves its clocks under load; a built CUTLASS INT8 kernel,
#: :mod:`gpu.backend.cutlass_int8`, moves the Ozaki products' speed); a record without them keeps the key it had
#: before they existed.
OPTIONAL_KEY_FIELDS = ("power_limit_w", "int8_kernel")


def environment(backend: Backend) -> dict[str, Any]:
    """Everything known about where and with what a measurement runs."""
    env = {
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "hostname": platform.node(),
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "numpy_blas": blas_library(np),
        "blas": blas_library(scipy),
        "gemmlab": __version__,
        "cuda_scale_launch_queues": os.environ.get("CUDA_SCALE_LAUNCH_QUEUES"),
        **git_state(),
        "recorded_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    env.update(backend.device_info())
    return env


def env_key(env: dict[str, Any]) -> str:
    """A short hash of the fields that make two environments interchangeable."""
    fields = {k: env.get(k) for k in KEY_FIELDS}
    fields.update({k: env[k] for k in OPTIONAL_KEY_FIELDS if env.get(k) is not None})
    fields["python"] = ".".join(str(fields["python"]).split(".")[:2])
    text = json.dumps(fields, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def git_state() -> dict[str, Any]:
    """Commit of the source tree and whether it has uncommitted changes.

    A copy of the tree sent to a GPU machine names its commit in
    ``$GEMMLAB_GIT_COMMIT``: that wins over any ``.git`` the copy carries, which
    can be a stale snapshot (its HEAD an older commit, the tree "dirty").
    """
    if os.environ.get("GEMMLAB_GIT_COMMIT"):
        return {"git_commit": os.environ["GEMMLAB_GIT_COMMIT"], "git_dirty": None}
    root = Path(__file__).resolve().parents[2]

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()

    try:
        return {"git_commit": git("rev-parse", "HEAD"), "git_dirty": bool(git("status", "--porcelain"))}
    except (OSError, subprocess.SubprocessError):
        return {"git_commit": os.environ.get("GEMMLAB_GIT_COMMIT", "unknown"), "git_dirty": None}


def choose_env(envs: list[tuple[str, dict[str, Any]]], what: str, where: Any, env: str | None = None,
               device: str | None = None, current: dict[str, Any] | None = None,
               advice: str = "choose a stored one with --env or --device") -> str:
    """Of ``envs`` ((key, environment) pairs holding ``what``, newest first): ``env`` (a key), else the newest
    whose device name contains ``device``, else the newest with the ``current`` device and backend. The error
    names what is stored in ``where`` (a database path) and ``advice``."""
    stored = "; ".join(f"{e.get('device', '?')} [{e.get('backend', '?')}] (--env {k})" for k, e in envs) or "none"
    if env is not None:
        if env in (k for k, _ in envs):
            return env
        raise ValueError(f"no {what} stored for environment {env!r} in {where}; stored: {stored}")
    if device is not None:
        hits = [k for k, e in envs if device.lower() in str(e.get("device", "")).lower()]
        target = f"a device matching {device!r}"
    else:
        current = current or {}
        hits = [k for k, e in envs if (e.get("device"), e.get("backend")) == (current.get("device"),
                                                                               current.get("backend"))]
        target = f"this device ({current.get('device', '?')} [{current.get('backend', '?')}])"
    if not hits:
        raise ValueError(f"no {what} stored for {target} in {where}; stored: {stored}. {advice}")
    return hits[0]
