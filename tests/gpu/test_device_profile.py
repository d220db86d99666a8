"""Device profile files (:mod:`gpu.profile`): where they live, how they are named, written atomically,
read back, re-read when rewritten, and refused with a clear error when they are not profiles."""

import json
import os
from pathlib import Path

import pytest

from gpu.backend import get_backend
from gpu.profile import (
    DEFAULT_DIR,
    ENV_VAR,
    FORMAT,
    VERSION,
    ProfileError,
    backend_profile,
    device_name,
    load_profile,
    profile_dir,
    profile_path,
    profile_stamp,
    save_profile,
)

H100 = "NVIDIA H100 80GB HBM3"


def test_profiles_live_in_the_environments_directory_or_results_profiles(monkeypatch, tmp_path):
    assert ENV_VAR == "GEMMLAB_PROFILES"
    assert profile_dir() == Path(os.environ[ENV_VAR]) and str(tmp_path) in os.environ[ENV_VAR]   # conftest
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "elsewhere"))
    assert profile_dir() == tmp_path / "elsewhere"
    monkeypatch.delenv(ENV_VAR)
    assert profile_dir() == DEFAULT_DIR == Path("results") / "profiles"


def test_files_are_named_after_backend_and_device(tmp_path):
    assert profile_path("cupy", H100, tmp_path) == tmp_path / "cupy-nvidia-h100-80gb-hbm3.json"
    assert profile_path("numpy", "  Intel(R) Xeon(R) CPU @ 2.20GHz ", tmp_path).name == \
        "numpy-intel-r-xeon-r-cpu-2-20ghz.json"
    assert profile_path("cupy", H100).parent == profile_dir()


def test_save_then_load_round_trips_with_format_and_version(tmp_path):
    doc = {"backend": "cupy", "device": H100, "levels": {"rum": [[0, 0], [9811, 1]]}, "note": "é"}
    path = save_profile(doc, tmp_path)
    assert path == profile_path("cupy", H100, tmp_path)
    loaded = load_profile(path)
    assert loaded == {"format": FORMAT, "version": VERSION, **doc}
    assert json.loads(path.read_text()) == loaded
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]       # no temporary file left
    save_profile({**doc, "levels": {}}, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


def test_a_missing_profile_is_none(tmp_path):
    assert load_profile(tmp_path / "none.json") is None
    assert backend_profile(get_backend("numpy"), tmp_path) is None
    assert backend_profile(get_backend("numpy")) is None                 # the test's empty directory


def test_a_rewritten_profile_is_read_again(tmp_path):
    path = save_profile({"backend": "cupy", "device": H100, "levels": {"rum": [[0, 0]]}}, tmp_path)
    assert load_profile(path)["levels"] == {"rum": [[0, 0]]}
    save_profile({"backend": "cupy", "device": H100, "levels": {"rum": [[0, 0], [64, 1]]}}, tmp_path)
    stat = os.stat(path)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))    # a later write, whatever the clock
    assert load_profile(path)["levels"] == {"rum": [[0, 0], [64, 1]]}


def test_the_backends_profile_is_its_devices_file(tmp_path):
    be = get_backend("numpy")
    assert device_name(be) == str(be.device_info()["device"]) and device_name(be)
    save_profile({"backend": "numpy", "device": device_name(be), "levels": {"rum": [[0, 0], [8, 1]]}})
    assert backend_profile(be)["levels"] == {"rum": [[0, 0], [8, 1]]}
    save_profile({"backend": "cupy", "device": device_name(be), "levels": {}}, tmp_path)
    assert backend_profile(be, tmp_path) is None                           # another backend's file


@pytest.mark.parametrize("content,match", [
    ("{not json", "is not a readable device profile"),
    ("\xff\xfe", "is not a readable device profile"),
    ("[1, 2]", "is not a gemmlab device profile of version 1 or 2"),
    ('{"format": "other", "version": 1}', "is not a gemmlab device profile of version 1 or 2"),
    (json.dumps({"format": FORMAT, "version": VERSION + 1}), "is not a gemmlab device profile of version 1 or 2"),
    (json.dumps({"format": FORMAT}), "is not a gemmlab device profile of version 1 or 2"),
])
def test_a_file_that_is_not_a_profile_is_refused_saying_what_to_do(tmp_path, content, match):
    path = tmp_path / "cupy-x.json"
    path.write_bytes(content.encode("latin-1"))
    with pytest.raises(ProfileError, match=match) as caught:
        load_profile(path)
    assert str(path.resolve()) in str(caught.value) and "run gemmlab calibrate" in str(caught.value)
    assert isinstance(caught.value, ValueError)


def test_the_stamp_sees_this_process_writes_at_once_and_other_writers_within_the_ttl(tmp_path, monkeypatch):
    from gpu import profile

    be = get_backend("numpy")
    clock = [1000.0]
    monkeypatch.setattr(profile.time, "monotonic", lambda: clock[0])
    assert profile_stamp(be, tmp_path)[1] is None
    path = save_profile({"backend": "numpy", "device": device_name(be), "levels": {}}, tmp_path)
    first = profile_stamp(be, tmp_path)
    assert first == (str(path), path.stat().st_mtime_ns)          # this process's write: seen at once
    path.write_text(path.read_text())                               # another writer: a new modification time
    os.utime(path, ns=(first[1] + 10**9, first[1] + 10**9))
    clock[0] += profile.STAMP_TTL_S / 2
    assert profile_stamp(be, tmp_path) == first                     # within the TTL: the kept stamp
    clock[0] += profile.STAMP_TTL_S
    assert profile_stamp(be, tmp_path)[1] == first[1] + 10**9       # after it: read again


def test_level_auto_reads_the_file_once_per_stamp_not_per_call(monkeypatch):
    """Every ``matmul(level="auto")`` asks for the level: a stat and a path resolution per call cost 36 us of a
    call whose 256 x 256 GEMM takes 0.5-0.9 ms on a 2-core CPU. The file's time is read as the kept
    decisions read it (once per STAMP_TTL_S, at once after this process saves one)."""
    from gpu import profile
    from gpu.strassen import auto_level

    be = get_backend("numpy")
    save_profile({"backend": "numpy", "device": device_name(be), "levels": {"rum": [[0, 0], [64, 1]]}})
    clock = [50.0]
    monkeypatch.setattr(profile.time, "monotonic", lambda: clock[0])
    stats, real = [], os.stat
    monkeypatch.setattr(os, "stat", lambda *a, **k: stats.append(a[0]) or real(*a, **k))
    assert [auto_level(n, be) for n in (32, 64, 128) * 20] == [0, 1, 1] * 20
    assert len(stats) <= 1
    save_profile({"backend": "numpy", "device": device_name(be), "levels": {"rum": [[0, 0], [100, 1]]}})
    assert auto_level(64, be) == 0                                   # this process's write: seen at once


# --- the profiles the package bundles -----------------------------------------------------------------

class FakeGPU:
    """A CuPy backend as the profile lookup sees it: its name and its device's name."""

    name, supports_graphs = "cupy", True

    def __init__(self, device):
        self.device = device

    def device_info(self):
        return {"device": self.device}


H200 = "NVIDIA H200"


def test_the_package_bundles_the_h100_and_h200_profiles_with_their_configurations():
    from gpu.profile import BUNDLED_DIR, regime_section
    from gpu.strassen.choose import table

    for device in (H100, H200):
        doc = load_profile(profile_path("cupy", device, BUNDLED_DIR))
        assert doc["device"] == device and doc["regimes"]["sustained"]["levels"]["rum+fused"]
        sizes = table(regime_section(doc, "sustained", "configurations"))
        assert len(sizes) >= 5 and all(timed for timed in sizes.values()), device
    pyproject = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    assert 'gpu = ["profiles/*.json"' in pyproject, "installed with the package"


def test_a_users_own_profile_comes_first_and_the_bundled_one_fills_its_gaps():
    from gpu.profile import BUNDLED_DIR, configurations, current_profile

    be = FakeGPU(H100)
    section, where = configurations(be)
    assert section["points"] and where == str(profile_path("cupy", H100, BUNDLED_DIR))
    assert current_profile(be)["env_key"] == load_profile(profile_path("cupy", H100, BUNDLED_DIR))["env_key"]
    save_profile({"backend": "cupy", "device": H100, "levels": {"rum": [[0, 0], [100, 1]]}})
    assert current_profile(be)["levels"] == {"rum": [[0, 0], [100, 1]]}, "the user's level tables"
    assert configurations(be) == (None, None), "a profile with level tables and no configurations: its tables"
    save_profile({"backend": "cupy", "device": H100, "levels": {}})
    assert configurations(be)[1] == where, "a profile with neither: the bundled section"
    own = {"points": [{"size": 4096, "gemm_s": 1.0, "timed": []}]}
    save_profile({"backend": "cupy", "device": H100, "levels": {}, "configurations": own})
    assert configurations(be) == (own, str(profile_path("cupy", H100)))
    assert configurations(FakeGPU("NVIDIA A100-SXM4-80GB")) == (None, None)


def test_other_gpus_get_the_transfer_models_level_tables():
    from gpu.profile import transfer_levels
    from gpu.strassen import auto_level
    from gpu.strassen.auto import table_level

    tables, gpu = transfer_levels(FakeGPU("NVIDIA A100-SXM4-80GB"))
    assert gpu == "A100" and set(tables) == {"rum", "rum+fused"}
    assert [auto_level(n, FakeGPU("NVIDIA A100-SXM4-80GB"), fused=True) for n in (2048, 16384, 65536)] == \
        [table_level(tables["rum+fused"], n) for n in (2048, 16384, 65536)]
    assert table_level(tables["rum+fused"], 2048) == 0 < table_level(tables["rum+fused"], 65536)
    assert transfer_levels(FakeGPU(H100)) == ({}, None), "a GPU with a bundled profile has no transfer table"
    assert transfer_levels(get_backend("numpy")) == ({}, None)


def test_other_gpus_get_the_transfer_models_predicted_methods_section():
    """A device with no profile of its own and no measured methods section bundled reads the predicted section of
    its GPU (``transfer-methods.json``, matched by CUDA-name pattern); one with either does not."""
    from gpu.frontdoor import rank
    from gpu.profile import BUNDLED_DIR, TRANSFER_METHODS_FILE, methods, transfer_methods

    a100 = FakeGPU("NVIDIA A100-SXM4-80GB")
    section, where = methods(a100)
    assert where.startswith(str(BUNDLED_DIR / TRANSFER_METHODS_FILE)) and "A100: predicted" in where
    assert section["points"] and all(p["basis"].startswith("predicted (transfer model from") for p in section["points"])
    winner = rank(16384, 16384, 16384, "dgemm", methods=section).winner
    assert winner.family == "ozaki2" and winner.basis.startswith("predicted (transfer model from")
    assert methods(a100, "cold") == (None, None), "the model is fitted on sustained measurements"
    assert transfer_methods(FakeGPU("NVIDIA H100 PCIe"))[1] == "H100-PCIe"
    assert methods(FakeGPU("Tesla V100-SXM2-32GB")) == (None, None), "no INT8 tensor cores: nothing predicted"
    # the H100's bundled profile holds Strassen's tables only: its front door reads the model's section, fitted on
    # its own published runs (and the H200's), which takes Ozaki II and split-K where those runs measured them
    h100, where = methods(FakeGPU(H100))
    assert where.endswith("(H100: predicted by the transfer model)")
    assert rank(16384, 16384, 16384, "dgemm", methods=h100).winner.family == "ozaki2"
    assert rank(16, 2**20, 16, "dgemm", methods=h100).winner.family == "splitk"
    assert rank(512, 512, 512, "dgemm", methods=h100).winner.family == "gemm"
    assert methods(FakeGPU(H200))[1] == str(profile_path("cupy", H200, BUNDLED_DIR)), "measured, not predicted"
    assert transfer_methods(get_backend("numpy")) == (None, None)
    save_profile({"backend": "cupy", "device": "NVIDIA A100-SXM4-80GB", "levels": {}})
    assert methods(a100) == (None, None), "a profile of its own: its measurements, none of methods"


def test_a_plans_watch_sees_this_process_writes_at_once_and_others_after_the_ttl(tmp_path, monkeypatch):
    """``ProfileWatch`` (what a kept ``level="auto"`` plan asks per call) reads the stamp only after this process
    saved a profile, after the folder's variable changed, or after the TTL; it reports a change once."""
    from gpu import profile

    be = get_backend("numpy")
    clock = [5000.0]
    monkeypatch.setattr(profile.time, "monotonic", lambda: clock[0])
    monkeypatch.setenv(profile.ENV_VAR, str(tmp_path))
    reads = []
    real = profile.profile_stamp
    monkeypatch.setattr(profile, "profile_stamp", lambda *a, **k: reads.append(1) or real(*a, **k))
    watch = profile.ProfileWatch(be)
    assert watch.stamp[1] is None and not watch.changed() and len(reads) == 1      # within the TTL: no read
    path = save_profile({"backend": "numpy", "device": device_name(be), "levels": {}}, tmp_path)
    assert watch.changed() and watch.stamp == (str(path), path.stat().st_mtime_ns)  # this process wrote it
    assert not watch.changed()                                                     # reported once
    os.utime(path, ns=(watch.stamp[1] + 10**9,) * 2)                               # another writer
    before = len(reads)
    assert not watch.changed() and len(reads) == before                            # not looked at yet
    clock[0] += 2 * profile.STAMP_TTL_S
    assert watch.changed() and watch.stamp[1] == path.stat().st_mtime_ns
    other = tmp_path / "other"
    other.mkdir()
    monkeypatch.setenv(profile.ENV_VAR, str(other))                                 # another folder: at once
    assert watch.changed() and watch.stamp[1] is None
