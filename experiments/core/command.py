"""The commands of ``gemmlab``, registered by the families that own them, and their shared parts.

Which commands exist, the module that registers each and its one-line help are data, in
:mod:`experiments.core.manifest` (its docstring says how to add a command); the command line
(:mod:`experiments.cli`) lists them from there and imports only the chosen command's module. That
module registers the command with :func:`command` beside its benchmark and figures: the option
groups it takes (:data:`OPTION_GROUPS`; every command takes ``common``: ``--json`` and ``--db``),
a function adding its own arguments, and a handler ``handler(args, db_path) -> exit code``.

Every command prints through :func:`emit`: JSON on stdout with ``--json``,
else its text (tables by :func:`table`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import manifest
from .database import ResultsDB, default_path
from .registry import Context, recorded_run

if TYPE_CHECKING:
    from gpu.backend import Backend

Handler = Callable[[argparse.Namespace, Path], int]
Arguments = Callable[[argparse.ArgumentParser], None]


@dataclass(frozen=True)
class Command:
    """A registered command: its manifest help, the description its ``--help`` shows, and how to run it."""

    words: tuple[str, ...]
    help: str
    description: str
    options: tuple[str, ...]
    arguments: Arguments | None
    handler: Handler


COMMANDS: dict[tuple[str, ...], Command] = {}


def command(words: str, *, options: Sequence[str] = ("common",), arguments: Arguments | None = None,
            description: str | None = None) -> Callable[[Handler], Handler]:
    """Register ``handler(args, db_path)`` as the command ``gemmlab <words>``, which must have an entry in
    the manifest naming the handler's module (the one-line help comes from there). ``description``:
    what the command's ``--help`` says above its options, when more than the one-line help."""
    def register(handler: Handler) -> Handler:
        unknown = set(options) - set(OPTION_GROUPS)
        if unknown:
            raise ValueError(f"unknown option groups {sorted(unknown)} for {words!r}; known: {sorted(OPTION_GROUPS)}")
        if "common" not in options:
            raise ValueError(f"{words!r} lacks the option group 'common': every command takes --json and --db")
        try:
            entry = manifest.entry(words)
        except KeyError as exc:
            raise ValueError(exc.args[0]) from None
        if handler.__module__ != entry.module:
            raise ValueError(f"{words!r} is registered by {entry.module} in the command manifest, not by "
                             f"{handler.__module__}; register it there or change its entry")
        key = tuple(words.split())
        COMMANDS[key] = Command(key, entry.help, description or entry.help, tuple(options), arguments, handler)
        return handler
    return register


# --------------------------------------------------------------------------- option groups

def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print machine-readable JSON on stdout")
    p.add_argument("--db", type=Path, default=None, help=f"results database (default: $GEMMLAB_DB or {default_path()})")


def _backend(p: argparse.ArgumentParser) -> None:
    from gpu.backend import BACKENDS  # the GPU layer: imported by the commands that run on it only

    p.add_argument("--backend", choices=BACKENDS + ("auto",), default="auto",
                   help="numpy (CPU), cupy (GPU) or auto: CuPy when a GPU is usable (default)")


def _measuring(p: argparse.ArgumentParser) -> None:
    p.add_argument("--force", action="store_true", help="measure again points already stored")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bars on stderr (default: when stderr is a terminal)")


def _regime(p: argparse.ArgumentParser) -> None:
    p.add_argument("--regime", choices=("sustained", "cold"), default="sustained",
                   help="power regime measured in, or read back: sustained (back to back until the SM clock "
                        "settles; default) or cold (the device idles before each sample)")


def _stored(p: argparse.ArgumentParser) -> None:
    p.add_argument("--env", default=None, metavar="KEY",
                   help="stored environment whose calibration to use (default: this device's newest)")
    p.add_argument("--device", default=None, metavar="TEXT",
                   help="the newest stored calibration of a device whose name contains TEXT")


def _range_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--range", type=size_range, default=None, metavar="LO,HI",
                   help="calibrated sizes to fit, and where to search the crossover")


#: Options shared by several commands, by name, in the order they are added.
OPTION_GROUPS: dict[str, Arguments] = {"common": _common, "backend": _backend, "measuring": _measuring,
                                       "regime": _regime, "stored": _stored, "range": _range_option}
#: What every measuring command takes.
MEASURING = ("common", "backend", "measuring", "regime")


# --------------------------------------------------------------------------- argument types

_KINDS = {int: "integers", float: "numbers"}


def numbers(cast: Callable[[str], Any], what: str) -> Callable[[str], list]:
    """An argparse type: a comma- or space-separated list (empty: refused by the command's planner)."""
    def parse(text: str) -> list:
        try:
            return [cast(s) for s in text.replace(",", " ").split()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be {_KINDS[cast]}, got {text!r}") from None
    return parse


sizes = numbers(int, "sizes")


def size_range(text: str) -> tuple[float, float]:
    try:
        lo, hi = (float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"a range is LO,HI such as 2048,32768, got {text!r}") from None
    if not 0 < lo < hi:
        raise argparse.ArgumentTypeError(f"a range needs 0 < LO < HI, got {text!r}")
    return lo, hi


_BYTE_UNITS = {"": 1, "B": 1, "K": 2**10, "KIB": 2**10, "M": 2**20, "MIB": 2**20, "G": 2**30, "GIB": 2**30,
               "T": 2**40, "TIB": 2**40}


def byte_size(text: str) -> int:
    """An argparse type: bytes, whole or with a binary unit (``0``, ``512M``, ``40GiB``, ``1.5G``)."""
    number = text.strip().rstrip("bBiIkKmMgGtT")
    unit = text.strip()[len(number):].upper()
    try:
        value = float(number) * _BYTE_UNITS[unit]
    except (ValueError, KeyError):
        raise argparse.ArgumentTypeError(f"a size in bytes is a number with an optional unit K, M, G or T "
                                         f"(binary), such as 40G; got {text!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"a size in bytes is finite and not negative, got {text!r}")
    return int(value)


def counts(text: str) -> list[int]:
    """An argparse type: integers and ascending ranges, ``2-9`` or ``2,3,5`` or ``2-4,8``.

    An empty value, a part that is neither, and a range that runs backwards (``9-2``) are errors
    naming the part: given counts are never dropped in favour of a default.
    """
    parts = text.replace(",", " ").split()
    if not parts:
        raise argparse.ArgumentTypeError("no slice counts given; write counts such as 2-9 or 2,4,6, "
                                         "or leave the option out for the default")
    out: set[int] = set()
    for part in parts:
        lo, dash, hi = part.partition("-")
        try:
            first, last = int(lo), int(hi) if dash else int(lo)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{part!r} in {text!r} is not a count or a range such as 2-9") from None
        if first > last:
            raise argparse.ArgumentTypeError(f"the range {part!r} in {text!r} runs backwards; write {last}-{first}")
        out.update(range(first, last + 1))
    return sorted(out)


# --------------------------------------------------------------------------- output and runs

def emit(args: argparse.Namespace, payload: Any, text: Callable[[], str]) -> None:
    """JSON of ``payload`` with ``--json``, else ``text()``."""
    print(json.dumps(payload, indent=2, default=str) if args.json else text())


def verdict_lines(checks: Sequence[dict[str, Any]]) -> list[str]:
    """One line per check (each ``as_dict()``): its target, what was measured, and met, not met or not judged."""
    return [f"{c['target']}: {c['measured']} ({'not judged' if c['met'] is None else c['met']})" for c in checks]


def run_header(device: Any, backend: str, regime: str, counts: dict[str, Any]) -> str:
    """A measuring command's first line: the device, backend and regime, then its counts."""
    return f"{device} ({backend}, regime {regime}): " + "; ".join(f"{k}: {v}" for k, v in counts.items())


def emit_sweep(args: argparse.Namespace, backend: str, env_key: str, counts: dict[str, Any], rows: Sequence[Any],
               checks: Sequence[Any], columns: Sequence[tuple[str, str, str]],
               shown: Callable[[dict[str, Any]], dict[str, Any]] = dict) -> None:
    """What a sweep command prints: its counts, a table of its stored rows (each ``as_dict()``, then
    ``shown`` for the table's cells) and its verdict on its targets; all of it as JSON with
    ``--json``."""
    stored = [r.as_dict() for r in rows]
    verdict = [c.as_dict() for c in checks]
    emit(args, {"backend": backend, "env_key": env_key, "summary": counts, "verdict": verdict, "rows": stored},
         lambda: "\n".join([*(f"{key}: {value}" for key, value in counts.items()),
                            table([shown(r) for r in stored], columns), *verdict_lines(verdict)]))


def table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str, str]]) -> str:
    """Plain-text table; ``columns`` are (key, header, format spec)."""
    cells = [[h for _, h, _ in columns]]
    cells += [[format(r.get(k, ""), f) if r.get(k) is not None else "" for k, _, f in columns] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in cells)


def ms(x: float | None) -> str:
    """Seconds as milliseconds text (blank for None)."""
    return f"{1e3 * x:.3f}" if x is not None else ""


def progress(args: argparse.Namespace) -> bool:
    return sys.stderr.isatty() if args.progress is None else args.progress


@contextmanager
def measuring_run(args: argparse.Namespace, db_path: Path, backend: Backend) -> Iterator[Context]:
    """The database and a recorded run for a command that measures."""
    with ResultsDB(db_path) as db, recorded_run(backend, db, args.command_line, quick=getattr(args, "quick", False),
                                                force=args.force, progress=progress(args),
                                                regime=args.regime) as ctx:
        yield ctx
