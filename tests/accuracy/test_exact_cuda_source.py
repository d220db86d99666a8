"""The exact product's CUDA module without a GPU: it compiles (nvcc, where present), and its per-entry rounding,
built for the host (a C++ compiler, where present), gives :mod:`accuracy.limbs`'s bits on hard limbs."""

import ctypes
import shutil
import subprocess

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accuracy.exact_source import EXACT_SOURCE
from accuracy.limbs import magnitude, round_to_float64

HOST = r"""
#include <cmath>
using std::ldexp;
#define EXACT_HOST
#define EXACT_FN static inline
#define CLZ64(x) __builtin_clzll(x)
#define FFS64(x) __builtin_ffsll(x)
""" + EXACT_SOURCE + r"""
extern "C" double round_limbs(long long* L, long long limbs, int beta, long long exponent, int* overflow)
{
    return round_entry(L, limbs, 1, beta, exponent, overflow);
}
"""


@pytest.fixture(scope="module")
def host_round(tmp_path_factory):
    compiler = shutil.which("g++") or shutil.which("clang++")
    if compiler is None:
        pytest.skip("needs a C++ compiler")
    folder = tmp_path_factory.mktemp("exact")
    (folder / "exact.cpp").write_text(HOST)
    done = subprocess.run([compiler, "-O1", "-shared", "-fPIC", "-o", "exact.so", "exact.cpp"], cwd=folder,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lib = ctypes.CDLL(str(folder / "exact.so"))
    lib.round_limbs.restype = ctypes.c_double
    lib.round_limbs.argtypes = [np.ctypeslib.ndpointer(np.int64, flags="C"), ctypes.c_longlong, ctypes.c_int,
                                ctypes.c_longlong, ctypes.POINTER(ctypes.c_int)]

    def run(limbs: np.ndarray, beta: int, exponent: int) -> float:
        flag = ctypes.c_int(0)
        value = lib.round_limbs(np.ascontiguousarray(limbs, dtype=np.int64), limbs.size, beta, exponent, flag)
        assert not flag.value
        return value

    return run


def numpy_round(limbs: np.ndarray, beta: int, exponent: int) -> float:
    L = limbs.astype(np.int64).reshape(-1, 1).copy()
    negative, digits = magnitude(np, L, beta)
    value = round_to_float64(np, digits, beta, np.array([exponent]))[0]
    return -value if negative[0] else value


@settings(max_examples=400, deadline=None)
@given(beta=st.integers(1, 27), count=st.integers(1, 12), data=st.data(),
       leading=st.one_of(st.integers(-1140, -1015), st.integers(1015, 1030), st.integers(-1200, 1100)))
def test_the_device_rounding_gives_numpys_bits(host_round, beta, count, data, leading):
    """Results placed around the subnormal range, the overflow threshold and anywhere (``leading``: the
    exponent of the exact value's top bit)."""
    limit = 2 ** min(beta + 8, 53)
    drawn = data.draw(st.lists(st.integers(-limit, limit), min_size=count, max_size=count))
    room = [0] * (-(-10 // beta) + 2)                # top limbs that take the carries, as limb_count provides
    limbs = np.array(drawn + room, dtype=np.int64)
    exponent = leading - max(abs(sum(d << (q * beta) for q, d in enumerate(drawn))).bit_length() - 1, 0)
    want, got = numpy_round(limbs, beta, exponent), host_round(limbs, beta, exponent)
    assert np.float64(got).view(np.int64) == np.float64(want).view(np.int64), (limbs, beta, exponent, got, want)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs the CUDA compiler (nvcc)")
def test_the_module_compiles(tmp_path):
    (tmp_path / "exact.cu").write_text(EXACT_SOURCE)
    done = subprocess.run(["nvcc", "-arch=sm_90", "-std=c++17", "-ptx", "exact.cu", "-o", "exact.ptx"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
