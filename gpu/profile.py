"""Device profiles: what the library knows of a device, as a small JSON file per device and backend.

The execution layer never opens the results database. What it needs from
measurements (today: the best Strassen level per size for ``level="auto"``)
is written, as plain data, into one file per (backend, device) by the
commands that measure it (``gemmlab calibrate``, ``gemmlab levels``):
calibration curves, launch overhead, the level sweep's times, and the level
tables the predictor computed from them within what those measurements support.
The library only reads it.

Files live in ``$GEMMLAB_PROFILES`` when that is set, else in
``results/profiles`` under the working directory, named after the backend and
the device (``cupy-nvidia-h100-80gb-hbm3.json``). A profile is read once per
change of the file (its modification time), so a new calibration is seen by a
running process: at once where this process wrote it, within :data:`STAMP_TTL_S`
where another did.

The package bundles the profiles measured on the GPUs the project ran on (``gpu/profiles``, installed with
it: :data:`BUNDLED_DIR`), so a user of those GPUs gets their configurations without calibrating. A user's own
profile comes first: its level tables replace the bundled ones, and so does its configurations section
where it has one (a profile written by a plain ``gemmlab calibrate`` has none, and the bundled section of the
same device is then read). For GPUs with no profile, ``gpu/profiles/transfer-levels.json`` holds level tables
that the transfer model (``modeling.transfer``) predicted from each GPU's datasheet (:func:`transfer_levels`), and
``gpu/profiles/transfer-methods.json`` the front door's methods sections predicted by ``modeling.methods_transfer``
(:func:`transfer_methods`, read by :func:`methods`).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from functools import lru_cache
from pathlib import Path
from typing import Any

from .backend import Backend

FORMAT = "gemmlab-device-profile"
VERSION = 2
#: Versions this code reads: 1 holds one set of level tables, 2 adds a set per power regime (``regimes``).
READABLE = (1, 2)
#: The power regimes a profile keeps level tables for, as ``gemmlab calibrate --regime`` measures them:
#: under sustained load the SM clock drops (1980 to 1500-1700 MHz on a 700 W H100), which moves the
#: crossovers, so a predictor calibrated in one regime misjudges the other.
REGIMES = ("sustained", "cold")
DEFAULT_REGIME = "sustained"
ENV_VAR = "GEMMLAB_PROFILES"
DEFAULT_DIR = Path("results") / "profiles"
_DEFAULT_DIR = str(DEFAULT_DIR)
#: The profiles installed with the package, and the transfer model's level tables for other GPUs.
BUNDLED_DIR = Path(__file__).resolve().parent / "profiles"
TRANSFER_FILE = "transfer-levels.json"
TRANSFER_FORMAT = "gemmlab-transfer-levels"
#: The transfer model's predicted ``methods`` sections for other GPUs (``modeling.methods_transfer``).
TRANSFER_METHODS_FILE = "transfer-methods.json"
TRANSFER_METHODS_FORMAT = "gemmlab-transfer-methods"


#: Seconds a kept ``level="auto"`` decision trusts the profile's modification time before it looks at the file
#: again (:func:`profile_stamp`); :func:`save_profile` makes this process look again at once. Reading the
#: time on every call cost a repeated ``level="auto"`` call about 7 of its 40 us on the host,
#: where the level-0 GEMM it dispatches at N = 1024 runs about 45 us on the H100.
STAMP_TTL_S = 1.0
_STAMPS: dict[tuple[str, str, str], tuple[int, float, tuple[str, int | None]]] = {}
_written = 0


class ProfileError(ValueError):
    """A profile file that is not a readable profile of this version."""


def profile_dir() -> Path:
    """Where profiles are read and written: ``$GEMMLAB_PROFILES``, else ``results/profiles``."""
    return Path(_directory(None))


def _directory(directory: str | os.PathLike | None) -> str:
    """``directory``, else :func:`profile_dir`'s folder, as a string (cheap: every ``level="auto"`` call asks;
    making the default's string each time was half of its 2.3 us)."""
    return str(directory) if directory is not None else os.environ.get(ENV_VAR) or _DEFAULT_DIR


def profile_path(backend: str, device: str, directory: str | os.PathLike | None = None) -> Path:
    """The file of (backend, device) in ``directory`` (default :func:`profile_dir`)."""
    return _path(backend, device, _directory(directory))


@lru_cache(maxsize=32)
def _path(backend: str, device: str, directory: str) -> Path:
    """Cached: ``level="auto"`` asks on every call, and building the path cost ~20 us of a 1024 product's."""
    slug = re.sub(r"[^a-z0-9]+", "-", f"{backend} {device}".lower()).strip("-")
    return Path(directory) / f"{slug}.json"


@lru_cache(maxsize=8)
def device_name(backend: Backend) -> str:
    """The device name a profile is keyed by (CUDA's name, or the CPU's), asked once per backend."""
    return str(backend.device_info().get("device"))


def load_profile(path: str | os.PathLike) -> dict[str, Any] | None:
    """The profile in ``path``, or None where there is no such file; :class:`ProfileError` for a
    file that is not a profile (say which file, and how to make a new one)."""
    path = Path(path)
    try:
        stamp = path.stat().st_mtime_ns
    except FileNotFoundError:
        return None
    return _read(str(path.resolve()), stamp)


@lru_cache(maxsize=32)
def _read(path: str, stamp: int) -> dict[str, Any]:
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProfileError(f"{path} is not a readable device profile ({exc}); delete it and run "
                           "gemmlab calibrate to write a new one") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("version") not in READABLE:
        raise ProfileError(f"{path} is not a gemmlab device profile of version {' or '.join(map(str, READABLE))}; "
                           "delete it and run gemmlab calibrate to write a new one")
    return doc


def backend_profile(backend: Backend, directory: str | os.PathLike | None = None) -> dict[str, Any] | None:
    """The profile of the device ``backend`` runs on, or None where none was written."""
    return load_profile(profile_path(backend.name, device_name(backend), directory))


def bundled_profile(backend: Backend) -> dict[str, Any] | None:
    """The profile installed with the package for the device ``backend`` runs on, or None."""
    return load_profile(_path(backend.name, device_name(backend), str(BUNDLED_DIR)))


def current_profile(backend: Backend, directory: str | os.PathLike | None = None) -> dict[str, Any] | None:
    """The profile ``level="auto"`` reads: the user's own (:func:`backend_profile`), else the bundled one of
    this device. The user's file is found by its modification time as :func:`profile_stamp` keeps it (read
    again after :data:`STAMP_TTL_S`, at once after this process saved a profile), the content read once per
    time. Reading the time and resolving the path on every call cost 36 us of a call whose 256 x 256 GEMM
    takes 0.5-0.9 ms on a 2-core CPU."""
    path, stamp = profile_stamp(backend, directory)
    return bundled_profile(backend) if stamp is None else _read(path, stamp)


def configurations(backend: Backend, regime: str = "sustained",
                   directory: str | os.PathLike | None = None) -> tuple[dict[str, Any] | None, str | None]:
    """The configurations section (:mod:`gpu.strassen.choose`) of ``regime`` for this device: the user's
    profile's where it has one, else the bundled profile's; and which file it came from (None: none). A user's
    profile with level tables and no configurations (a plain ``gemmlab calibrate``) gives none: its level
    tables, measured on this machine, decide instead of the bundled configurations."""
    return _section(backend, regime, "configurations", directory, own_levels_decide=True)


def methods(backend: Backend, regime: str = "sustained",
            directory: str | os.PathLike | None = None) -> tuple[dict[str, Any] | None, str | None]:
    """The methods section (:mod:`gpu.frontdoor.table`: each method's measured ratio to the library GEMM per
    shape) of ``regime`` for this device: the user's profile's where it has one, else the bundled profile's; for a
    device with no profile of its own and no measured section bundled (no bundled profile, or one with Strassen's
    tables only, as the H100's), the transfer model's predicted section (:func:`transfer_methods`; its points say
    ``"basis": "predicted ..."``); and where it came from (None: none)."""
    found = _section(backend, regime, "methods", directory)
    if found[0] is not None or profile_stamp(backend, directory)[1] is not None:
        return found
    section, gpu = transfer_methods(backend, regime)
    if section is None:
        return None, None
    return section, f"{BUNDLED_DIR / TRANSFER_METHODS_FILE} ({gpu}: predicted by the transfer model)"


def _section(backend: Backend, regime: str, name: str, directory: str | os.PathLike | None,
             own_levels_decide: bool = False) -> tuple[dict[str, Any] | None, str | None]:
    """Section ``name`` of the user's profile, else of the bundled one, and its file; with
    ``own_levels_decide``, none where the user's profile has level tables but not this section."""
    path, stamp = profile_stamp(backend, directory)
    own = None if stamp is None else _read(path, stamp)
    if own_levels_decide and own is not None and not regime_section(own, regime, name) and \
            regime_section(own, regime, "levels"):
        return None, None                     # the user's own level tables are this device's measurement
    bundled = str(_path(backend.name, device_name(backend), str(BUNDLED_DIR)))
    for doc, where in ((own, path), (bundled_profile(backend), bundled)):
        section = regime_section(doc, regime, name)
        if section:
            return section, where
    return None, None


def transfer_levels(backend: Backend) -> tuple[dict[str, Any], str | None]:
    """The transfer model's level tables for the device ``backend`` runs on (the first GPU of
    ``transfer-levels.json`` whose CUDA-name pattern matches it), and that GPU's name; ({}, None) where none
    matches or on a backend that is not a GPU's."""
    if backend.name != "cupy":
        return {}, None
    doc = load_profile_file(BUNDLED_DIR / TRANSFER_FILE, TRANSFER_FORMAT)
    name = device_name(backend)
    for gpu in (doc or {}).get("gpus", ()):
        if re.search(gpu["pattern"], name, re.IGNORECASE):
            return gpu["levels"], gpu["name"]
    return {}, None


def transfer_methods(backend: Backend, regime: str = "sustained") -> tuple[dict[str, Any] | None, str | None]:
    """The transfer model's predicted methods section of ``regime`` for the device ``backend`` runs on (the first
    GPU of ``transfer-methods.json`` whose CUDA-name pattern matches it; the model is fitted on sustained
    measurements, so only that regime has one), and that GPU's name; (None, None) where none matches or on a
    backend that is not a GPU's."""
    if backend.name != "cupy":
        return None, None
    return transfer_methods_of(device_name(backend), regime)


def transfer_methods_of(device: str, regime: str = "sustained") -> tuple[dict[str, Any] | None, str | None]:
    """:func:`transfer_methods` for a CUDA device name (or a hardware-table GPU's short name)."""
    doc = load_profile_file(BUNDLED_DIR / TRANSFER_METHODS_FILE, TRANSFER_METHODS_FORMAT)
    for gpu in (doc or {}).get("gpus", ()):
        if re.search(gpu["pattern"], device, re.IGNORECASE) or device.strip().lower() == gpu["name"].lower():
            section = gpu.get("methods")
            if section and section.get("points") and section.get("regime", DEFAULT_REGIME) == check_regime(regime):
                return section, gpu["name"]
            return None, gpu["name"]
    return None, None


def load_profile_file(path: Path, kind: str) -> dict[str, Any] | None:
    """A bundled data file of format ``kind`` (None where it is missing or of another format)."""
    try:
        doc = _read_any(str(path), path.stat().st_mtime_ns)
    except (FileNotFoundError, ProfileError):
        return None
    return doc if doc.get("format") == kind else None


@lru_cache(maxsize=4)
def _read_any(path: str, stamp: int) -> dict[str, Any]:
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProfileError(f"{path} is not readable ({exc})") from None
    if not isinstance(doc, dict):
        raise ProfileError(f"{path} is not a JSON object")
    return doc


def profile_stamp(backend: Backend, directory: str | os.PathLike | None = None) -> tuple[str, int | None]:
    """The device profile's file and modification time (None where there is none): what a kept
    ``level="auto"`` decision depends on, so that writing a profile changes later decisions. The time
    is read again after :data:`STAMP_TTL_S`, or at once after this process saved a profile."""
    key = (backend.name, device_name(backend), _directory(directory))
    now, kept = time.monotonic(), _STAMPS.get(key)
    if kept is not None and kept[0] == _written and now - kept[1] < STAMP_TTL_S:
        return kept[2]
    path = str(_path(*key))
    try:
        stamp = path, os.stat(path).st_mtime_ns
    except FileNotFoundError:
        stamp = path, None
    _STAMPS[key] = (_written, now, stamp)
    return stamp


class ProfileWatch:
    """Whether the device profile has changed since a decision was made, asked per call by a kept plan: it
    reads :func:`profile_stamp` only where this process saved a profile since, the profile folder's variable
    changed, or :data:`STAMP_TTL_S` passed (a look costs ~0.5 us, :func:`profile_stamp` 2.3 us on an H200's
    host). :attr:`stamp` is the stamp of the last decision."""

    __slots__ = ("backend", "stamp", "_seen")

    def __init__(self, backend: Backend) -> None:
        self.backend, self.stamp = backend, profile_stamp(backend)
        self._seen = (_written, os.environ.get(ENV_VAR), time.monotonic())

    def changed(self) -> bool:
        """Whether the stamp differs from :attr:`stamp` (which then becomes the new one)."""
        written, where, at = self._seen
        if written == _written and where == os.environ.get(ENV_VAR) and time.monotonic() - at < STAMP_TTL_S:
            return False
        stamp = profile_stamp(self.backend)
        self._seen = (_written, os.environ.get(ENV_VAR), time.monotonic())
        if stamp == self.stamp:
            return False
        self.stamp = stamp
        return True


def check_regime(regime: str) -> str:
    """``regime`` where it is one of :data:`REGIMES`; ValueError naming them otherwise."""
    if regime not in REGIMES:
        raise ValueError(f"regime must be one of {', '.join(REGIMES)}, got {regime!r}")
    return regime


#: Sections of a profile that other measurements write (the out-of-core rates: gpu.outofcore.rates), kept
#: when the level tables are rewritten.
KEPT_SECTIONS = ("transfer",)


def with_regime(old: dict[str, Any] | None, new: dict[str, Any], regime: str) -> dict[str, Any]:
    """``new`` (a profile measured in ``regime``) with the level tables, configurations and methods ``old`` kept
    for the other regimes, so that writing a cold profile does not lose the sustained one (or the reverse); a
    ``new`` without a configurations or methods section keeps the regime's old one."""
    kept = dict((old or {}).get("regimes", {}))
    previous = kept.get(check_regime(regime), {})
    kept[regime] = {"levels": new["levels"], "env_key": new.get("env_key"), "written_at": new.get("written_at")}
    for name in ("configurations", "methods"):
        section = new.get(name) or previous.get(name)
        if section:
            kept[regime][name] = section
    sections = {key: old[key] for key in KEPT_SECTIONS if old and key in old and key not in new}
    return {**new, **sections, "regime": regime, "regimes": kept}


def regime_section(profile: dict[str, Any] | None, regime: str, name: str) -> Any:
    """Section ``name`` of ``regime`` in ``profile`` (a version-1 profile's own), or None."""
    if not profile:
        return None
    regimes = profile.get("regimes")
    if not regimes:
        return profile.get(name)
    return regimes.get(check_regime(regime), {}).get(name)


def regime_levels(profile: dict[str, Any] | None, regime: str = DEFAULT_REGIME) -> tuple[dict[str, Any], str | None]:
    """The level tables of ``regime`` in ``profile`` (empty where there is none), and why another
    regime's stand in (None where the tables are the regime's own or the profile predates regimes)."""
    if not profile:
        return {}, None
    regimes = profile.get("regimes")
    if not regimes:
        return profile.get("levels", {}), None
    if check_regime(regime) in regimes:
        return regimes[regime]["levels"], None
    other = next(iter(regimes))
    return regimes[other]["levels"], (f"the device profile has no {regime} calibration, so level='auto' uses the "
                                      f"{other} one; run gemmlab calibrate --regime {regime} for its own")


def save_profile(doc: dict[str, Any], directory: str | os.PathLike | None = None) -> Path:
    """Write ``doc`` (with its ``backend`` and ``device``) as that device's profile, atomically:
    a reader sees the old file or the new one, never half of one."""
    doc = {"format": FORMAT, "version": VERSION, **doc}
    path = profile_path(doc["backend"], doc["device"], directory)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
        json.dump(doc, fh, indent=1)
    os.replace(tmp, path)
    global _written
    _written += 1
    return path
