"""``level="auto"`` (:mod:`gpu.strassen.auto`): the device profile's level table where there is one,
else the fixed rule; a profile that cannot be read gives a warning and the rule. Every test has its
own ``GEMMLAB_PROFILES`` directory (the autouse fixture), so no real profile is ever read."""

import os
import warnings
from pathlib import Path

import numpy as np
import pytest

from experiments.core.regime import get_regime
from gpu.backend import MemoryPlanError, get_backend
from gpu.profile import FORMAT, REGIMES, VERSION, device_name, profile_path, save_profile, with_regime
from gpu.strassen import auto, decide, matmul
from gpu.strassen.auto import MAX_LEVEL, RULE_CROSSOVER, auto_level, profile_key, rule_level, table_level

N = 64
TABLE = [[0, 0], [100, 1], [200, 2], [5000, 3]]


def numpy_profile(levels, **extra):
    """A profile document of this machine's CPU for the NumPy backend."""
    be = get_backend("numpy")
    return {"backend": "numpy", "device": device_name(be), "levels": levels, **extra}


def levels_used(monkeypatch):
    """The levels ``matmul`` resolves and checks, recorded as it runs."""
    seen, real = [], decide.check_schedule
    monkeypatch.setattr(decide, "check_schedule", lambda schedule, level: (seen.append(level), real(schedule, level)))
    return seen


# --- the rule --------------------------------------------------------------------------------------

def test_rule_keeps_the_bottom_products_above_the_crossover():
    assert [rule_level(n, "cupy") for n in (4096, 8191, 8192, 16384, 65536)] == [0, 0, 1, 2, 4]
    assert [rule_level(n, "numpy") for n in (2047, 2048, 4096, 2**20)] == [0, 0, 0, 0]     # a CPU: measured first
    assert rule_level(2**40, "cupy") == MAX_LEVEL
    for backend, crossover in RULE_CROSSOVER.items():
        if crossover is None:
            continue
        for n in (1, crossover, 2 * crossover - 1, 2 * crossover, 3 * crossover, 2**20):
            level = rule_level(n, backend)
            assert level == 0 or n // 2**level >= crossover
            assert level == MAX_LEVEL or n // 2 ** (level + 1) < crossover


def test_without_a_profile_auto_is_the_rule_and_says_nothing():
    be = get_backend("numpy")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for n in (1, 7, 1023, 2048, 4096, 10**5):
            assert auto_level(n, be) == rule_level(n, "numpy")
    with pytest.raises(ValueError, match="size must be positive, got 0"):
        auto_level(0, be)


def test_auto_level_recurses_above_the_crossover(backend, monkeypatch, operand, host, check, tmp_path):
    import gpu.profile
    monkeypatch.setattr(gpu.profile, "BUNDLED_DIR", tmp_path)   # no bundled profile: the rule decides
    monkeypatch.setitem(auto.RULE_CROSSOVER, backend.name, 16)
    assert auto_level(N, backend) == 2
    assert auto_level(N - 1, backend) == 1
    A, B = operand(backend, (N, N), 1), operand(backend, (N, N), 2)
    a0, b0 = host(backend, A), host(backend, B)
    C = matmul(A, B, level="auto", schedule="otsuka", backend=backend)
    check(backend, C, a0, b0, 2)
    assert np.array_equal(host(backend, A), a0)


def test_auto_is_the_default_level(backend, operand, host, check):
    A, B = operand(backend, (N, N), 1), operand(backend, (N, N), 2)
    C = matmul(A, B, backend=backend)
    check(backend, C, host(backend, A), host(backend, B), auto_level(N, backend))


# --- the table ------------------------------------------------------------------------------------

def test_table_lookup_is_the_last_row_at_or_below_the_size():
    sizes = [1, 99, 100, 101, 199, 200, 4999, 5000, 10**7]
    assert [table_level(TABLE, n) for n in sizes] == [0, 0, 1, 1, 1, 2, 2, 3, 3]
    assert table_level([[0, 0]], 10**9) == 0
    assert table_level([[50, 2]], 10) == 2          # a size below the first row gets the first row


def test_profile_argument_gives_the_level_of_its_table():
    be = get_backend("numpy")
    profile = {"levels": {"rum": TABLE, "rum+fused": [[0, 0], [300, 1]], "lai": [[0, 0], [64, 4]]}}
    assert [auto_level(n, be, profile=profile) for n in (99, 100, 250, 6000)] == [0, 1, 2, 3]
    assert [auto_level(n, be, fused=True, profile=profile) for n in (299, 300, 6000)] == [0, 1, 1]
    assert auto_level(100, be, schedule="lai", profile=profile) == 4
    assert auto_level(4096, be, schedule="otsuka", profile=profile) == rule_level(4096, "numpy")   # no table
    assert auto_level(4096, be, profile={}) == rule_level(4096, "numpy")


def test_levels_never_exceed_the_halvings_of_the_size_or_the_maximum():
    be = get_backend("numpy")
    deep = {"levels": {"rum": [[0, 0], [2, 15]]}}
    assert [auto_level(n, be, profile=deep) for n in (2, 3, 4, 16, 17, 2**20)] == [1, 1, 2, 4, 4, MAX_LEVEL]


def test_profile_keys_name_the_configuration_without_streams():
    assert (profile_key("rum", False), profile_key("rum", True), profile_key("rum2", True)) == \
        ("rum", "rum+fused", "rum2+fused")


def test_the_device_profile_file_is_read():
    be = get_backend("numpy")
    path = save_profile(numpy_profile({"rum": TABLE}))
    assert path == profile_path("numpy", device_name(be)) and path.parent == Path(os.environ["GEMMLAB_PROFILES"])
    assert [auto_level(n, be) for n in (99, 100, 250)] == [0, 1, 2]
    other = {"levels": {"rum": [[0, 0], [10, 3]]}}
    assert auto_level(99, be, profile=other) == 3                     # an explicit profile wins over the file
    save_profile(numpy_profile({"rum": [[0, 0], [50, 1]]}))
    os.utime(path, ns=(os.stat(path).st_atime_ns, os.stat(path).st_mtime_ns + 10**9))
    assert auto_level(99, be) == 1                                    # a new file is seen by a running process


@pytest.mark.parametrize("content", ["{not json", '{"format": "something else", "version": 1}',
                                     f'{{"format": "{FORMAT}", "version": {VERSION + 1}}}', "[1, 2]"])
def test_a_broken_profile_warns_and_falls_back_to_the_rule(content):
    be = get_backend("numpy")
    path = profile_path("numpy", device_name(be))
    path.parent.mkdir(parents=True)
    path.write_text(content)
    with pytest.warns(RuntimeWarning, match=r"device profile.*level='auto' uses the fixed rule") as caught:
        assert auto_level(4096, be) == rule_level(4096, "numpy")
    assert str(path.resolve()) in str(caught[0].message)
    assert "gemmlab calibrate" in str(caught[0].message)


def test_matmul_auto_uses_the_saved_profile(backend, monkeypatch, operand, host, check):
    """With a profile whose table says 2 levels at 128 and 1 level at 96, ``matmul(level="auto", fused=False)``
    runs those levels: bitwise the explicit-level products, which differ between levels. A default call (no
    configuration given, no configurations measured) reads the table of its fallback configuration: RUM on
    NumPy, RUM with fused additions on CuPy."""
    save_profile({"backend": backend.name, "device": device_name(backend),
                  "levels": {"rum": [[0, 0], [64, 1], [128, 2]], "rum+fused": [[0, 0], [32, 3]]}})
    seen = levels_used(monkeypatch)
    A, B = operand(backend, (2 * N, 2 * N), 1), operand(backend, (2 * N, 2 * N), 2)
    a0, b0 = host(backend, A), host(backend, B)
    got = host(backend, matmul(A, B, level="auto", fused=False, backend=backend))
    assert seen == [2]
    check(backend, got, a0, b0, 2)
    levels = {lv: host(backend, matmul(A, B, level=lv, backend=backend)) for lv in (1, 2, 3)}
    assert np.array_equal(got, levels[2])
    assert not np.array_equal(levels[1], levels[2]) and not np.array_equal(levels[3], levels[2])
    seen.clear()
    matmul(A[:96, :96], B[:96, :96], fused=False, backend=backend)
    matmul(A, B, fused=True, backend=backend)
    assert seen == [1, 3]
    seen.clear()
    matmul(A[:64, :64], B[:64, :64], fused=True, backend=backend)
    assert seen == [2], "a table's level beyond bottom products of 16 is capped, never refused"
    assert matmul(A, B, backend=backend) is not None
    from gpu.strassen import PLANS
    chosen = [plan.configuration for plan in PLANS._plans.values()][-1]
    assert (chosen.level, chosen.fused) == ((3, True) if backend.name == "cupy" else (2, False))


# --- one set of tables per power regime ----------------------------------------------------------

SUSTAINED, COLD = [[0, 0], [100, 1], [200, 2]], [[0, 0], [150, 1], [400, 2]]


def regime_profile(**tables):
    """A version-2 profile with level tables (configuration ``rum``) for the given regimes."""
    doc = None
    for regime, table in tables.items():
        doc = with_regime(doc, numpy_profile({"rum": table}), regime)
    return doc


def test_auto_reads_the_tables_of_the_callers_regime():
    be = get_backend("numpy")
    both = regime_profile(sustained=SUSTAINED, cold=COLD)
    assert [auto_level(n, be, profile=both) for n in (120, 250)] == [1, 2]                 # sustained by default
    assert [auto_level(n, be, profile=both, regime="cold") for n in (120, 250, 450)] == [0, 1, 2]
    assert set(both["regimes"]) == {"sustained", "cold"} and both["regime"] == "cold"


def test_a_profile_without_the_regime_warns_and_uses_the_other_one():
    be = get_backend("numpy")
    sustained_only = regime_profile(sustained=SUSTAINED)
    with pytest.warns(RuntimeWarning, match=r"no cold calibration.*gemmlab calibrate --regime cold"):
        assert auto_level(120, be, profile=sustained_only, regime="cold") == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert auto_level(120, be, profile={"levels": {"rum": COLD}}, regime="cold") == 0   # version 1: no regimes


def test_writing_one_regime_keeps_the_other_and_a_bad_regime_is_refused():
    kept = with_regime(regime_profile(sustained=SUSTAINED), numpy_profile({"rum": COLD}), "cold")
    assert kept["regimes"]["sustained"]["levels"] == {"rum": SUSTAINED}
    assert kept["regimes"]["cold"]["levels"] == {"rum": COLD} and kept["levels"] == {"rum": COLD}
    with pytest.raises(ValueError, match="regime must be one of sustained, cold"):
        with_regime(None, numpy_profile({"rum": COLD}), "warm")
    with pytest.raises(ValueError, match="regime must be one of"):
        matmul(np.eye(4), np.eye(4), regime="warm", backend="numpy")


def test_the_library_and_the_protocol_name_the_same_regimes():
    assert all(get_regime(name).name == name for name in REGIMES)


def test_level_zero_without_out_is_the_librarys_own_product(monkeypatch):
    """At level 0 with no ``out`` the call is NumPy's own ``A @ B`` (one call on one layout: the same bits),
    with no further GEMM of the backend's, and the memory check of its output still comes first."""
    be = get_backend("numpy")
    rng = np.random.default_rng(5)
    A, B = rng.standard_normal((130, 70)), np.asfortranarray(rng.standard_normal((70, 90)))
    calls = []
    monkeypatch.setattr(type(be), "gemm", lambda self, *a, **k: calls.append(a))
    assert np.array_equal(matmul(A, B, level=0, backend=be), A @ B) and calls == []
    assert np.array_equal(matmul(A, B, backend=be), A @ B)                     # auto: level 0 on a CPU
    monkeypatch.setattr(be, "memory_info", lambda: (8 * 130 * 90 - 1, 2**40))
    with pytest.raises(MemoryPlanError, match=r"the 130 x 90 output needs .* pass out="):
        matmul(A, B, level=0, backend=be)
