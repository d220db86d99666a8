"""The fused second level's batched residue GEMMs under other orders of CUTLASS's tile scheduler (a probe).

One span's INT8 operands at N = 32768 (15 moduli, each 49 products of SPAN x 8192 by 8192 x 8192 over k = 8192;
residues drawn uniformly in [-(m/2), (m-1)/2] for moduli near 256) multiplied by each kernel of ``KERNELS`` in turn,
one batched launch of 49 a modulus, as ``gpu.ozaki2.fused_level2.span_gemms`` issues them: the library's kernel (its
raster heuristic, swizzle 1) and variants built from the same source with the scheduler's raster order along M or N
and its swizzle (``ozaki2_level2_raster_build.py``: ``-DRASTER=1|2 -DSWIZZLE=S``). A sample is LOOP passes over the
15 launches, CUDA events; ROUNDS rounds in turning order after WARM untimed ones, sustained (no idle gap); the SM
clock and power read after each sample. Each variant's products are compared byte for byte with the first
kernel's. ``KERNELS=tag=path,...`` (the first: the control); JSON to ``$OUT/level2-raster.json``.

    KERNELS=lib=$GEMMLAB_KERNEL_DIR/cutlass_int8-....so,r1=.whl/variants/cutlass_int8-r1.so OUT=dir \\
        PYTHONPATH=$PWD:$PWD/results/published/scripts python3 results/published/scripts/ozaki2_level2_raster_probe.py
"""

import os
import statistics

import cupy as cp
from rounds import device_ms, turning, write_json

from experiments.core.environment import environment
from gpu.backend import cutlass_int8 as ci
from gpu.backend import get_backend
from gpu.ozaki2.moduli import moduli_table

SPAN, SIDE, COUNT = int(os.environ.get("SPAN", 2048)), 8192, 15
ROUNDS, LOOP, WARM = (int(os.environ.get(k, d)) for k, d in (("ROUNDS", 10), ("LOOP", 2), ("WARM", 3)))


def residues(shape: tuple[int, ...], moduli: tuple[int, ...]) -> cp.ndarray:
    """Symmetric residues of each modulus's products, uniform: int8 (count, 49, *shape)."""
    out = cp.empty((len(moduli), 49, *shape), dtype=cp.int8)
    for t, m in enumerate(moduli):
        for p in range(49):
            out[t, p] = cp.random.randint(-(m // 2), (m - 1) // 2 + 1, shape, dtype=cp.int32).astype(cp.int8)
    return out


def issuers(kernel: ci.CutlassInt8, a: cp.ndarray, b: cp.ndarray, r: cp.ndarray, moduli: tuple[int, ...],
            space: tuple[int, int, int]) -> list:
    """One batched issue a modulus, as the library's span GEMMs make them."""
    calls = []
    for t, m in enumerate(moduli):
        views = [(x[t].data.ptr, x.shape[-1], x.shape[-2] * x.shape[-1]) for x in (a, b, r)]
        issue = kernel.residues(*views, (SPAN, SIDE, SIDE, 49), m, lambda: space)
        assert issue is not None, "the kernel declined the span's batch"
        calls.append(issue)
    return calls


def main() -> None:
    be = get_backend("cupy")
    moduli = moduli_table(COUNT).moduli
    a, b = residues((SPAN, SIDE), moduli), residues((SIDE, SIDE), moduli)
    r = cp.empty_like(a)
    work = cp.empty(64 << 20, dtype=cp.uint8)
    space = (work.data.ptr, work.nbytes, cp.cuda.get_current_stream().ptr)
    choice = ci.KERNELS["9.0"]
    kernels = dict(item.split("=", 1) for item in os.environ["KERNELS"].split(","))
    runs, same, first = {}, {}, None
    for tag, path in kernels.items():
        calls = issuers(ci.CutlassInt8.load(path, choice), a, b, r, moduli, space)
        for issue in calls:
            issue()
        got = cp.asnumpy(r[:, :, :64]).tobytes() + cp.asnumpy(r[:, :, -64:]).tobytes()
        first = first or got
        same[tag] = got == first

        def run(calls=calls):
            for _ in range(LOOP):
                for issue in calls:
                    issue()
        runs[tag] = run
    telemetry = be.telemetry()
    for _ in range(WARM):
        for run in runs.values():
            run()
    cp.cuda.Device().synchronize()

    def sample(run):
        ms = device_ms(run) / LOOP
        reading = telemetry.read().as_dict() if telemetry else {}
        return ms, reading

    samples = turning(runs, ROUNDS, sample)
    ops = 2.0 * COUNT * 49 * SPAN * SIDE * SIDE
    base = list(runs)[0]
    result = {"script": "results/published/scripts/ozaki2_level2_raster_probe.py", "environment": environment(be),
              "kernels": kernels, "span": SPAN, "loop": LOOP, "rounds": ROUNDS, "same_products": same, "per": {}}
    for tag, got in samples.items():
        ms = [x for x, _ in got]
        paired = statistics.median(b_ms / s for (b_ms, _), s in zip(samples[base], ms, strict=True))
        result["per"][tag] = {
            "median_ms": statistics.median(ms), "tops": ops / statistics.median(ms) / 1e9, "paired_speed": paired,
            "sm_mhz": statistics.median(t.get("sm_mhz", 0) for _, t in got),
            "power_w": statistics.median(t.get("power_w", 0) for _, t in got), "samples_ms": ms}
        print(tag, {k: v for k, v in result["per"][tag].items() if k != "samples_ms"}, same[tag], flush=True)
    write_json(result, "level2-raster.json")


if __name__ == "__main__":
    main()
