"""INT8 GEMMs on a CUTLASS kernel compiled once on the user's machine: the products of Ozaki schemes I and II.

On the H200, under its 700 W cap, cuBLAS 13.1's INT8 kernels were not the fastest:

- CUTLASS 3's warp-specialized cooperative kernel with a 128 x 256 x 128 CTA tile in clusters of 2 x 1 ran
  1.01-1.03x cuBLAS's rate on scheme II's GEMMs over k = 8192 and 16384.
- Fast-15 products at N = 16384, as called, ran 1.036x faster at level 0 and 1.043x at level 1
  (``results/published/h200/h200-ozaki2-cutlass-*.json``).

An integer product is exact, so C keeps its bits. The same kernel's second entry point writes each product's
symmetric residue modulo a modulus as INT8 (:meth:`CutlassInt8.residues`, offered as
:meth:`gpu.backend.Backend.residue_gemm`): scheme II's CRT then reads a quarter of the bytes (level 1 at N = 16384
1.039x faster, its epilogue costing the GEMMs 0-1.7% of their rate).

:data:`KERNELS` holds the choice as data, per compute capability: the kernel, and the inner dimension it is taken
from (the one measured).

CUTLASS kernels are C++ templates, so the kernel is built on the user's machine:

- ``gemmlab kernels --build`` (:func:`build`) compiles ``kernels/cutlass_int8.cu`` with nvcc and CUTLASS's headers
  (the ``nvidia-cutlass`` package, or a checkout named by ``CUTLASS_PATH``).
- The result is a shared library in the kernel folder (``GEMMLAB_KERNEL_DIR``, default
  ``~/.cache/gemmlab/kernels``). Its name holds a hash of the source and the target, so a changed source is
  built again.

:class:`gpu.backend.lt_int8.Int8Routes` takes the kernel first, where it is built and takes the call:

- layout TN, beta 0, ``k`` at least the choice's ``min_k``;
- 16-byte alignment, and CUTLASS's own checks.

Every other call goes to cublasLt or ``cublasGemmEx`` as before. The kernel is launched on the current stream
with that stream's cuBLAS workspace, so CUDA graphs capture it.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from importlib import util
from pathlib import Path
from typing import Any

SOURCE = Path(__file__).with_name("kernels") / "cutlass_int8.cu"
ENV_DIR, ENV_CUTLASS = "GEMMLAB_KERNEL_DIR", "CUTLASS_PATH"


@dataclass(frozen=True)
class KernelChoice:
    """The CUTLASS kernel a device's INT8 GEMMs take: its target, CTA tile (m, n, k), cluster (m, n) and schedule,
    for inner dimensions of at least ``min_k``."""

    arch: str
    tile: tuple[int, int, int]
    cluster: tuple[int, int]
    pingpong: bool = False
    min_k: int = 0

    @property
    def name(self) -> str:
        """The kernel's C symbol, from its shape: ``i32_128x256x128_c21``."""
        m, n, k = self.tile
        return f"i32_{m}x{n}x{k}_c{self.cluster[0]}{self.cluster[1]}{'_pingpong' if self.pingpong else ''}"


#: The choice by compute capability. On the H200 the 256 x 128 tile in clusters of 1 x 2 ran the products at
#: 1.018x (level 0) and 1.027x (level 1) against 1.036x and 1.043x for this one; only k = 8192 and 16384 were timed.
KERNELS: dict[str, KernelChoice] = {"9.0": KernelChoice("90a", (128, 256, 128), (2, 1), min_k=8192)}


class BuildError(RuntimeError):
    """The kernel could not be built: a missing compiler or header, or nvcc's own error."""


def kernel_dir() -> Path:
    """Where built kernels are kept: ``GEMMLAB_KERNEL_DIR``, else ``~/.cache/gemmlab/kernels``."""
    return Path(os.environ.get(ENV_DIR) or Path.home() / ".cache" / "gemmlab" / "kernels")


def library_path(choice: KernelChoice) -> Path:
    """The shared library of ``choice``, named by a hash of the source and the choice."""
    digest = hashlib.sha256(SOURCE.read_bytes() + repr(choice).encode()).hexdigest()[:12]
    return kernel_dir() / f"cutlass_int8-{choice.name}-sm{choice.arch}-{digest}.so"


def cutlass_headers(root: str | Path | None = None) -> list[Path]:
    """CUTLASS's include folders, from ``root`` or ``CUTLASS_PATH`` (a CUTLASS checkout), else from the
    ``nvidia-cutlass`` package; empty where none holds them."""
    root = root or os.environ.get(ENV_CUTLASS)
    if root:
        base = Path(root)
    else:
        spec = util.find_spec("cutlass_library")
        if spec is None or spec.origin is None:
            return []
        base = Path(spec.origin).parent / "source"
    dirs = [base / "include", base / "tools" / "util" / "include"]
    ok = (dirs[0] / "cutlass" / "cutlass.h").is_file() and (dirs[1] / "cutlass" / "util").is_dir()
    return dirs if ok else []


def build_command(choice: KernelChoice, include: list[Path], out: Path, nvcc: str) -> list[str]:
    """nvcc's command line that builds ``choice`` into the shared library ``out``."""
    (m, n, k), (cm, cn) = choice.tile, choice.cluster
    return [nvcc, "-std=c++17", "-O3", "-DNDEBUG", f"-gencode=arch=compute_{choice.arch},code=sm_{choice.arch}",
            "--expt-relaxed-constexpr", "-diag-suppress", "20012", "-shared", "-Xcompiler", "-fPIC",
            "--cudart", "static", *(f"-I{d}" for d in include), f"-DNAME={choice.name}", f"-DTILE_M={m}",
            f"-DTILE_N={n}", f"-DTILE_K={k}", f"-DCLUSTER_M={cm}", f"-DCLUSTER_N={cn}",
            f"-DPINGPONG={int(choice.pingpong)}", "-o", str(out), str(SOURCE)]


def build(compute_capability: str = "9.0", *, nvcc: str | None = None, cutlass: str | Path | None = None) -> Path:
    """Compile the kernel that :data:`KERNELS` chooses for ``compute_capability`` into the kernel folder (about a
    minute) and return its path. Raises :class:`BuildError` naming what is missing."""
    choice = KERNELS.get(compute_capability)
    if choice is None:
        raise BuildError(f"no CUTLASS INT8 kernel is chosen for compute capability {compute_capability} "
                         f"(chosen for {', '.join(KERNELS)}); INT8 GEMMs there stay on cuBLAS")
    compiler = nvcc or shutil.which("nvcc")
    if compiler is None:
        raise BuildError("nvcc was not found: install the CUDA toolkit (or pip install nvidia-cuda-nvcc) and put "
                         "nvcc on PATH, or pass its path")
    include = cutlass_headers(cutlass)
    if not include:
        raise BuildError("CUTLASS's headers were not found: pip install nvidia-cutlass, or set CUTLASS_PATH to a "
                         "CUTLASS checkout (the folder holding include/ and tools/)")
    out = library_path(choice)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        part = Path(tmp) / out.name
        done = subprocess.run(build_command(choice, include, part, compiler), capture_output=True, text=True,
                              check=False)
        if done.returncode:
            raise BuildError(f"nvcc failed with status {done.returncode}:\n{done.stderr[-3000:]}")
        os.replace(part, out)
    return out


def takes(recipe: Any, call: Any, beta: float, min_k: int) -> bool:
    """Whether the kernel can take ``call`` (a :class:`gpu.backend.blas.BlasCall`): INT8, TN, beta 0, k at least
    ``min_k``, operands and C 16-byte aligned with rows a multiple of 16 bytes apart."""
    return (recipe.name == "int8" and beta == 0 and call.transa == 1 and call.transb == 0 and call.k >= min_k
            and all(v % 16 == 0 for v in (call.a, call.b, call.c, call.lda, call.ldb)) and call.ldc % 4 == 0)


class CutlassInt8:
    """One device's INT8 GEMMs on a built kernel: ``fn`` is its C function (:meth:`load`), ``res`` the one that
    writes residues (:meth:`residues`); ``calls`` counts the GEMMs it issued."""

    def __init__(self, fn: Any, choice: KernelChoice, res: Any = None) -> None:
        self.fn, self.choice, self.calls, self.res = fn, choice, 0, res

    @classmethod
    def load(cls, path: Path, choice: KernelChoice) -> CutlassInt8:
        lib = ctypes.CDLL(str(path))
        fn, res = getattr(lib, choice.name), getattr(lib, choice.name + "_res")
        p, i, i64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64
        tail = [p, ctypes.c_size_t, p]
        fn.restype = res.restype = ctypes.c_int
        fn.argtypes = [p] * 3 + [i] * 3 + [i64] * 3 + tail
        res.argtypes = [p] * 3 + [i] * 4 + [i64] * 6 + [i] + tail
        return cls(fn, choice, res)

    def run(self, recipe: Any, call: Any, beta: float, workspace: tuple[int, int], stream: int) -> bool:
        """Issue ``call`` on ``stream`` where the kernel takes it; False (nothing issued) otherwise. Column-major
        C(m, n) = a^T b is row-major C(n, m) = b a^T: the kernel's D = A B^T with A = b and B = a."""
        if not takes(recipe, call, beta, self.choice.min_k):
            return False
        if self.fn(call.b, call.a, call.c, call.n, call.m, call.k, call.ldb, call.lda, call.ldc, workspace[0],
                   workspace[1], stream):
            return False
        self.calls += 1
        return True

    def residues(self, a: tuple[int, ...], b: tuple[int, ...], r: tuple[int, ...], shape: tuple[int, ...],
                 modulus: int, space: Any) -> Any:
        """An issuer of R = a b^T modulo ``modulus`` as INT8 symmetric residues (``res``): ``a``, ``b`` and ``r``
        their (pointer, row stride) pairs in elements, ``a`` k-contiguous (rows, k), ``b`` (cols, k), R row-major
        (rows, cols); ``shape`` (rows, cols, k); ``space()`` gives (workspace, bytes, stream) at each issue.

        A batch of such products in one launch: ``shape`` (rows, cols, k, batch) and each view a (pointer, row
        stride, batch stride) triple, product i at i batch strides from each pointer. None where the kernel does
        not take it (:func:`takes_residues`). An issue that CUTLASS refuses raises."""
        rows, cols, k, batch = (*shape, 1)[:4]
        views = [(*x, 0)[:3] for x in (a, b, r)]
        if self.res is None or batch < 1 or not takes_residues(*views, k, modulus, self.choice.min_k):
            return None
        fn = self.res
        args = (*(x[0] for x in views), rows, cols, k, batch, *(x[1] for x in views), *(x[2] for x in views),
                modulus)

        def issue() -> None:
            status = fn(*args, *space())
            if status:
                where = f" x {batch}" if batch > 1 else ""
                raise RuntimeError(f"the CUTLASS residue GEMM {rows} x {cols} x {k}{where} failed (status {status})")
            self.calls += batch
        return issue


def residue_depth(k: int, min_k: int) -> bool:
    """Whether the residue kernel takes a depth of ``k`` terms: at least ``min_k`` and a multiple of 16. Plans ask
    it before they have views (:func:`gpu.ozaki2.gemms.writes_residues`), the kernel again with them."""
    return k >= min_k and k % 16 == 0


def takes_residues(a: tuple[int, ...], b: tuple[int, ...], r: tuple[int, ...], k: int, modulus: int,
                   min_k: int) -> bool:
    """Whether the residue kernel takes R = a b^T: a depth it takes (:func:`residue_depth`), every pointer and
    stride (the (pointer, row stride[, batch stride]) of each INT8 view) a multiple of 16 bytes, and a modulus of 3
    to 256."""
    return (residue_depth(k, min_k) and 3 <= modulus <= 256
            and all(v % 16 == 0 for x in (a, b, r) for v in x))


def cutlass_int8(compute_capability: str, table: dict[str, KernelChoice] | None = None) -> CutlassInt8 | None:
    """The built kernel of a device of ``compute_capability`` (its choice from ``table``, default :data:`KERNELS`),
    or None where none is chosen or built."""
    choice = (KERNELS if table is None else table).get(compute_capability)
    if choice is None:
        return None
    path = library_path(choice)
    return CutlassInt8.load(path, choice) if path.is_file() else None


def built_kernel(compute_capability: str) -> str | None:
    """The file name of the kernel built for ``compute_capability``, which measurements record (the INT8 GEMMs
    run on it), or None where none is built."""
    choice = KERNELS.get(compute_capability)
    path = library_path(choice) if choice is not None else None
    return path.name if path is not None and path.is_file() else None


def status(*, nvcc: str | None = None, cutlass: str | Path | None = None) -> dict[str, Any]:
    """What ``gemmlab kernels`` reports: per compute capability the kernel chosen, its library and whether it is
    built; the nvcc and CUTLASS headers a build with these arguments (as :func:`build` takes them) would use."""
    return {"kernel_dir": str(kernel_dir()), "nvcc": nvcc or shutil.which("nvcc"),
            "cutlass_headers": [str(d) for d in cutlass_headers(cutlass)],
            "kernels": {cc: {"kernel": c.name, "min_k": c.min_k, "library": str(library_path(c)),
                             "built": library_path(c).is_file()} for cc, c in KERNELS.items()}}
