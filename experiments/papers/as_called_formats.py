"""The device scripts' own JSON as records of the documented shape (:func:`experiments.papers.headline.record`).

Each timing script in ``results/published/scripts/`` writes its measurements in a format of its own (``points``
or ``methods``) and, beside them, ``records`` built by the adapter here for that script; files written before
they did carry no ``records``, and :func:`convert` builds them the same way on reading. Nothing is estimated:
what a script did not measure (a host time, a device time) stays None.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import PurePath
from typing import Any

from ..core.ascalled import call_text
from .headline import first_call_record, record, telemetry_summary

Doc = Mapping[str, Any]
SUSTAINED = "sustained"


def _ms(value: float | None) -> float | None:
    return None if value is None else value / 1e3


def splitk(doc: Doc) -> list[dict[str, Any]]:
    """``splitk_as_called.py``: the default call and ``deterministic=False``, as called, beside the executor on the
    default's split by CUDA events (the atomic call's executor was not timed) and ``cupy.matmul(A, B)``."""
    out = []
    calls = {"matmul": ("splitk.matmul(A, B)", "run"), "matmul_atomic": ("splitk.matmul(A, B, deterministic=False)",
                                                                        None)}
    for p in doc["points"]:
        med, ref = p["median"], p["median"]["cupy_matmul"]
        for name, (call, executor) in calls.items():
            runs = p.get("samples", {}).get(name, [])
            config = dict(p["split"]) if executor else {"deterministic": False}
            out.append(record(
                "splitk", call, m=p["m"], n=p["n"], k=p["k"], as_called_s=med[name]["wall_s"],
                host_s=med[name]["host_s"], device_s=med[executor]["device_s"] if executor else None,
                reference_s=ref["wall_s"], reference_device_s=ref["device_s"], reference_host_s=ref["host_s"],
                reference_call="cupy.matmul(A, B)", config=config,
                telemetry=telemetry_summary(r for s in runs for r in (s.get("start"), s.get("end"))),
                call_device_s=med[name]["device_s"], check_error=p.get("check_error", {}).get(name),
                host_clock="the loop's issue time per call", calls=doc.get("calls"), samples=len(runs) or None))
    return out


def ozaki1(doc: Doc) -> list[dict[str, Any]]:
    """``ozaki1_as_called.py``: the default call as called beside the fixed count it resolves to (the executor, by
    CUDA events) and DGEMM by CUDA events; DGEMM as called where the file has it (``dgemm_as_called``)."""
    out = []
    for p in doc["points"]:
        med, fmt = p["median_ms"], p.get("slice_format", "fp32")
        options = {} if fmt == "fp32" else {"slice_format": fmt}
        out.append(record(
            "ozaki1", call_text("ozaki.matmul", options, "A, B"), size=p["n"], as_called_s=_ms(med["as_called"]),
            host_s=None, device_s=_ms(med["fixed"]), reference_s=_ms(med.get("dgemm_as_called")),
            reference_device_s=_ms(med["dgemm"]), reference_call="cupy.matmul(A, B)",
            config={"slices": p["slices"], "bound": p.get("bound"), "slice_format": fmt},
            telemetry=telemetry_summary((p.get("telemetry") or {}).values()), calls=p.get("calls_per_loop"),
            samples=len(p["samples_ms"]["as_called"])))
    return out


def ozaki2(doc: Doc) -> list[dict[str, Any]]:
    """``ozaki2_as_called.py``: each public call and DGEMM as called (no device time; one call's host time where
    the file has it, ``host_ms``), against the DGEMM of its own group where it ran in one (``"dgemm beside
    <run>"``), the count the defaults chose and each call's error (``default-w1``, ``fast-<count>-w1``: with
    ``level=1``; ``-w2``: ``level=2``; ``-ws<G>``: ``workspace=`` G GiB); the first call of the default, cold or
    warm by the kernel cache (none where the file's first call was another run's, ``first_call_of``)."""
    out = []
    for p in doc["points"]:
        for name, run in p["runs"].items():
            if name.startswith("dgemm"):
                continue
            dgemm = p["runs"].get(f"dgemm beside {name}") or p["runs"]["dgemm"]
            options, span = ozaki2_run(name)
            count = options.get("moduli")
            config = {"moduli": count or "auto", "scaling": "fast",
                      **{k: v for k, v in options.items() if k not in ("moduli", "scaling")},
                      **({} if span is None else {"max_span": span})}
            if count is None and "default_count" in p:
                config["count_chosen"] = p["default_count"]
            out.append(record(
                "ozaki2", call_text("ozaki2.matmul", options, "A, B"), size=p["n"],
                as_called_s=_ms(run["ms_per_call"]), host_s=_ms(run.get("host_ms")), device_s=None,
                reference_s=_ms(dgemm["ms_per_call"]), reference_host_s=_ms(dgemm.get("host_ms")),
                reference_call="cupy.matmul(A, B)", config=config,
                telemetry=telemetry_summary(run.get("telemetry") or []), calls=p.get("loop"),
                samples=len(run.get("telemetry") or []) or None,
                max_rel_error=(p.get("errors", {}).get(name) or {}).get("max_rel")))
        if p.get("first_call_s") is not None and p.get("first_call_of", "default") == "default":
            cold = doc.get("kernel_cache_files_at_start") == 0
            out.append(first_call_record("ozaki2", "ozaki2.matmul(A, B)", size=p["n"],
                                         cold_s=p["first_call_s"] if cold else None,
                                         warm_s=None if cold else p["first_call_s"]))
    return out


def ozaki2_run(name: str) -> tuple[dict[str, int | str], int | None]:
    """The ``ozaki2.matmul`` options an ``ozaki2_as_called.py`` run's name stands for, and its span cap:
    ``default`` (none: ``moduli="auto"``) or ``fast-<count>`` (``moduli=count, scaling="fast"``), then any of
    ``-w<L>`` (``level=L``), ``-ws<G>`` (``workspace=`` G GiB, in bytes) and ``-span<R>`` (the fused second level's
    spans capped at R rows, not an option of the call: ``gpu.ozaki2.fused_level2.MAX_SPAN`` while its plan is
    built; None where the name has none)."""
    head, *parts = name.split("-")
    options: dict[str, int | str] = {} if head == "default" else {"moduli": int(parts.pop(0)), "scaling": "fast"}
    span = None
    for part in parts:
        if part.startswith("ws") and part[2:].isdigit():
            options["workspace"] = int(part[2:]) << 30
        elif part.startswith("w") and part[1:].isdigit():
            options["level"] = int(part[1:])
        elif part.startswith("span") and part[4:].isdigit():
            span = int(part[4:])
    return options, span


def strassen(doc: Doc) -> list[dict[str, Any]]:
    """``strassen_as_called.py``: both default calls as called beside their device time (a stream hold, or the
    CUDA events of the wall loop; ``device_clock`` says which) and DGEMM's called the same way (into ``out=``, or into
    a new C: ``dgemm_new``, where the run has it), in the same rounds."""
    out = []
    calls = {"strassen_out": ("strassen.matmul(A, B, out=C)", "dgemm"),
             "strassen": ("strassen.matmul(A, B)", "dgemm_new")}
    references = {"dgemm": "cupy.matmul(A, B, out=C)", "dgemm_new": "cupy.matmul(A, B)"}
    for p in doc["points"]:
        med, tel = p["median_s"], p.get("telemetry") or {}
        for name, (call, base) in calls.items():
            base = base if base in med else "dgemm"              # runs before dgemm_new: DGEMM into out= for both
            ref = med[base]
            out.append(record(
                "strassen", call, size=p["size"], as_called_s=med[name]["wall"],
                host_s=(p.get("host_s") or {}).get(name), reference_host_s=(p.get("host_s") or {}).get(base),
                device_s=med[name]["device"], reference_s=ref["wall"], reference_device_s=ref["device"],
                reference_call=references[base], config=dict(p.get("chosen", {}).get(name) or {}),
                telemetry=telemetry_summary((tel.get("start"), tel.get("end"))), device_clock=p.get("device_time"),
                calls=p.get("calls_per_sample"), samples=p.get("samples")))
    return out


#: first_call.py's methods: family, the call and its operands' shape (as its child process draws them; a size of
#: None is the run's ``n``, 4096 where the file gives none).
FIRST_CALLS = {"dgemm": ("dgemm", "cupy.matmul(A, B)", {"size": None}),
               "strassen": ("strassen", "strassen.matmul(A, B)", {"size": None}),
               "ozaki": ("ozaki1", "ozaki.matmul(A, B)", {"size": None}),
               "ozaki2": ("ozaki2", "ozaki2.matmul(A, B)", {"size": None}),
               "frontdoor": ("frontdoor", "gpu.matmul(A, B)", {"size": None}),
               "splitk": ("splitk", "splitk.matmul(A, B)", {"m": 16, "n": 16, "k": 2**20}),
               "exact": ("exact", "exact_matmul(A, B)", {"size": 1024}),
               "outofcore": ("outofcore", "outofcore.matmul(A, B) on host arrays", {"size": 4096})}


def first_call(doc: Doc) -> list[dict[str, Any]]:
    """``first_call.py``: each method's first call in a new process, cold and warm, and the repeats after them;
    a run that failed has None and its error."""
    out = []
    for method, runs in doc["methods"].items():
        family, call, where = FIRST_CALLS[method]
        where = {k: doc.get("n", 4096) if v is None else v for k, v in where.items()}
        cold, warm = runs.get("cold") or {}, runs.get("warm") or {}
        errors = {k: r["error"] for k, r in (("cold", cold), ("warm", warm)) if r.get("error")}
        out.append(first_call_record(family, call, **where, cold_s=cold.get("first_s"), warm_s=warm.get("first_s"),
                                     repeat_s=warm.get("repeat_s"), cold_repeat_s=cold.get("repeat_s"),
                                     **({"errors": errors} if errors else {})))
    return out


ADAPTERS: dict[str, Callable[[Doc], list[dict[str, Any]]]] = {
    "splitk_as_called.py": splitk, "ozaki1_as_called.py": ozaki1, "ozaki2_as_called.py": ozaki2,
    "strassen_as_called.py": strassen, "first_call.py": first_call}
#: The file each script writes, for a file that does not name its script.
FILES = {"splitk-as-called.json": "splitk_as_called.py", "ozaki1-as-called.json": "ozaki1_as_called.py",
         "ozaki2-as-called.json": "ozaki2_as_called.py", "strassen-as-called.json": "strassen_as_called.py",
         "first-call.json": "first_call.py"}
REGIMES = {"first_call.py": None}


def environment(doc: Doc) -> dict[str, Any]:
    """A script's environment in the renderer's keys (older scripts wrote ``device`` and ``commit``)."""
    env = dict(doc.get("environment") or {**(doc.get("device") or {}),
                                           **{k: doc[k] for k in ("numpy", "python") if k in doc}})
    if "git_commit" not in env and env.get("commit"):
        env["git_commit"] = str(env["commit"])[:12]
    return env


def script_of(doc: Doc, filename: str | None = None) -> str | None:
    """The script that wrote ``doc``: its ``script`` field, else the name of the file it writes."""
    if doc.get("script"):
        return PurePath(str(doc["script"])).name
    return FILES.get(PurePath(filename).name) if filename else None


def envelope(doc: Doc, script: str) -> dict[str, Any]:
    """``script``, ``environment``, ``regime`` and ``records`` of a script's document (what it adds to its JSON)."""
    regime = doc.get("regime", REGIMES.get(script, SUSTAINED))
    return {"script": f"results/published/scripts/{script}", "environment": environment(doc), "regime": regime,
            "records": ADAPTERS[script](doc)}


def written(doc: Doc, script: str) -> dict[str, Any]:
    """What a script adds to its JSON: :func:`envelope`, or where a measurement does not fit the shape (a NaN
    time), only ``records_error`` saying why: the measurements themselves are written either way."""
    try:
        return envelope(doc, script)
    except (ValueError, KeyError, TypeError) as exc:
        return {"records_error": f"{type(exc).__name__}: {exc}"}


def convert(doc: Doc, filename: str | None = None) -> Doc:
    """``doc`` with its records where it is one of the device scripts' formats (ValueError naming what is
    missing where it claims to be one and is not); any other document as it is."""
    script = script_of(doc, filename)
    if script not in ADAPTERS:
        return doc
    try:
        return {**doc, **envelope(doc, script)}
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{filename or script}: not the format {script} writes ({type(exc).__name__}: {exc})") \
            from None

