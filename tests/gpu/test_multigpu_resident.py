"""Products of dask.array operands whose chunks stay on the workers (``gpu.multigpu.resident``), with NumPy chunks
standing in for CuPy on CPU workers: C is a dask.array whose blocks equal their panels' GEMM and ``A @ B``, on 2
and 4 workers, placed block-cyclically and left there, its blocks the operands' own chunks where they suit; bad
operands are refused before any work."""

import numpy as np
import pytest

distributed = pytest.importorskip("distributed", reason="needs dask[array] and distributed (pip install -e '.[dist]')")
da = pytest.importorskip("dask.array", reason="needs dask[array] (pip install -e '.[dist]')")

import gpu  # noqa: E402
from gpu.frontdoor import routes  # noqa: E402
from gpu.multigpu import resident  # noqa: E402
from gpu.multigpu.grid import process_grid  # noqa: E402


@pytest.mark.parametrize("workers", [2, 4])
@pytest.mark.parametrize("shape, chunks, block", [((97, 61, 83), (30, 25), None),
                                                 ((200, 150, 120), (64, 50), (50, 40))])
def test_c_stays_on_the_workers_block_cyclically_and_equals_a_at_b(cluster_of, operands, assert_product, workers,
                                                                    shape, chunks, block):
    cluster, client = cluster_of(workers)
    with cluster, client:
        m, k, n = shape
        a, b = operands(m, k, n, seed=workers)
        A, B = da.from_array(a, chunks=chunks), da.from_array(b, chunks=chunks[::-1])
        C = resident.matmul(A, B, block=block, client=client)
        assert isinstance(C, da.Array) and C.shape == (m, n)
        distributed.wait(C)
        names = sorted(client.nthreads())
        rows, cols = C.chunks
        pr, pc = process_grid(len(names), len(rows), len(cols), m, n)
        held = client.who_has(C)
        for (_, i, j), where in held.items():
            assert where == [names[(i % pr) * pc + j % pc]], (i, j)
        assert_product(C.compute(), a, b)
        r0, c0 = rows[0], cols[0]
        assert np.array_equal(C.blocks[0, 0].compute(), a[:r0] @ b[:, :c0]), "a block is one GEMM of its panels"


def test_without_a_client_c_is_lazy_and_float32_keeps_its_dtype(operands):
    a, b = operands(40, 30, 20, dtype=np.float32, seed=3)
    C = resident.matmul(da.from_array(a, chunks=10), da.from_array(b, chunks=10))
    assert C.dtype == np.float32 and not distributed.futures_of(C), "lazy: nothing computed yet"
    got = C.compute(scheduler="sync")
    assert got.dtype == np.float32 and np.allclose(got, a @ b, rtol=0, atol=1e-4)


def test_bad_operands_are_refused_before_any_work(operands):
    a, b = operands(8, 6, 4)
    A, B = da.from_array(a, chunks=4), da.from_array(b, chunks=3)
    cases = [((a, B), TypeError, "takes dask arrays"), ((A, A), ValueError, "A's columns must equal B's rows"),
             ((A.astype(np.float32), B), TypeError, "one dtype"),
             ((A.astype(np.int64), B.astype(np.int64)), TypeError, "float64 or float32"),
             ((A[A[:, 0] > 2], B), ValueError, "unknown chunk sizes"), ((A[None], B), ValueError, "must be 2-D")]
    for (x, y), error, match in cases:
        with pytest.raises(error, match=match):
            resident.matmul(x, y)
    with pytest.raises(ValueError, match="block must be a positive int"):
        resident.matmul(A, B, block=0)


def test_the_front_door_leaves_device_resident_operands_on_the_workers(client, operands, assert_product,
                                                                       monkeypatch):
    """Device chunks are what routes there; NumPy chunks stand in for them here."""
    monkeypatch.setattr(routes, "on_devices", routes.is_dask)
    a, b = operands(60, 40, 50, seed=9)
    A, B = da.from_array(a, chunks=20), da.from_array(b, chunks=20)
    C = gpu.matmul(A, B, client=client)
    assert isinstance(C, da.Array) and distributed.futures_of(C), "persisted on the workers, not gathered"
    assert_product(C.compute(), a, b)
    with pytest.raises(ValueError, match="leave out= out and call .compute"):
        gpu.matmul(A, B, client=client, out=np.empty((60, 50)))
    with pytest.raises(ValueError, match="1e-20"):
        gpu.matmul(A, B, client=client, accuracy=1e-20)


def test_a_product_asked_again_while_held_is_the_held_result_unless_named_anew(cluster_of, operands):
    """Dask keys C's blocks by a token of the operands: the same product again is the held result (no work).
    A benchmark names each product anew, so that every timed product computes."""
    cluster, client = cluster_of(2)
    with cluster, client:
        a, b = operands(60, 40, 50, seed=5)
        A, B = da.from_array(a, chunks=(30, 40)), da.from_array(b, chunks=(40, 25))
        first = resident.matmul(A, B, client=client)
        again = resident.matmul(A, B, client=client)
        fresh = resident.matmul(A, B, client=client, name="gemmlab-resident-fresh")
        distributed.wait([first, again, fresh])
        assert again.name == first.name and fresh.name == "gemmlab-resident-fresh"
        held = client.who_has(fresh)
        assert {key[0] for key in held} == {"gemmlab-resident-fresh"} and len(held) == len(client.who_has(first))
        assert np.array_equal(fresh.compute(), first.compute())


def test_the_operands_own_chunks_are_the_blocks_where_they_suit(cluster_of, operands, assert_product):
    """Row panels of A by column panels of B, one of each per worker (the benchmark's setting): C's blocks are
    those chunks' products, so no chunk is merged into a panel; irregular chunks, or fewer blocks than workers,
    take one block per worker."""
    m = k = n = 96
    a, b = operands(m, k, n, seed=5)
    A, B = da.from_array(a, chunks=(48, k)), da.from_array(b, chunks=(k, 48))
    cluster, client = cluster_of(2)
    with cluster, client:
        C = resident.matmul(A, B, client=client)
        distributed.wait(C)
        assert C.chunks == ((48, 48), (48, 48))
        assert_product(C.compute(), a, b)

    def merged(C):
        return any("rechunk" in str(key) for key in dict(C.__dask_graph__()))
    assert not merged(resident.matmul(A, B)), "no chunk merged into a panel"
    assert merged(resident.matmul(A, B, block=(48, 96))), "one block a worker merges B's two column chunks"
    assert resident._own_blocks(A, B, 2) == (48, 48)
    assert resident._own_blocks(A, B, 5) == (None, None), "fewer blocks than workers"
    assert resident._own_blocks(da.from_array(a, chunks=((40, 56), (k,))), B, 2) == (None, None), "irregular"
    assert resident._own_blocks(da.from_array(a, chunks=1), da.from_array(b, chunks=1), 2) == (None, None), \
        "more than FREE_TASKS_PER_WORKER blocks a worker"
    assert resident._regular((48, 48, 30)) == 48 and resident._regular((30, 48)) is None
