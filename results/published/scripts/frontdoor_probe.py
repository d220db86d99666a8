"""``gpu.matmul`` as called against the library GEMM and against every candidate it ranked, on a small grid (CuPy).

For each shape and accuracy of :data:`GRID` (override with ``SHAPES=m:k:n,...`` and ``ACCURACIES=dgemm,1e-10``):
the front door's plan and its ``explain()``; then, interleaved in rounds (the order rotated each round), the
calls ``gpu.matmul(A, B)`` (a new output, as a user calls it), ``cupy.matmul(A, B)``, and each candidate that
keeps the accuracy and fits, run through its own family plan (``gpu.frontdoor.frontplan.family_plan``) into a
new output (the best :data:`OTHERS` besides the winner, so that their workspaces fit beside it). Each sample is a
loop of back-to-back calls then one synchronisation: wall time per call, and CUDA events around the loop, medians
of :data:`SAMPLES`. Operands are
uniform [0, 1) FP64. The front door's result is compared with the library GEMM's (normwise relative
difference). NVML readings at the start and end of each shape. Writes ``$OUT/frontdoor-probe.json``.
This is a probe of the first front-door run on a GPU, not the issue's grid (``gemmlab frontdoor``).
"""
import json
import math
import os
import statistics
import time

import numpy as np

import gpu
from experiments.core.environment import environment
from gpu.backend import get_backend
from gpu.backend.plans import free_kept_plans
from gpu.frontdoor.frontplan import family_plan

GRID = [(1024, 1024, 1024), (4096, 4096, 4096), (8192, 8192, 8192), (16384, 16384, 16384),
        (16, 1 << 20, 16), (64, 1 << 20, 64), (4096, 65536, 4096)]
ACCURACIES = ("dgemm", 1e-10, "sgemm")
SAMPLES, LOOP_S, MAX_CALLS, OTHERS = 10, 0.02, 64, 2


def accuracy_of(text: str):
    return text if text in ("dgemm", "sgemm") else float(text)


def loop(be, f, calls: int) -> tuple[float, float]:
    """(wall, CUDA-event) seconds per call of ``calls`` back-to-back calls, then one synchronisation. No stream
    hold: the front door's Ozaki II ``moduli="auto"`` reads 4 bytes from the device per call."""
    be.synchronize()
    t0 = time.perf_counter()
    with be.timer() as t:
        for _ in range(calls):
            f()
    be.synchronize()
    return (time.perf_counter() - t0) / calls, t.seconds / calls


def reading(be):
    tel = be.telemetry()
    return None if tel is None else tel.read().as_dict()


def point(be, A, B, accuracy) -> dict:
    probe = gpu.plan(A, B, accuracy=accuracy)
    chosen, text, entries = probe.chosen.name, probe.explain(), probe.ranking.entries
    probe.free()
    works = {"frontdoor": lambda: gpu.matmul(A, B, accuracy=accuracy), "library": lambda: be.xp.matmul(A, B)}
    refused = {}
    for r in [r for r in entries if r.eligible and r.family != "gemm" and r.name != chosen][:OTHERS]:
        try:
            p = family_plan(r, A, B, None, be, None)
        except (ValueError, TypeError) as err:
            refused[r.name] = str(err)
            continue
        works[r.name] = (lambda p=p: p._execute(A, B, None))
    for f in works.values():
        f()
        f()
    gemm_s = loop(be, works["library"], 1)[0]
    calls = min(MAX_CALLS, max(1, math.ceil(LOOP_S / gemm_s)))
    names, t = list(works), {k: {"wall": [], "device": []} for k in works}
    for s in range(SAMPLES):
        for name in names[s % len(names):] + names[:s % len(names)]:
            wall, device = loop(be, works[name], calls)
            t[name]["wall"].append(wall)
            t[name]["device"].append(device)
    med = {k: {c: statistics.median(v) for c, v in x.items()} for k, x in t.items()}
    xp = be.xp
    C, R = gpu.matmul(A, B, accuracy=accuracy), xp.matmul(A, B)
    diff = float(xp.linalg.norm(C - R) / xp.linalg.norm(R))
    best = min((k for k in med if k != "frontdoor"), key=lambda k: med[k]["wall"])
    return {"accuracy": str(accuracy), "chosen": chosen, "explain": text, "calls": calls,
            "median_s": med, "samples_s": t, "refused": refused, "normwise_difference_from_library": diff,
            "x_library": {k: {c: med["library"][c] / v[c] for c in v} for k, v in med.items()},
            "fastest_other": best, "frontdoor_over_fastest": med[best]["wall"] / med["frontdoor"]["wall"]}


def main() -> None:
    be = get_backend(os.environ.get("BACKEND", "cupy"))
    shapes = [tuple(int(x) for x in s.split(":")) for s in os.environ["SHAPES"].split(",")] \
        if os.environ.get("SHAPES") else GRID
    accs = [accuracy_of(a) for a in os.environ["ACCURACIES"].split(",")] if os.environ.get("ACCURACIES") \
        else ACCURACIES
    records, started = [], time.perf_counter()
    for m, k, n in shapes:
        rng = np.random.default_rng(m + k + n)
        A, B = be.xp.asarray(rng.random((m, k))), be.xp.asarray(rng.random((k, n)))
        start = reading(be)
        for acc in accs:
            try:
                rec = point(be, A, B, acc)
            except Exception as err:  # noqa: BLE001 - a probe records what failed and goes on
                rec = {"accuracy": str(acc), "error": f"{type(err).__name__}: {err}"}
            rec.update(shape=[m, k, n], telemetry={"start": start, "end": reading(be)})
            records.append(rec)
            x = rec.get("x_library", {})
            print(m, k, n, acc, rec.get("chosen", rec.get("error")), {k2: round(v["wall"], 3) for k2, v in x.items()},
                  "over fastest", round(rec.get("frontdoor_over_fastest", 0), 3), flush=True)
        del A, B
        free_kept_plans()
        be.release_memory()
    doc = {"script": "results/published/scripts/frontdoor_probe.py", "environment": environment(be),
           "elapsed_s": time.perf_counter() - started, "records": records}
    path = os.path.join(os.environ.get("OUT", "."), "frontdoor-probe.json")
    with open(path, "w") as fh:
        json.dump(doc, fh, indent=1, default=str)


if __name__ == "__main__":
    main()
