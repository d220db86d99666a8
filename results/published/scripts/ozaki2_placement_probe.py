"""Does the INT8 GEMMs' state under the 700 W cap follow their operands' content, or where the operands sit?

``ozaki2_gemm_clock_probe.py`` ran the 15 residue GEMMs of a level-1 sub-product at N = 32768 on one operand pair
per range R, each pair drawn and allocated in turn. In its first two runs every pair drawn first, third, fifth and
seventh ran capped (about 1590 MHz, 692 W) and every pair drawn second, fourth and sixth ran fast (1980 MHz,
490-690 W). This probe separates the pair's content from its place, with every pair held by the script (which that
probe's sets, it turned out, did not do):

1. ``fresh``: ``PAIRS`` pairs drawn from [-127, 127] and allocated in turn, as that probe did (with its
   statistics' temporaries between draws), each run for ``PHASE_S`` seconds;
2. ``swapped``: the contents of pairs 2i and 2i + 1 exchanged in place, each run again (the state follows the
   content if it flips, the place if it stays);
3. ``arena``: one pair's content copied into ``SLOTS`` places of two large arrays, 256 MiB apart, and each run;
4. ``fresh again``: the pairs of 2, to see whether a place keeps its state.

Each sample is the set of ``GEMMS`` GEMMs timed by CUDA events, with NVML read after it; each phase also gives its
energy from NVML's counter. Device pointers are recorded. JSON to ``$OUT/ozaki2-placement-probe.json``.

    OUT=dir PYTHONPATH=/tmp/site:$PWD:$PWD/results/published/scripts \\
        python3 results/published/scripts/ozaki2_placement_probe.py
"""

import os
import time

import cupy as cp
import pynvml
from ozaki2_data_power_probe import gemm_set
from ozaki2_gemm_clock_probe import phase, second_half
from rounds import write_json

from experiments.core.environment import environment
from gpu.backend import get_backend
from gpu.ozaki2.gemms import panels

N = int(os.environ.get("N", 16384))
PAIRS, SLOTS = int(os.environ.get("PAIRS", 6)), int(os.environ.get("SLOTS", 8))
PHASE_S, GAP_S = float(os.environ.get("PHASE_S", 3.0)), float(os.environ.get("GAP_S", 0.5))


def stats(a, b) -> dict:
    """What a pair holds, and how alike its two operands are."""
    fa, fb = a.astype(cp.float32), b.astype(cp.float32)
    return {"mean_abs": float(cp.abs(fa).mean()), "equal": float((a == b).mean()),
            "corr": float((fa * fb).mean() / cp.sqrt((fa * fa).mean() * (fb * fb).mean())),
            "distinct": int(cp.unique(a).size), "a_ptr": a.data.ptr, "b_ptr": b.data.ptr}


def timed(name: str, run, handle) -> dict:
    """One phase: its samples, the second half's medians, and its mean power from the energy counter."""
    time.sleep(GAP_S)
    e0, t0 = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle), time.perf_counter()
    samples = phase(run, PHASE_S, handle)
    joules = (pynvml.nvmlDeviceGetTotalEnergyConsumption(handle) - e0) / 1e3
    summary = second_half(samples)
    summary["energy_w"] = joules / (time.perf_counter() - t0)
    print(name, len(samples), summary, flush=True)
    return {"phase": name, "second_half_median": summary, "samples": samples}


def main() -> None:
    be = get_backend("cupy")
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    rng = cp.random.default_rng(1)
    tiles, r = panels(N, N), cp.empty((N, N), dtype=cp.int8)
    pairs, info = [], {}
    for i in range(PAIRS):
        a, b = (rng.integers(-127, 128, (N, N), dtype=cp.int8) for _ in range(2))
        pairs.append((a, b))
        info[f"F{i}"] = stats(a, b)
    runs = [gemm_set(be, a, b, r, tiles) for a, b in pairs]
    arena_a, arena_b = (cp.empty((SLOTS, N, N), dtype=cp.int8) for _ in range(2))
    arena_a[:], arena_b[:] = pairs[0][0], pairs[0][1]
    slots = [gemm_set(be, arena_a[s], arena_b[s], r, tiles) for s in range(SLOTS)]
    info.update({f"S{s}": {"a_ptr": arena_a[s].data.ptr, "b_ptr": arena_b[s].data.ptr} for s in range(SLOTS)})
    for run in runs + slots:
        run()
    cp.cuda.Device().synchronize()
    phases = [timed(f"fresh F{i}", run, handle) for i, run in enumerate(runs)]
    for i in range(0, PAIRS - 1, 2):
        for k in range(2):
            t = pairs[i][k].copy()
            pairs[i][k][:] = pairs[i + 1][k]
            pairs[i + 1][k][:] = t
    cp.cuda.Device().synchronize()
    phases += [timed(f"swapped F{i} (content of F{i ^ 1})", run, handle) for i, run in enumerate(runs)]
    phases += [timed(f"arena S{s} (content of F0)", run, handle) for s, run in enumerate(slots)]
    phases += [timed(f"fresh again F{i} (content of F{i ^ 1})", run, handle) for i, run in enumerate(runs)]
    write_json({"script": "results/published/scripts/ozaki2_placement_probe.py", "environment": environment(be),
                "command": f"N={N} PAIRS={PAIRS} SLOTS={SLOTS} PHASE_S={PHASE_S} GAP_S={GAP_S} OUT=dir python3 "
                           "results/published/scripts/ozaki2_placement_probe.py",
                "gemm_ops": 2.0 * N**3 * 15, "operands": info, "phases": phases}, "ozaki2-placement-probe.json")


if __name__ == "__main__":
    main()
