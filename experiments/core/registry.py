"""The registry of experiments and figures that ``gemmlab reproduce`` runs.

An experiment measures and stores results and returns a
:class:`~experiments.core.summary.Summary`; a figure is drawn from stored results
only (``draw(db) -> Figure | None``) and names the experiments it shows, so that
``SUMMARY.md`` links each figure under its experiment. Each family of the lab (``experiments.strassen``,
``experiments.levels``, ``experiments.audit``, ``experiments.ozaki``, ``experiments.ozaki2``,
``experiments.splitk``, ``experiments.outofcore``, ``experiments.segmented``, ``experiments.frontdoor``,
``experiments.multigpu``, ``experiments.complex``) registers
its experiments and figures with the decorators here when imported (and its commands, :mod:`experiments.core.command`);
:data:`MODULES` lists them in run order and :func:`load` imports them, for the commands that need every
experiment or figure (``reproduce``, ``figures``). This module imports no family and nothing of the GPU
layer, so that commands which do not measure start fast.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .database import ResultsDB
from .summary import Summary

if TYPE_CHECKING:
    from gpu.backend import Backend

#: Modules whose import registers experiments and figures, in run order.
MODULES = ("experiments.levels", "experiments.strassen", "experiments.audit",
           "experiments.ozaki", "experiments.ozaki2", "experiments.splitk", "experiments.outofcore",
           "experiments.segmented", "experiments.frontdoor", "experiments.multigpu",
           "experiments.complex")


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
    regime: str = "sustained"


RunFn = Callable[[Context], Summary]
#: Draws a figure from stored results: the matplotlib figure, or None when nothing is stored.
DrawFn = Callable[[ResultsDB], Any]


@dataclass(frozen=True)
class Experiment:
    name: str
    description: str
    run: RunFn


@dataclass(frozen=True)
class Figure:
    """A registered figure: how to draw it, and the experiments (by registered name) it shows."""

    name: str
    description: str
    draw: DrawFn
    experiments: tuple[str, ...] = ()

    def render(self, db: ResultsDB, out_dir: Path) -> list[Path]:
        """Draw from ``db`` and write PNG and PDF into ``out_dir``; no files when nothing is stored."""
        from .plotting import save_figure

        return save_figure(self.draw(db), out_dir, self.name)


EXPERIMENTS: dict[str, Experiment] = {}
FIGURES: dict[str, Figure] = {}


def experiment(name: str, description: str) -> Callable[[RunFn], RunFn]:
    """Register ``fn(ctx) -> Summary`` as an experiment called ``name``. The description says what
    it measures in general; the summary's scope says what a run measured."""
    def register(fn: RunFn) -> RunFn:
        EXPERIMENTS[name] = Experiment(name, description, fn)
        return fn
    return register


def figure(name: str, description: str, experiments: tuple[str, ...] | None = None) -> Callable[[DrawFn], DrawFn]:
    """Register ``draw(db) -> Figure | None`` as a figure called ``name``, showing ``experiments``
    (default: the experiment of the same name)."""
    def register(fn: DrawFn) -> DrawFn:
        FIGURES[name] = Figure(name, description, fn, (name,) if experiments is None else tuple(experiments))
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
    from .environment import env_key, environment  # NumPy, SciPy and the GPU layer: for measuring only

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
