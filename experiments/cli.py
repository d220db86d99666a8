"""The ``gemmlab`` command line. Every command takes ``--json`` for machine-readable output.

The parser is built from the command manifest (:mod:`experiments.core.manifest`, which says how to
add a command): every command is listed from that table alone, and only the module of the command
the line names is imported, to add that command's arguments and run it. So ``gemmlab --help`` and
``gemmlab --version`` import no family, NumPy or GPU code, and each command starts by importing only
what it uses.
"""

from __future__ import annotations

import argparse
import importlib
import os
import shlex
import signal
import sqlite3
import sys
import threading
from collections.abc import Sequence
from typing import Any

from . import __version__
from .core.manifest import ENTRIES, GROUPS, Entry, chosen

#: CUDA's launch queues for every command: four times CUDA's default unless the caller has set them. CUDA reads the
#: variable when it makes a context, which no command does before :func:`main` sets it. A call that launches more
#: operations than the default queues hold keeps the host waiting in the launch for the device to drain them:
#: scheme II's level-1 graph of 1727 nodes at N = 32768 (2048-row spans) held the host 318-335 ms of a 743-777 ms
#: call, 1.3-3.5 ms with the queues scaled, the device time the same (``h200-ozaki2-span-host-probe.json``). Set
#: here and not by the library on import: it is the whole process's setting, and ``4x`` was reported to hang
#: programs on Jetson Orin (llama.cpp took back its own default for that).
LAUNCH_QUEUES = ("CUDA_SCALE_LAUNCH_QUEUES", "4x")

DESCRIPTION = ("Fast and accurate matrix multiplication on NVIDIA GPUs: measure, predict the best Strassen level, "
               "audit accuracy, draw figures. Every command takes --json for machine-readable output and --db for "
               "the results database; gemmlab COMMAND --help shows its options.")


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The parser of every command in the manifest, with the full arguments of the one that ``argv``
    (a command line without the program name) calls; the others are listed with their help only."""
    called = chosen(argv)
    parser = argparse.ArgumentParser(prog="gemmlab", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    groups: dict[str, argparse._SubParsersAction] = {}
    for entry in ENTRIES:
        words = entry.words.split()
        parent = sub
        if len(words) == 2:
            if words[0] not in groups:
                group = sub.add_parser(words[0], help=GROUPS[words[0]], description=GROUPS[words[0]])
                groups[words[0]] = group.add_subparsers(dest="action", required=True, metavar="ACTION")
            parent = groups[words[0]]
        p = parent.add_parser(words[-1], help=entry.help, description=entry.help)
        if entry is called:
            _add_arguments(p, entry)
    return parser


def _add_arguments(p: argparse.ArgumentParser, entry: Entry) -> None:
    """Import the command's module (which registers it) and give its parser the command's options."""
    importlib.import_module(entry.module)
    from .core.command import COMMANDS, OPTION_GROUPS

    cmd = COMMANDS[tuple(entry.words.split())]
    p.description = cmd.description
    for name in cmd.options:
        OPTION_GROUPS[name](p)
    if cmd.arguments is not None:
        cmd.arguments(p)
    p.set_defaults(handler=cmd.handler)


def portable(arg: str) -> str:
    """An argument as the stored command line records it: an absolute path (alone or after ``--option=``) by its
    file name, so that stored and published rows name no machine's folders."""
    option, eq, value = arg.partition("=") if arg.startswith("--") else ("", "", arg)
    return option + eq + (os.path.basename(value) if os.path.isabs(value) else value)


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault(*LAUNCH_QUEUES)
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(argv).parse_args(argv)
    from .core.database import default_path
    from .core.dbfile import translate

    args.command_line = "gemmlab " + shlex.join(map(portable, argv))
    db_path = args.db or default_path()
    stopped = _stop_on_sigterm()
    try:
        return args.handler(args, db_path)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # reader gone (| head): stop quietly
        return 0
    except KeyboardInterrupt:
        print("gemmlab: interrupted; every point measured so far is stored: run the same command "
              "again to resume", file=sys.stderr)
        return 130
    except (ValueError, FileNotFoundError, RuntimeError) as exc:    # BackendUnavailable is a RuntimeError
        print(f"gemmlab {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except sqlite3.Error as exc:    # ResultsDB translates these; a stray one is still one line, no traceback
        print(f"gemmlab {args.command}: error: {translate(exc, db_path)}", file=sys.stderr)
        return 2
    finally:
        if stopped is not None:
            signal.signal(signal.SIGTERM, stopped)


def _stop_on_sigterm() -> Any:
    """Make SIGTERM (``timeout``, a batch system's stop) interrupt the command as Ctrl-C does, so that open
    clusters close and temporary operand files are removed; the handler it replaced (None off the main thread,
    where none can be set)."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt
    return signal.signal(signal.SIGTERM, interrupt)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
