"""Scheme II's CRT kernel with its moduli set's constants compiled in: the macros carry the table's very doubles
(CPU), and the kernel equals the NumPy CRT bit for bit in every column width it takes, with rows that end short
of a whole vector and rows wider than one block's columns (GPU)."""

import re
import struct

import numpy as np
import pytest

from gpu import ozaki2
from gpu.backend import get_backend
from gpu.ozaki2.cuda_source import constants, for_each_modulus
from gpu.ozaki2.moduli import GAUSSIAN_MODULI, MAX_MODULI, moduli_table

TABLES = [moduli_table(n) for n in range(1, MAX_MODULI + 1)] + [moduli_table(16, GAUSSIAN_MODULI)]


def macros(text: str) -> dict[str, str]:
    return dict(re.findall(r"#define (\w+) \(?([^)\n]+)\)?\n", text))


def bits(x: float) -> bytes:
    return struct.pack("<d", x)


@pytest.mark.parametrize("table", TABLES, ids=lambda t: f"{t.count}-{t.moduli[-1]}")
def test_constants_are_the_tables_doubles_bit_for_bit(table):
    got = macros(constants(table))
    for t, (hi, lo) in enumerate(zip(table.weights_hi, table.weights_lo, strict=True)):
        assert bits(float.fromhex(got[f"W_HI_{t}"])) == bits(hi)
        assert bits(float.fromhex(got[f"W_LO_{t}"])) == bits(lo)
    assert f"W_HI_{table.count}" not in got
    assert bits(float.fromhex(got["P_HI"])) == bits(table.product_hi)
    assert bits(float.fromhex(got["P_LO"])) == bits(table.product_lo)
    assert bits(float.fromhex(got["INV"])) == bits(1.0 / float(table.product))
    assert got["EXACT"] == str(int(table.exact))


def test_the_modulus_macro_lists_each_modulus_with_its_index():
    assert for_each_modulus((256, 255, 253)) == "#define FOR_EACH_MODULUS(F) F(0, 256) F(1, 255) F(2, 253)\n"


def planes_and_shifts(count: int, m: int, n: int, ld: int, dtype, seed: int):
    """Planes (count x m x n views of count x m x ld) of INT32 products or INT8 residues, and shifts."""
    rng = np.random.default_rng(seed)
    table = moduli_table(count)
    if dtype == np.int32:
        full = rng.integers(-2**30, 2**30, size=(count, m, ld), dtype=np.int32)
    else:
        full = np.stack([rng.integers(*ozaki2.residue_range(mod), size=(m, ld), endpoint=True)
                         for mod in table.moduli]).astype(np.int8)
    codes = rng.integers(-40 * 256, 40 * 256, size=m + n)      # scale codes: shifts and fractions
    codes[::3] &= ~255                                          # some powers of two, some rows all of them
    codes[:2] &= ~255
    return table, full, codes[:m].astype(np.int32), codes[m:].astype(np.int32)


@pytest.mark.gpu
@pytest.mark.parametrize("count", [2, 15, 16, 20])
@pytest.mark.parametrize("dtype", [np.int32, np.int8])
@pytest.mark.parametrize("n, ld, offset", [(64, 64, 0), (62, 66, 0), (61, 67, 0), (64, 68, 2), (33, 34, 1),
                                           (61, 64, 0), (62, 64, 0), (63, 68, 0), (2050, 2052, 0)])
def test_gpu_crt_equals_numpy_in_every_column_width(cupy_backend, count, dtype, n, ld, offset):
    from gpu.ozaki2 import crt_kernels
    m = 37
    table, full, sa, sb = planes_and_shifts(count, m, n, ld, dtype, count * ld + n)
    want = np.empty((m, n))
    get_backend("numpy").ops("ozaki2").crt(full[:, :, offset:offset + n], table, sa, sb, want)
    cp = cupy_backend.xp
    planes = cp.asarray(full)[:, :, offset:offset + n]
    width = crt_kernels.columns(planes)
    assert width == (1 if (ld % 2 or offset % 2) else 2 if (ld % 4 or offset % 4 or count > 16) else 4)
    for out_ld in (n, n + 1):
        C = cp.full((m, out_ld), np.nan)[:, :n]
        crt_kernels.crt(planes, table, cp.asarray(sa), cp.asarray(sb), C)
        assert np.array_equal(cupy_backend.to_numpy(C), want), (width, out_ld)
