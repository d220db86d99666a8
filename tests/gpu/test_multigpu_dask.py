"""The Dask front-end of the out-of-core engine (``gpu.multigpu.dask_matmul``) on CPU workers: products equal
``A @ B`` on odd shapes and blocks, from NumPy and dask.array operands, in float64 and float32; the
refusals before any work; and the placement (each block on its worker of the process grid, which holds its
panels of A and B and read each of them once)."""

import pickle
from collections import Counter

import numpy as np
import pytest

distributed = pytest.importorskip("distributed", reason="the Dask front-end needs dask[array] and distributed "
                                                        "(pip install -e '.[dist]')")
da = pytest.importorskip("dask.array", reason="the Dask front-end needs dask[array] (pip install -e '.[dist]')")

from gpu.multigpu.dask_matmul import matmul, process_grid, submit  # noqa: E402
from gpu.multigpu.mapped import MappedMatrix, locate  # noqa: E402

TOL = {np.dtype(np.float64): 1e-12, np.dtype(np.float32): 1e-5}


def _cluster(n_workers):
    cluster = distributed.LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=False,
                                       dashboard_address=":0")
    return cluster, distributed.Client(cluster)


@pytest.fixture(scope="module")
def client():
    cluster, client = _cluster(2)
    yield client
    client.close()
    cluster.close()


def operands(m, k, n, dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (m, k)).astype(dtype), rng.uniform(-1, 1, (k, n)).astype(dtype)


def assert_product(C, A, B):
    """max |C - A B| <= tol |A| |B| (norms: largest absolute entry times k)."""
    A, B = np.asarray(A), np.asarray(B)
    expect = A.astype(np.float64) @ B.astype(np.float64)
    assert C.shape == expect.shape and C.dtype == A.dtype and type(C) is np.ndarray
    scale = max(1.0, A.shape[1] * np.abs(A).max() * np.abs(B).max()) if A.size and B.size else 1.0
    assert np.abs(C - expect).max(initial=0.0) <= TOL[C.dtype] * scale


# --- products ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("block", [None, 40, (20, 30), (7, 83), (97, 9), 1000])
def test_the_product_equals_a_at_b_on_odd_shapes_and_blocks(client, block):
    A, B = operands(97, 61, 83)
    assert_product(matmul(A, B, client=client, block=block, backend="numpy"), A, B)


@pytest.mark.parametrize("convert", ["both", "A", "B"])
def test_dask_array_operands(client, convert):
    A, B = operands(97, 61, 83, seed=1)
    dA = da.from_array(A, chunks=(30, 25)) if convert in ("both", "A") else A
    dB = da.from_array(B, chunks=(17, 40)) if convert in ("both", "B") else B
    assert_product(matmul(dA, dB, client=client, block=(25, 35), backend="numpy"), A, B)


def test_float32_and_engine_options(client):
    A, B = operands(45, 70, 33, dtype=np.float32, seed=2)
    C = matmul(A, B, client=client, block=(20, 16), backend="numpy", panel=9, device_block=(7, 5), buffers=3)
    assert_product(C, A, B)


def test_a_transposed_view_and_empty_products(client):
    A, B = operands(61, 37, 29, seed=3)
    assert_product(matmul(np.asfortranarray(A), B[:, ::1], client=client, block=13, backend="numpy"), A, B)
    assert matmul(A[:0], B, client=client).shape == (0, 29)
    C = matmul(A[:, :0], B[:0], client=client, block=7, backend="numpy")
    assert C.shape == (61, 29) and not C.any()


def test_a_task_error_comes_back_from_the_worker(client):
    A, B = operands(20, 10, 12)
    A[3, 4] = np.nan
    with pytest.raises(ValueError, match="NaN or infinity"):
        matmul(A, B, client=client, block=8, backend="numpy")
    C = matmul(A, B, client=client, block=8, backend="numpy", check_finite=False)
    assert np.isnan(C[3]).all() and np.isfinite(np.delete(C, 3, axis=0)).all()


# --- refusals before any work --------------------------------------------------------------------------

@pytest.mark.parametrize("args,kwargs,error,match", [
    ((np.ones((3, 4)), np.ones((5, 2))), {}, ValueError, "A's columns must equal B's rows"),
    ((np.ones(3), np.ones((3, 2))), {}, ValueError, "must be 2-D"),
    ((np.ones((3, 4)), np.ones((4, 2), np.float32)), {}, TypeError, "one dtype"),
    ((np.ones((3, 4), int), np.ones((4, 2), int)), {}, TypeError, "float32 or float64"),
    ((np.ma.ones((3, 4)), np.ones((4, 2))), {}, TypeError, "masked array"),
    ((np.ones((3, 4)), np.ones((4, 2))), {"block": 0}, ValueError, "block must be a positive int"),
    ((np.ones((3, 4)), np.ones((4, 2))), {"block": (2, -1)}, ValueError, "block must be a positive int"),
    ((np.ones((3, 4)), np.ones((4, 2))), {"block": True}, ValueError, "block must be a positive int"),
    ((np.ones((3, 4)), np.ones((4, 2))), {"backend": "tpu"}, ValueError, "backend must name"),
    ((np.ones((3, 4)), np.ones((4, 2))), {"out": np.ones((2, 3))}, ValueError, "out has shape"),
    ((np.ones((3, 4)), np.ones((4, 2))), {"out": np.ones((3, 2), np.float32)}, ValueError, "out has shape"),
    ((np.ones((3, 4)), np.ones((4, 2))), {"workers": ["tcp://nowhere:1"]}, ValueError, "some of the client's"),
    ((np.ones((3, 4)), np.ones((4, 2))), {"pannel": 3}, TypeError, "unknown engine option"),
])
def test_bad_input_is_refused_with_the_way_out(client, args, kwargs, error, match):
    with pytest.raises(error, match=match):
        submit(*args, client=client, **kwargs)


def test_bad_dask_operands_and_clients_are_refused(client):
    x = da.ones((10, 4), chunks=5)
    with pytest.raises(ValueError, match="compute_chunk_sizes"):
        matmul(x[x[:, 0] > 0], np.ones((4, 2)), client=client)
    with pytest.raises(ValueError, match="2-D"):
        matmul(da.ones(4, chunks=2), np.ones((4, 2)), client=client)
    with pytest.raises(TypeError, match="distributed.Client"):
        matmul(np.ones((2, 2)), np.ones((2, 2)), client="tcp://127.0.0.1:8786")


def test_a_client_without_workers_is_refused():
    cluster, empty = _cluster(0)
    with cluster, empty, pytest.raises(ValueError, match="no workers.*wait_for_workers"):
        matmul(np.ones((2, 2)), np.ones((2, 2)), client=empty)


# --- placement -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("workers,rows,cols,m,n,grid", [
    (2, 5, 3, 97, 83, (2, 1)),     # m >= n: split the rows
    (2, 3, 5, 40, 83, (1, 2)),
    (4, 4, 4, 100, 100, (2, 2)),   # traffic m pc + n pr is least on the square grid
    (4, 1, 9, 10, 90, (1, 4)),     # one block row: every worker in it
    (3, 2, 2, 50, 50, (1, 2)),     # 2 of 3 workers busy (no 3-way grid of 2 x 2 blocks)
    (8, 3, 2, 60, 40, (3, 2)),
])
def test_the_process_grid_keeps_the_most_workers_busy_at_the_least_traffic(workers, rows, cols, m, n, grid):
    assert process_grid(workers, rows, cols, m, n) == grid


def _fetched(client) -> dict[str, Counter]:
    """Per worker, how many times each key came in from another worker."""
    logs = client.run(lambda dask_worker: [key for entry in dask_worker.transfer_incoming_log for key in entry["keys"]])
    return {worker: Counter(keys) for worker, keys in logs.items()}


def _check_placement(client, product, dask_operands):
    (pr, pc), names = product.grid, sorted(client.nthreads())
    before = _fetched(client)
    C = product.result()
    fetched = {w: _fetched(client)[w] - before.get(w, Counter()) for w in names}
    if dask_operands:
        a_key, b_key = [f.key for f in product.a_panels], [f.key for f in product.b_panels]
    else:                     # one key per panel and worker, on that worker alone
        scattered = [(w, f) for p in (*product.a_panels, *product.b_panels) for w, f in p.items()]
        assert all(list(client.who_has(f)[f.key]) == [w] for w, f in scattered)
        a_key = b_key = [f.key for _, f in scattered]
    for (i, j), future in product.blocks.items():
        owner = names[(i % pr) * pc + j % pc]
        assert product.workers[i, j] == owner
        assert list(client.who_has(future)[future.key]) == [owner], "block ran away from its worker"
    for w in names:
        mine_a = {a_key[i] for (i, _), o in product.workers.items() if o == w}
        mine_b = {b_key[j] for (_, j), o in product.workers.items() if o == w}
        panels = {key: count for key, count in fetched[w].items() if key in {*a_key, *b_key}}
        if dask_operands:     # computed anywhere, then fetched once by each worker that needs them, if at all
            assert set(panels) <= mine_a | mine_b and all(c == 1 for c in panels.values()), (w, panels)
        else:                 # scattered to exactly the workers that need them: nothing to fetch
            assert not panels, (w, panels)
    return C


@pytest.mark.parametrize("dask_operands", [False, True])
@pytest.mark.parametrize("n_workers", [2, 4])
def test_each_block_runs_where_its_panels_are(client, n_workers, dask_operands):
    A, B = operands(97, 61, 83, seed=4)
    if dask_operands:
        A, B = da.from_array(A, chunks=(20, 61)), da.from_array(B, chunks=(61, 20))
    if n_workers == 2:
        product = submit(A, B, client=client, block=(13, 17), backend="numpy")
        assert product.grid == (2, 1)
        C = _check_placement(client, product, dask_operands)
    else:
        cluster, own = _cluster(n_workers)
        with cluster, own:
            product = submit(A, B, client=own, block=(13, 17), backend="numpy")
            assert product.grid == (2, 2)
            C = _check_placement(own, product, dask_operands)
    assert_product(C, A, B)



def test_the_result_as_a_dask_array_stays_on_the_workers(client):
    A, B = operands(61, 40, 47, seed=11)
    product = submit(A, B, client=client, block=(25, 20))
    C = product.to_dask_array()
    assert isinstance(C, da.Array) and C.shape == (61, 47) and C.dtype == A.dtype
    assert C.chunks == ((25, 25, 11), (20, 20, 7)), "one chunk per block task"
    total = client.compute(C.sum()).result()
    assert total == pytest.approx((A @ B).sum(), rel=1e-12)
    held = client.who_has(list(product.blocks.values()))
    assert all(product.workers[key] in held[f.key] for key, f in product.blocks.items()), \
        "a block left the worker that computed it"
    assert_product(C.compute(), A, B)
    empty = submit(np.ones((0, 4)), np.ones((4, 3)), client=client).to_dask_array()
    assert empty.shape == (0, 3) and empty.compute().shape == (0, 3)


@pytest.mark.gpu
def test_one_gpu_worker_of_a_local_cuda_cluster_runs_the_engine_on_its_gpu(cupy_backend, tmp_path):
    dask_cuda = pytest.importorskip("dask_cuda", reason="the GPU cluster needs dask-cuda")
    with dask_cuda.LocalCUDACluster(n_workers=1, dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as gpu_client:
        A, B = operands(700, 513, 600, seed=9)
        assert_product(matmul(A, B, client=gpu_client, backend="cupy", block=(350, 300), device_block=128), A, B)
        Ad, Bd = da.from_array(A, chunks=(200, 513)), da.from_array(B, chunks=(513, 250))
        assert_product(matmul(Ad, Bd, client=gpu_client, backend="cupy"), A, B)
        Am, Bm = _npy(tmp_path / "a.npy", A), _npy(tmp_path / "b.npy", B)
        out = np.lib.format.open_memmap(tmp_path / "c.npy", mode="w+", dtype=np.float64, shape=(700, 600))
        assert matmul(Am, Bm, client=gpu_client, backend="cupy", block=(350, 300), out=out) is out
        assert_product(np.load(tmp_path / "c.npy"), A, B)
        (visible,) = gpu_client.run(lambda: __import__("os").environ["CUDA_VISIBLE_DEVICES"]).values()
        assert visible.split(",")[0] == "0", "dask-cuda puts the worker's own GPU first"


# --- operands and outputs in mapped files ------------------------------------------------------------------

def _npy(path, x, mode="r"):
    """``x`` saved as a .npy file and mapped back in ``mode``."""
    np.save(path, x)
    return np.load(path, mmap_mode=mode)


@pytest.mark.parametrize("order", ["C", "F"])
def test_a_mapped_view_has_a_handle_that_maps_the_same_elements(tmp_path, order):
    x = _npy(tmp_path / "x.npy", np.asarray(np.arange(77.0).reshape(7, 11), order=order))
    for view in (x, x[2:6, 3:10], x.T[1:4], np.asarray(x)[1:, :5], x[:0, :3]):
        handle = locate(view)
        assert handle is not None and not handle.writeable
        assert np.array_equal(handle.open(), view) and type(handle.open()) is np.ndarray
        assert np.array_equal(handle[1:3, :2].open(), np.asarray(view)[1:3, :2])
        assert len(pickle.dumps(handle)) < 400, "a handle travels instead of the bytes"
    assert locate(x[:, ::-1]) is None, "negative strides travel as bytes"
    assert locate(np.ones((3, 3))) is None
    assert locate(np.load(tmp_path / "x.npy", mmap_mode="c")) is None, "copy-on-write writes are private"
    with pytest.raises(ValueError, match="step 1"):
        locate(x)[::2, :]


def test_handles_of_one_file_meet_where_their_bytes_do(tmp_path):
    x = _npy(tmp_path / "x.npy", np.zeros((8, 8)), mode="r+")
    top, bottom, left = locate(x[:4]), locate(x[4:]), locate(x[:, :4])
    assert top.writeable and not top.meets(bottom) and top.meets(left) and bottom.meets(left)
    other = locate(_npy(tmp_path / "y.npy", np.zeros((8, 8))))
    assert not top.meets(other) and not top.meets(locate(x[:0]))


def test_mapped_operands_are_read_in_place_by_the_tasks(client, tmp_path):
    A0, B0 = operands(97, 61, 83, seed=12)
    A, B = _npy(tmp_path / "a.npy", A0), _npy(tmp_path / "b.npy", np.asfortranarray(B0))
    before, held = _fetched(client), set(client.who_has())
    product = submit(A, B, client=client, block=(30, 40), backend="numpy")
    assert all(isinstance(p, MappedMatrix) for p in (*product.a_panels, *product.b_panels))
    C = product.result()
    assert_product(C, A0, B0)
    moved = {w: _fetched(client)[w] - before.get(w, Counter()) for w in before}
    assert not any(moved.values()), f"operand bytes crossed between workers: {moved}"
    new = set(client.who_has()) - held - {f.key for f in product.blocks.values()}
    assert not new, f"something was scattered: {new}"


def test_a_mapped_out_is_written_by_the_tasks_in_place(client, tmp_path):
    A0, B0 = operands(61, 45, 70, seed=13)
    A = _npy(tmp_path / "a.npy", A0)
    out = np.lib.format.open_memmap(tmp_path / "c.npy", mode="w+", dtype=np.float64, shape=(61, 70))
    out[:] = np.nan
    product = submit(A, B0, client=client, block=(25, 30), backend="numpy", out=out)
    assert product.in_place
    assert all(part is None for part in client.gather(list(product.blocks.values()))), "no block travels back"
    assert product.result() is out
    assert_product(np.load(tmp_path / "c.npy"), A0, B0)
    with pytest.raises(ValueError, match="written into out="):
        product.to_dask_array()


def test_an_out_in_memory_receives_the_gathered_blocks(client):
    A, B = operands(40, 30, 20, seed=14)
    out = np.full((40, 20), np.nan)
    assert matmul(A, B, client=client, block=(15, 7), backend="numpy", out=out) is out
    assert_product(out, A, B)


def test_an_out_over_its_operands_file_is_refused(client, tmp_path):
    x = _npy(tmp_path / "x.npy", np.ones((6, 6)), mode="r+")
    alias = np.load(tmp_path / "x.npy", mmap_mode="r+")
    with pytest.raises(ValueError, match="shares no memory with A"):
        submit(x[:, :3], np.ones((3, 3)), client=client, out=alias[:, :3])
    assert np.array_equal(np.load(tmp_path / "x.npy"), np.ones((6, 6))), "nothing was written"
    C = matmul(x[:3, :3], np.eye(3), client=client, out=alias[3:, 3:], backend="numpy")
    assert np.array_equal(C, np.ones((3, 3)))


def test_workers_restrict_the_product(client):
    A, B = operands(50, 20, 40, seed=15)
    one = sorted(client.nthreads())[1]
    product = submit(A, B, client=client, block=(10, 10), backend="numpy", workers=[one])
    assert product.grid == (1, 1) and set(product.workers.values()) == {one}
    assert_product(product.result(), A, B)


def test_a_process_keeps_its_mappings_until_the_path_names_another_file(tmp_path):
    from gpu.multigpu import mapped
    path = tmp_path / "x.npy"
    handle = locate(_npy(path, np.ones((4, 5))))
    first = handle.open()
    assert first.base is handle.open().base, "the second view reuses the kept mapping"
    np.save(tmp_path / "y.npy", np.full((4, 5), 2.0))
    (tmp_path / "y.npy").replace(path)              # a new file under the old name
    assert np.array_equal(handle.open(), np.full((4, 5), 2.0)) and np.array_equal(first, np.ones((4, 5)))
    path.unlink()
    locate(_npy(tmp_path / "z.npy", np.zeros((2, 2)))).open()
    assert str(path) not in {kept.path for kept in mapped._MAPPINGS.values()}, "a deleted file's mapping is dropped"
    for i in range(mapped.MAX_MAPPINGS + 2):
        locate(_npy(tmp_path / f"w{i}.npy", np.zeros((2, 2)))).open()
    assert len(mapped._MAPPINGS) == mapped.MAX_MAPPINGS
    mapped.release()
    assert not mapped._MAPPINGS


def test_a_writeable_view_writes_the_file(tmp_path):
    x = _npy(tmp_path / "x.npy", np.zeros((6, 4)), mode="r+")
    handle = locate(x)[2:5, 1:3]
    view = handle.open()
    assert view.flags.writeable and not locate(np.load(tmp_path / "x.npy", mmap_mode="r")).open().flags.writeable
    view[:] = 7.0
    handle.flush()
    expect = np.zeros((6, 4))
    expect[2:5, 1:3] = 7.0
    assert np.array_equal(np.load(tmp_path / "x.npy"), expect)


class _Locker:
    """Stands for the engine's operations: the ranges it was asked to lock and unlock."""

    def __init__(self):
        self.locked, self.unlocked = [], []

    def lock_pages(self, address, nbytes, writeable):
        self.locked.append((address, nbytes, writeable))
        return True

    def unlock_pages(self, address, nbytes):
        self.unlocked.append((address, nbytes))


def test_an_opened_view_is_locked_and_unlocked_with_its_kept_mapping(tmp_path):
    from gpu.multigpu import mapped
    mapped.release()
    locker, path = _Locker(), tmp_path / "x.npy"
    x = _npy(path, np.arange(60.0).reshape(6, 10), mode="r+")
    view = locate(x[2:4, 3:7]).open(locker)
    (kept,) = mapped._MAPPINGS.values()
    (address, nbytes, writeable), = locker.locked
    assert address == view.ctypes.data and nbytes == (10 + 4) * 8 and writeable
    assert kept.lockers == [locker] and not locker.unlocked
    locate(x[:1]).open()
    assert len(locker.locked) == 1, "a view opened without a locker locks nothing"
    np.save(tmp_path / "y.npy", np.zeros((6, 10)))
    (tmp_path / "y.npy").replace(path)
    locate(_npy(path, np.zeros((6, 10)))).open()
    assert locker.unlocked == [(kept.address, len(kept.region))], "the dropped mapping was unlocked whole"
    mapped.release()


def _mapped_files(client, tmp_path, m, k, n, seed):
    """Operands A0 and B0, the same in mapped files A and B, and a mapped out for C; every worker's kept
    mappings dropped first (and so unlocked)."""
    from gpu.multigpu import mapped
    client.run(mapped.release)
    A0, B0 = operands(m, k, n, seed=seed)
    A, B = _npy(tmp_path / "a.npy", A0), _npy(tmp_path / "b.npy", B0)
    return A0, B0, A, B, np.lib.format.open_memmap(tmp_path / "c.npy", mode="w+", dtype=np.float64, shape=(m, n))


@pytest.mark.parametrize("lock_pages", [True, False])
def test_workers_lock_the_pages_of_mapped_operands_and_out(client, tmp_path, lock_pages):
    from gpu.multigpu import mapped
    from gpu.outofcore.ops import HOST_RANGES
    A0, B0, A, B, out = _mapped_files(client, tmp_path, 61, 45, 70, seed=16)
    matmul(A, B, client=client, block=(31, 70), backend="numpy", out=out, lock_pages=lock_pages)
    assert_product(np.load(tmp_path / "c.npy"), A0, B0)
    kept = list(mapped._MAPPINGS.values())               # the in-process workers' mappings
    assert len(kept) == 3
    held = [any(lo <= k.address and k.address + len(k.region) <= hi for lo, (hi, _) in HOST_RANGES.ranges.items())
            for k in kept]
    assert held == [lock_pages] * 3, "each file's pages locked (whole, as two workers' panels cover it)"
    client.run(mapped.release)
    assert not HOST_RANGES.ranges, "released mappings are unlocked"


@pytest.mark.parametrize("lock_pages", [True, False])
def test_block_tasks_report_where_their_time_went(client, tmp_path, lock_pages):
    from gpu.multigpu import mapped
    A0, B0, A, B, out = _mapped_files(client, tmp_path, 40, 30, 50, seed=17)
    product = submit(A, B, client=client, block=(20, 50), backend="numpy", out=out, lock_pages=lock_pages,
                     report=True, device_block=(10, 25), panel=8)
    reports = product.reports()
    assert_product(np.load(tmp_path / "c.npy"), A0, B0)
    assert sorted(r["block"] for r in reports) == [(0, 0), (1, 0)]
    for r in reports:
        assert r["worker"] == product.workers[r["block"]]
        assert r["staged"] == [not lock_pages] * 3
        assert 0 < r["busy_s"]["GEMM"] <= r["run_s"] <= r["call_s"]
        assert (r["busy_s"]["staging"] > 0) is not lock_pages and (r["busy_s"]["placement"] > 0) is not lock_pages
    client.run(mapped.release)
    with pytest.raises(ValueError, match="without report=True"):
        submit(A0, B0, client=client, backend="numpy").reports()


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("count", [1, 2, 3, 7])
def test_finite_check_bands_cover_an_operand_once_in_contiguous_lines(tmp_path, order, count):
    from gpu.multigpu.finite import bands
    x = _npy(tmp_path / "x.npy", np.asarray(np.arange(30.0).reshape(5, 6), order=order))
    handle = locate(x[:, 1:])
    parts = bands(handle, count)
    assert 1 <= len(parts) <= count
    seen = np.concatenate([p.open().ravel(order="K") for p in parts])
    assert sorted(seen) == sorted(x[:, 1:].ravel()), "every element in exactly one band"
    outer = 0 if order == "C" else 1
    assert all(p.shape[1 - outer] == handle.shape[1 - outer] for p in parts), "bands of whole lines"


def _checked(client, product_call):
    """The keys of the finite-check tasks that a call ran."""
    with distributed.get_task_stream(client) as ts:
        product_call()
    return sorted(t["key"] for t in ts.data if "outofcore-check" in str(t["key"]))


def test_mapped_operands_are_checked_once_across_the_workers_before_any_block(client, tmp_path):
    A0, B0 = operands(40, 30, 50, seed=18)
    B0[17, 3] = np.nan
    A, B = _npy(tmp_path / "a.npy", A0), _npy(tmp_path / "b.npy", B0)
    out = np.lib.format.open_memmap(tmp_path / "c.npy", mode="w+", dtype=np.float64, shape=(40, 50))
    out[:] = 7.0
    with distributed.get_task_stream(client) as ts, pytest.raises(ValueError, match="B contains NaN or infinity"):
        submit(A, B, client=client, backend="numpy", out=out, block=(10, 50))
    keys = [str(t["key"]) for t in ts.data]
    assert sum("outofcore-check" in k for k in keys) == 4, "a band of A and of B per worker"
    assert not any("outofcore-block" in k for k in keys), "no block task was sent"
    assert (np.load(tmp_path / "c.npy") == 7.0).all()
    B0[17, 3] = 1.0
    B = _npy(tmp_path / "b2.npy", B0)
    assert len(_checked(client, lambda: matmul(A, B, client=client, backend="numpy", out=out))) == 4
    assert_product(np.load(tmp_path / "c.npy"), A0, B0)
    assert not _checked(client, lambda: matmul(A, B, client=client, backend="numpy", check_finite=False))
    assert not _checked(client, lambda: matmul(A0, B0, client=client, backend="numpy")), "the engine checks these"
