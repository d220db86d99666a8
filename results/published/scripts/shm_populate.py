"""How fast a new shared-memory file's pages come into being on the lent virtual machines, by how it is done.

A new output C of N = 65536 (34 GB in ``/dev/shm``) spends most of a one-shot product's extra time having its
pages made. This probe makes a new file of ``GIB`` GiB (default 32) under ``/dev/shm`` per variant and times
making all its pages: ``posix_fallocate`` in one process and split over P processes, and
``madvise(MADV_POPULATE_WRITE)`` over a shared mapping on T threads of one process and in P processes; the
file is removed between variants (with ``KEEP=1`` kept to the end, so each variant takes memory not used before),
and the first variant runs again last.
``MemTotal`` is read before and after each (it grows as the machine's memory is first used).
Writes ``$OUT/shm-populate.json``; prints a line per variant.
Run: ``python3 results/published/scripts/shm_populate.py``.
"""

import ctypes
import json
import mmap
import multiprocessing as mp
import os
import time
from concurrent.futures import ThreadPoolExecutor

GIB = float(os.environ.get("GIB", 32))
PATH = os.environ.get("PROBE_PATH", "/dev/shm/gemmlab-populate-probe.bin")
#: Keep each variant's file until the end (``KEEP=1``), so that every variant makes pages in memory the machine
#: has not used before (on a fresh machine), rather than in memory the last variant gave back.
KEEP = os.environ.get("KEEP", "0") == "1"
LIBC = ctypes.CDLL(None, use_errno=True)
LIBC.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)
PAGE = mmap.PAGESIZE


def mem_total_gib() -> float:
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemTotal"):
                return int(line.split()[1]) / 2**20
    return float("nan")


def parts(size: int, count: int) -> list[tuple[int, int]]:
    step = -(-size // count // PAGE) * PAGE
    return [(s, min(size, s + step)) for s in range(0, size, step)]


def fallocate_part(span: tuple[int, int]) -> None:
    fd = os.open(PATH, os.O_RDWR)
    try:
        os.posix_fallocate(fd, span[0], span[1] - span[0])
    finally:
        os.close(fd)


def populate_part(span: tuple[int, int]) -> None:
    fd = os.open(PATH, os.O_RDWR)
    try:
        region = mmap.mmap(fd, span[1] - span[0], offset=span[0])
        address = ctypes.addressof(ctypes.c_char.from_buffer(region))
        if LIBC.madvise(address, span[1] - span[0], POPULATE_WRITE) != 0:
            raise OSError(ctypes.get_errno(), "madvise")
        del address
        region.close()
    finally:
        os.close(fd)


def variant(name: str, size: int) -> dict:
    how, where, count = name.split("-")
    work = fallocate_part if how == "fallocate" else populate_part
    fd = os.open(PATH, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    os.ftruncate(fd, size)
    os.close(fd)
    before = mem_total_gib()
    start = time.perf_counter()
    spans = parts(size, int(count))
    if where == "procs":
        with mp.get_context("fork").Pool(int(count)) as pool:
            pool.map(work, spans)
    else:
        with ThreadPoolExecutor(int(count)) as pool:
            list(pool.map(work, spans))
    seconds = time.perf_counter() - start
    after = mem_total_gib()
    if KEEP:
        os.rename(PATH, f"{PATH}.{name}")
    else:
        os.unlink(PATH)
        time.sleep(1.0)
    return {"variant": name, "seconds": seconds, "gb_per_s": size / seconds / 1e9, "mem_total_gib_before": before,
            "mem_total_gib_after": after}


def main() -> None:
    size = int(GIB * 2**30)
    names = os.environ.get("VARIANTS", "populate-threads-8,fallocate-threads-1,fallocate-procs-8,populate-procs-2,"
                           "populate-procs-8,populate-procs-16,populate-threads-1,populate-threads-8").split(",")
    rows = []
    for name in names:
        rows.append(variant(name, size))
        print(json.dumps(rows[-1]), flush=True)
    for name in names if KEEP else ():
        if os.path.exists(f"{PATH}.{name}"):
            os.unlink(f"{PATH}.{name}")
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "shm-populate.json"), "w") as fh:
        json.dump({"script": "results/published/scripts/shm_populate.py", "gib": GIB, "cpus": os.cpu_count(),
                   "keep": KEEP, "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
