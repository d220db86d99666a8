"""The INT8 GEMMs' CUTLASS route (:mod:`gpu.backend.cutlass_int8`): where the built kernel is kept, how it is
built, which calls it takes and how they map to the kernel, its place before cublasLt, and (on a GPU where it is
built) bits equal to cublasGemmEx's."""

import subprocess
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from gpu.backend import cutlass_int8 as ci
from gpu.backend import lt_int8
from gpu.backend.blas import BlasCall, gemm_recipe

INT8 = gemm_recipe("int8")
CHOICE = ci.KernelChoice("90a", (128, 256, 128), (2, 1), min_k=8192)


def _call(m=2048, n=8192, k=16384, transa=1, transb=0, a=0x1000, b=0x2000, c=0x3000, lda=None, ldb=None, ldc=None):
    return BlasCall(transa, transb, m, n, k, a, lda or k, b, ldb or k, c, ldc or m)


@pytest.fixture
def folder(monkeypatch, tmp_path):
    monkeypatch.setenv(ci.ENV_DIR, str(tmp_path))
    return tmp_path


def _headers(root: Path) -> Path:
    (root / "include" / "cutlass").mkdir(parents=True)
    (root / "include" / "cutlass" / "cutlass.h").write_text("")
    (root / "tools" / "util" / "include" / "cutlass" / "util").mkdir(parents=True)
    return root


def test_the_library_is_named_by_its_source_and_choice_in_the_kernel_folder(folder):
    path = ci.library_path(CHOICE)
    assert path.parent == folder and path.suffix == ".so"
    assert CHOICE.name == "i32_128x256x128_c21" and CHOICE.name in path.name and "sm90a" in path.name
    assert ci.library_path(ci.KernelChoice("90a", (128, 256, 128), (2, 1), min_k=4096)) != path
    assert ci.KernelChoice("90a", (128, 128, 128), (1, 1), pingpong=True).name == "i32_128x128x128_c11_pingpong"


def test_without_a_built_kernel_or_a_choice_there_is_no_route(folder):
    assert ci.cutlass_int8("9.0") is None
    assert ci.cutlass_int8("8.0") is None
    assert ci.cutlass_int8("9.0", {}) is None
    status = ci.status()
    assert status["kernel_dir"] == str(folder) and status["kernels"]["9.0"]["built"] is False


def test_measurements_record_the_built_kernel_by_its_file_name(folder):
    assert ci.built_kernel("9.0") is None and ci.built_kernel("8.0") is None
    path = ci.library_path(ci.KERNELS["9.0"])
    path.write_bytes(b"")
    assert ci.built_kernel("9.0") == path.name and ci.status()["kernels"]["9.0"]["built"] is True


def test_a_build_names_what_is_missing(folder, monkeypatch, tmp_path):
    with pytest.raises(ci.BuildError, match="stay on cuBLAS"):
        ci.build("8.0")
    monkeypatch.setattr(ci.shutil, "which", lambda name: None)
    with pytest.raises(ci.BuildError, match="nvcc was not found"):
        ci.build("9.0")
    monkeypatch.setattr(ci.util, "find_spec", lambda name: None)
    monkeypatch.delenv(ci.ENV_CUTLASS, raising=False)
    with pytest.raises(ci.BuildError, match="pip install nvidia-cutlass"):
        ci.build("9.0", nvcc="nvcc")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert ci.cutlass_headers(empty) == []
    assert not list(folder.glob("*.so"))


def test_the_report_names_what_a_build_with_the_same_arguments_would_use(folder, monkeypatch, tmp_path):
    monkeypatch.setattr(ci.shutil, "which", lambda name: None)
    monkeypatch.setattr(ci.util, "find_spec", lambda name: None)
    monkeypatch.delenv(ci.ENV_CUTLASS, raising=False)
    assert ci.status()["nvcc"] is None and ci.status()["cutlass_headers"] == []
    root = _headers(tmp_path / "cutlass")
    given = ci.status(nvcc="/opt/nvcc", cutlass=root)
    assert given["nvcc"] == "/opt/nvcc"
    assert given["cutlass_headers"] == [str(root / "include"), str(root / "tools" / "util" / "include")]


def test_a_build_runs_nvcc_into_the_kernel_folder_or_leaves_nothing(folder, monkeypatch, tmp_path):
    root, ran = _headers(tmp_path / "cutlass"), []

    def nvcc(cmd, status=0):
        ran.append(cmd)
        Path(cmd[cmd.index("-o") + 1]).write_bytes(b"\x7fELF")
        return subprocess.CompletedProcess(cmd, status, "", "error: something" if status else "")

    monkeypatch.setattr(ci.subprocess, "run", lambda cmd, **kw: nvcc(cmd))
    path = ci.build("9.0", nvcc="/opt/nvcc", cutlass=root)
    assert path == ci.library_path(ci.KERNELS["9.0"]) and path.read_bytes() == b"\x7fELF"
    cmd = ran[0]
    assert cmd[0] == "/opt/nvcc" and "-gencode=arch=compute_90a,code=sm_90a" in cmd and "-shared" in cmd
    assert f"-I{root / 'include'}" in cmd and f"-I{root / 'tools' / 'util' / 'include'}" in cmd
    assert {"-DNAME=i32_128x256x128_c21", "-DTILE_M=128", "-DTILE_N=256", "-DCLUSTER_M=2", "-DPINGPONG=0",
            "-DNDEBUG"} <= set(cmd) and cmd[-1] == str(ci.SOURCE) and ci.SOURCE.is_file()
    pyproject = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    assert '"backend/kernels/*.cu"]' in pyproject, "the source is installed with the package"
    path.unlink()
    monkeypatch.setattr(ci.subprocess, "run", lambda cmd, **kw: nvcc(cmd, status=2))
    with pytest.raises(ci.BuildError, match="status 2:\nerror: something"):
        ci.build("9.0", nvcc="/opt/nvcc", cutlass=root)
    assert [p.name for p in folder.iterdir()] == ["cutlass"]


def test_calls_map_to_the_kernels_row_major_product_and_the_rest_are_declined():
    """Column-major C(m, n) = a^T b over k-contiguous operands is the kernel's D(n, m) = b a^T."""
    issued, status = [], [0]
    kernel = ci.CutlassInt8(lambda *args: issued.append(args) or status[0], CHOICE)
    assert kernel.run(INT8, _call(ldc=2064), 0.0, (0xCC, 1 << 20), 0x55)
    assert issued == [(0x2000, 0x1000, 0x3000, 8192, 2048, 16384, 16384, 16384, 2064, 0xCC, 1 << 20, 0x55)]
    declined = [(_call(transa=0), 0.0), (_call(transb=1), 0.0), (_call(), 1.0), (_call(k=4096), 0.0),
                (_call(a=0x1008), 0.0), (_call(c=0x3004), 0.0), (_call(lda=16392), 0.0), (_call(ldc=2050), 0.0)]
    for call, beta in declined:
        assert not kernel.run(INT8, call, beta, (0xCC, 1 << 20), 0x55)
    assert not kernel.run(gemm_recipe("fp16"), _call(), 0.0, (0xCC, 1 << 20), 0x55)
    status[0] = 1
    assert not kernel.run(INT8, _call(), 0.0, (0xCC, 1 << 20), 0x55)
    assert len(issued) == 2 and kernel.calls == 1


def test_routes_take_the_built_kernel_first_and_cublaslt_for_the_rest(monkeypatch):
    taken, made = [], []
    kernel = ci.CutlassInt8(lambda *args: taken.append(args[5]) or 0, CHOICE)
    monkeypatch.setattr(lt_int8, "cutlass_int8", lambda cc, kernels: made.append(cc) or kernel)
    lt_route = SimpleNamespace(run=lambda recipe, call, beta, ws, stream: taken.append(("lt", call.k)) or True)
    monkeypatch.setattr(lt_int8, "lt_int8", lambda cc, table: lt_route)
    xp = SimpleNamespace(cuda=SimpleNamespace(runtime=SimpleNamespace(getDevice=lambda: 0),
                                              Device=lambda i: SimpleNamespace(compute_capability="90")))
    workspace = SimpleNamespace(data=SimpleNamespace(ptr=0xCC), nbytes=32 << 20)
    routes = lt_int8.Int8Routes(xp, SimpleNamespace(entry=lambda: (7, workspace, SimpleNamespace(ptr=0x55))))
    for k in (16384, 4096, 8192):
        assert routes.run(INT8, _call(k=k), 0.0)
    assert taken == [16384, ("lt", 4096), 8192] and made == ["9.0"]


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k,pad", [(8192, 2048, 16384, 0), (300, 520, 8192, 0), (129, 260, 8208, 0),
                                       (2048, 1024, 8192, 128)])
def test_gpu_built_kernel_products_equal_cublas_gemmex_bitwise(cupy_backend, m, n, k, pad):
    """P = a @ b.T through the backend where the kernel is built (the GPU suite builds or carries it): taken by
    the kernel, eagerly and replayed from a CUDA graph, with the bits of cublasGemmEx; ``pad``: operands and P
    are views into wider rows, as a plan's panels are."""
    be, xp = cupy_backend, cupy_backend.xp
    cc = xp.cuda.Device().compute_capability
    if be._lt is None or ci.cutlass_int8(f"{cc[:-1]}.{cc[-1]}") is None:
        pytest.skip("no CUTLASS INT8 kernel built for this device (gemmlab kernels --build)")
    rng = xp.random.default_rng(11)
    a, b = (rng.integers(-128, 128, size=(r, k + pad), dtype=np.int8)[:, :k] for r in (m, n))
    want = xp.zeros((m, n + pad), dtype=np.int32)[:, :n]
    routes, be._lt = be._lt, None
    try:
        be.gemm_ex(a, b.T, want, recipe="int8")
    finally:
        be._lt = routes
    be.gemm_ex(xp.ones((8, k), np.int8), xp.ones((8, k), np.int8).T, xp.empty((8, 8), np.int32), recipe="int8")
    kernel = be._lt._cutlass[xp.cuda.runtime.getDevice()]
    before = kernel.calls
    got = xp.zeros_like(want)
    be.gemm_ex(a, b.T, got, recipe="int8")
    assert kernel.calls == before + 1 and bool((got == want).all())
    got.fill(0)
    graph = be.capture(lambda: be.gemm_ex(a, b.T, got, recipe="int8"))
    got.fill(0)
    graph.launch()
    assert bool((got == want).all())
