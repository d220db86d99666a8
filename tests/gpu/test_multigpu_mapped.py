"""Operands and outputs of the Dask front-end in mapped files (``gpu.multigpu.mapped``), on CPU workers: handles
that map the same elements, read and written in place by the tasks with nothing sent between workers, kept
mappings, page-locking with the mappings, the finite checks made once across the workers, and the tasks'
reports of where their time went."""

import mmap
import pickle
import threading
import time
from collections import Counter

import numpy as np
import pytest

distributed = pytest.importorskip("distributed", reason="the Dask front-end needs dask[array] and distributed "
                                                        "(pip install -e '.[dist]')")


from gpu.multigpu.dask_matmul import matmul, submit  # noqa: E402
from gpu.multigpu.mapped import MappedMatrix, locate  # noqa: E402


@pytest.mark.parametrize("order", ["C", "F"])
def test_a_mapped_view_has_a_handle_that_maps_the_same_elements(tmp_path, order, npy):
    x = npy(tmp_path / "x.npy", np.asarray(np.arange(77.0).reshape(7, 11), order=order))
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


def test_handles_of_one_file_meet_where_their_bytes_do(tmp_path, npy):
    x = npy(tmp_path / "x.npy", np.zeros((8, 8)), mode="r+")
    top, bottom, left = locate(x[:4]), locate(x[4:]), locate(x[:, :4])
    assert top.writeable and not top.meets(bottom) and top.meets(left) and bottom.meets(left)
    other = locate(npy(tmp_path / "y.npy", np.zeros((8, 8))))
    assert not top.meets(other) and not top.meets(locate(x[:0]))


def test_mapped_operands_are_read_in_place_by_the_tasks(client, tmp_path, operands, assert_product, fetched, npy):
    A0, B0 = operands(97, 61, 83, seed=12)
    A, B = npy(tmp_path / "a.npy", A0), npy(tmp_path / "b.npy", np.asfortranarray(B0))
    before, held = fetched(client), set(client.who_has())
    product = submit(A, B, client=client, block=(30, 40), backend="numpy")
    assert all(isinstance(p, MappedMatrix) for p in (*product.a_panels, *product.b_panels))
    C = product.result()
    assert_product(C, A0, B0)
    moved = {w: fetched(client)[w] - before.get(w, Counter()) for w in before}
    assert not any(moved.values()), f"operand bytes crossed between workers: {moved}"
    new = set(client.who_has()) - held - {f.key for f in product.blocks.values()}
    assert not new, f"something was scattered: {new}"


def test_a_mapped_out_is_written_by_the_tasks_in_place(client, tmp_path, operands, assert_product, npy):
    A0, B0 = operands(61, 45, 70, seed=13)
    A = npy(tmp_path / "a.npy", A0)
    out = np.lib.format.open_memmap(tmp_path / "c.npy", mode="w+", dtype=np.float64, shape=(61, 70))
    out[:] = np.nan
    product = submit(A, B0, client=client, block=(25, 30), backend="numpy", out=out)
    assert product.in_place
    assert all(part is None for part in client.gather(list(product.blocks.values()))), "no block travels back"
    assert product.result() is out
    assert_product(np.load(tmp_path / "c.npy"), A0, B0)
    with pytest.raises(ValueError, match="written into out="):
        product.to_dask_array()


def test_an_out_in_memory_receives_the_gathered_blocks(client, operands, assert_product):
    A, B = operands(40, 30, 20, seed=14)
    out = np.full((40, 20), np.nan)
    assert matmul(A, B, client=client, block=(15, 7), backend="numpy", out=out) is out
    assert_product(out, A, B)


def test_an_out_over_its_operands_file_is_refused(client, tmp_path, npy):
    x = npy(tmp_path / "x.npy", np.ones((6, 6)), mode="r+")
    alias = np.load(tmp_path / "x.npy", mmap_mode="r+")
    with pytest.raises(ValueError, match="shares no memory with A"):
        submit(x[:, :3], np.ones((3, 3)), client=client, out=alias[:, :3])
    assert np.array_equal(np.load(tmp_path / "x.npy"), np.ones((6, 6))), "nothing was written"
    C = matmul(x[:3, :3], np.eye(3), client=client, out=alias[3:, 3:], backend="numpy")
    assert np.array_equal(C, np.ones((3, 3)))


def test_workers_restrict_the_product(client, operands, assert_product):
    A, B = operands(50, 20, 40, seed=15)
    one = sorted(client.nthreads())[1]
    product = submit(A, B, client=client, block=(10, 10), backend="numpy", workers=[one])
    assert product.grid == (1, 1) and set(product.workers.values()) == {one}
    assert_product(product.result(), A, B)


def test_a_process_keeps_its_mappings_until_the_path_names_another_file(tmp_path, npy):
    from gpu.multigpu import mapped
    path = tmp_path / "x.npy"
    handle = locate(npy(path, np.ones((4, 5))))
    first = handle.open()
    assert first.base is handle.open().base, "the second view reuses the kept mapping"
    np.save(tmp_path / "y.npy", np.full((4, 5), 2.0))
    (tmp_path / "y.npy").replace(path)              # a new file under the old name
    assert np.array_equal(handle.open(), np.full((4, 5), 2.0)) and np.array_equal(first, np.ones((4, 5)))
    path.unlink()
    locate(npy(tmp_path / "z.npy", np.zeros((2, 2)))).open()
    assert str(path) not in {kept.path for kept in mapped._MAPPINGS.values()}, "a deleted file's mapping is dropped"
    for i in range(mapped.MAX_MAPPINGS + 2):
        locate(npy(tmp_path / f"w{i}.npy", np.zeros((2, 2)))).open()
    assert len(mapped._MAPPINGS) == mapped.MAX_MAPPINGS
    mapped.release()
    assert not mapped._MAPPINGS


def test_a_writeable_view_writes_the_file(tmp_path, npy):
    x = npy(tmp_path / "x.npy", np.zeros((6, 4)), mode="r+")
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

    def pages_locked(self, address, nbytes, writeable=False):
        return any(a <= address and address + nbytes <= a + n and (w or not writeable) for a, n, w in self.locked)

    def unlock_pages(self, address, nbytes):
        self.unlocked.append((address, nbytes))


def test_an_opened_view_is_locked_and_unlocked_with_its_kept_mapping(tmp_path, npy):
    from gpu.multigpu import mapped
    mapped.release()
    locker, path = _Locker(), tmp_path / "x.npy"
    x = npy(path, np.arange(60.0).reshape(6, 10), mode="r+")
    view = locate(x[2:4, 3:7]).open(locker)
    (kept,) = mapped._MAPPINGS.values()
    (address, nbytes, writeable), = locker.locked
    assert address == view.ctypes.data and nbytes == (10 + 4) * 8 and writeable
    assert kept.lockers == [locker] and not locker.unlocked
    locate(x[:1]).open()
    assert len(locker.locked) == 1, "a view opened without a locker locks nothing"
    np.save(tmp_path / "y.npy", np.zeros((6, 10)))
    (tmp_path / "y.npy").replace(path)
    locate(npy(path, np.zeros((6, 10)))).open()
    assert locker.unlocked == [(kept.address, len(kept.region))], "the dropped mapping was unlocked whole"
    mapped.release()


def test_first_touch_counts_the_bytes_mapped_in_and_locked_once(tmp_path, npy):
    from gpu.multigpu import mapped
    mapped.release()
    locker, path = _Locker(), tmp_path / "x.npy"
    x = npy(path, np.arange(60.0).reshape(6, 10), mode="r+")
    before = mapped.first_touch()
    locate(x[2:4, 3:7]).open(locker)
    once = mapped.first_touch()
    locate(x[2:4, 3:7]).open(locker)
    locate(x[2:3, 4:6]).open(locker)
    again = mapped.first_touch()
    assert once["lock_bytes"] - before["lock_bytes"] == (10 + 4) * 8 and once["lock_s"] >= before["lock_s"]
    assert once["populate_bytes"] > before["populate_bytes"], "the view's pages were mapped in"
    assert again == once, "a range mapped in and locked before costs nothing again"
    mapped.release()


def _mapped_files(client, tmp_path, m, k, n, seed, operands, npy):
    """Operands A0 and B0, the same in mapped files A and B, and a mapped out for C; every worker's kept
    mappings dropped first (and so unlocked)."""
    from gpu.multigpu import mapped
    client.run(mapped.release)
    A0, B0 = operands(m, k, n, seed=seed)
    A, B = npy(tmp_path / "a.npy", A0), npy(tmp_path / "b.npy", B0)
    return A0, B0, A, B, np.lib.format.open_memmap(tmp_path / "c.npy", mode="w+", dtype=np.float64, shape=(m, n))


@pytest.mark.parametrize("lock_pages", [True, False])
def test_workers_lock_the_pages_of_mapped_operands_and_out(client, tmp_path, lock_pages, assert_product, operands, npy):
    from gpu.multigpu import mapped
    from gpu.outofcore.ops import HOST_RANGES
    A0, B0, A, B, out = _mapped_files(client, tmp_path, 61, 45, 70, 16, operands, npy)
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
def test_block_tasks_report_where_their_time_went(client, tmp_path, lock_pages, assert_product, operands, npy):
    from gpu.multigpu import mapped
    A0, B0, A, B, out = _mapped_files(client, tmp_path, 40, 30, 50, 17, operands, npy)
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
def test_finite_check_bands_cover_an_operand_once_in_contiguous_lines(tmp_path, order, count, npy):
    from gpu.multigpu.finite import bands
    x = npy(tmp_path / "x.npy", np.asarray(np.arange(30.0).reshape(5, 6), order=order))
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


def _verdicts(client):
    """The names of the finite checks' verdicts the scheduler holds."""
    return client.run_on_scheduler(lambda dask_scheduler: sorted(
        v for v in dask_scheduler.extensions["variables"].variables if v.startswith("outofcore-finite")))


def _settled(futures, timeout=30):
    distributed.wait(futures, timeout=timeout)
    return [f.status for f in futures]


def test_mapped_operands_are_checked_once_across_the_workers_beside_the_blocks(client, tmp_path, operands,
                                                                             assert_product, npy):
    A0, B0 = operands(40, 30, 50, seed=18)
    B0[17, 3] = np.nan
    A, B = npy(tmp_path / "a.npy", A0), npy(tmp_path / "b.npy", B0)
    out = np.lib.format.open_memmap(tmp_path / "c.npy", mode="w+", dtype=np.float64, shape=(40, 50))
    out[:] = 7.0
    blocks = []
    sent = client.map

    def noted(*args, **kwargs):
        futures = sent(*args, **kwargs)
        blocks.extend(f for f in futures if "outofcore-block" in f.key)
        return futures

    with (distributed.get_task_stream(client) as ts, pytest.MonkeyPatch.context() as mp,
          pytest.raises(ValueError, match="B contains NaN or infinity")):
        mp.setattr(client, "map", noted)
        submit(A, B, client=client, backend="numpy", out=out, block=(10, 50), check_finite=True)
    assert _settled(blocks) == ["error"] * 4, "every block stopped at its gate"
    with pytest.raises(ValueError, match="stopped before writing C: .*B contains NaN"):
        blocks[0].result()
    keys = [str(t["key"]) for t in ts.data]
    assert sum("outofcore-check" in k for k in keys) == 4, "a band of A and of B per worker"
    assert (np.load(tmp_path / "c.npy") == 7.0).all()
    time.sleep(0.2)
    assert _verdicts(client) == [], "the verdict went with its blocks"
    B0[17, 3] = 1.0
    B = npy(tmp_path / "b2.npy", B0)
    assert len(_checked(client, lambda: matmul(A, B, client=client, backend="numpy", out=out,
                                               check_finite=True))) == 4
    assert_product(np.load(tmp_path / "c.npy"), A0, B0)
    assert not _checked(client, lambda: matmul(A, B, client=client, backend="numpy")), "no check by default"
    assert not _checked(client, lambda: matmul(A0, B0, client=client, backend="numpy", check_finite=True)), \
        "the engine checks these"


def test_the_finite_checks_run_beside_the_block_products(client, tmp_path, operands, assert_product, npy,
                                                         held_checks):
    """Each check (held until a block product has run) sees a product run while it waits: the checks and the
    blocks run at once on the single-thread workers, whichever starts first."""
    from gpu.multigpu import finite

    seen = held_checks(finite)
    A0, B0 = operands(40, 30, 50, seed=19)
    A, B = npy(tmp_path / "a.npy", A0), npy(tmp_path / "b.npy", B0)
    out = np.lib.format.open_memmap(tmp_path / "c.npy", mode="w+", dtype=np.float64, shape=(40, 50))
    matmul(A, B, client=client, backend="numpy", out=out, check_finite=True)
    assert [waited for _, waited in seen] == [True] * 4
    assert_product(np.load(tmp_path / "c.npy"), A0, B0)
    time.sleep(0.2)
    assert _verdicts(client) == []


def test_blocks_that_fail_before_their_gate_leave_no_verdict_behind(client, tmp_path, operands, npy):
    from gpu.backend import MemoryPlanError

    A0, B0 = operands(40, 30, 50, seed=20)
    A, B = npy(tmp_path / "a.npy", A0), npy(tmp_path / "b.npy", B0)
    product = submit(A, B, client=client, backend="numpy", device_memory=64)
    with pytest.raises(MemoryPlanError):
        product.result()
    time.sleep(0.2)
    assert _verdicts(client) == []


def test_a_range_is_populated_in_pieces_on_threads_that_cover_it_once(tmp_path, monkeypatch):
    """The populating calls cover the range exactly, in pieces of at most SUB_PIECE, several on threads of
    their own; the real call maps a file's pages in and leaves its bytes as they were."""
    from gpu.multigpu import mapped
    from gpu.outofcore import ahead as lock_ahead
    path = tmp_path / "x.bin"
    path.write_bytes(bytes(range(256)) * 4096 * 5)
    with open(path, "r+b") as f:
        region = mmap.mmap(f.fileno(), 0)
    address = np.frombuffer(region, np.uint8).ctypes.data
    mapped.populate(region, address, 0, len(region), False)
    mapped.populate(region, address, mmap.PAGESIZE, len(region) - 5, True)
    assert region[:256] == bytes(range(256)) and region[-256:] == bytes(range(256))
    calls, threads = [], set()
    real = lock_ahead._LIBC

    class Spy:
        def madvise(self, where, length, advice):
            calls.append((where.value - address, length.value, advice))
            threads.add(threading.get_ident())
            time.sleep(0.01)
            return real.madvise(where, length, advice)
    monkeypatch.setattr(lock_ahead, "_LIBC", Spy())
    monkeypatch.setattr(lock_ahead, "SUB_PIECE", 4 * mmap.PAGESIZE)
    monkeypatch.setattr(lock_ahead, "POPULATE_THREADS", 4)
    stop = len(region) - 100
    mapped.populate(region, address, mmap.PAGESIZE, stop, True)
    calls.sort()
    assert calls[0][0] == mmap.PAGESIZE and sum(length for _, length, _ in calls) == stop - mmap.PAGESIZE
    assert all(a + length == b for (a, length, _), (b, _, _) in zip(calls, calls[1:])), "no gap, no overlap"
    assert all(length <= 4 * mmap.PAGESIZE and advice == lock_ahead.POPULATE[True] for _, length, advice in calls)
    assert len(threads) > 1, "the pieces ran on several threads"
    del region


def test_with_reuse_a_range_is_locked_from_its_second_opening_on(tmp_path, npy):
    """``reuse``: the first opening of a range maps it in and leaves it unlocked (the engine stages a range
    read once); a later opening of a range inside it locks it."""
    from gpu.multigpu import mapped
    mapped.release()
    locker, path = _Locker(), tmp_path / "x.npy"
    x = npy(path, np.arange(60.0).reshape(6, 10), mode="r+")
    before = mapped.first_touch()
    locate(x[2:4]).open(locker, reuse=True)
    once = mapped.first_touch()
    assert locker.locked == [] and once["populate_bytes"] > before["populate_bytes"]
    locate(x[2:3]).open(locker, reuse=True)
    assert len(locker.locked) == 1 and locker.locked[0][1] == 10 * 8, "locked on its second opening"
    locate(x[4:6]).open(locker, reuse=True)
    assert len(locker.locked) == 1, "a range not opened before is not locked"
    mapped.release()


def test_block_tasks_lock_pages_a_product_reuses(client, tmp_path, assert_product, operands, npy):
    """``lock_pages="reuse"`` reaches the block tasks: the first product stages what it reads once (B, read by
    both of this test's workers, is locked by the second: they share one process, where dask-cuda's workers
    each have their own), and the second product finds every range locked."""
    from gpu.multigpu import mapped
    A0, B0, A, B, out = _mapped_files(client, tmp_path, 40, 30, 50, 18, operands, npy)
    first = submit(A, B, client=client, block=(20, 50), backend="numpy", out=out, lock_pages="reuse", report=True,
                   device_block=(10, 25), panel=8)
    staged = sorted(r["staged"] for r in first.reports())
    assert staged == [[True, False, True], [True, True, True]], "read once: staged (B twice in this one process)"
    second = submit(A, B, client=client, block=(20, 50), backend="numpy", out=out, lock_pages="reuse",
                    report=True, device_block=(10, 25), panel=8)
    assert all(r["staged"] == [False] * 3 for r in second.reports()), "the same ranges again: locked"
    assert_product(np.load(tmp_path / "c.npy"), A0, B0)
    client.run(mapped.release)
    with pytest.raises(ValueError, match="lock_pages must be True, False, 'reuse', 'ahead' or 'stream'"):
        submit(A0, B0, client=client, backend="numpy", lock_pages="sometimes")
