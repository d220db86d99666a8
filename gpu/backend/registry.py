"""Backends by name: ``get_backend("numpy" | "cupy" | "auto")``, one instance each per process.

The CuPy backend is imported only when asked for (:func:`gpu.backend.interface.load`),
so the CPU path needs neither CuPy nor a GPU.
"""

from __future__ import annotations

from typing import Any

from .interface import Backend, BackendUnavailable, load

BACKENDS = ("numpy", "cupy")
_CLASSES = {"numpy": "gpu.backend.numpy_backend:NumpyBackend", "cupy": "gpu.backend.cupy_backend:CupyBackend"}
_instances: dict[str, Backend] = {}


def backend_class(name: str) -> type[Backend]:
    """The class of the backend called ``name`` (importable without a GPU: for what a stored
    environment's backend was, such as :attr:`Backend.asynchronous`)."""
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; choose one of {BACKENDS}")
    return load(_CLASSES[name])


def get_backend(name: str | Backend = "auto") -> Backend:
    """The backend called ``name``: ``"numpy"``, ``"cupy"`` or ``"auto"``.

    ``"auto"`` is CuPy when a GPU is usable, else NumPy, decided once per process (a default call would
    otherwise try CuPy again each time: 2 us of host time a call on a CPU). Asking for ``"cupy"`` where no
    GPU is usable raises :class:`BackendUnavailable` with the reason.
    """
    kept = _instances.get(name) if type(name) is str else None
    if kept is not None:                   # every call asks: a dict read, not an ABC isinstance test
        return kept
    if isinstance(name, Backend):
        return name
    if name == "auto":
        if "auto" not in _instances:
            try:
                _instances["auto"] = get_backend("cupy")
            except BackendUnavailable:
                _instances["auto"] = get_backend("numpy")
        return _instances["auto"]
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; choose one of {BACKENDS + ('auto',)}")
    if name not in _instances:
        _instances[name] = backend_class(name)()
    return _instances[name]


def gpu_available() -> bool:
    """Whether the CuPy backend can run here."""
    try:
        get_backend("cupy")
    except BackendUnavailable:
        return False
    return True


def backend_of(x: Any) -> Backend:
    """The backend whose arrays ``x`` is: CuPy for a CuPy array, NumPy for anything else."""
    return get_backend("cupy" if type(x).__module__.partition(".")[0] == "cupy" else "numpy")
