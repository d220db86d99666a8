"""Split-K's CUDA kernels compiled and looked up (CuPy only): the source's template instantiations, each compiled
once per process and device, only those a plan launches, together in one NVRTC run (CuPy keeps the binaries on
disk for the next process); the chunk kernel a device runs for an output (:func:`variant`) and what one block of
it needs (:func:`resources`), the occupancy formula's input. :mod:`gpu.splitk.kernels` launches them."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

import cupy
import numpy as np

from . import bulk_source, source
from .occupancy import Kernel
from .ops import TILE
from .plan import BULK_WIDTH
from .variants import _CTYPES, WARPS, Variant, choose

#: The whole source, its constants filled in.
_SOURCE = (source.SOURCE + bulk_source.BULK).replace("__TILE__", str(TILE)).replace("__WARPS__", str(WARPS))


def variant(dtype: Any, m: int, n: int, wide: bool = False) -> Variant:
    """The chunk kernel for this dtype and output on the current device (:func:`gpu.splitk.variants.choose`)."""
    return choose(dtype, m, n, int(cupy.cuda.Device().compute_capability), wide)


#: The compiled kernels of this process, by (device, template instantiation) and (device, chunk variant).
_FUNCTIONS: dict[tuple[int, str], Any] = {}
_CHUNK_FUNCTIONS: dict[tuple[int, Variant], Any] = {}


def _compile(names: tuple[str, ...]) -> Any:
    """One NVRTC run of the source for the template instantiations ``names`` (CuPy keeps the binary on disk,
    so a new process finds it there)."""
    return cupy.RawModule(code=_SOURCE, options=("--std=c++14",), name_expressions=names)


def compile_names(*names: str) -> None:
    """The kernels ``names`` compiled for the current device: those this process has not compiled yet, in one
    NVRTC run. A plan asks for the kernels it launches only, so that a first call compiles no other."""
    device = cupy.cuda.Device().id
    missing = tuple(dict.fromkeys(name for name in names if (device, name) not in _FUNCTIONS))
    if missing:
        module = _compile(missing)
        for name in missing:
            _FUNCTIONS[(device, name)] = module.get_function(name)


def _function(name: str) -> Any:
    key = (cupy.cuda.Device().id, name)
    if key not in _FUNCTIONS:
        compile_names(name)
    return _FUNCTIONS[key]


def _ctype(dtype: Any) -> str:
    return _CTYPES[np.dtype(dtype)]


def _elementwise(name: str, dtype: Any) -> Any:
    return _function(f"{name}<{_ctype(dtype)}>")


def reduction_names(dtype: Any) -> tuple[str]:
    """The deterministic reduction's kernels for ``dtype``."""
    return (f"splitk_reduce<{_ctype(dtype)}>",)


def _chunk_function(v: Variant) -> Any:
    """The compiled chunk kernel, allowed the dynamic shared memory it needs."""
    key = (cupy.cuda.Device().id, v)
    f = _CHUNK_FUNCTIONS.get(key)
    if f is None:
        f = _function(v.name)
        if v.shared:
            limit = _properties(key[0])["sharedMemPerBlockOptin"]
            if v.shared + f.shared_size_bytes > limit:
                raise ValueError(f"{v.name} needs {v.shared + f.shared_size_bytes} bytes of shared memory per "
                                 f"block; this device allows {limit}: use fewer stages or slices")
            f.max_dynamic_shared_size_bytes = v.shared
        _CHUNK_FUNCTIONS[key] = f
    return f


@cache
def _properties(device: int) -> dict[str, Any]:
    return cupy.cuda.runtime.getDeviceProperties(device)


def resources(v: Variant) -> Kernel:
    """What one block of chunk kernel ``v`` needs, as compiled for this device: the occupancy formula's input."""
    f = _chunk_function(v)
    return Kernel(threads=int(np.prod(v.block)), shared_bytes=f.shared_size_bytes + v.shared,
                  registers_per_thread=f.num_regs, tile=v.rows, tile_n=v.cols, width=BULK_WIDTH if v.maps else None)


def resources_of(named: Mapping[str, Variant]) -> tuple[dict[str, tuple[Variant, Kernel]], dict[str, str]]:
    """Named chunk kernels compiled together in one NVRTC run, with their :func:`resources`; and those this
    device cannot run (more shared memory than a block may have), with the reason: what the tuning scripts
    compare."""
    compile_names(*{v.name for v in named.values()})
    found, refused = {}, {}
    for name, v in named.items():
        try:
            found[name] = (v, resources(v))
        except ValueError as err:
            refused[name] = str(err)
    return found, refused
