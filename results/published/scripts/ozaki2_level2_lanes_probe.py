"""Probe: the level-2 operand pass with one packed add-and-min a modular sum, against its form of cf23e7c.

The operand pass (``gpu.ozaki2.level2_kernels``) is bound by instruction issue: under Nsight Compute at N = 16384 it
issued 2.1-2.4 instructions a cycle with DRAM 24-27% busy (``h200-ozaki2-fused-level2-ncu-16384.txt``). Its
second phase spent 1282 instructions a task (a modulus, four neighbouring entries of the 16 sub-blocks, 49 words
out), most of them on the reduction of each 16-bit lane sum (bit 15 of s + 2^15 - m, masked and multiplied: five
or six instructions) and on each store's 64-bit address. On sm_90 the lesser of s and s - m modulo 2^16 a lane is
one ``VIADDMNMX.U16x2`` (``__vminu2(s, __vadd2(s, nm))``), the moduli's packed constants come from shared memory
(so that ``u + mm - v`` is one IADD3), and the stores walk a pointer: 755 instructions a task, and the first
phase's limb loop 66 against 74-79 for two moduli (``cuobjdump -sass``). Every byte is the same residue class's
canonical byte, so the output is bitwise the old one's.

Checks, byte for byte, the new pass (the library's) against the old (its source of ``BASELINE``, a folder with
``level2_kernels.py`` and ``residue_cuda.py``, and ``rows_source.py`` where it differs from the library's, as at
cf23e7c: ``git show cf23e7c:gpu/ozaki2/level2_kernels.py``)
on B whole and A's first span at ``CHECK`` sizes and counts (``N:COUNT[:SCALE]``, SCALE widening the entries'
exponents; the power-table path of entries past 2^79 is ``tests/gpu/test_ozaki2_fused_level2.py``'s), then at ``N``
(32768) and 15 moduli
times both on B whole and on A's spans of ``SPAN`` rows (one sample: all spans), interleaved, ``ROUNDS`` samples
each by CUDA events, with NVML's clock and power. Writes ``$OUT/ozaki2-level2-lanes-probe.json``.

    BASELINE=dir OUT=dir PYTHONPATH=$PWD:$PWD/results/published/scripts \\
        python3 results/published/scripts/ozaki2_level2_lanes_probe.py
"""

import ast
import os
import statistics
from contextlib import contextmanager

import cupy as cp
from rounds import device_ms, write_json

from experiments.core.environment import environment
from gpu.backend import get_backend
from gpu.ozaki2 import level2_kernels
from gpu.ozaki2.crt_kernels import FINISH
from gpu.ozaki2.cuda_source import COMMON, constants, for_each_modulus
from gpu.ozaki2.moduli import moduli_table
from gpu.ozaki2.ops import ops
from gpu.ozaki2.rows_source import ROWS_SOURCE

N, SPAN, ROUNDS = int(os.environ.get("N", 32768)), int(os.environ.get("SPAN", 2048)), int(os.environ.get("ROUNDS", 10))
CHECK = [tuple(int(v) for v in c.split(":")) for c in os.environ.get("CHECK", "4096:15,4096:20:60,8192:15").split(",")]


def _strings(path: str, names: tuple[str, ...]) -> dict[str, str]:
    """The string constants ``names`` assigned at the top of the module at ``path`` (read, not imported; of a sum
    ``NAME + "..."``, its literal part)."""
    with open(path) as fh:
        tree = ast.parse(fh.read())
    found = {t.id: ast.literal_eval(node.value.right if isinstance(node.value, ast.BinOp) else node.value)
             for node in tree.body if isinstance(node, ast.Assign)
             for t in node.targets if isinstance(t, ast.Name) and t.id in names}
    return {name: found[name] for name in names}


def baseline_kernel(side: str, folder: str | None = None):
    """The operand pass as at cf23e7c (its device functions and kernel from ``folder``, default ``BASELINE``)."""
    folder = folder or os.environ["BASELINE"]
    old = _strings(os.path.join(folder, "level2_kernels.py"), ("HELPERS", "OPERANDS"))
    device = _strings(os.path.join(folder, "residue_cuda.py"), ("DEVICE",))["DEVICE"]
    rows = os.path.join(folder, "rows_source.py")
    rows_source = _strings(rows, ("ROWS_SOURCE",))["ROWS_SOURCE"] if os.path.exists(rows) else ROWS_SOURCE
    tr, tc = level2_kernels.TILE
    head = (f"#define SIDE {int(side != 'a')}\n#define TR {tr}\n#define TC {tc}\n#define BARS 0\n#define LANES_MIN\n"
            f"#define OP_BLOCKS {level2_kernels.OPERAND_BLOCKS}\n" + COMMON + device
            + rows_source.split("/* The row kernels'")[0] + old["HELPERS"])
    kernel = cp.RawKernel(head + old["OPERANDS"], "ozaki2_level2_operands")
    kernel.max_dynamic_shared_size_bytes = level2_kernels.operand_shared()
    return kernel


def baseline_crt(table, folder: str | None = None):
    """The staged level-2 CRT as at cf23e7c (``folder``, default ``BASELINE``), for ``table``'s moduli."""
    old = _strings(os.path.join(folder or os.environ["BASELINE"], "level2_kernels.py"), ("CRT", "CRT_STAGED"))
    source = (f"#define CRT_BLOCKS {level2_kernels.CRT_BLOCKS}\n#define NMOD {table.count}\n" + constants(table)
              + for_each_modulus(table.moduli) + COMMON + FINISH + old["CRT"] + old["CRT_STAGED"])
    return cp.RawKernel(source, "ozaki2_crt_level2_staged")


@contextmanager
def patched(operand_kernel=None, crt_kernel=None):
    """``gpu.ozaki2.level2_kernels``'s kernel makers replaced while the block runs (None: the library's), so that the
    library's own launchers (:func:`~gpu.ozaki2.level2_kernels.operands`, :func:`~gpu.ozaki2.level2_kernels.crt`)
    and the plans built meanwhile launch another form's kernels."""
    kept = (level2_kernels.operand_kernel, level2_kernels.crt_kernel)
    level2_kernels.operand_kernel = operand_kernel or kept[0]
    level2_kernels.crt_kernel = crt_kernel or kept[1]
    try:
        yield
    finally:
        level2_kernels.operand_kernel, level2_kernels.crt_kernel = kept


def crt_launch(kernel, products, table, sa, sb, C, span0: int, rows: int, quarter: int) -> None:
    """One launch of a staged level-2 CRT ``kernel`` by the library's launcher."""
    with patched(crt_kernel=lambda table, staged: kernel):
        level2_kernels.crt(products, table, sa, sb, C, span0, rows, quarter)


def crt_timing(sa, sb, n: int, table) -> dict:
    """Old and new staged CRT on one span's products (random INT8 residues) into C: bitwise, then interleaved."""
    q = n // 4
    products = cp.random.default_rng(1).integers(-128, 128, (table.count, 49, SPAN, q), dtype=cp.int8)
    kernels = {"new": level2_kernels.crt_kernel(table, True), "old": baseline_crt(table)}
    outs = {form: cp.zeros((n, n)) for form in kernels}
    for form, k in kernels.items():
        crt_launch(k, products, table, sa, sb, outs[form], 0, SPAN, q)
    same = bool(cp.array_equal(outs["new"], outs["old"]))
    samples = {form: [] for form in kernels}
    for _ in range(ROUNDS):
        for form, k in kernels.items():
            out = outs[form]
            samples[form].append(device_ms(lambda k=k, out=out: crt_launch(k, products, table, sa, sb, out, 0, SPAN,
                                                                           q)))
    med = {form: statistics.median(v) for form, v in samples.items()}
    print("crt", same, med, flush=True)
    return {"bitwise": same, "samples_ms": samples, "median_ms": med, "span_rows": SPAN,
            "new_over_old": med["old"] / med["new"]}


def launch(kernel, X, shifts, exps, table, out, span0: int, rows: int, quarter: int) -> None:
    """One launch of an operand pass ``kernel`` by the library's launcher."""
    with patched(operand_kernel=lambda side: kernel):
        level2_kernels.operands(X, shifts, exps, table, out, "a", span0, rows, quarter)


def operands(n: int, count: int, scale: int, seed: int = 0):
    """phi-style operands (entries (U - 0.5) e^(scale N(0, 1))) and their scale codes and bar exponents."""
    rng = cp.random.default_rng(seed)
    draw = (lambda: (rng.random((n, n)) - 0.5) * cp.exp(scale * rng.standard_normal((n, n)) / 10))
    A, B = draw(), draw()
    be, table = get_backend("cupy"), moduli_table(count)
    family = ops(be)
    codes = []
    for X in (A, B.T):
        stats = family.line_stats(X, None, False, family.line_buffers(be, n, False))
        codes.append((family.shifts(stats, table, cp.empty(n, dtype=cp.int32)), stats.e))
    return A, B, table, codes


def check(n: int, count: int, scale: int, kernels: dict) -> dict:
    """Byte-for-byte equality of the new and old passes on B whole and A's first span."""
    A, B, table, ((sa, ea), (sb, eb)) = operands(n, count, scale)
    q, span = n // 4, min(SPAN, n // 4)
    result = {"n": n, "count": count, "scale": scale}
    for side, X, s, e, rows in (("b", B.T, sb, eb, q), ("a", A, sa, ea, span)):
        outs = {}
        for form in ("new", "old"):
            outs[form] = cp.zeros((count, 49, rows, q), dtype=cp.int8)
            launch(kernels[form][side], X, s, e, table, outs[form], 0, rows, q)
        result[side] = bool(cp.array_equal(outs["new"], outs["old"]))
        result[f"{side}_checksum"] = int(outs["new"].view(cp.uint32).sum(dtype=cp.uint64))
        del outs
        cp.get_default_memory_pool().free_all_blocks()
    print("check", result, flush=True)
    return result


def nvml_now() -> dict:
    """The SM clock (MHz), power (W) and throttle reasons of the device the backend runs on (NVML)."""
    reading = get_backend("cupy").telemetry().read()
    return {"sm_mhz": reading.sm_mhz, "power_w": reading.power_w, "throttle": reading.reasons}


def timing(kernels: dict) -> dict:
    """Old and new passes at ``N`` and 15 moduli, interleaved: B whole, and A's spans (one sample: all spans)."""
    A, B, table, ((sa, ea), (sb, eb)) = operands(N, 15, 0)
    q = N // 4
    out_b = cp.empty((15, 49, q, q), dtype=cp.int8)
    out_a = cp.empty((15, 49, SPAN, q), dtype=cp.int8)
    work = {}
    for form in ("new", "old"):
        k = kernels[form]
        work[f"b_{form}"] = (lambda k=k: launch(k["b"], B.T, sb, eb, table, out_b, 0, q, q))
        work[f"a_{form}"] = (lambda k=k: [launch(k["a"], A, sa, ea, table, out_a, s0, SPAN, q)
                                          for s0 in range(0, q, SPAN)])
    for run in work.values():
        run()
    samples, telemetry = {name: [] for name in work}, []
    for _ in range(ROUNDS):
        for name, run in work.items():
            samples[name].append(device_ms(run))
        telemetry.append(nvml_now())
    med = {name: statistics.median(v) for name, v in samples.items()}
    result = {"samples_ms": samples, "median_ms": med, "telemetry": telemetry,
              "new_over_old": {side: med[f"{side}_old"] / med[f"{side}_new"] for side in "ab"},
              "written_gb": {"b": out_b.nbytes / 1e9, "a": out_a.nbytes * (q // SPAN) / 1e9}}
    print("timing", {k: round(v, 2) for k, v in med.items()}, result["new_over_old"], flush=True)
    work.clear()
    out_a = out_b = A = B = None
    cp.get_default_memory_pool().free_all_blocks()
    result["crt"] = crt_timing(sa, sb, N, table)
    return result


def main() -> None:
    kernels = {"new": {side: level2_kernels.operand_kernel(side) for side in "ab"},
               "old": {side: baseline_kernel(side) for side in "ab"}}
    result = {"environment": environment(get_backend("cupy")),
              "checks": [check(n, c, *(s or [0]), kernels) for n, c, *s in CHECK]}
    result["timing"] = timing(kernels)
    write_json(result, "ozaki2-level2-lanes-probe.json")


if __name__ == "__main__":
    main()
