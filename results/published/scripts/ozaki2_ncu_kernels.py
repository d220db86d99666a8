"""One Ozaki II fast-15 call, uncapped or capped, under Nsight Compute: its kernels' device time by kernel.

Run twice on the device from the repository root (``MODE`` uncapped or capped; ``N``, default 16384; ``CAP``
FP64 matrices of workspace for the capped call, default 2), then sum the CSV::

    MODE=capped ncu --clock-control none --metrics gpu__time_duration.sum --csv --profile-from-start off \\
        python3 results/published/scripts/ozaki2_ncu_kernels.py > ncu-capped.csv
    python3 results/published/scripts/ozaki2_ncu_kernels.py ncu-capped.csv

Two warm-up calls (plans, kernels, graphs), then the profiled call between ``cudaProfilerStart`` and ``Stop``.
Under Nsight Compute each kernel runs alone at free clocks: the sums say where the time goes, not the time of a
call at the power cap.
"""

import collections
import csv
import json
import os
import sys


def profiled() -> None:
    import cupy as cp
    from ozaki2_as_called import fresh_inputs

    from gpu import ozaki2
    from gpu.backend import get_backend

    n, mode, cap = int(os.environ.get("N", 16384)), os.environ["MODE"], float(os.environ.get("CAP", 2))
    be = get_backend("cupy")
    A, B = fresh_inputs(n)
    kw = {"workspace": int(8 * cap * n * n)} if mode == "capped" else {}
    for _ in range(2):
        ozaki2.matmul(A, B, moduli=15, backend=be, **kw)
    cp.cuda.Device().synchronize()
    cp.cuda.profiler.start()
    ozaki2.matmul(A, B, moduli=15, backend=be, **kw)
    cp.cuda.Device().synchronize()
    cp.cuda.profiler.stop()


def summed(path: str) -> list[dict]:
    """Per kernel name (to its first parenthesis): launches and microseconds, largest first."""
    scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}
    total, header = collections.defaultdict(lambda: [0, 0.0]), None
    with open(path) as fh:
        rows = list(csv.reader(fh))
    for row in rows:
        if "Kernel Name" in row and "Metric Value" in row:
            header = row
            continue
        if header is None or len(row) != len(header):
            continue
        d = dict(zip(header, row))
        if d.get("Metric Name") == "gpu__time_duration.sum":
            name = d["Kernel Name"].split("(")[0][:90]
            total[name][0] += 1
            total[name][1] += float(d["Metric Value"].replace(",", "")) * scale.get(d.get("Metric Unit", ""), 1.0)
    return [{"kernel": k, "launches": c, "us": t} for k, (c, t) in sorted(total.items(), key=lambda x: -x[1][1])]


if __name__ == "__main__":
    if len(sys.argv) > 1:
        rows = summed(sys.argv[1])
        print(f"total {sum(r['us'] for r in rows) / 1e3:.2f} ms")
        for r in rows:
            print(f"  {r['us'] / 1e3:9.3f} ms  {r['launches']:5d}  {r['kernel']}")
        if len(sys.argv) > 2:
            with open(sys.argv[2], "w") as fh:
                json.dump(rows, fh, indent=1)
    else:
        profiled()
