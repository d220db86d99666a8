"""Strassen's default call at one size with ``out=C`` and with a new output, beside DGEMM, and the same
configuration run eagerly; then whether each kept plan replays graphs.

Calls, interleaved in rotating order over 12 rounds of 3 back-to-back calls, device time by CUDA events:
``cupy.matmul(A, B, out=C)``, ``cupy.matmul(A, B)``, ``strassen.matmul(A, B, out=C)``, ``strassen.matmul(A, B)``,
the latter keeping its last two outputs alive (three addresses in turn), and each plan's own configuration with
``graph=False``. Prints medians (ms), the ratios, and per kept plan its graph mode and the address sets it
captured and saw. Run on the device from the repository root, with the bundled profile (an empty profile folder):
``GEMMLAB_PROFILES=$(mktemp -d) N=6144 PYTHONPATH=$PWD python3 results/published/scripts/strassen_output_probe.py``.
"""

import os
import statistics

import cupy as cp

from gpu.strassen import matmul
from gpu.strassen.api import kept

N = int(os.environ.get("N", "6144"))
ROUNDS, CALLS = 12, 3


def main() -> None:
    A, B, C = cp.random.rand(N, N), cp.random.rand(N, N), cp.empty((N, N))
    held = []

    def new_held() -> None:
        held.append(matmul(A, B))
        if len(held) > 2:
            held.pop(0)
    fns = {"dgemm": lambda: cp.matmul(A, B, out=C), "dgemm_new": lambda: cp.matmul(A, B),
           "s_out": lambda: matmul(A, B, out=C), "s_new": lambda: matmul(A, B), "s_new_held3": new_held}
    for fn in fns.values():
        for _ in range(CALLS):
            fn()
    chosen = {p.product.output: p.decision.configuration for p in kept() if p.product.m == N}
    eager = {output: {"level": c.level, "schedule": c.schedule, "fused": c.fused, "flat": c.flat, "graph": False}
             for output, c in chosen.items()}
    fns["s_out_eager"] = lambda: matmul(A, B, out=C, **eager[False])
    fns["s_new_eager"] = lambda: matmul(A, B, **eager[True])
    for name in ("s_out_eager", "s_new_eager"):
        for _ in range(CALLS):
            fns[name]()
    cp.cuda.Device().synchronize()
    print("configurations (new output: configuration)", chosen)
    times = {k: [] for k in fns}
    names = list(fns)
    for r in range(ROUNDS):
        for k in names[r % len(names):] + names[:r % len(names)]:
            start, stop = cp.cuda.Event(), cp.cuda.Event()
            start.record()
            for _ in range(CALLS):
                fns[k]()
            stop.record()
            stop.synchronize()
            times[k].append(cp.cuda.get_elapsed_time(start, stop) / CALLS)
    med = {k: statistics.median(v) for k, v in times.items()}
    print({k: round(v, 3) for k, v in med.items()})
    for base in ("dgemm", "dgemm_new"):
        print(f"x {base}:", {k: round(med[base] / v, 4) for k, v in med.items()})
    for p in kept():
        g = p._graphs
        print("new output" if p.product.output else "out=C", p.configuration.name, "graph mode", g.mode,
              "captured", len(g.captured._entries), "seen", len(g.seen._entries))


if __name__ == "__main__":
    main()
