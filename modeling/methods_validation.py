"""The front door's choices under a predicted ``methods`` section, judged against a measured one.

:func:`judge` ranks every product of a grid twice with :func:`gpu.frontdoor.rank.rank` (the same Strassen
configurations, if any, on both sides): once with the measured section, once with the predicted one
(:func:`modeling.methods_transfer.predict`), and prices the predicted choice with the measured section's
estimate for it. The **time lost** is the measured best's ratio over the predicted choice's, minus one (the
library GEMM's ratio is 1): what running the predicted choice costs against the measured choice. It is "not
judged" where the measured section gives the predicted choice no estimate (a class of shape it never measured
that method on), and 0 where both pick the same candidate. :data:`GRID` is the acceptance grid of shapes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpu.frontdoor.rank import Ranking, rank

#: Square N, the tall-skinny (m = n, k) and the two rectangular products of the acceptance grid.
SQUARES = (512, 1024, 2048, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152)
GRID: tuple[tuple[int, int, int], ...] = (*((n, n, n) for n in SQUARES),
                                          *((m, k, m) for m in (16, 64) for k in (2**16, 2**20, 2**24)),
                                          (4096, 65536, 4096), (32768, 4096, 32768))
ACCURACIES: tuple[Any, ...] = ("dgemm", 1e-10, "sgemm")


@dataclass(frozen=True)
class Judged:
    """One product and accuracy: the measured choice and its ratio, the predicted choice with its predicted
    ratio and its measured one (None: not estimated there), and the time lost (None: not judged)."""

    shape: tuple[int, int, int]
    accuracy: Any
    measured: str
    measured_ratio: float | None
    predicted: str
    predicted_ratio: float | None
    predicted_measured: float | None
    lost: float | None
    note: str = ""

    @property
    def same(self) -> bool:
        return self.measured == self.predicted


def _rank(m: int, k: int, n: int, accuracy: Any, methods: Mapping[str, Any] | None,
          configurations: Mapping[str, Any] | None) -> Ranking | None:
    try:
        return rank(m, k, n, accuracy, configurations=configurations, methods=methods)
    except ValueError:
        return None


def judge(measured: Mapping[str, Any] | None, predicted: Mapping[str, Any] | None,
          grid: Iterable[tuple[int, int, int]] = GRID, accuracies: Sequence[Any] = ACCURACIES,
          configurations: Mapping[str, Any] | None = None) -> list[Judged]:
    """Every (shape, accuracy) of the grid judged (see the module notes)."""
    out = []
    for shape in grid:
        for accuracy in accuracies:
            truth, guess = (_rank(*shape, accuracy, s, configurations) for s in (measured, predicted))
            if truth is None or guess is None:
                out.append(Judged(tuple(shape), accuracy, truth.winner.name if truth else "none keeps it", None,
                                  guess.winner.name if guess else "none keeps it", None, None, None,
                                  "no candidate keeps the accuracy"))
                continue
            best, chosen = truth.winner, guess.winner
            priced = next((r for r in truth.entries if r.name == chosen.name), None)
            at = priced.ratio if priced is not None and priced.estimated else None
            if chosen.name == best.name:
                lost, note = 0.0, "same choice"
            elif at is None or not best.estimated:
                lost, note = None, "not judged: the measured section has no estimate for the predicted choice"
            else:
                lost, note = best.ratio / at - 1, ""
                if not any(r.name == best.name and r.estimated for r in guess.entries):
                    note = "the prediction has no estimate for the measured choice (outside its training data)"
            out.append(Judged(tuple(shape), accuracy, best.name, best.ratio, chosen.name, chosen.ratio, at, lost,
                              note))
    return out


def worst(judged: Iterable[Judged]) -> float | None:
    """The largest time lost over the judged points (None where none was judged)."""
    lost = [j.lost for j in judged if j.lost is not None]
    return max(lost) if lost else None


def table(judged: Iterable[Judged]) -> str:
    """The judgements as a Markdown table (ratios to the library GEMM; time lost in per cent)."""
    def num(x: float | None) -> str:
        return "-" if x is None else f"{x:.3f}"

    lines = ["| m x k x n | accuracy | measured choice | x GEMM | predicted choice | predicted x GEMM | "
             "its measured x GEMM | time lost |", "|---|---|---|---|---|---|---|---|"]
    for j in judged:
        lost = "not judged" if j.lost is None else f"{100 * j.lost:.1f}%"
        lines.append(f"| {' x '.join(map(str, j.shape))} | {j.accuracy} | {j.measured} | {num(j.measured_ratio)} | "
                     f"{'same' if j.same else j.predicted} | {num(j.predicted_ratio)} | "
                     f"{num(j.predicted_measured)} | {lost} |")
    return "\n".join(lines)
