"""The registry of experiments and figures that ``gemmlab reproduce`` runs.

An experiment measures and stores results; a figure is rendered from stored
results only. Each family of the lab (``experiments.strassen``,
``experiments.levels``, ``experiments.audit``, ``experiments.ozaki``) registers
its experiments, figures and commands (:mod:`experiments.core.command`) with
the decorators here when imported; :data:`MODULES` lists them in run order and
:func:`load` imports them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpu.backend import Backend

from .database import ResultsDB
from .environment import env_key, environment

#: Modules whose import registers experiments and figures, in run order.
MODULES = ("experiments.core.commands", "experiments.levels", "experiments.strassen", "experiments.audit",
           "experiments.ozaki")


@dataclass
class Context:
    """What an experiment needs: where to measure, where to store, and how much."""

    backend: Backend
    db: ResultsDB
    run_id: int
    env_key: str
    quick: bool = False
    force: bool = False
    progress: bool = True
    command: str = ""


@dataclass(frozen=True)
class Experiment:
    name: str
    description: str
    run: Callable[[Context], dict[str, Any]]


@dataclass(frozen=True)
class Figure:
    name: str
    description: str
    render: Callable[[ResultsDB, Path], list[Path]]


EXPERIMENTS: dict[str, Experiment] = {}
FIGURES: dict[str, Figure] = {}


RunFn = Callable[[Context], dict[str, Any]]
RenderFn = Callable[[ResultsDB, Path], list[Path]]


def experiment(name: str, description: str) -> Callable[[RunFn], RunFn]:
    """Register ``fn(ctx) -> summary`` as an experiment called ``name``."""
    def register(fn: RunFn) -> RunFn:
        EXPERIMENTS[name] = Experiment(name, description, fn)
        return fn
    return register


def figure(name: str, description: str) -> Callable[[RenderFn], RenderFn]:
    """Register ``fn(db, out_dir) -> paths`` as a figure called ``name``."""
    def register(fn: RenderFn) -> RenderFn:
        FIGURES[name] = Figure(name, description, fn)
        return fn
    return register


def load() -> None:
    """Import every registering module."""
    for module in MODULES:
        importlib.import_module(module)


@contextmanager
def recorded_run(backend: Backend, db: ResultsDB, command: str, **options: Any) -> Iterator[Context]:
    """Open a run with this machine's environment record; close it as finished,
    interrupted (Ctrl-C) or failed, keeping every point already stored."""
    env = environment(backend)
    key = env_key(env)
    run_id = db.start_run(command, env, key)
    ctx = Context(backend, db, run_id, key, command=command, **options)
    try:
        yield ctx
    except KeyboardInterrupt:
        db.finish_run(run_id, "interrupted")
        raise
    except BaseException:
        db.finish_run(run_id, "failed")
        raise
    db.finish_run(run_id)
