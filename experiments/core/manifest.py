"""The commands of ``gemmlab`` as data: the words that call each one, the module that registers it,
and its one-line help.

The top-level parser is built from this table alone, so ``gemmlab --help`` and the start of every
command import no family: only the chosen command's module is imported, when it runs or when its
own ``--help`` is asked for. This module therefore imports nothing.

Adding a command (to a family, or with a new family):

1. add an :class:`Entry` to :data:`ENTRIES` (its place there is its place in ``gemmlab --help``):
   the words, the module that registers it, the one-line help; the first word of a two-word command
   is a group, which needs its help in :data:`GROUPS`;
2. in that module, register the handler under the same words with
   :func:`experiments.core.command.command` (its options, its own arguments, optionally a longer
   description for its ``--help``; the one-line help is taken from here);
3. a new family whose experiments or figures ``gemmlab reproduce`` and ``gemmlab figures`` should
   find also goes into :data:`experiments.core.registry.MODULES`.

The table and the code cannot drift apart: registering a command that has no entry here, or from
another module than its entry names, is an error when that module is imported, and the tests import
every entry's module and check that it registers exactly its entries.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple


class Entry(NamedTuple):
    """One command: ``gemmlab <words>``, registered by importing ``module``."""

    words: str
    module: str
    help: str


CORE = "experiments.core.commands"
RESULTS = "experiments.core.results"
LEVELS = "experiments.levels.commands"
STRASSEN = "experiments.strassen.commands"

#: Help of the command groups (``gemmlab results ...``, ``gemmlab schedule ...``).
GROUPS = {"results": "stored runs and measurements",
          "schedule": "Strassen schedules: list, liveness analysis, stream waits"}

#: Every command, in the order ``gemmlab --help`` lists them.
ENTRIES: tuple[Entry, ...] = (
    Entry("info", CORE, "backend, device and versions"),
    Entry("results list", RESULTS, "runs, newest first"),
    Entry("results export", RESULTS, "measurements as CSV"),
    Entry("results import", RESULTS, "read a CSV export into the database"),
    Entry("kernels", CORE, "the compiled CUTLASS INT8 GEMM kernel: where it is kept and whether it is built; "
                           "--build compiles it (nvcc, CUTLASS headers)"),
    Entry("figures", CORE, "render every figure from stored results"),
    Entry("reproduce", CORE, "run every registered experiment and render every figure"),
    Entry("calibrate", LEVELS, "measure Gemm(x) and Geam(x), or the Strassen configurations (--configurations); "
                               "writes the device profile"),
    Entry("profile", LEVELS, "write a device profile from stored results (into gpu/profiles to bundle it), or the "
                             "transfer model's level tables"),
    Entry("fit", LEVELS, "fit Gemm (cubic) and Geam (quadratic) to a stored calibration"),
    Entry("predict", LEVELS, "the best Strassen level for a size: one answer with the range of its models, marked "
                             "where it extrapolates the measurements"),
    Entry("levels", LEVELS, "measure the best Strassen level over a size sweep and judge the predictors; writes "
                            "the device profile"),
    Entry("choose", "experiments.frontdoor.commands",
          "the front door's choice for a product and an accuracy (gpu.matmul): every candidate, its measured "
          "speed-up, its proven bound, and why the winner won"),
    Entry("strassen", STRASSEN, "Strassen speed-up over the library GEMM at chosen sizes and levels"),
    Entry("schedule list", STRASSEN, "the registered schedules"),
    Entry("schedule analyze", STRASSEN, "free spaces, supports and recursion (state table)"),
    Entry("schedule streams", STRASSEN, "cross-stream waits derived from read/write sets"),
    Entry("audit", "experiments.audit.commands",
          "error of GEMM methods against the correctly rounded product (resumes)"),
    Entry("ozaki", "experiments.ozaki.commands",
          "Ozaki scheme: time against DGEMM and SGEMM and max relative error, per format and slice count (resumes)"),
    Entry("ozaki2", "experiments.ozaki2.commands",
          "Ozaki scheme II against DGEMM: max relative error per phi and speed-up per product and method, "
          "judged against its speed-up targets (resumes)"),
    Entry("complex", "experiments.complex.commands",
          "complex products (complex128) as called against ZGEMM: 3M and 4M over real methods, Ozaki scheme II over "
          "both parts and the front door, with their componentwise errors per phi, judged against the complex "
          "speed targets (resumes)"),
    Entry("splitk", "experiments.splitk.commands",
          "split-K against the library GEMM and a device copy, by output size m = n and inner dimension k "
          "(resumes)"),
    Entry("frontdoor", "experiments.frontdoor.commands",
          "the front door (gpu.matmul) as called against the library GEMM and its best candidates, by shape and "
          "accuracy, with its error on phi inputs against its bound (resumes)"),
    Entry("outofcore", "experiments.outofcore.commands",
          "the out-of-core engine against the in-core DGEMM (where it fits), host memory to host memory, by "
          "size N (resumes)"),
    Entry("multigpu", "experiments.multigpu.commands",
          "products across 1, 2 and 4 workers of a Dask cluster, one shot and steady, for host operands and "
          "device-resident dask arrays: speed-up over one worker (resumes)"),
    Entry("segmented", "experiments.segmented.commands",
          "the segmented launcher (1-D and 2-D segments, index translation) against the same kernel on whole "
          "arrays, by size N (resumes); the largest N of each decomposition"),
)


def entry(words: str) -> Entry:
    """The entry of ``gemmlab <words>``; a KeyError saying where to add a missing one."""
    for e in ENTRIES:
        if e.words == words:
            return e
    raise KeyError(f"no command {words!r} in the command manifest; add an Entry to ENTRIES in {__name__}")


def chosen(argv: Sequence[str]) -> Entry | None:
    """The command that a command line (without the program name) calls, if its first words name one."""
    for e in ENTRIES:
        words = e.words.split()
        if list(argv[:len(words)]) == words:
            return e
    return None
