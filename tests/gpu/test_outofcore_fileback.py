"""A writeable file mapping's pages made in the file before they are mapped in (``gpu.outofcore.fileback``):
``fallocate`` keeps the file's size and bytes; a view finds its file and offset; locking ahead and the
workers' kept mappings allocate the ranges they are about to map in (a new output's pages came 2.8x faster
so on the two-H200 machine)."""

import mmap
import os

import numpy as np
import pytest

from gpu.multigpu import mapped
from gpu.outofcore import ahead, fileback
from gpu.outofcore.ahead import Ahead
from gpu.outofcore.pagelock import LockedRanges, extent

PAGE = mmap.PAGESIZE


def test_allocate_makes_the_pages_and_keeps_the_size_and_the_bytes(tmp_path):
    folder = tmp_path
    path = folder / "c.bin"
    with open(path, "wb") as fh:
        fh.truncate(16 * PAGE + 100)
        fh.seek(5 * PAGE + 7)
        fh.write(b"kept")
    before = os.stat(path)
    if not fileback.allocate(str(path), 0, 40 * PAGE):
        pytest.skip("this file system has no fallocate")
    after = os.stat(path)
    assert after.st_size == before.st_size, "never past the file's end"
    assert after.st_blocks * 512 >= 16 * PAGE > before.st_blocks * 512
    with open(path, "rb") as fh:
        fh.seek(5 * PAGE + 7)
        assert fh.read(4) == b"kept"
    sparse = folder / "d.bin"
    with open(sparse, "wb") as fh:
        fh.truncate(4 * PAGE)
    assert fileback.allocate(str(sparse), 20 * PAGE, PAGE), "a range past the end is nothing to do"
    assert os.stat(sparse).st_size == 4 * PAGE and os.stat(sparse).st_blocks == 0
    assert not fileback.allocate(str(folder / "missing.bin"), 0, PAGE)


def test_a_view_finds_its_file_and_the_offset_of_its_bytes(tmp_path):
    C = np.lib.format.open_memmap(tmp_path / "c.npy", mode="w+", dtype=np.float64, shape=(6, 5))
    view = C[3:5, 2:4]
    path, origin = fileback.backing(view)
    assert path == os.fspath(tmp_path / "c.npy")
    assert view.__array_interface__["data"][0] - origin == mapped.locate(view).offset
    del C, view
    assert fileback.backing(np.load(tmp_path / "c.npy", mmap_mode="r")) is None, "read-only: nothing to make"
    assert fileback.backing(np.zeros((4, 4))) is None


def test_a_registered_mapping_names_its_file_until_it_is_forgotten():
    region = mmap.mmap(-1, 4 * PAGE)
    x = np.frombuffer(region, np.uint8)
    address = x.ctypes.data
    fileback.register(address, 4 * PAGE, "/some/file")
    try:
        assert fileback.backing(x[PAGE:]) == ("/some/file", address)
    finally:
        fileback.forget(address)
    assert fileback.backing(x[PAGE:]) is None


def test_locking_ahead_makes_a_writeable_file_s_pieces_in_the_file_first(tmp_path, monkeypatch):
    made, events = [], []
    monkeypatch.setattr(fileback.Allocator, "allocate",
                        lambda self, *args: made.append(args) or events.append(("made", args[1])))
    real_populate = ahead.populate_range
    monkeypatch.setattr(ahead, "populate_range", lambda address, *a: events.append(("mapped", address - origin))
                        or real_populate(address, *a))
    C = np.lib.format.open_memmap(tmp_path / "c.npy", mode="w+", dtype=np.uint8, shape=(8, PAGE))
    _, origin = fileback.backing(C)
    ranges = LockedRanges(lambda address, nbytes, writeable: None, lambda address: None)
    locker = Ahead(ranges, piece=2 * PAGE)
    locker.wait(C[2:6], writeable=True)
    locker.wait(C[6:], writeable=False)
    locker.close()
    written_pieces = [o for kind, o in events if kind == "mapped" and any(o == m[1] for m in made)]
    assert written_pieces, "the written view's pieces were mapped in"
    for at in written_pieces:
        assert events.index(("made", at)) < events.index(("mapped", at)), "a piece is made before it is mapped in"
    start = C[2:6].__array_interface__["data"][0] - origin
    assert made and all(p == os.fspath(tmp_path / "c.npy") for p, _, _ in made)
    covered = sorted((o, o + n) for _, o, n in made)
    assert covered[0][0] <= start and covered[-1][1] >= start + 4 * PAGE, "every byte of the view"
    written = ahead.pieces(*extent(C[2:6]), ahead.root_extent(C), 2 * PAGE)
    assert len(made) == len(written), "the pieces of the view written, none of the view read"
    del C


def test_a_worker_s_writeable_mapping_makes_its_range_in_the_file_and_names_it(tmp_path, monkeypatch):
    made = []
    real = fileback.allocate
    monkeypatch.setattr(fileback, "allocate", lambda *a: made.append(a) or real(*a))
    C = np.lib.format.open_memmap(tmp_path / "c.npy", mode="w+", dtype=np.float64, shape=(64, 64))
    handle = mapped.locate(C)[10:20, :]
    view = handle.open()
    lo, hi = handle.extent()
    assert made and made[0][0] == handle.path and made[0][1] <= lo and made[0][1] + made[0][2] >= hi
    path, origin = fileback.backing(view)
    assert path == handle.path and view.__array_interface__["data"][0] - origin == lo
    view[:] = 3.0
    del view
    mapped.release()
    assert np.all(C[10:20] == 3.0) and np.all(C[:10] == 0.0)
    assert origin not in fileback._FILES, "a dropped mapping is forgotten"


def test_a_file_whose_pages_are_all_made_is_left_alone(tmp_path, monkeypatch):
    """A written output (a filled C) is not walked again: that cost 0.6 s per 17 GB on the two-H200 machine."""
    path = tmp_path / "c.bin"
    with open(path, "wb") as fh:
        fh.write(b"\1" * (4 * PAGE))
        os.fsync(fh.fileno())
    if os.stat(path).st_blocks * 512 < 4 * PAGE:
        pytest.skip("this file system reports a written file's blocks late")
    calls = []

    class Libc:
        @staticmethod
        def fallocate(*args):
            calls.append(args)
            return 0
    monkeypatch.setattr(fileback, "_LIBC", Libc)
    monkeypatch.setattr(fileback, "_HAS_FALLOCATE", True)
    assert fileback.allocate(str(path), 0, 4 * PAGE) and calls == []
    sparse = tmp_path / "d.bin"
    with open(sparse, "wb") as fh:
        fh.truncate(4 * PAGE)
    assert fileback.allocate(str(sparse), PAGE, PAGE) and len(calls) == 1 and calls[0][1:] == (1, PAGE, PAGE)


def test_an_allocator_opens_a_file_once_for_its_ranges_and_closes_it(tmp_path, monkeypatch):
    path = tmp_path / "c.bin"
    with open(path, "wb") as fh:
        fh.truncate(8 * PAGE)
    opened = []
    real_open = os.open
    monkeypatch.setattr(fileback.os, "open", lambda *a: opened.append(a[0]) or real_open(*a))
    files = fileback.Allocator()
    results = [files.allocate(str(path), i * PAGE, PAGE) for i in range(4)]
    assert opened == [str(path)] and len(files._fds) == 1
    files.close()
    assert files._fds == {}
    if not results[0]:
        pytest.skip("this file system has no fallocate")
    assert os.stat(path).st_blocks * 512 >= 4 * PAGE and os.stat(path).st_size == 8 * PAGE
