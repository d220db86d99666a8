"""Page-locking a /dev/shm file mapping: whole against pieces on threads, populated or not; copies within one
registration and across two; cudaHostAlloc; pageable copies. Writes $OUT/pin-probe.json.

``OUT=dir PYTHONPATH=$PWD python3 results/published/scripts/pagelock_probe.py`` (``GIB``, default 8, sizes the file;
``results/published/h200/h200-pagelock-probe.json`` holds two runs on the H200)."""
import json
import mmap
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import cupy
import numpy as np

from gpu.multigpu import mapped

rt = cupy.cuda.runtime
GIB = int(os.environ.get("GIB", 8))
path = "/dev/shm/gemmlab-pin-probe"
RO = 1 | 8
res = {"gib": GIB, "cpu_count": os.cpu_count(), "runs": []}


def note(**kw):
    res["runs"].append(kw)
    print(kw, flush=True)
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "pin-probe.json"), "w") as fh:
        json.dump(res, fh, indent=1)


def fresh():
    with open(path, "rb") as f:
        r = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    return r, np.frombuffer(r, np.uint8).ctypes.data


def register_pieces(addr, n, piece, threads):
    pieces = [(a, min(piece, n - a)) for a in range(0, n, piece)]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda p: rt.hostRegister(addr + p[0], p[1], RO), pieces))
    return time.perf_counter() - t0, pieces


def unregister(addr, pieces):
    t0 = time.perf_counter()
    for a, _ in pieces:
        rt.hostUnregister(addr + a)
    return time.perf_counter() - t0


x = np.lib.format.open_memmap(path, "w+", np.float64, (GIB * 2**27,))
x[:] = 1.0
x.flush()
del x
cupy.cuda.Device().synchronize()
dev = cupy.empty(2**28)    # 2 GiB
for populated in (False, True):
    r, addr = fresh()
    n = len(r) // mmap.PAGESIZE * mmap.PAGESIZE
    pop = 0.0
    if populated:
        t0 = time.perf_counter()
        mapped.populate(r, addr, 0, len(r), False)
        pop = time.perf_counter() - t0
    s, pieces = register_pieces(addr, n, n, 1)
    u = unregister(addr, pieces)
    note(what="whole", populated=populated, populate_s=pop, register_s=s, gb_per_s=n / s / 1e9, unregister_s=u)
    del r
for piece_mib in (256, 1024):
    for threads in (1, 2, 4, 8, 16):
        r, addr = fresh()
        n = len(r) // mmap.PAGESIZE * mmap.PAGESIZE
        s, pieces = register_pieces(addr, n, piece_mib * 2**20, threads)
        u = unregister(addr, pieces)
        note(what="pieces", piece_mib=piece_mib, threads=threads, register_s=s, gb_per_s=n / s / 1e9, unregister_s=u)
        del r
r, addr = fresh()
n = len(r) // mmap.PAGESIZE * mmap.PAGESIZE
s, pieces = register_pieces(addr, n, 2**30, 8)
stream = cupy.cuda.Stream(non_blocking=True)


def copy_rate(src, nbytes, reps=5):
    out = []
    for _ in range(reps):
        e0, e1 = cupy.cuda.Event(), cupy.cuda.Event()
        e0.record(stream)
        h0 = time.perf_counter()
        rt.memcpyAsync(dev.data.ptr, src, nbytes, rt.memcpyHostToDevice, stream.ptr)
        host = time.perf_counter() - h0
        e1.record(stream)
        e1.synchronize()
        out.append((cupy.cuda.get_elapsed_time(e0, e1) / 1e3, host))
    t, h = statistics.median(o[0] for o in out), statistics.median(o[1] for o in out)
    return {"device_s": t, "host_call_s": h, "gb_per_s": nbytes / t / 1e9}


note(what="copy within one piece", **copy_rate(addr + 2**30, 2**30))
try:
    note(what="copy across two pieces", **copy_rate(addr + 2**30 + 2**29, 2**30))
except Exception as exc:
    note(what="copy across two pieces", error=str(exc))


def copy2d(src, width, height, pitch, reps=5):
    out = []
    for _ in range(reps):
        e0, e1 = cupy.cuda.Event(), cupy.cuda.Event()
        e0.record(stream)
        h0 = time.perf_counter()
        rt.memcpy2DAsync(dev.data.ptr, width, src, pitch, width, height, rt.memcpyHostToDevice, stream.ptr)
        host = time.perf_counter() - h0
        e1.record(stream)
        e1.synchronize()
        out.append((cupy.cuda.get_elapsed_time(e0, e1) / 1e3, host))
    t, h = statistics.median(o[0] for o in out), statistics.median(o[1] for o in out)
    return {"device_s": t, "host_call_s": h, "gb_per_s": width * height / t / 1e9}


# a panel of 32 KB lines out of 256 KB rows: 8192 rows = 2 GiB extent, 256 MiB moved
note(what="2d within one piece", **copy2d(addr + 2**30, 32768, 4096, 262144))
try:
    note(what="2d across pieces", **copy2d(addr + 2**30, 32768, 8192, 262144))
except Exception as exc:
    note(what="2d across pieces", error=str(exc))
unregister(addr, pieces)
note(what="2d pageable (populated, unregistered)", **copy2d(addr + 2**30, 32768, 8192, 262144))
note(what="1d pageable (populated, unregistered)", **copy_rate(addr + 2**30, 2**30))
# a pageable copy while another thread registers the next gigabytes
r2, addr2 = fresh()
with ThreadPoolExecutor(1) as pool:
    fut = pool.submit(register_pieces, addr2, 4 * 2**30, 2**30, 1)
    note(what="2d pageable beside registering", **copy2d(addr + 2**30, 32768, 8192, 262144))
    s2, pieces2 = fut.result()
note(what="registering beside pageable copies", register_s=s2, gb_per_s=4 * 2**30 / s2 / 1e9)
unregister(addr2, pieces2)
del r2
del r
for gib in (1, 4):
    t0 = time.perf_counter()
    p = rt.hostAlloc(gib * 2**30, 0)
    a = time.perf_counter() - t0
    t0 = time.perf_counter()
    rt.freeHost(p)
    note(what="cudaHostAlloc", gib=gib, alloc_s=a, gb_per_s=gib * 2**30 / a / 1e9, free_s=time.perf_counter() - t0)
# locking anonymous (malloc'd, touched) memory in pieces: a NumPy operand not from a file
y = np.ones(GIB * 2**27)
addr = y.ctypes.data
n = (y.nbytes // mmap.PAGESIZE - 1) * mmap.PAGESIZE
addr = addr + (-addr) % mmap.PAGESIZE
for threads in (1, 8):
    s, pieces = register_pieces(addr, n, 2**30, threads)
    u = unregister(addr, pieces)
    note(what="anonymous pieces", threads=threads, register_s=s, gb_per_s=n / s / 1e9, unregister_s=u)
os.unlink(path)
