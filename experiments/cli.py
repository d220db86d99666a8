"""The ``gemmlab`` command line. Every command takes ``--json`` for machine-readable output.

The commands are registered by the lab's families (:mod:`experiments.core.command`);
this module builds the parser from that registry and runs the chosen command.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sqlite3
import sys
from collections.abc import Sequence

from gpu.backend import BackendUnavailable

from .core.command import COMMANDS, GROUPS, OPTION_GROUPS
from .core.database import default_path
from .core.dbfile import translate
from .core.registry import load


def build_parser() -> argparse.ArgumentParser:
    """The parser of every registered command (subcommands in registration order)."""
    load()
    parser = argparse.ArgumentParser(prog="gemmlab", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    groups: dict[str, argparse._SubParsersAction] = {}
    for words, cmd in COMMANDS.items():
        parent = sub
        if len(words) == 2:
            if words[0] not in groups:
                g = sub.add_parser(words[0], help=GROUPS.get(words[0]))
                groups[words[0]] = g.add_subparsers(dest="action", required=True, metavar="ACTION")
            parent = groups[words[0]]
        p = parent.add_parser(words[-1], help=cmd.help, description=cmd.help)
        for name in cmd.options:
            OPTION_GROUPS[name](p)
        if cmd.arguments is not None:
            cmd.arguments(p)
        p.set_defaults(handler=cmd.handler)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.command_line = "gemmlab " + shlex.join(argv)
    db_path = args.db or default_path()
    try:
        return args.handler(args, db_path)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # reader gone (| head): stop quietly
        return 0
    except KeyboardInterrupt:
        print("gemmlab: interrupted; every point measured so far is stored: run the same command "
              "again to resume", file=sys.stderr)
        return 130
    except (BackendUnavailable, ValueError, FileNotFoundError, RuntimeError) as exc:
        print(f"gemmlab {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except sqlite3.Error as exc:    # ResultsDB translates these; a stray one is still one line, no traceback
        print(f"gemmlab {args.command}: error: {translate(exc, db_path)}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
