"""The Dask front-end of the out-of-core engine (``gpu.multigpu.dask_matmul``) on CPU workers: products equal
``A @ B`` on odd shapes and blocks, from NumPy and dask.array operands, in float64 and float32; the
refusals before any work; and the placement (each block on its worker of the process grid, which holds its
panels of A and B and read each of them once)."""

from collections import Counter

import numpy as np
import pytest

distributed = pytest.importorskip("distributed", reason="the Dask front-end needs dask[array] and distributed "
                                                        "(pip install -e '.[dist]')")
da = pytest.importorskip("dask.array", reason="the Dask front-end needs dask[array] (pip install -e '.[dist]')")


from gpu.multigpu.dask_matmul import matmul, process_grid, submit  # noqa: E402

# --- products ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("block", [None, 40, (20, 30), (7, 83), (97, 9), 1000])
def test_the_product_equals_a_at_b_on_odd_shapes_and_blocks(client, block, operands, assert_product):
    A, B = operands(97, 61, 83)
    assert_product(matmul(A, B, client=client, block=block, backend="numpy"), A, B)


@pytest.mark.parametrize("convert", ["both", "A", "B"])
def test_dask_array_operands(client, convert, operands, assert_product):
    A, B = operands(97, 61, 83, seed=1)
    dA = da.from_array(A, chunks=(30, 25)) if convert in ("both", "A") else A
    dB = da.from_array(B, chunks=(17, 40)) if convert in ("both", "B") else B
    assert_product(matmul(dA, dB, client=client, block=(25, 35), backend="numpy"), A, B)


def test_float32_and_engine_options(client, operands, assert_product):
    A, B = operands(45, 70, 33, dtype=np.float32, seed=2)
    C = matmul(A, B, client=client, block=(20, 16), backend="numpy", panel=9, device_block=(7, 5), buffers=3)
    assert_product(C, A, B)


def test_a_transposed_view_and_empty_products(client, operands, assert_product):
    A, B = operands(61, 37, 29, seed=3)
    assert_product(matmul(np.asfortranarray(A), B[:, ::1], client=client, block=13, backend="numpy"), A, B)
    assert matmul(A[:0], B, client=client).shape == (0, 29)
    C = matmul(A[:, :0], B[:0], client=client, block=7, backend="numpy")
    assert C.shape == (61, 29) and not C.any()


def test_a_task_error_comes_back_from_the_worker(client, operands):
    A, B = operands(20, 10, 12)
    A[3, 4] = np.nan
    with pytest.raises(ValueError, match="NaN or infinity"):
        matmul(A, B, client=client, block=8, backend="numpy", check_finite=True)
    C = matmul(A, B, client=client, block=8, backend="numpy")
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


def test_a_client_without_workers_is_refused(cluster_of):
    cluster, empty = cluster_of(0)
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


def test_host_operands_in_rows_split_the_rows_where_the_traffic_ties():
    assert process_grid(2, 2, 2, 64, 64) == (1, 2) and process_grid(2, 2, 2, 64, 64, rows_first=True) == (2, 1)
    assert process_grid(2, 3, 5, 40, 83, rows_first=True) == (1, 2), "no tie: the least traffic"


def _check_placement(client, product, dask_operands, fetched):
    (pr, pc), names = product.grid, sorted(client.nthreads())
    before = fetched(client)
    C = product.result()
    moved = {w: fetched(client)[w] - before.get(w, Counter()) for w in names}
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
        panels = {key: count for key, count in moved[w].items() if key in {*a_key, *b_key}}
        if dask_operands:     # computed anywhere, then fetched once by each worker that needs them, if at all
            assert set(panels) <= mine_a | mine_b and all(c == 1 for c in panels.values()), (w, panels)
        else:                 # scattered to exactly the workers that need them: nothing to fetch
            assert not panels, (w, panels)
    return C


@pytest.mark.parametrize("dask_operands", [False, True])
@pytest.mark.parametrize("n_workers", [2, 4])
def test_each_block_runs_where_its_panels_are(client, n_workers, dask_operands, operands, assert_product, cluster_of,
                                              fetched):
    A, B = operands(97, 61, 83, seed=4)
    if dask_operands:
        A, B = da.from_array(A, chunks=(20, 61)), da.from_array(B, chunks=(61, 20))
    if n_workers == 2:
        product = submit(A, B, client=client, block=(13, 17), backend="numpy")
        assert product.grid == (2, 1)
        C = _check_placement(client, product, dask_operands, fetched)
    else:
        cluster, own = cluster_of(n_workers)
        with cluster, own:
            product = submit(A, B, client=own, block=(13, 17), backend="numpy")
            assert product.grid == (2, 2)
            C = _check_placement(own, product, dask_operands, fetched)
    assert_product(C, A, B)



def test_the_result_as_a_dask_array_stays_on_the_workers(client, operands, assert_product):
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
def test_one_gpu_worker_of_a_local_cuda_cluster_runs_the_engine_on_its_gpu(cupy_backend, tmp_path, operands,
                                                                           assert_product, npy):
    dask_cuda = pytest.importorskip("dask_cuda", reason="the GPU cluster needs dask-cuda")
    with dask_cuda.LocalCUDACluster(n_workers=1, dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as gpu_client:
        A, B = operands(700, 513, 600, seed=9)
        assert_product(matmul(A, B, client=gpu_client, backend="cupy", block=(350, 300), device_block=128), A, B)
        Ad, Bd = da.from_array(A, chunks=(200, 513)), da.from_array(B, chunks=(513, 250))
        assert_product(matmul(Ad, Bd, client=gpu_client, backend="cupy"), A, B)
        Am, Bm = npy(tmp_path / "a.npy", A), npy(tmp_path / "b.npy", B)
        out = np.lib.format.open_memmap(tmp_path / "c.npy", mode="w+", dtype=np.float64, shape=(700, 600))
        assert matmul(Am, Bm, client=gpu_client, backend="cupy", block=(350, 300), out=out) is out
        assert_product(np.load(tmp_path / "c.npy"), A, B)
        (visible,) = gpu_client.run(lambda: __import__("os").environ["CUDA_VISIBLE_DEVICES"]).values()
        assert visible.split(",")[0] == "0", "dask-cuda puts the worker's own GPU first"
