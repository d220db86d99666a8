"""INT8 GEMMs through cublasLt, the algorithm picked by its CTA tile: the products of Ozaki schemes I and II.

``cublasGemmEx`` runs cuBLAS's own choice of kernel. On the H200 (cuBLAS 13.1, fast-15 scheme II at N = 16384, as
called; ``results/published/h200/h200-ozaki2-int8-lt-product-*.json``) that choice for a capped product's tiles of
8192 x 2048 over k = 16384 (a 128 x 128 CTA tile) ran the product at 0.94x the uncapped one's speed; the first
algorithm cublasLt's heuristic offers with a 256 x 128 CTA tile ran it at 0.98-1.03x, and the uncapped product
within -0.3% and +1.6% of its speed on ``cublasGemmEx`` (its spans of 3072 x 16384 take cublasLt's 256 x 128 tile
in clusters of 3); the complex plans and Ozaki I's INT8 slices within -0.3% and +1.7%. An integer product is exact,
so every algorithm gives the same bits.

:data:`INT8_TILES` holds that choice as data, per compute capability: the CTA tiles (m x n of the column-major call)
taken first, in order, among the algorithms the heuristic offers for a shape, from an inner dimension on
(:class:`Preference`). Below it, where the heuristic offers none of them, on a device with no entry, or without
cublasLt (it comes with nvmath-python), the call goes to ``cublasGemmEx`` as before. A CUTLASS kernel built on the
machine (:mod:`gpu.backend.cutlass_int8`) is taken before either where it takes the call.

The heuristic is asked once per shape (transposes, m, n, k, leading dimensions and the operands' alignment) and
device; a call then issues ``cublasLtMatmul`` on the current stream with that stream's cuBLAS workspace, so CUDA
graphs capture it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, NamedTuple

import numpy as np

from .cutlass_int8 import CutlassInt8, KernelChoice, cutlass_int8

try:
    from nvmath.bindings import cublasLt as lt
except ImportError:  # nvmath-python is in the gpu extra; without it INT8 GEMMs stay on cublasGemmEx
    lt = None


@dataclass(frozen=True)
class Preference:
    """CTA tiles an INT8 GEMM takes first, in order, where cublasLt's heuristic offers them, for an inner dimension
    of at least ``min_k``."""

    tiles: tuple[str, ...]
    min_k: int = 0


#: The preference by compute capability. On the H200 the 256 x 128 tile lost 6% against cublasGemmEx's choice in
#: scheme II's GEMMs over k = 8192 (panels of 2048 x 8192 at N = 8192) and 4096 (N = 4096), and won over 16384.
INT8_TILES: dict[str, Preference] = {"9.0": Preference(("256x128", "128x256"), 16384)}
#: Algorithms asked of the heuristic per shape, shapes kept per device before the kept ones are dropped, and the
#: alignment (bytes) the heuristic assumes of an operand unless told less.
OFFERED, MAX_SHAPES, ALIGN = 16, 512, 256


class LtPlan(NamedTuple):
    """One shape's cublasLt call: descriptor, layouts of A, B and C, the heuristic's results and the one taken."""

    desc: int
    layouts: tuple[int, int, int]
    results: Any
    taken: int
    tile: str


class LtInt8:
    """INT8 x INT8 -> INT32 GEMMs of one device through cublasLt (see the module) by a :class:`Preference`."""

    def __init__(self, preference: Preference) -> None:
        self.preference = preference
        self._handle = lt.create()
        self._plans: dict[tuple[int, ...], LtPlan | None] = {}
        self._names = {int(t): t.name.removeprefix("TILE_") for t in lt.MatmulTile}

    def run(self, recipe: Any, call: Any, beta: float, workspace: tuple[int, int], stream: int) -> bool:
        """Issue ``call`` (a :class:`gpu.backend.blas.BlasCall` of the int8 recipe) on ``stream`` where a preferred
        algorithm is offered for its shape; False (nothing issued) otherwise."""
        if call.k < self.preference.min_k:
            return False
        aligned = tuple(min(ALIGN, p & -p) if p else ALIGN for p in (call.a, call.b, call.c))
        key = (call.transa, call.transb, call.m, call.n, call.k, call.lda, call.ldb, call.ldc, workspace[1], aligned)
        plan = self._plans.get(key, False)
        if plan is False:
            if len(self._plans) >= MAX_SHAPES:
                self._plans.clear()            # dropped, not destroyed: a call on another thread may hold one
            plan = self._plans[key] = self._plan(recipe, call, workspace[1], aligned)
        if plan is None:
            return False
        al, be = np.array(1, recipe.scalar), np.array(beta, recipe.scalar)
        la, lb, lc = plan.layouts
        lt.matmul(self._handle, plan.desc, al.ctypes.data, call.a, la, call.b, lb, be.ctypes.data, call.c, lc,
                  call.c, lc, plan.results[plan.taken]["algo"].ctypes.data, workspace[0], workspace[1], stream)
        return True

    def _plan(self, recipe: Any, call: Any, workspace_bytes: int, aligned: tuple[int, int, int]) -> LtPlan | None:
        """The shape's descriptor and the first offered algorithm of a preferred tile for operands of the
        ``aligned`` bytes of A, B and C (the heuristic assumes 256 unless told), or None where none is."""
        desc = lt.matmul_desc_create(recipe.compute, recipe.cuda_output)
        for attr, value in ((lt.MatmulDescAttribute.TRANSA, call.transa), (lt.MatmulDescAttribute.TRANSB, call.transb)):
            _set(lt.matmul_desc_set_attribute, desc, attr, value, lt.get_matmul_desc_attribute_dtype(attr))
        layouts = (lt.matrix_layout_create(recipe.cuda_operands, *((call.k, call.m) if call.transa else
                                                                    (call.m, call.k)), call.lda),
                   lt.matrix_layout_create(recipe.cuda_operands, *((call.n, call.k) if call.transb else
                                                                    (call.k, call.n)), call.ldb),
                   lt.matrix_layout_create(recipe.cuda_output, call.m, call.n, call.ldc))
        pref, attrs = lt.matmul_preference_create(), lt.MatmulPreferenceAttribute
        for attr, value in ((attrs.MAX_WORKSPACE_BYTES, workspace_bytes), (attrs.MIN_ALIGNMENT_A_BYTES, aligned[0]),
                            (attrs.MIN_ALIGNMENT_B_BYTES, aligned[1]), (attrs.MIN_ALIGNMENT_C_BYTES, aligned[2]),
                            (attrs.MIN_ALIGNMENT_D_BYTES, aligned[2])):
            _set(lt.matmul_preference_set_attribute, pref, attr, value, lt.get_matmul_preference_attribute_dtype(attr))
        results, count = lt.MatmulHeuristicResult(OFFERED), np.zeros(1, dtype=np.int32)
        try:
            lt.matmul_algo_get_heuristic(self._handle, desc, *layouts, layouts[2], pref, OFFERED, results.ptr,
                                         count.ctypes.data)
        except lt.cuBLASLtError:                # a shape cublasLt refuses stays on cublasGemmEx
            count[0] = 0
        finally:
            lt.matmul_preference_destroy(pref)
        tiles = [self._tile(results, i) for i in range(int(count[0]))]
        taken = next((tiles.index(t) for t in self.preference.tiles if t in tiles), None)
        if taken is None:
            for layout in layouts:
                lt.matrix_layout_destroy(layout)
            lt.matmul_desc_destroy(desc)
            return None
        return LtPlan(desc, layouts, results, taken, tiles[taken])

    def _tile(self, results: Any, i: int) -> str:
        """The CTA tile of the heuristic's result ``i`` (``"256x128"``)."""
        attr = lt.MatmulAlgoConfigAttribute.TILE_ID
        buf, written = np.zeros(1, lt.get_matmul_algo_config_attribute_dtype(attr)), np.zeros(1, np.uint64)
        lt.matmul_algo_config_get_attribute(results[i]["algo"].ctypes.data, attr, buf.ctypes.data, buf.nbytes,
                                            written.ctypes.data)
        return self._names.get(int(buf[0]), str(int(buf[0])))


def _set(setter: Any, obj: int, attr: Any, value: int, dtype: Any) -> None:
    """Set one cublasLt attribute from a Python value in the attribute's own dtype."""
    buf = np.array([value], dtype=dtype)
    setter(obj, attr, buf.ctypes.data, buf.nbytes)


def lt_int8(compute_capability: str, table: dict[str, Preference] | None = None) -> LtInt8 | None:
    """The cublasLt route of a device of ``compute_capability`` (its preference from ``table``, default
    :data:`INT8_TILES`), or None where it prefers no tiles or cublasLt is missing."""
    preference = (INT8_TILES if table is None else table).get(compute_capability)
    return LtInt8(preference) if preference is not None and preference.tiles and lt is not None else None


class Int8Routes:
    """The CuPy backend's INT8 GEMMs, per device: the built CUTLASS kernel first (:mod:`gpu.backend.cutlass_int8`;
    ``kernels``, default its :data:`~gpu.backend.cutlass_int8.KERNELS`), then :class:`LtInt8` (``table``, default
    :data:`INT8_TILES`), each made on the device's first INT8 GEMM (None where it has none), on the current stream
    with that stream's workspace from ``streams`` (:class:`gpu.backend.stream_blas.StreamBlas`)."""

    def __init__(self, xp: Any, streams: Any, table: dict[str, Preference] | None = None,
                 kernels: dict[str, KernelChoice] | None = None) -> None:
        self.xp, self.streams, self.table, self.kernels = xp, streams, table, kernels
        self._routes: dict[int, LtInt8 | None] = {}
        self._cutlass: dict[int, CutlassInt8 | None] = {}

    def _device(self) -> tuple[LtInt8 | None, CutlassInt8 | None]:
        """The current device's cublasLt route and built kernel, made on its first use."""
        device = self.xp.cuda.runtime.getDevice()
        if device not in self._routes:
            cc = self.xp.cuda.Device(device).compute_capability
            cc = f"{cc[:-1]}.{cc[-1]}"
            self._routes[device] = lt_int8(cc, self.table)
            self._cutlass[device] = cutlass_int8(cc, self.kernels)
        return self._routes[device], self._cutlass[device]

    def residue_min_k(self) -> int | None:
        """The least k of the residue GEMMs of the current device's built kernel; None where it has none."""
        kernel = self._device()[1]
        return None if kernel is None or kernel.res is None else kernel.choice.min_k

    def residues(self, a: Any, b: Any, r: Any, modulus: int) -> Any:
        """An issuer of R = a @ b.T modulo ``modulus`` written as INT8 residues by the current device's built
        kernel (:meth:`gpu.backend.cutlass_int8.CutlassInt8.residues`), on the stream current at each issue;
        None where no kernel is built or it does not take these views. Views of three dimensions are a batch
        (``r[i] = a[i] @ b[i].T``), issued as one launch."""
        kernel = self._device()[1]
        if kernel is None or not _residue_views(a, b, r):
            return None

        def space() -> tuple[int, int, int]:
            _, workspace, stream = self.streams.entry()
            return workspace.data.ptr, workspace.nbytes, stream.ptr
        shape = (*r.shape[-2:], a.shape[-1], *r.shape[:-2])
        views = ((x.data.ptr, x.strides[-2], *x.strides[:-2]) for x in (a, b, r))
        issue = kernel.residues(*views, shape, modulus, space)
        return None if issue is None else partial(_holding, issue, (a, b, r))

    def run(self, recipe: Any, call: Any, beta: float) -> bool:
        """Issue ``call`` through the current device's first route that takes the shape; False otherwise."""
        route, kernel = self._device()
        if route is None and kernel is None:
            return False
        _, workspace, stream = self.streams.entry()
        space = (workspace.data.ptr, workspace.nbytes)
        if kernel is not None and kernel.run(recipe, call, beta, space, stream.ptr):
            return True
        return route is not None and route.run(recipe, call, beta, space, stream.ptr)


def _residue_views(a: Any, b: Any, r: Any) -> bool:
    """Whether INT8 views ``a`` (rows, k), ``b`` (cols, k) and ``r`` (rows, cols), each with unit last stride and
    each led by the same batch side or none, make a residue GEMM."""
    if any(x.dtype != np.int8 or x.ndim != a.ndim or x.strides[-1] != 1 for x in (a, b, r)) or a.ndim not in (2, 3):
        return False
    batch = a.shape[:-2]
    return (b.shape[:-2] == r.shape[:-2] == batch and r.shape[-2:] == (a.shape[-2], b.shape[-2])
            and a.shape[-1] == b.shape[-1] and all(r.shape))


def _holding(issue: Callable[[], None], views: tuple[Any, ...]) -> None:
    """``issue()``, with ``views`` bound beside it: the kernel takes the arrays' addresses only, so the issuer holds
    the arrays themselves. One freed under a kept issuer would have its memory handed to later arrays by the pool,
    and the GEMMs would read (and write) that memory with no error."""
    issue()
