"""The published headline tables: each family's call as a user makes it beside its executor's device time.

A table row is a *record* (the shape :data:`SHAPE` describes; ``results/published/scripts/as_called_tables.py``
repeats it for the scripts that write them): the call, its size, the as-called time (a loop of calls, then one
synchronise, by the host's clock), the host time of one call, the executor's device time, the library GEMM's
time in the same rounds and both ratios, the configuration and the regime's readings. Records come from the
JSON files the device scripts write (:func:`load`), or from the committed exports of runs made before the
as-called times were (:func:`h100_documents`: device time only, the as-called columns say *not measured*).
:func:`markdown` renders them; nothing here is measured, and no missing number is filled in.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpu.backend.telemetry import REASONS, reason_names

from ..core.ascalled import call_text
from ..core.csvio import open_text, read_export
from ..strassen.rows import DEFAULTS
from .exports import Exports

#: The documented record shape (the keys of one as-called record; every time in seconds, per call, a median).
SHAPE = ("family", "call", "size | m, n, k", "as_called_s", "host_s", "device_s", "reference_s", "ratio_as_called",
         "ratio_device", "config", "telemetry")
#: Keys a record must have (a value may be null: not measured), and those of a first-call record.
REQUIRED = ("family", "call", "as_called_s", "host_s", "device_s", "reference_s", "ratio_as_called", "ratio_device")
FIRST_CALL = ("family", "call", "cold_s", "warm_s")
NOT_MEASURED = "not measured"
#: Environment fields the header of a table names, in order.
STACK = (("driver", "driver"), ("cuda_runtime", "CUDA"), ("cublas", "cuBLAS"), ("cupy", "CuPy"), ("numpy", "NumPy"),
         ("nvmath", "nvmath-python"), ("git_commit", "gemmlab"))


@dataclass
class Document:
    """One file of records: where it came from, its environment and regime, and its records."""

    source: str
    environment: dict[str, Any]
    regime: str | None
    records: list[dict[str, Any]] = field(default_factory=list)


def _number(value: Any, where: str) -> None:
    """ValueError unless ``value`` is null or a finite non-negative number."""
    if value is not None and not (isinstance(value, (int, float)) and not isinstance(value, bool)
                                  and math.isfinite(value) and value >= 0):
        raise ValueError(f"{where} must be a non-negative number or null (not measured), got {value!r}")


def check_record(record: Mapping[str, Any], where: str) -> dict[str, Any]:
    """A record as read, or ValueError naming ``where`` and the missing or malformed key."""
    if not isinstance(record, Mapping):
        raise ValueError(f"{where} is not an object")
    first = "cold_s" in record or "warm_s" in record
    missing = [k for k in (FIRST_CALL if first else REQUIRED) if k not in record]
    if missing:
        raise ValueError(f"{where} lacks {', '.join(missing)} (use null for a value not measured)")
    if not ("size" in record or all(k in record for k in ("m", "n", "k"))):
        raise ValueError(f"{where} gives neither size nor m, n and k")
    for key in (*REQUIRED[2:], "reference_host_s", "cold_s", "warm_s", "repeat_s"):
        _number(record.get(key), f"{where}: {key}")
    return dict(record)


def _where(size: int | None, m: int | None, n: int | None, k: int | None) -> dict[str, int]:
    if (size is None) == (m is None or n is None or k is None):
        raise ValueError("give a record either size (a square product) or all of m, n and k")
    return {"size": size} if size is not None else {"m": m, "n": n, "k": k}


def _over(num: float | None, den: float | None) -> float | None:
    return None if num is None or not den else num / den


def record(family: str, call: str, *, size: int | None = None, m: int | None = None, n: int | None = None,
           k: int | None = None, as_called_s: float | None, host_s: float | None, device_s: float | None,
           reference_s: float | None, reference_device_s: float | None = None,
           config: Mapping[str, Any] | None = None, telemetry: Mapping[str, Any] | None = None,
           **extra: Any) -> dict[str, Any]:
    """One as-called record of the documented shape, both ratios computed from the medians given:
    ``ratio_as_called`` = reference_s / as_called_s, ``ratio_device`` = reference_device_s / device_s (None
    where either is not measured). ``extra`` keys (``reference_call``, ``calls``, ...) are kept as given."""
    clash = {"ratio_as_called", "ratio_device", "family", "call"} & extra.keys()
    if clash:
        raise ValueError(f"{', '.join(sorted(clash))} is computed by record(), not passed to it")
    out = {"family": family, "call": call, **_where(size, m, n, k), "as_called_s": as_called_s, "host_s": host_s,
           "device_s": device_s, "reference_s": reference_s, "reference_device_s": reference_device_s,
           "ratio_as_called": _over(reference_s, as_called_s), "ratio_device": _over(reference_device_s, device_s),
           "config": dict(config or {}), "telemetry": dict(telemetry or {}), **extra}
    return check_record(out, f"record of {call}")


def first_call_record(family: str, call: str, *, size: int | None = None, m: int | None = None,
                      n: int | None = None, k: int | None = None, cold_s: float | None, warm_s: float | None,
                      repeat_s: float | None = None, **extra: Any) -> dict[str, Any]:
    """One first-call record: the first call in a new process with an empty kernel cache (``cold_s``), with a
    filled one (``warm_s``), and a repeat in the warm process (``repeat_s``; ``cold_repeat_s`` in ``extra``)."""
    out = {"family": family, "call": call, **_where(size, m, n, k), "cold_s": cold_s, "warm_s": warm_s,
           "repeat_s": repeat_s, **extra}
    return check_record(out, f"first-call record of {call}")


def _mask(reasons: Any) -> int:
    if isinstance(reasons, (int, float)):
        return int(reasons)
    bits = {name: bit for bit, name in REASONS.items()}
    return sum(bits[r] if r in bits else int(r, 16) for r in reasons)


def telemetry_summary(readings: Iterable[Mapping[str, Any] | None]) -> dict[str, Any]:
    """The regime of a record's samples from NVML readings (``Reading.as_dict()`` or ``sm_mhz``/``power_w``/
    ``reasons`` as names): the median SM clock and power, the throttle reasons seen in any (a mask)."""
    seen = [r for r in readings if r]
    if not seen:
        return {}
    clocks = [r.get("sm_clock_mhz", r.get("sm_mhz")) for r in seen]
    power = [r["power_w"] for r in seen if r.get("power_w") is not None]
    mask = 0
    for r in seen:
        mask |= _mask(r.get("throttle_reasons", r.get("reasons")) or 0)
    clocks = [c for c in clocks if c is not None]
    return {"sm_clock_mhz": statistics.median(clocks) if clocks else None,
            "power_w": statistics.median(power) if power else None, "throttle_reasons": mask,
            "readings": len(seen)}


def load(path: str | Path) -> Document:
    """The records of one JSON file (``{"environment", "regime", "records": [...]}``), each checked."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: cannot read it as JSON ({exc})") from None
    if isinstance(data, Mapping) and "records" not in data:
        from .as_called_formats import convert  # it builds on record(): imported late

        data = convert(data, path.name)
    if not isinstance(data, Mapping) or not isinstance(data.get("records"), list):
        raise ValueError(f"{path}: expected an object with a list 'records' (see the renderer's docstring), "
                         "or the JSON of one of the device scripts that the renderer converts")
    records = [check_record(r, f"{path}: record {i}") for i, r in enumerate(data["records"])]
    return Document(str(path), dict(data.get("environment") or {}), data.get("regime"), records)


# --------------------------------------------------------------------------- formatting

def _ms(seconds: float | None) -> str:
    return NOT_MEASURED if seconds is None else f"{1e3 * seconds:.4g}"


def _ratio(value: float | None) -> str:
    return NOT_MEASURED if value is None else f"{value:.3f}x"


def _us(seconds: float | None) -> str:
    return NOT_MEASURED if seconds is None else f"{1e6 * seconds:.1f}"


def _k(k: int) -> str:
    return f"2^{k.bit_length() - 1}" if k > 0 and k & (k - 1) == 0 else str(k)


def size_text(record: Mapping[str, Any]) -> str:
    """``N = 4096`` for a square, ``m = n = 16, k = 2^20`` or ``m x n x k`` otherwise."""
    if "size" in record:
        return f"N = {record['size']}"
    m, n, k = record["m"], record["n"], record["k"]
    return f"m = n = {m}, k = {_k(k)}" if m == n else f"{m} x {n}, k = {_k(k)}"


def regime_text(telemetry: Mapping[str, Any] | None) -> tuple[str, str, str]:
    """SM clock (MHz), power (W) and throttle reasons of a record's samples, each "-" where not read."""
    t = telemetry or {}
    clock = "-" if t.get("sm_clock_mhz") is None else f"{t['sm_clock_mhz']:.0f}"
    power = "-" if t.get("power_w") is None else f"{t['power_w']:.0f}"
    mask = t.get("throttle_reasons")
    reasons = "-" if mask is None else (", ".join(reason_names(int(mask))) or "none")
    return clock, power, reasons


def stack_text(doc: Document) -> str:
    """The device and library versions of a document, and its regime."""
    env = doc.environment
    device = env.get("device", "device not recorded")
    if env.get("power_limit_w"):
        device += f" ({env['power_limit_w']:.0f} W)"
    parts = [f"{label} {_short(key, env[key])}" for key, label in STACK if env.get(key)]
    regime = f"; regime {doc.regime}" if doc.regime else ""
    return f"{device}; {', '.join(parts) or 'versions not recorded'}{regime}"


def _short(key: str, value: Any) -> Any:
    """A whole commit hash as its first seven digits, as the other tables' headers name theirs."""
    text = str(value)
    if key == "git_commit" and len(text) == 40 and all(c in "0123456789abcdef" for c in text):
        return text[:7]
    return value


def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |",
            *("| " + " | ".join(r) + " |" for r in rows)]


AS_CALLED_HEADER = ("call", "size", "as called (ms)", "as called x ref.", "device only (ms)", "device x ref.",
                    "reference (ms)", "host per call (us)", "reference host (us)", "SM clock (MHz)", "power (W)",
                    "throttle reasons")


def as_called_row(r: Mapping[str, Any]) -> list[str]:
    """One record as a table row (see :data:`AS_CALLED_HEADER`)."""
    return [f"`{r['call']}`", size_text(r), _ms(r["as_called_s"]), _ratio(r["ratio_as_called"]), _ms(r["device_s"]),
            _ratio(r["ratio_device"]), _ms(r["reference_s"]), _us(r["host_s"]), _us(r.get("reference_host_s")),
            *regime_text(r.get("telemetry"))]


FIRST_CALL_HEADER = ("method", "call", "size", "cold first call (s)", "cold repeat (s)", "warm first call (s)",
                     "warm repeat (s)")


def first_call_row(r: Mapping[str, Any]) -> list[str]:
    """One first-call record as a table row (see :data:`FIRST_CALL_HEADER`): ``repeat_s`` is the warm process's
    repeat, ``cold_repeat_s`` the cold one's."""
    return [str(r["family"]), f"`{r['call']}`", size_text(r), _seconds(r.get("cold_s")),
            _seconds(r.get("cold_repeat_s")), _seconds(r.get("warm_s")), _seconds(r.get("repeat_s"))]


def markdown(docs: Sequence[Document]) -> str:
    """Every document's records as Markdown: per document and family one table of as-called records, headed by
    the stack and the reference calls, then one table of the document's first-call records."""
    out: list[str] = []
    for doc in docs:
        first = [r for r in doc.records if "cold_s" in r or "warm_s" in r]
        timed = [r for r in doc.records if r not in first]
        for family in dict.fromkeys(r["family"] for r in timed):
            records = [r for r in timed if r["family"] == family]
            out += [f"#### {family}: {stack_text(doc)}", "", f"Source: `{doc.source}`."]
            refs = sorted({str(r["reference_call"]) for r in records if r.get("reference_call")})
            out += [f"Reference (x ref.): {', '.join(f'`{c}`' for c in refs)}."] if refs else []
            out += ["", *_table(AS_CALLED_HEADER, (as_called_row(r) for r in records)), ""]
        if first:
            out += [f"#### first call: {stack_text(doc)}", "", f"Source: `{doc.source}`.", "",
                    *_table(FIRST_CALL_HEADER, (first_call_row(r) for r in first)), ""]
    return "\n".join(out).rstrip() + "\n"


def _seconds(value: float | None) -> str:
    return NOT_MEASURED if value is None else f"{value:.4g}"


# --------------------------------------------------------------------------- the H100's record

#: Split-K's headline points: m = n and k of its targets.
SPLITK_POINTS = tuple((m, k) for m in (16, 32, 64) for k in (2**20, 2**22, 2**24))
#: Scheme II's configuration of the H100's headline (as accurate as DGEMM on phi = 1 inputs there).
OZAKI2_METHOD, OZAKI2_CALL = "ozaki2-fast-15", call_text("ozaki2.matmul", {"moduli": 15, "scaling": "fast"})


def _device_record(family: str, call: str, where: Mapping[str, int], row: Any, speedup: str, reference: str,
                   config: Mapping[str, Any]) -> dict[str, Any]:
    """A stored row measured by the device's clock only, as a record: its as-called fields None."""
    meta = row.meta
    return {"family": family, "call": call, **where, "as_called_s": meta.get("as_called_s"),
            "host_s": meta.get("host_s"), "device_s": row.value, "reference_s": meta[reference],
            "ratio_as_called": meta.get("ratio_as_called"), "ratio_device": meta[speedup],
            "reference_host_s": meta.get("reference_host_s"), "config": dict(config),
            "telemetry": {k: meta.get(k) for k in ("sm_clock_mhz", "power_w", "throttle_reasons")}}


def _sustained(rows: Iterable[Any]) -> list[Any]:
    return [r for r in rows if r.params.get("regime", "sustained") == "sustained"]


def h100_documents(exports: Exports | None = None) -> list[Document]:
    """The H100's headline rows from the committed exports (sustained): split-K's best mode at each target
    point, Strassen's best configuration per size, scheme II's fast scaling with 15 moduli per square; each
    by the device's clock, its as-called time never measured."""
    from ..splitk.points import MODES

    exports = exports or Exports()
    docs = []
    splitk = [r for r in _sustained(exports.rows("h100-splitk", "splitk")) if r.method in MODES]
    best: dict[tuple[int, int], Any] = {}
    for r in splitk:
        key = (r.params["m"], r.params["k"])
        if key in SPLITK_POINTS and (key not in best or r.meta["speedup"] > best[key].meta["speedup"]):
            best[key] = r
    docs.append(_document("h100-splitk.csv", list(best.values()), [
        _device_record("splitk", call_text("splitk.matmul", MODES[r.method]),
                       {"m": r.params["m"], "n": r.params["n"], "k": r.params["k"]}, r, "speedup", "gemm_s",
                       {"mode": r.method, **(r.meta.get("plan") or {})}) for _, r in sorted(best.items())]))
    strassen = [r for r in _sustained(exports.rows("h100-strassen", "strassen-speedup"))
                if r.method not in ("gemm", DEFAULTS)]
    top: dict[int, Any] = {}
    for r in strassen:
        n = r.params["size"]
        if n not in top or r.meta["speedup"] > top[n].meta["speedup"]:
            top[n] = r
    docs.append(_document("h100-strassen-speedup.csv", list(top.values()), [
        _device_record("strassen", f"executor: {r.method} at level {r.params['level']}", {"size": n}, r, "speedup",
                       "gemm_s", {"configuration": r.method, "level": r.params["level"]})
        for n, r in sorted(top.items())]))
    with open_text(exports.root / "h100-ozaki2.csv", "r") as fh:
        ozaki2 = _sustained(r for r in read_export(fh, "h100-ozaki2.csv")
                            if r.experiment == "ozaki2-time" and r.method == OZAKI2_METHOD)
    docs.append(_document("h100-ozaki2.csv", ozaki2, [
        _device_record("ozaki2", OZAKI2_CALL, {"size": r.params["n"]}, r, "speedup_vs_dgemm", "dgemm_s",
                       {"moduli": 15, "scaling": "fast", "clock": "CUDA events, one call per sample"})
        for r in sorted(ozaki2, key=lambda r: r.params["n"]) if r.params["m"] == r.params["k"] == r.params["n"]]))
    return docs


def _document(name: str, rows: Sequence[Any], records: list[dict[str, Any]]) -> Document:
    """The records of the export ``name``, with the environment of its rows (every commit they were measured at)."""
    env = dict(rows[0].environment) if rows else {}
    commits = sorted({str(r.environment.get("git_commit", "?"))[:7] for r in rows})
    if commits:
        env["git_commit"] = ", ".join(commits)
    return Document(f"results/published/{name}", env, "sustained", records)
